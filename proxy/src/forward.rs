//! Relaying a request to an upstream over HTTP/1.1 or h2c, and the responses the proxy
//! makes itself (shed, upstream failure) in HTTP and gRPC form.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::gate::ShedReason;
use crate::headers::SHED_HEADER;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the proxy returns.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// Pooled connections to upstreams: one client per protocol. A request goes out in the
/// version it came in (h2c in, h2c out), so gRPC keeps HTTP/2 and its trailers.
#[derive(Clone)]
pub struct Upstreams {
    h1: Client<HttpConnector, Incoming>,
    h2: Client<HttpConnector, Incoming>,
}

impl Default for Upstreams {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(std::time::Duration::from_secs(2)));
        let h1 = Client::builder(TokioExecutor::new()).build(connector.clone());
        let h2 = Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
        Upstreams { h1, h2 }
    }
}

impl Upstreams {
    /// Sends `req` to `addr`, keeping its path, query, headers and body.
    pub async fn send(&self, mut req: Request<Incoming>, addr: SocketAddr) -> Result<Response<Incoming>, BoxError> {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        *req.uri_mut() = format!("http://{addr}{path}").parse()?;
        let response =
            if req.version() == Version::HTTP_2 { self.h2.request(req).await? } else { self.h1.request(req).await? };
        Ok(response)
    }
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

/// The response when the upstream failed: 502, or gRPC `UNAVAILABLE`.
pub fn upstream_failed(grpc: bool, why: &str) -> Response<Body> {
    if grpc {
        return grpc_trailers_only(14, &format!("tailor: upstream failed: {why}"));
    }
    let mut r = Response::new(text(format!("upstream failed: {why}\n")));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

/// A plain response with `status` and a one-line text body.
pub fn plain(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(text(body.into()));
    *r.status_mut() = status;
    r
}

/// A response body that runs `on_end` once, when it ends or is dropped (client gone):
/// the request leaves the gate and its upstream only when the whole response is relayed.
pub struct Guarded<F: FnOnce(bool) + Send + Unpin> {
    inner: Incoming,
    on_end: Option<F>,
}

impl<F: FnOnce(bool) + Send + Unpin> Guarded<F> {
    /// `on_end(true)` when the body ended normally, `on_end(false)` when it failed or was dropped.
    pub fn new(inner: Incoming, on_end: F) -> Self {
        Guarded { inner, on_end: Some(on_end) }
    }

    fn end(&mut self, ok: bool) {
        if let Some(f) = self.on_end.take() {
            f(ok);
        }
    }
}

impl<F: FnOnce(bool) + Send + Unpin> HttpBody for Guarded<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.end(true),
            Poll::Ready(Some(Err(_))) => self.end(false),
            _ => {}
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
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

/// `response` with its body guarded by `on_end`.
pub fn guarded<F: FnOnce(bool) + Send + Unpin + 'static>(response: Response<Incoming>, on_end: F) -> Response<Body> {
    response.map(|b| Guarded::new(b, on_end).boxed_unsync())
}
