//! Client connections within bounds: at most `max_connections` open per listener, a
//! request's head within `header_read_timeout_ms` (slowloris), heads of at most
//! `max_header_bytes` (431 beyond), and no write waiting on the client longer than
//! `client_write_timeout_ms` (a client that stops reading its response).
//!
//! Every HTTP/1.1 request head is bounded here, on the socket ([`ClientIo`]), not by
//! hyper's header read timeout: that one covers a head only once the connection is known
//! to speak HTTP/1.1 (before that, a connection that sends nothing or an HTTP/2 preface
//! trickled byte by byte, hyper-util's version detection waits for ever), and it
//! allocated and registered a new timer for every request and forced a read after each
//! response, one of the sidecar's larger costs per request above nginx's. Here one timer
//! per connection is pushed forward at each wait for a head. The wait starts when the
//! connection's last response has ended (as hyper's, whose timer starts when the
//! connection turns idle), and the timer is armed right then, on the socket write or
//! flush that follows the end of every response as well as on reads. A head that does
//! not arrive within `header_read_timeout_ms` closes the connection, an idle kept-alive
//! one included. On HTTP/2 only the first request's head is bounded (streams multiplex;
//! HTTP/2 has its own keep-alive).
//!
//! hyper still gets a header read timeout, with a timer that never fires
//! ([`ReadAfterResponse`]): only with one set does hyper read the socket again right
//! after each response (to start its timer), which picks up a next request already
//! waiting without a turn of the scheduler. Turning it off (`None`) lost that read and
//! cost 55-75 µs of p50 at 6000 req/s (docs/results/proxy.md, "Cost").
//!
//! hyper has no write timeout either: a response body is relayed only as fast as the
//! client takes it, so a client that stops reading would hold its request's slot (and the
//! upstream's connection) for as long as it keeps the connection open. The socket's
//! writes are bounded here too: a write that makes no progress for the timeout fails,
//! and hyper closes the connection and drops the response.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Version;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::Limits;
use crate::metrics::Metrics;

/// What a connection beyond `max_connections` is told before it is closed.
pub const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ntailor-shed: connection_limit\r\n\
content-type: text/plain\r\ncontent-length: 29\r\nconnection: close\r\n\r\nshed: connection_limit (503)\n";

/// The connection builder for `limits`: header size on HTTP/1.1 (the header read timeout
/// is [`ClientIo`]'s; hyper's own never fires, see [`ReadAfterResponse`]), header list
/// size on HTTP/2.
pub fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(ReadAfterResponse)
        .header_read_timeout(limits.header_read_timeout())
        .max_buf_size(limits.max_header_bytes);
    b.http2().timer(TokioTimer::new()).max_header_list_size(limits.max_header_bytes as u32);
    b
}

/// hyper's HTTP/1.1 timer, used only for its header read timeout, whose sleeps never
/// fire and cost nothing (a zero-sized sleep: boxing it allocates nothing, and no tokio
/// timer is registered per request). The bound on a request head is [`ClientIo`]'s; the
/// timeout is set in hyper only for what it does besides: hyper reads again right after
/// every response, so a next request already waiting is served in the same poll.
#[derive(Clone, Copy)]
pub struct ReadAfterResponse;

/// A sleep that never ends.
struct Never;

impl Future for Never {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl hyper::rt::Sleep for Never {}

impl hyper::rt::Timer for ReadAfterResponse {
    fn sleep(&self, _: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Never)
    }

    fn sleep_until(&self, _: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Never)
    }

    fn reset(&self, _: &mut Pin<Box<dyn hyper::rt::Sleep>>, _: std::time::Instant) {}
}

/// One open client connection: holds the open gauge (the accept loop holds its
/// `max_connections` slot).
pub struct Open {
    metrics: Arc<Metrics>,
}

impl Open {
    pub fn new(metrics: Arc<Metrics>) -> Open {
        metrics.connections_open.fetch_add(1, Relaxed);
        Open { metrics }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.metrics.connections_open.fetch_sub(1, Relaxed);
    }
}

/// What the service tells a connection's [`ClientIo`] about its requests.
#[derive(Default)]
pub struct Activity {
    /// Requests whose head has arrived.
    started: AtomicU64,
    /// Requests whose response has ended (or was dropped): `started - ended` are in
    /// progress, and with none in progress the connection awaits a head.
    ended: AtomicU64,
    /// The connection speaks HTTP/2 (its first request said so).
    h2: AtomicBool,
}

impl Activity {
    /// A request's head arrived: it is in progress until the guard is dropped (held by
    /// the service's future, then by the response body, [`Tracked`]).
    pub fn started(self: &Arc<Self>, version: Version) -> InProgress {
        if version == Version::HTTP_2 {
            self.h2.store(true, Relaxed);
        }
        self.started.fetch_add(1, Relaxed);
        InProgress(self.clone())
    }
}

/// A request in progress on its connection (see [`Activity::started`]).
pub struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        // hyper drops a response body once it has written its end (or gave up on it).
        self.0.ended.fetch_add(1, Relaxed);
    }
}

/// A response body holding its request's [`InProgress`] until it is done with.
pub struct Tracked<B> {
    inner: B,
    _request: InProgress,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, request: InProgress) -> Tracked<B> {
        Tracked { inner, _request: request }
    }
}

impl<B: HttpBody + Unpin> HttpBody for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client connection (a socket, or TLS over one) whose reads fail once a request head
/// has been awaited for `header_read_timeout` (see the module doc; `activity`, from the
/// service, says when one is awaited), and whose writes fail once one has made no
/// progress for `client_write_timeout` (counted in `client_write_timeouts`).
pub struct ClientIo<S = TcpStream> {
    inner: S,
    activity: Arc<Activity>,
    /// The head timer, created with the connection and pushed forward for every later
    /// head (moving a registered tokio timer later takes no lock and no allocation);
    /// `None` once the connection turned out to be HTTP/2.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    header_timeout: Duration,
    /// The value of `activity.ended` the timer was set for.
    armed_for: u64,
    write_timeout: Option<Duration>,
    /// Armed while a write waits on the client; allocated the first time one does.
    write_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    write_armed: bool,
    metrics: Arc<Metrics>,
}

impl<S> ClientIo<S> {
    pub fn new(inner: S, limits: &Limits, activity: Arc<Activity>, metrics: Arc<Metrics>) -> ClientIo<S> {
        ClientIo {
            inner,
            activity,
            timer: Some(Box::pin(tokio::time::sleep(limits.header_read_timeout()))),
            header_timeout: limits.header_read_timeout(),
            armed_for: 0,
            write_timeout: limits.client_write_timeout(),
            write_timer: None,
            write_armed: false,
            metrics,
        }
    }

    /// Whether a head is awaited now and overdue. With no request in progress, the
    /// first look after a response ended starts the wait: the timer is moved to the
    /// timeout from now and polled, so it wakes the connection's task even if hyper
    /// reads no more (then hyper's wake-up read finds the head overdue). Called on every
    /// read that would block and every write or flush (hyper flushes after each
    /// response).
    fn head_overdue(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(timer) = self.timer.as_mut() else { return false };
        let a = &*self.activity;
        if a.h2.load(Relaxed) {
            self.timer = None;
            return false;
        }
        let ended = a.ended.load(Relaxed);
        if a.started.load(Relaxed) != ended {
            return false;
        }
        if ended != self.armed_for {
            self.armed_for = ended;
            timer.as_mut().reset(tokio::time::Instant::now() + self.header_timeout);
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// `polled`, a write's outcome, unless it has been pending for longer than the
    /// write timeout: then a `TimedOut` error.
    fn bound_write<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        // Not a head timeout: an overdue head is reported by the wake-up read.
        let _ = self.head_overdue(cx);
        if polled.is_ready() {
            self.write_armed = false;
            return polled;
        }
        let Some(limit) = self.write_timeout else { return polled };
        let timer = self.write_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !self.write_armed {
            timer.as_mut().reset(tokio::time::Instant::now() + limit);
            self.write_armed = true;
        }
        if timer.as_mut().poll(cx).is_ready() {
            self.write_armed = false;
            self.metrics.client_write_timeouts.fetch_add(1, Relaxed);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took none of the response within client_write_timeout_ms",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if read.is_pending() && this.head_overdue(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request head within header_read_timeout_ms",
            )));
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.bound_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.bound_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.bound_write(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.bound_write(cx, polled)
    }
}
