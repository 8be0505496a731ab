//! The admin HTTP listener: Prometheus `/metrics`, liveness `/healthz` and readiness `/readyz`.
//!
//! One small hyper server per process, apart from the data path: a daemon
//! built on tokio starts it on its own runtime with [`AdminServer::start`]; a
//! daemon built on plain threads (the kernel scheduler agent, the node agent)
//! calls [`AdminServer::spawn`], which runs it on a thread of its own with a
//! current-thread runtime, so the daemon's loop never waits on a scraper.
//!
//! Metrics stay cheap for the daemon: counters and gauges are atomics the
//! daemon updates in place, and values that are costly or racy to keep
//! current (table occupancy, heartbeat age) are read by an
//! [`AdminServer::on_scrape`] hook only when a scraper asks.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::accept::AcceptLoop;
use crate::exposition::{openmetrics_to_text, Format};

/// Scrapers served at once; more wait for a slot (an admin port is not a data path).
const MAX_CONNECTIONS: usize = 32;
/// A client that has not sent its request headers by then is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the process is ready to take traffic, as `/readyz` reports it.
#[derive(Clone)]
pub struct Readiness(Arc<dyn Fn() -> bool + Send + Sync>);

impl Readiness {
    /// Ready whenever it is alive (a process with nothing to warm up).
    pub fn always() -> Readiness {
        Readiness(Arc::new(|| true))
    }

    /// Ready while `check` says so, evaluated on every `/readyz` request.
    pub fn from_fn(check: impl Fn() -> bool + Send + Sync + 'static) -> Readiness {
        Readiness(Arc::new(check))
    }

    /// Ready while a flag the daemon sets is true; starts at `initial`.
    pub fn flag(initial: bool) -> (Readiness, ReadyFlag) {
        let flag = ReadyFlag(Arc::new(AtomicBool::new(initial)));
        let read = flag.clone();
        (Readiness::from_fn(move || read.get()), flag)
    }

    /// Asks now.
    pub fn is_ready(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Readiness").field(&self.is_ready()).finish()
    }
}

/// The daemon's side of [`Readiness::flag`].
#[derive(Clone, Debug)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

type ScrapeHook = Arc<dyn Fn() + Send + Sync>;

/// An admin server, configured and not yet listening.
#[derive(Clone)]
pub struct AdminServer {
    registry: Arc<Registry>,
    readiness: Readiness,
    on_scrape: Option<ScrapeHook>,
}

impl AdminServer {
    /// Serves `registry` (every family registered already); ready always until
    /// [`AdminServer::readiness`] says otherwise.
    pub fn new(registry: Arc<Registry>) -> AdminServer {
        AdminServer { registry, readiness: Readiness::always(), on_scrape: None }
    }

    /// What `/readyz` answers from.
    pub fn readiness(mut self, readiness: Readiness) -> AdminServer {
        self.readiness = readiness;
        self
    }

    /// Runs `hook` before each `/metrics` encoding, to set gauges from state
    /// that is read only when someone asks (it runs on the admin thread).
    pub fn on_scrape(mut self, hook: impl Fn() + Send + Sync + 'static) -> AdminServer {
        self.on_scrape = Some(Arc::new(hook));
        self
    }

    /// Binds `addr` (port 0 picks one) and serves on the current tokio
    /// runtime until the handle is dropped or shut down.
    pub async fn start(self, addr: SocketAddr) -> io::Result<AdminHandle> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::spawn(self.serve(listener, stop_rx));
        tracing::info!(addr = %local, "admin endpoint listening (/metrics, /healthz, /readyz)");
        Ok(AdminHandle { addr: local, stop: Some(stop_tx), thread: None })
    }

    /// Binds `addr` (port 0 picks one) and serves from a thread of its own
    /// with a current-thread runtime, for daemons that do not run tokio.
    /// Returns once the port accepts connections.
    pub fn spawn(self, addr: SocketAddr) -> io::Result<AdminHandle> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread = thread::Builder::new().name("tailor-admin".into()).spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(std_listener) {
                    Ok(listener) => self.serve(listener, stop_rx).await,
                    Err(e) => tracing::error!(error = %e, "admin endpoint: cannot register listener"),
                }
            })
        })?;
        tracing::info!(addr = %local, "admin endpoint listening (/metrics, /healthz, /readyz)");
        Ok(AdminHandle { addr: local, stop: Some(stop_tx), thread: Some(thread) })
    }

    async fn serve(self, listener: TcpListener, stop: oneshot::Receiver<()>) {
        let stopped = async {
            let _ = stop.await;
        };
        AcceptLoop::new("admin endpoint")
            .wait_beyond(MAX_CONNECTIONS)
            .run(listener, stopped, |stream| {
                let server = self.clone();
                async move {
                    let service = hyper::service::service_fn(move |req| {
                        let server = server.clone();
                        async move { Ok::<_, Infallible>(server.respond(&req)) }
                    });
                    let served = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_READ_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "admin endpoint: connection ended with an error");
                    }
                }
            })
            .await
    }

    /// The answer to one request, for a service that mounts the admin routes
    /// on a port of its own (what the listener itself calls).
    pub fn respond<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        self.respond_to(req.method(), req.uri().path(), accept)
    }

    fn respond_to(&self, method: &Method, path: &str, accept: Option<&str>) -> Response<Full<Bytes>> {
        let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
        if !known {
            return plain(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n");
        }
        if method != Method::GET && method != Method::HEAD {
            let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: use GET\n");
            resp.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        match path {
            "/healthz" => plain(StatusCode::OK, "ok\n"),
            "/readyz" if self.readiness.is_ready() => plain(StatusCode::OK, "ready\n"),
            "/readyz" => plain(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
            _ => self.metrics(Format::negotiate(accept)),
        }
    }

    fn metrics(&self, format: Format) -> Response<Full<Bytes>> {
        if let Some(hook) = &self.on_scrape {
            hook();
        }
        let mut openmetrics = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut openmetrics, &self.registry) {
            tracing::error!(error = %e, "admin endpoint: encoding metrics failed");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed\n");
        }
        let body = match format {
            Format::OpenMetrics => openmetrics,
            Format::Text => openmetrics_to_text(&openmetrics),
        };
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(format.content_type()));
        resp
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// A listening admin server; dropping it stops the server (and joins its thread).
#[derive(Debug)]
pub struct AdminHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl AdminHandle {
    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; connections in flight on a spawned thread end with it.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for AdminHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;

    fn body(resp: Response<Full<Bytes>>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let bytes = rt.block_on(resp.into_body().collect()).unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn routes_answer_by_path_and_method() {
        let (readiness, flag) = Readiness::flag(false);
        let server = AdminServer::new(Arc::new(Registry::default())).readiness(readiness);
        assert_eq!(server.respond_to(&Method::GET, "/healthz", None).status(), StatusCode::OK);
        assert_eq!(server.respond_to(&Method::GET, "/readyz", None).status(), StatusCode::SERVICE_UNAVAILABLE);
        flag.set(true);
        assert_eq!(server.respond_to(&Method::GET, "/readyz", None).status(), StatusCode::OK);
        assert_eq!(server.respond_to(&Method::GET, "/stats", None).status(), StatusCode::NOT_FOUND);
        let post = server.respond_to(&Method::POST, "/metrics", None);
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[header::ALLOW], "GET, HEAD");
    }

    #[test]
    fn scrape_hook_runs_before_encoding() {
        let mut registry = Registry::default();
        let scrapes = Counter::<u64>::default();
        registry.register("tailor_test_scrapes", "Scrapes answered.", scrapes.clone());
        let server = AdminServer::new(Arc::new(registry)).on_scrape(move || {
            scrapes.inc();
        });
        let first = body(server.respond_to(&Method::GET, "/metrics", None));
        assert!(first.contains("tailor_test_scrapes_total 1\n"), "{first}");
        let second = server.respond_to(&Method::GET, "/metrics", Some("application/openmetrics-text"));
        assert_eq!(second.headers()[header::CONTENT_TYPE], Format::OpenMetrics.content_type());
        let second = body(second);
        assert!(second.contains("tailor_test_scrapes_total 2\n") && second.ends_with("# EOF\n"), "{second}");
    }
}
