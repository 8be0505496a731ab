//! Relaying a request to an upstream over HTTP/1.1 or h2c (or either over TLS), within the proxy's bounds (time
//! to the upstream's response headers, request body size and time), and the responses the
//! proxy makes itself (shed, upstream failure, refused body) in HTTP and gRPC form.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::Limits;
use crate::gate::ShedReason;
use crate::headers::{ERROR_HEADER, SHED_HEADER};
use crate::metrics::Metrics;
use crate::pool::{H1Pool, SendError};
use crate::tls::{self, ClientTls};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the proxy returns.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// Why a request's body was refused while it was relayed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("request body larger than max_body_bytes ({0})")]
    TooLarge(u64),
    #[error("request body not received within body_read_timeout_ms ({0} ms)")]
    TimedOut(u128),
}

/// A client's request body on its way to the upstream: at most `max_body_bytes`, and all of
/// it within `body_read_timeout_ms` of admission, so a slow client cannot hold a slot.
pub struct RequestBody {
    inner: Incoming,
    left: u64,
    limit: u64,
    timeout: Option<BodyTimeout>,
    /// When the whole body had been handed on (the upstream's time starts then). `None`:
    /// the body was complete when the request was relayed (most requests have none), so
    /// nobody needs to be told when it went: no cell to allocate.
    sent: Option<Arc<OnceLock<Instant>>>,
}

/// A request body's time limit and its deadline; the timer is made the first time the body
/// has to be waited for (most requests have none, or all of it at once).
struct BodyTimeout {
    limit: std::time::Duration,
    deadline: tokio::time::Instant,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl RequestBody {
    pub fn new(inner: Incoming, max_bytes: u64, timeout: Option<std::time::Duration>) -> RequestBody {
        let timeout =
            timeout.map(|limit| BodyTimeout { limit, deadline: tokio::time::Instant::now() + limit, timer: None });
        let sent = (!inner.is_end_stream()).then(Arc::default);
        RequestBody { inner, left: max_bytes, limit: max_bytes, timeout, sent }
    }

    fn mark_if_sent(&self) {
        if let Some(sent) = self.sent.as_ref().filter(|_| self.inner.is_end_stream()) {
            let _ = sent.set(Instant::now());
        }
    }
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > this.left {
                    return Poll::Ready(Some(Err(BodyError::TooLarge(this.limit).into())));
                }
                this.left -= len;
                this.mark_if_sent();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                if let Some(sent) = &this.sent {
                    let _ = sent.set(Instant::now());
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => {
                if let Some(BodyTimeout { limit, deadline, timer }) = &mut this.timeout {
                    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(*deadline)));
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Some(Err(BodyError::TimedOut(limit.as_millis()).into())));
                    }
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why relaying a request failed; each has its status and `tailor-error` value.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection to the upstream (refused, unreachable, connect timeout).
    #[error("cannot connect to the upstream: {0}")]
    Connect(BoxError),
    /// The TLS handshake with the upstream failed (its certificate not signed by
    /// `upstream_tls.ca_file`, a wrong name, no TLS at all).
    #[error("TLS handshake with the upstream failed: {0}")]
    Tls(String),
    /// No response headers within `upstream_timeout_ms` (a hung upstream).
    #[error("no response from the upstream within upstream_timeout_ms ({0} ms)")]
    Timeout(u128),
    /// The connection closed or was reset before the response (the upstream died).
    #[error("the upstream closed the connection: {0}")]
    Closed(BoxError),
    /// The upstream sent its response headers, then no more of its body within
    /// `upstream_body_timeout_ms` (it stalled mid-body); the response is cut off.
    #[error("the upstream sent none of the rest of its response body within upstream_body_timeout_ms ({0} ms)")]
    BodyStalled(u128),
    /// The client's body broke a limit while it was relayed.
    #[error("{0}")]
    Body(BodyError),
}

impl UpstreamError {
    /// The `tailor-error` value.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "upstream_connect",
            UpstreamError::Tls(_) => "upstream_tls",
            UpstreamError::Timeout(_) => "upstream_timeout",
            UpstreamError::Closed(_) => "upstream_closed",
            UpstreamError::BodyStalled(_) => "upstream_body_timeout",
            UpstreamError::Body(BodyError::TooLarge(_)) => "body_too_large",
            UpstreamError::Body(BodyError::TimedOut(_)) => "body_timeout",
        }
    }

    /// The upstream's fault (counts against its health), not the client's.
    pub fn is_upstream(&self) -> bool {
        !matches!(self, UpstreamError::Body(_))
    }

    fn status(&self) -> (StatusCode, u8) {
        match self {
            UpstreamError::Connect(_) | UpstreamError::Tls(_) | UpstreamError::Closed(_) => {
                (StatusCode::BAD_GATEWAY, 14)
            }
            UpstreamError::Timeout(_) | UpstreamError::BodyStalled(_) => (StatusCode::GATEWAY_TIMEOUT, 4),
            UpstreamError::Body(BodyError::TooLarge(_)) => (StatusCode::PAYLOAD_TOO_LARGE, 8),
            UpstreamError::Body(BodyError::TimedOut(_)) => (StatusCode::REQUEST_TIMEOUT, 4),
        }
    }

    /// `e` from sending a request (`connect`: no connection was made) as the proxy reports it.
    fn classify(e: BoxError, connect: bool) -> UpstreamError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
        while let Some(s) = source {
            if let Some(b) = s.downcast_ref::<BodyError>() {
                return UpstreamError::Body(match b {
                    BodyError::TooLarge(n) => BodyError::TooLarge(*n),
                    BodyError::TimedOut(ms) => BodyError::TimedOut(*ms),
                });
            }
            source = s.source();
        }
        if let Some(tls) = tls::find_tls_error(&*e) {
            UpstreamError::Tls(tls)
        } else if connect {
            UpstreamError::Connect(e)
        } else {
            UpstreamError::Closed(e)
        }
    }

    fn from_send(e: SendError) -> UpstreamError {
        match e {
            SendError::Connect(e) => UpstreamError::classify(e, true),
            SendError::Send(e) => UpstreamError::classify(Box::new(e), false),
            SendError::TimedOut(ms) => UpstreamError::Timeout(ms),
        }
    }

    fn from_legacy(e: hyper_util::client::legacy::Error) -> UpstreamError {
        let connect = e.is_connect();
        UpstreamError::classify(Box::new(e), connect)
    }
}

/// Pooled connections to upstreams: one client per protocol. A request goes out in the
/// version it came in (h2c in, h2c out; h2 over TLS in, h2 out), so gRPC keeps HTTP/2 and
/// its trailers. Plaintext unless built with [`Upstreams::tls`]. HTTP/1.1 goes through
/// the proxy's own pool (`pool`), HTTP/2 (one multiplexed connection) through hyper-util's.
#[derive(Clone)]
pub struct Upstreams {
    h1: Arc<H1Pool>,
    h2: Client<HttpsConnector<HttpConnector>, RequestBody>,
    scheme: &'static str,
}

impl Default for Upstreams {
    fn default() -> Self {
        Upstreams::build(None)
    }
}

/// An HTTP connector with the proxy's socket settings, for upstreams and health checks.
pub fn http_connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(2)));
    // The TLS wrapper, not this connector, decides which schemes are allowed.
    connector.enforce_http(false);
    connector
}

/// A connector that speaks TLS to `https://` URIs with `tls` (ALPN `h2` when `h2`; no ALPN
/// for HTTP/1.1, which a server then assumes) and plaintext to `http://` ones.
pub fn connector(tls: Option<&ClientTls>, h2: bool) -> HttpsConnector<HttpConnector> {
    let config = tls.map_or_else(tls::plaintext_only, |t| t.config.clone());
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config((*config).clone()).https_or_http();
    if let Some(name) = tls.and_then(|t| t.server_name.clone()) {
        builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    if h2 {
        builder.enable_http2().wrap_connector(http_connector())
    } else {
        builder.enable_http1().wrap_connector(http_connector())
    }
}

impl Upstreams {
    /// Clients that call upstreams over TLS with `tls`.
    pub fn tls(tls: &ClientTls) -> Upstreams {
        Upstreams::build(Some(tls))
    }

    fn build(tls: Option<&ClientTls>) -> Upstreams {
        // Without a pool timer hyper-util never closes idle connections: a burst's
        // extra upstream connections would stay open for the life of the proxy.
        let pooled = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(std::time::Duration::from_secs(90)).pool_timer(hyper_util::rt::TokioTimer::new());
            b
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let h1 = H1Pool::new(connector(tls, false), scheme);
        let h2 = pooled().http2_only(true).build(connector(tls, true));
        Upstreams { h1, h2, scheme }
    }
}

impl Upstreams {
    /// Sends `req` to `addr` within `limits`: its body at most `max_body_bytes` and within
    /// `body_read_timeout`, the response headers within `upstream_timeout` of the whole
    /// request having been sent (a client still sending is bounded by the body's timeout,
    /// not counted against the upstream).
    pub async fn relay(
        &self,
        req: Request<Incoming>,
        addr: SocketAddr,
        limits: &Limits,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let (parts, body) = req.into_parts();
        let body = RequestBody::new(body, limits.max_body_bytes, limits.body_read_timeout());
        let wait = ResponseWait::new(&body, limits.upstream_timeout());
        let mut req = Request::from_parts(parts, body);
        if req.version() == Version::HTTP_2 {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            // An address and a path that came parsed from a URI always make a URI.
            *req.uri_mut() = format!("{}://{addr}{path}", self.scheme).parse().expect("scheme://ip:port/path is a URI");
            let timer = std::pin::pin!(tokio::time::sleep_until(wait.first()));
            return within(self.h2.request(req), timer, &wait)
                .await
                .map_err(UpstreamError::Timeout)?
                .map_err(UpstreamError::from_legacy);
        }
        if req.uri().authority().is_some() {
            // An absolute-form request line (`GET http://host/path`): the upstream gets origin form.
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            *req.uri_mut() = path.parse().expect("a URI's path and query is a URI");
        }
        self.h1.send(req, addr, &wait).await.map_err(UpstreamError::from_send)
    }
}

/// The wait for an upstream's response headers: `wait` from when the whole request had
/// been sent, which is when the relay started for a body complete on arrival (`sent`
/// `None`), else when [`RequestBody`] handed on its end.
pub struct ResponseWait {
    start: tokio::time::Instant,
    wait: std::time::Duration,
    sent: Option<Arc<OnceLock<Instant>>>,
}

impl ResponseWait {
    /// The wait for the response to a request with `body`, starting now.
    pub fn new(body: &RequestBody, wait: std::time::Duration) -> ResponseWait {
        ResponseWait { start: tokio::time::Instant::now(), wait, sent: body.sent.clone() }
    }

    /// The deadline as of the start (the earliest the wait can be over).
    pub fn first(&self) -> tokio::time::Instant {
        self.start + self.wait
    }

    /// A timer set for an earlier deadline has fired: the next deadline, or the wait in
    /// milliseconds when it is over.
    fn next(&self) -> Result<tokio::time::Instant, u128> {
        match self.sent.as_ref().map_or(Some(self.start.into_std()), |s| s.get().copied()) {
            Some(at) if at + self.wait <= Instant::now() => Err(self.wait.as_millis()),
            Some(at) => Ok((at + self.wait).into()),
            // Still sending: the body's own timeout bounds that.
            None => Ok(tokio::time::Instant::now() + self.wait),
        }
    }
}

pin_project_lite::pin_project! {
    /// `fut`'s output, unless `wait` is over first (`Err`: the wait in milliseconds), watched
    /// with `timer`, set for `wait.first()` or later. The timer is the caller's so that a
    /// pooled upstream connection can keep one for all its requests: moving a registered
    /// tokio timer later takes no lock and no allocation, a new one is registered and
    /// removed under the timer driver's lock every time.
    ///
    /// A future of its own rather than an `async fn`: an `async fn` keeps its argument and
    /// the pinned copy it polls, so `fut` (a whole request's relay) would be carried, and
    /// moved, twice.
    pub struct Within<'a, F> {
        #[pin]
        fut: F,
        timer: Pin<&'a mut tokio::time::Sleep>,
        wait: &'a ResponseWait,
    }
}

pub fn within<'a, F: Future>(fut: F, timer: Pin<&'a mut tokio::time::Sleep>, wait: &'a ResponseWait) -> Within<'a, F> {
    Within { fut, timer, wait }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Result<F::Output, u128>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            match this.wait.next() {
                Ok(deadline) => this.timer.as_mut().reset(deadline),
                Err(ms) => return Poll::Ready(Err(ms)),
            }
        }
        Poll::Pending
    }
}

/// A request whose declared `content-length` is above `max_body_bytes`: refused before it
/// waits for a slot (a chunked body is counted as it is relayed).
pub fn declared_too_large(req: &Request<Incoming>, limits: &Limits, grpc: bool) -> Option<Response<Body>> {
    let declared = req.headers().get(http::header::CONTENT_LENGTH)?.to_str().ok()?.parse::<u64>().ok()?;
    (declared > limits.max_body_bytes)
        .then(|| failed(grpc, &UpstreamError::Body(BodyError::TooLarge(limits.max_body_bytes))))
}

/// The response to a relay that failed: its status (502, 504, 413, 408; for gRPC a
/// trailers-only `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `RESOURCE_EXHAUSTED`), the reason in
/// `tailor-error`.
pub fn failed(grpc: bool, e: &UpstreamError) -> Response<Body> {
    let (status, grpc_status) = e.status();
    let mut r =
        if grpc { grpc_trailers_only(grpc_status, &format!("tailor: {e}")) } else { plain(status, format!("{e}\n")) };
    r.headers_mut().insert(ERROR_HEADER, HeaderValue::from_static(e.kind()));
    r
}

/// A body from a fixed text.
pub fn text(s: impl Into<Bytes>) -> Body {
    Full::new(s.into()).map_err(|never| match never {}).boxed_unsync()
}

fn grpc_trailers_only(status: u8, message: &str) -> Response<Body> {
    let mut r = Response::new(text(Bytes::new()));
    let h = r.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(u16::from(status)));
    if let Ok(v) = HeaderValue::from_str(message) {
        h.insert("grpc-message", v);
    }
    r
}

/// The response to a shed request: 503, or for gRPC a trailers-only response with
/// `DEADLINE_EXCEEDED` (deadline passed or cannot be met) or `RESOURCE_EXHAUSTED`
/// (queue full). The reason is in `tailor-shed` either way.
pub fn shed_response(reason: ShedReason, grpc: bool) -> Response<Body> {
    let mut r = if grpc {
        let status = match reason {
            ShedReason::QueueFull => 8,
            ShedReason::DeadlineExpired | ShedReason::CannotMeet => 4,
        };
        grpc_trailers_only(status, &format!("tailor: shed ({})", reason.as_str()))
    } else {
        let mut r = Response::new(text(format!("shed: {}\n", reason.as_str())));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        r
    };
    r.headers_mut().insert(SHED_HEADER, HeaderValue::from_static(reason.as_str()));
    r
}

/// A plain response with `status` and a one-line text body.
pub fn plain(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(text(body.into()));
    *r.status_mut() = status;
    r
}

/// How a relayed response body is watched: at most `stall_timeout` without a frame from
/// the upstream; a stall is counted in `metrics` and, on gRPC, ends the call with
/// `DEADLINE_EXCEEDED` trailers.
#[derive(Clone)]
pub struct BodyWatch {
    pub stall_timeout: Option<std::time::Duration>,
    pub grpc: bool,
    pub metrics: Arc<Metrics>,
}

impl BodyWatch {
    pub fn new(limits: &Limits, grpc: bool, metrics: &Arc<Metrics>) -> BodyWatch {
        BodyWatch { stall_timeout: limits.upstream_body_timeout(), grpc, metrics: metrics.clone() }
    }
}

/// A response body that runs `on_end` once, when it ends or is dropped (client gone):
/// the request leaves the gate and its upstream only when the whole response is relayed.
/// An upstream that sends no frame for the watch's stall timeout ends it too: HTTP gets
/// an error (hyper cuts the response off: HTTP/1.1 closes the connection, HTTP/2 resets
/// the stream), gRPC gets trailers with `DEADLINE_EXCEEDED` and `tailor-error`.
pub struct Guarded<F: FnOnce(bool) + Send + Unpin> {
    inner: Incoming,
    on_end: Option<F>,
    watch: BodyWatch,
    /// Armed while the upstream's next frame is awaited; allocated the first time it is.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    stall_armed: bool,
    stalled: bool,
}

impl<F: FnOnce(bool) + Send + Unpin> Guarded<F> {
    /// `on_end(true)` when the body ended normally, `on_end(false)` when it failed, stalled
    /// or was dropped.
    pub fn new(inner: Incoming, watch: BodyWatch, on_end: F) -> Self {
        Guarded { inner, on_end: Some(on_end), watch, stall: None, stall_armed: false, stalled: false }
    }

    fn end(&mut self, ok: bool) {
        if let Some(f) = self.on_end.take() {
            f(ok);
        }
    }

    /// Whether the stall timer, armed now if it was not, has fired.
    fn stall_fired(&mut self, cx: &mut TaskContext<'_>) -> bool {
        let Some(limit) = self.watch.stall_timeout else { return false };
        let timer = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !self.stall_armed {
            timer.as_mut().reset(tokio::time::Instant::now() + limit);
            self.stall_armed = true;
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// The upstream stalled: count it, give the slot back, end the response.
    fn cut_off(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.stalled = true;
        let limit = self.watch.stall_timeout.map_or(0, |t| t.as_millis());
        let e = UpstreamError::BodyStalled(limit);
        self.watch.metrics.relay_failed(&e);
        self.end(false);
        tracing::warn!(error = %e, "upstream stalled mid-body; response cut off");
        if !self.watch.grpc {
            return Poll::Ready(Some(Err(e.into())));
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from(4u16));
        if let Ok(v) = HeaderValue::from_str(&format!("tailor: {e}")) {
            trailers.insert("grpc-message", v);
        }
        trailers.insert(ERROR_HEADER, HeaderValue::from_static(e.kind()));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

impl<F: FnOnce(bool) + Send + Unpin> HttpBody for Guarded<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.stalled {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Pending => {
                if self.stall_fired(cx) {
                    return self.cut_off();
                }
            }
            Poll::Ready(None) => self.end(true),
            Poll::Ready(Some(Err(_))) => self.end(false),
            Poll::Ready(Some(Ok(_))) => self.stall_armed = false,
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.stalled || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(bool) + Send + Unpin> Drop for Guarded<F> {
    fn drop(&mut self) {
        let ended = self.inner.is_end_stream();
        self.end(ended);
    }
}

/// `response` with its body watched by `watch` and guarded by `on_end`.
pub fn guarded<F: FnOnce(bool) + Send + Unpin + 'static>(
    response: Response<Incoming>,
    watch: BodyWatch,
    on_end: F,
) -> Response<Body> {
    response.map(|b| Guarded::new(b, watch, on_end).boxed_unsync())
}
