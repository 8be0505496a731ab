//! Running a proxy: listeners, the admin endpoint, reload on SIGHUP, drain on SIGTERM.
//!
//! Each request reads the current state (an `Arc` swapped whole on reload), so a reload
//! changes what the next request sees and never touches open connections. SIGTERM (or
//! SIGINT) stops accepting, lets requests in progress finish (HTTP/1.1 connections close
//! after their current response, HTTP/2 ones get GOAWAY) and exits once they have, or
//! after `drain_timeout_ms`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Semaphore};

use crate::config::{Edge, Limits, Sidecar};
use crate::conn;
use crate::edge::{self, EdgeState};
use crate::forward::{plain, text, Body};
use crate::metrics::Metrics;
use crate::sidecar::{self, Shared, SidecarState};
use crate::ProxyError;

type Handler = Arc<dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync>;

/// The admin endpoint's answer for `path`; `metrics` renders `/metrics`.
pub fn admin_response(path: &str, draining: bool, metrics: impl FnOnce() -> String) -> Response<Body> {
    match path {
        "/metrics" => {
            let mut r = Response::new(text(metrics()));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" => plain(StatusCode::OK, "ok\n"),
        "/readyz" if draining => plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
        "/readyz" => plain(StatusCode::OK, "ready\n"),
        _ => plain(StatusCode::NOT_FOUND, "try /metrics, /healthz or /readyz\n"),
    }
}

/// Refused connections whose close may wait for the client's request at once.
const MAX_LINGERING: usize = 256;

/// Answers a connection beyond the cap with 503 and closes it. Closing a socket with unread
/// input sends a reset, which can destroy the 503 before the client reads it (the client's
/// request usually arrives just after the accept), so the close first sends FIN and reads
/// and discards up to 64 KiB for up to 1 s — at most `MAX_LINGERING` such closes at a
/// time; beyond that (a flood) the socket is just closed.
fn refuse(stream: tokio::net::TcpStream, lingering: &Arc<Semaphore>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // The answer fits any socket buffer.
    let _ = stream.try_write(conn::REFUSED);
    let Ok(slot) = lingering.clone().try_acquire_owned() else { return };
    tokio::spawn(async move {
        let _slot = slot;
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let mut read = 0;
            while read < 64 * 1024 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
    });
}

/// A listener and what serves it.
struct Listener {
    listener: TcpListener,
    handler: Handler,
    /// The admin listener: not drained, not counted in `connections_open`.
    admin: bool,
}

/// Accepts on `listener` until `stop` turns true; every connection is watched by `graceful`.
/// `None`: connections are not drained (the admin listener, which answers until the end).
/// At most `limits.max_connections` connections are open at once (beyond it a connection
/// gets 503 and is closed); each must send its first request head within the header
/// read timeout.
async fn accept_loop(
    l: Listener,
    limits: Limits,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
    graceful: Option<Arc<GracefulShutdown>>,
) {
    let builder = conn::builder(&limits);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING));
    // The admin listener's connections are not client load: a separate gauge would be noise.
    let counted = if l.admin { Arc::new(Metrics::default()) } else { metrics };
    loop {
        let stream = tokio::select! {
            _ = stop.changed() => return,
            accepted = l.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: keep serving the connections we have.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            counted.connections_rejected.fetch_add(1, Relaxed);
            refuse(stream, &lingering);
            continue;
        };
        let open = conn::Open::new(counted.clone(), permit);
        let _ = stream.set_nodelay(true);
        let served = Arc::new(AtomicBool::new(false));
        let io = TokioIo::new(conn::FirstRequestDeadline::new(stream, &limits, served.clone()));
        let handler = l.handler.clone();
        let service = service_fn(move |req| {
            served.store(true, Relaxed);
            let fut = handler(req);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let conn = builder.serve_connection(io, service).into_owned();
        match &graceful {
            Some(g) => {
                let watched = g.watch(conn);
                tokio::spawn(async move {
                    let _ = watched.await;
                    drop(open);
                });
            }
            None => {
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(open);
                });
            }
        }
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| ProxyError::Io { what: format!("binding the {what} listener on {addr}"), source: e })
}

/// A getter of the state as it is now (reloads swap the `Arc` inside).
fn reader<T: Send + Sync + 'static>(
    state: &Arc<RwLock<Arc<T>>>,
) -> impl Fn() -> Arc<T> + Clone + Send + Sync + 'static {
    let state = state.clone();
    move || state.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The admin listener's handler: `answer(path, draining)`.
fn admin_handler(
    draining: &Arc<AtomicBool>,
    answer: impl Fn(&str, bool) -> Response<Body> + Send + Sync + 'static,
) -> Handler {
    let draining = draining.clone();
    Arc::new(move |req| {
        let r = answer(req.uri().path(), draining.load(Relaxed));
        Box::pin(async move { r })
    })
}

/// Runs the sidecar of the config file `path` until SIGTERM/SIGINT.
pub async fn run_sidecar(path: PathBuf) -> Result<(), ProxyError> {
    let loaded = Sidecar::load(&path)?;
    let shared = Shared::default();
    let state = Arc::new(RwLock::new(Arc::new(SidecarState::new(loaded, None))));
    let current = reader(&state);
    let s = current();
    let config = &s.loaded.config;
    let mut listeners: Vec<Listener> = Vec::new();
    let inbound: Handler = {
        let (current, shared) = (current.clone(), shared.clone());
        Arc::new(move |req| Box::pin(sidecar::inbound(current(), shared.clone(), req)))
    };
    listeners.push(Listener { listener: bind(config.listen, "inbound").await?, handler: inbound, admin: false });
    for egress in &config.egress {
        let upstream = egress.upstream;
        let (current, shared) = (current.clone(), shared.clone());
        let handler: Handler = Arc::new(move |req| Box::pin(sidecar::egress(current(), shared.clone(), upstream, req)));
        listeners.push(Listener { listener: bind(egress.listen, "egress").await?, handler, admin: false });
    }
    let draining = Arc::new(AtomicBool::new(false));
    if let Some(addr) = config.admin {
        let (current, shared) = (current.clone(), shared.clone());
        let handler =
            admin_handler(&draining, move |path, draining| sidecar::admin(&current(), &shared, path, draining));
        listeners.push(Listener { listener: bind(addr, "admin").await?, handler, admin: true });
    }
    let limits = config.limits();
    tracing::info!(listen = %config.listen, upstream = %config.upstream, order = ?config.order, c = ?config.c, "sidecar ready");
    drop(s);
    let reload = {
        let state = state.clone();
        move || -> Result<(), ProxyError> {
            let loaded = Sidecar::load(&path)?;
            let mut slot = state.write().unwrap_or_else(|p| p.into_inner());
            if loaded.config.listen != slot.loaded.config.listen || loaded.config.admin != slot.loaded.config.admin {
                tracing::warn!("listen and admin addresses change only on restart; the rest is reloaded");
            }
            let next = SidecarState::new(loaded, Some(&slot));
            *slot = Arc::new(next);
            Ok(())
        }
    };
    let drain_ms = move || current().loaded.config.drain_timeout_ms;
    supervise(listeners, limits, shared.metrics.clone(), draining, reload, drain_ms).await
}

/// Runs the edge of the config file `path` until SIGTERM/SIGINT.
pub async fn run_edge(path: PathBuf) -> Result<(), ProxyError> {
    let loaded = Edge::load(&path)?;
    let shared = Shared::default();
    let first = EdgeState::new(loaded);
    tokio::spawn(edge::health_checks(Arc::downgrade(&first)));
    let state = Arc::new(RwLock::new(first));
    let current = reader(&state);
    let s = current();
    let config = &s.loaded.config;
    let mut listeners: Vec<Listener> = Vec::new();
    let main: Handler = {
        let (current, shared) = (current.clone(), shared.clone());
        Arc::new(move |req| Box::pin(edge::handle(current(), shared.clone(), req)))
    };
    listeners.push(Listener { listener: bind(config.listen, "edge").await?, handler: main, admin: false });
    let draining = Arc::new(AtomicBool::new(false));
    if let Some(addr) = config.admin {
        let (current, shared) = (current.clone(), shared.clone());
        let handler = admin_handler(&draining, move |path, draining| edge::admin(&current(), &shared, path, draining));
        listeners.push(Listener { listener: bind(addr, "admin").await?, handler, admin: true });
    }
    let limits = config.limits();
    tracing::info!(listen = %config.listen, routes = config.routes.len(), "edge ready");
    drop(s);
    let reload = {
        let state = state.clone();
        move || -> Result<(), ProxyError> {
            let loaded = Edge::load(&path)?;
            let next = EdgeState::new(loaded);
            tokio::spawn(edge::health_checks(Arc::downgrade(&next)));
            *state.write().unwrap_or_else(|p| p.into_inner()) = next;
            Ok(())
        }
    };
    let drain_ms = move || current().loaded.config.drain_timeout_ms;
    supervise(listeners, limits, shared.metrics.clone(), draining, reload, drain_ms).await
}

/// Serves `listeners`; reloads on SIGHUP (a bad config is reported and the old one kept);
/// drains on SIGTERM/SIGINT. Listener limits (`limits`) change only on restart.
async fn supervise(
    listeners: Vec<Listener>,
    limits: Limits,
    metrics: Arc<Metrics>,
    draining: Arc<AtomicBool>,
    reload: impl Fn() -> Result<(), ProxyError>,
    drain_ms: impl Fn() -> u64,
) -> Result<(), ProxyError> {
    let sig = |kind: SignalKind| {
        signal(kind).map_err(|e| ProxyError::Io { what: "installing a signal handler".into(), source: e })
    };
    let (mut hup, mut term, mut int) =
        (sig(SignalKind::hangup())?, sig(SignalKind::terminate())?, sig(SignalKind::interrupt())?);
    let graceful = Arc::new(GracefulShutdown::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (admin_stop_tx, admin_stop_rx) = watch::channel(false);
    let mut loops = Vec::new();
    for l in listeners {
        if l.admin {
            // Keeps answering during the drain: /readyz says so.
            tokio::spawn(accept_loop(l, limits, metrics.clone(), admin_stop_rx.clone(), None));
        } else {
            let stop = stop_rx.clone();
            loops.push(tokio::spawn(accept_loop(l, limits, metrics.clone(), stop, Some(graceful.clone()))));
        }
    }
    tracing::info!("serving; SIGHUP reloads, SIGTERM drains");
    loop {
        tokio::select! {
            _ = hup.recv() => match reload() {
                Ok(()) => tracing::info!("configuration reloaded"),
                Err(e) => tracing::error!(error = %e, "reload failed; keeping the running configuration"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    draining.store(true, Relaxed);
    tracing::info!("draining");
    let _ = stop_tx.send(true);
    let timeout = Duration::from_millis(drain_ms());
    let drained = tokio::time::timeout(timeout, async {
        // The loops hold clones of `graceful` until they return, which they do at once on `stop`.
        for l in loops {
            let _ = l.await;
        }
        if let Ok(graceful) = Arc::try_unwrap(graceful) {
            graceful.shutdown().await;
        }
    })
    .await;
    let _ = admin_stop_tx.send(true);
    if drained.is_err() {
        tracing::warn!(timeout_ms = timeout.as_millis() as u64, "drain timed out; exiting");
    } else {
        tracing::info!("drained");
    }
    Ok(())
}
