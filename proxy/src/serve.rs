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

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tailor_telemetry::{AcceptLoop, AdminHandle, AdminServer, Readiness};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Semaphore};

use crate::config::{Edge, Limits, Sidecar};
use crate::conn;
use crate::edge::{self, EdgeState};
use crate::forward::Body;
use crate::metrics::{self, GateView, Metrics};
use crate::sidecar::{self, Shared, SidecarState};
use crate::ProxyError;

type Handler = Arc<dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync>;

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

/// Where a TLS listener finds its server config for the next handshake (a reload with
/// new certificates replaces it; connections already open keep theirs).
type TlsSource = Arc<dyn Fn() -> Option<Arc<rustls::ServerConfig>> + Send + Sync>;

/// A listener and what serves it.
struct Listener {
    listener: TcpListener,
    handler: Handler,
    /// Present: the listener speaks TLS.
    tls: Option<TlsSource>,
}

/// Accepts on `listener` (the shared [`AcceptLoop`]) until `stop` turns true; every
/// connection is watched by `graceful`.
/// At most `limits.max_connections` connections are open at once (beyond it a connection
/// gets 503 and is closed); each must finish its TLS handshake (on a TLS listener) and
/// then send its first request head, each within the header read timeout.
async fn accept_loop(
    l: Listener,
    limits: Limits,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
    graceful: Arc<GracefulShutdown>,
) {
    let builder = Arc::new(conn::builder(&limits));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING));
    let refused_metrics = metrics.clone();
    let refuse_beyond = move |stream| {
        refused_metrics.connections_rejected.fetch_add(1, Relaxed);
        refuse(stream, &lingering);
    };
    let stopped = async move {
        let _ = stop.changed().await;
    };
    let accept = AcceptLoop::new("proxy listener").refuse_beyond(limits.max_connections, refuse_beyond);
    accept
        .run(l.listener, stopped, |stream| {
            let open = conn::Open::new(metrics.clone());
            // Taken now, so a drain that starts during the handshake still waits for it.
            let watcher = graceful.watcher();
            let tls = l.tls.as_ref().and_then(|source| source());
            let (builder, handler, metrics) = (builder.clone(), l.handler.clone(), metrics.clone());
            async move {
                match tls {
                    None => serve_connection(&builder, stream, &limits, &metrics, handler, watcher).await,
                    Some(config) => {
                        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(stream);
                        match tokio::time::timeout(limits.header_read_timeout(), handshake).await {
                            Ok(Ok(stream)) => {
                                serve_connection(&builder, stream, &limits, &metrics, handler, watcher).await
                            }
                            Ok(Err(e)) => {
                                metrics.tls_handshake_failures.fetch_add(1, Relaxed);
                                tracing::debug!(error = %e, "TLS handshake failed");
                            }
                            Err(_) => {
                                metrics.tls_handshake_failures.fetch_add(1, Relaxed);
                                tracing::debug!("no TLS handshake within header_read_timeout_ms");
                            }
                        }
                    }
                }
                drop(open);
            }
        })
        .await
}

/// Serves one client connection (plain or TLS) until it ends; `watcher` drains it.
async fn serve_connection<S>(
    builder: &auto::Builder<TokioExecutor>,
    stream: S,
    limits: &Limits,
    metrics: &Arc<Metrics>,
    handler: Handler,
    watcher: Watcher,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let served = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(conn::ClientIo::new(stream, limits, served.clone(), metrics.clone()));
    let service = service_fn(move |req| {
        served.store(true, Relaxed);
        let fut = handler(req);
        async move { Ok::<_, Infallible>(fut.await) }
    });
    let _ = watcher.watch(builder.serve_connection(io, service).into_owned()).await;
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

/// Starts the admin endpoint (the telemetry crate's: `/metrics`, `/healthz`, `/readyz`)
/// on `addr`, if one is configured; `gate` reads the running state at each scrape;
/// `/readyz` answers 503 once `draining` is set. It serves until the handle is dropped,
/// after the drain.
async fn start_admin(
    addr: Option<SocketAddr>,
    metrics: &Arc<Metrics>,
    gate: impl Fn() -> GateView + Send + Sync + 'static,
    draining: &Arc<AtomicBool>,
) -> Result<Option<AdminHandle>, ProxyError> {
    let Some(addr) = addr else { return Ok(None) };
    let draining = draining.clone();
    AdminServer::new(Arc::new(metrics::registry(metrics, gate)))
        .readiness(Readiness::from_fn(move || !draining.load(Relaxed)))
        .start(addr)
        .await
        .map(Some)
        .map_err(|e| ProxyError::Io { what: format!("binding the admin listener on {addr}"), source: e })
}

/// The TLS source of a listener that speaks TLS (`enabled`), reading the current state.
fn tls_source(
    enabled: bool,
    current: impl Fn() -> Option<Arc<rustls::ServerConfig>> + Send + Sync + 'static,
) -> Option<TlsSource> {
    enabled.then(|| Arc::new(current) as TlsSource)
}

/// A reload may change certificates, not whether the listener speaks TLS: clients would
/// break mid-flight, so that needs a restart (the running config is kept).
fn same_tls_mode(path: &std::path::Path, running: bool, reloaded: bool) -> Result<(), ProxyError> {
    if running == reloaded {
        return Ok(());
    }
    let change = if reloaded { "adding" } else { "removing" };
    Err(ProxyError::Config {
        file: path.to_path_buf(),
        field: "tls".into(),
        problem: format!(
            "{change} [tls] changes the listener's protocol and needs a restart; certificates reload on SIGHUP"
        ),
    })
}

/// Runs the sidecar of the config file `path` until SIGTERM/SIGINT.
pub async fn run_sidecar(path: PathBuf) -> Result<(), ProxyError> {
    let loaded = Sidecar::load(&path)?;
    // Egress listeners are bound only here: without any, no request can call out.
    // One `Arc` per request to clone, not the clients and counters inside.
    let shared = Arc::new(Shared { egress_listeners: !loaded.config.egress.is_empty(), ..Shared::default() });
    let state = Arc::new(RwLock::new(Arc::new(SidecarState::new(loaded, None))));
    let current = reader(&state);
    let s = current();
    let config = &s.loaded.config;
    let mut listeners: Vec<Listener> = Vec::new();
    let inbound: Handler = {
        let (current, shared) = (current.clone(), shared.clone());
        Arc::new(move |req| Box::pin(sidecar::inbound(current(), shared.clone(), req)))
    };
    let tls = tls_source(s.loaded.tls.server.is_some(), {
        let current = current.clone();
        move || current().loaded.tls.server.clone()
    });
    listeners.push(Listener { listener: bind(config.listen, "inbound").await?, handler: inbound, tls });
    for egress in &config.egress {
        let (listen, upstream) = (egress.listen, egress.upstream);
        let (current, shared) = (current.clone(), shared.clone());
        let handler: Handler =
            Arc::new(move |req| Box::pin(sidecar::egress(current(), shared.clone(), listen, upstream, req)));
        listeners.push(Listener { listener: bind(egress.listen, "egress").await?, handler, tls: None });
    }
    let draining = Arc::new(AtomicBool::new(false));
    let view = {
        let current = current.clone();
        move || sidecar::gate_view(&current())
    };
    let admin = start_admin(config.admin, &shared.metrics, view, &draining).await?;
    let limits = config.limits;
    tracing::info!(listen = %config.listen, upstream = %config.upstream, order = ?config.order, c = ?config.c, "sidecar ready");
    drop(s);
    let reload = {
        let state = state.clone();
        move || -> Result<(), ProxyError> {
            let loaded = Sidecar::load(&path)?;
            let mut slot = state.write().unwrap_or_else(|p| p.into_inner());
            same_tls_mode(&path, slot.loaded.tls.server.is_some(), loaded.tls.server.is_some())?;
            if loaded.config.listen != slot.loaded.config.listen || loaded.config.admin != slot.loaded.config.admin {
                tracing::warn!("listen and admin addresses change only on restart; the rest is reloaded");
            }
            let next = SidecarState::new(loaded, Some(&slot));
            *slot = Arc::new(next);
            Ok(())
        }
    };
    let drain_ms = move || current().loaded.config.drain_timeout_ms;
    let served = supervise(listeners, limits, shared.metrics.clone(), draining, reload, drain_ms).await;
    // The admin endpoint answers (`/readyz`: draining) until the drain is over.
    drop(admin);
    served
}

/// Runs the edge of the config file `path` until SIGTERM/SIGINT.
pub async fn run_edge(path: PathBuf) -> Result<(), ProxyError> {
    let loaded = Edge::load(&path)?;
    let shared = Arc::new(Shared::default());
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
    let tls = tls_source(s.loaded.tls.server.is_some(), {
        let current = current.clone();
        move || current().loaded.tls.server.clone()
    });
    listeners.push(Listener { listener: bind(config.listen, "edge").await?, handler: main, tls });
    let draining = Arc::new(AtomicBool::new(false));
    let view = {
        let current = current.clone();
        move || edge::gate_view(&current())
    };
    let admin = start_admin(config.admin, &shared.metrics, view, &draining).await?;
    let limits = config.limits;
    tracing::info!(listen = %config.listen, routes = config.routes.len(), "edge ready");
    drop(s);
    let reload = {
        let state = state.clone();
        move || -> Result<(), ProxyError> {
            let loaded = Edge::load(&path)?;
            let running = state.read().unwrap_or_else(|p| p.into_inner()).loaded.tls.server.is_some();
            same_tls_mode(&path, running, loaded.tls.server.is_some())?;
            let next = EdgeState::new(loaded);
            tokio::spawn(edge::health_checks(Arc::downgrade(&next)));
            *state.write().unwrap_or_else(|p| p.into_inner()) = next;
            Ok(())
        }
    };
    let drain_ms = move || current().loaded.config.drain_timeout_ms;
    let served = supervise(listeners, limits, shared.metrics.clone(), draining, reload, drain_ms).await;
    // The admin endpoint answers (`/readyz`: draining) until the drain is over.
    drop(admin);
    served
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
    let mut loops = Vec::new();
    for l in listeners {
        loops.push(tokio::spawn(accept_loop(l, limits, metrics.clone(), stop_rx.clone(), graceful.clone())));
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
    if drained.is_err() {
        tracing::warn!(timeout_ms = timeout.as_millis() as u64, "drain timed out; exiting");
    } else {
        tracing::info!("drained");
    }
    Ok(())
}
