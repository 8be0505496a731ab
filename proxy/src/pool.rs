//! Kept-alive HTTP/1.1 connections to upstreams (plaintext or TLS), reused request after
//! request.
//!
//! hyper-util's pooled client spawns a task for every HTTP/1.1 request whose response has
//! a body, to put the connection back once it can take the next request; with the URI and
//! `Host` it rebuilds and the checkout it races against a connect, that was the largest
//! part of the sidecar's CPU per request above nginx's. Here a connection goes back to
//! the pool as soon as its response headers arrive (hyper's connection task streams the
//! body on its own), and a checkout takes an idle one only once hyper says it can take a
//! request (`is_ready`: the previous response was read to its end). A connection that
//! is still busy is skipped, a closed one dropped; with none ready a new one is made.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use crate::forward::{BoxError, RequestBody};

/// Idle connections kept per upstream at most; more are closed as they come back.
const MAX_IDLE_PER_UPSTREAM: usize = 256;
/// An idle connection unused this long is closed (by the sweep, or at the next return).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often idle connections are swept for expired ones.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Why a request got no response from the upstream.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made (refused, unreachable, TLS handshake failed).
    Connect(BoxError),
    /// The connection failed while the request was sent or its response awaited.
    Send(hyper::Error),
}

struct Idle {
    sender: http1::SendRequest<RequestBody>,
    since: Instant,
}

/// The HTTP/1.1 connections of one client (one TLS setting), by upstream address.
pub struct H1Pool {
    connector: HttpsConnector<HttpConnector>,
    scheme: &'static str,
    idle: Mutex<HashMap<SocketAddr, Vec<Idle>>>,
}

impl H1Pool {
    /// A pool that connects with `connector` to `scheme://addr`; inside a tokio runtime
    /// a task sweeps its expired idle connections until the pool is dropped.
    pub fn new(connector: HttpsConnector<HttpConnector>, scheme: &'static str) -> Arc<H1Pool> {
        let pool = Arc::new(H1Pool { connector, scheme, idle: Mutex::default() });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&pool);
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(SWEEP_EVERY).await;
                    let Some(pool) = weak.upgrade() else { return };
                    let now = Instant::now();
                    for list in pool.lock().values_mut() {
                        list.retain(|c| !c.sender.is_closed() && now.duration_since(c.since) <= IDLE_TIMEOUT);
                    }
                }
            });
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `addr` that can take a request now (the most recently used
    /// first: its socket is the likeliest to be warm); closed ones are dropped on the way.
    /// The list stays in the order connections came back, oldest first.
    fn checkout(&self, addr: SocketAddr) -> Option<http1::SendRequest<RequestBody>> {
        let mut idle = self.lock();
        let list = idle.get_mut(&addr)?;
        let mut i = list.len();
        while i > 0 {
            i -= 1;
            let conn = &list[i];
            if conn.sender.is_closed() {
                list.remove(i);
            } else if conn.sender.is_ready() {
                return Some(list.remove(i).sender);
            }
        }
        None
    }

    /// Returns a connection whose response headers arrived; it takes the next request
    /// once hyper has read that response to its end.
    fn give_back(&self, addr: SocketAddr, sender: http1::SendRequest<RequestBody>) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = self.lock();
        let list = idle.entry(addr).or_default();
        // The oldest go first: dropping a sender closes its connection once it is idle.
        let expired = list.iter().take_while(|c| now.duration_since(c.since) > IDLE_TIMEOUT).count();
        let over = (list.len() - expired + 1).saturating_sub(MAX_IDLE_PER_UPSTREAM);
        list.drain(..expired + over);
        list.push(Idle { sender, since: now });
    }

    async fn connect(&self, addr: SocketAddr) -> Result<http1::SendRequest<RequestBody>, SendError> {
        // A socket address with a scheme always makes a URI.
        let uri: Uri = format!("{}://{addr}/", self.scheme).parse().expect("scheme://ip:port/ is a URI");
        let io = self.connector.clone().call(uri).await.map_err(SendError::Connect)?;
        let (sender, conn) = http1::Builder::new().handshake(io).await.map_err(SendError::Send)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Sends `req` (its URI in origin form) to `addr` on an idle connection, or a new one.
    /// A request an idle connection could not take (the upstream had closed it) is sent
    /// again on a new connection; one that was written is never resent.
    pub async fn send(&self, mut req: Request<RequestBody>, addr: SocketAddr) -> Result<Response<Incoming>, SendError> {
        if !req.headers().contains_key(http::header::HOST) {
            // Only an HTTP/1.0 client or an h2 request without :authority lacks it.
            if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
        }
        if let Some(mut sender) = self.checkout(addr) {
            match sender.try_send_request(req).await {
                Ok(response) => {
                    self.give_back(addr, sender);
                    return Ok(response);
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(SendError::Send(e.into_error())),
                },
            }
        }
        let mut sender = self.connect(addr).await?;
        let response = sender.send_request(req).await.map_err(SendError::Send)?;
        self.give_back(addr, sender);
        Ok(response)
    }
}
