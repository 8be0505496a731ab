//! Client connections within bounds: at most `max_connections` open per listener, a
//! request's head within `header_read_timeout_ms` (slowloris), heads of at most
//! `max_header_bytes` (431 beyond), and no write waiting on the client longer than
//! `client_write_timeout_ms` (a client that stops reading its response).
//!
//! hyper's HTTP/1.1 header timeout covers a request head once the connection is known to
//! speak HTTP/1.1; before that (a connection that sends nothing, or an HTTP/2 preface
//! trickled byte by byte) hyper-util's version detection waits for ever, so the first
//! request's head is bounded here, on the socket, until the first request arrives.
//!
//! hyper has no write timeout either: a response body is relayed only as fast as the
//! client takes it, so a client that stops reading would hold its request's slot (and the
//! upstream's connection) for as long as it keeps the connection open. The socket's
//! writes are bounded here too: a write that makes no progress for the timeout fails,
//! and hyper closes the connection and drops the response.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::Limits;
use crate::metrics::Metrics;
use crate::timer::ReusingTimer;

/// What a connection beyond `max_connections` is told before it is closed.
pub const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ntailor-shed: connection_limit\r\n\
content-type: text/plain\r\ncontent-length: 29\r\nconnection: close\r\n\r\nshed: connection_limit (503)\n";

/// The connection builder for `limits`: header read timeout and header size on HTTP/1.1,
/// header list size on HTTP/2.
pub fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(ReusingTimer::default())
        .header_read_timeout(limits.header_read_timeout())
        .max_buf_size(limits.max_header_bytes);
    b.http2().timer(TokioTimer::new()).max_header_list_size(limits.max_header_bytes as u32);
    b
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

/// A client connection (a socket, or TLS over one) whose reads fail once
/// `header_read_timeout` passes before its first request arrived (`served`, set by the
/// service), and whose writes fail once one has made no progress for
/// `client_write_timeout` (counted in `client_write_timeouts`).
pub struct ClientIo<S = TcpStream> {
    inner: S,
    served: Arc<AtomicBool>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    write_timeout: Option<Duration>,
    /// Armed while a write waits on the client; allocated the first time one does.
    write_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    write_armed: bool,
    metrics: Arc<Metrics>,
}

impl<S> ClientIo<S> {
    pub fn new(inner: S, limits: &Limits, served: Arc<AtomicBool>, metrics: Arc<Metrics>) -> ClientIo<S> {
        ClientIo {
            inner,
            served,
            timer: Some(Box::pin(tokio::time::sleep(limits.header_read_timeout()))),
            write_timeout: limits.client_write_timeout(),
            write_timer: None,
            write_armed: false,
            metrics,
        }
    }

    /// `polled`, a write's outcome, unless it has been pending for longer than the
    /// write timeout: then a `TimedOut` error.
    fn bound_write<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
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
        if read.is_pending() {
            if this.served.load(Relaxed) {
                this.timer = None;
            } else if this.timer.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready()) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request head within header_read_timeout_ms",
                )));
            }
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
