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

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustc_hash::FxHashMap;
use tower_service::Service;

use crate::forward::{within, BoxError, RequestBody, ResponseWait};

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
    /// No response headers within the wait (milliseconds).
    TimedOut(u128),
}

/// The timer bounding the wait for a connection's responses, one request at a time.
type Timer = Pin<Box<tokio::time::Sleep>>;

struct Idle {
    sender: http1::SendRequest<RequestBody>,
    /// Kept with the connection, so that its next request moves it instead of
    /// registering a new one (see [`within`]).
    timer: Timer,
    since: Instant,
}

/// The HTTP/1.1 connections of one client (one TLS setting), by upstream address.
pub struct H1Pool {
    connector: HttpsConnector<HttpConnector>,
    scheme: &'static str,
    idle: Mutex<FxHashMap<SocketAddr, Vec<Idle>>>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<SocketAddr, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `addr` that can take a request now (the most recently used
    /// first: its socket is the likeliest to be warm); closed ones are dropped on the way.
    /// The list stays in the order connections came back, oldest first.
    fn checkout(&self, addr: SocketAddr) -> Option<(http1::SendRequest<RequestBody>, Timer)> {
        let mut idle = self.lock();
        let list = idle.get_mut(&addr)?;
        let mut i = list.len();
        while i > 0 {
            i -= 1;
            let conn = &list[i];
            if conn.sender.is_closed() {
                list.remove(i);
            } else if conn.sender.is_ready() {
                let Idle { sender, timer, .. } = list.remove(i);
                return Some((sender, timer));
            }
        }
        None
    }

    /// Returns a connection whose response headers arrived; it takes the next request
    /// once hyper has read that response to its end.
    fn give_back(&self, addr: SocketAddr, sender: http1::SendRequest<RequestBody>, timer: Timer) {
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
        list.push(Idle { sender, timer, since: now });
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

    /// Sends `req` (its URI in origin form) to `addr` on an idle connection, or a new one,
    /// and waits for its response headers within `wait`. A request an idle connection
    /// could not take (the upstream had closed it) is sent again on a new connection; one
    /// that was written is never resent.
    pub async fn send(
        &self,
        mut req: Request<RequestBody>,
        addr: SocketAddr,
        wait: &ResponseWait,
    ) -> Result<Response<Incoming>, SendError> {
        if !req.headers().contains_key(http::header::HOST) {
            // Only an HTTP/1.0 client or an h2 request without :authority lacks it.
            if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
        }
        let mut spare = None;
        if let Some((mut sender, mut timer)) = self.checkout(addr) {
            timer.as_mut().reset(wait.first());
            match within(sender.try_send_request(req), timer.as_mut(), wait).await.map_err(SendError::TimedOut)? {
                Ok(response) => {
                    self.give_back(addr, sender, timer);
                    return Ok(response);
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(SendError::Send(e.into_error())),
                },
            }
            spare = Some(timer);
        }
        let mut timer = spare.unwrap_or_else(|| Box::pin(tokio::time::sleep_until(wait.first())));
        // Boxed: a new connection's state (the connect and handshake, a TLS stream among
        // them, and a first request) would otherwise be part of this future, carried and
        // moved on the common path of a pooled connection.
        let fresh = Box::pin(async {
            let mut sender = self.connect(addr).await?;
            let response = sender.send_request(req).await.map_err(SendError::Send)?;
            Ok::<_, SendError>((sender, response))
        });
        let (sender, response) = within(fresh, timer.as_mut(), wait).await.map_err(SendError::TimedOut)??;
        self.give_back(addr, sender, timer);
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::connector;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A test upstream: each connection it accepts is counted and served by `serve` on a
    /// task of its own.
    async fn listening<F, Fut>(serve: F) -> (SocketAddr, Arc<AtomicUsize>)
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Relaxed);
                tokio::spawn(serve(stream));
            }
        });
        (addr, accepted)
    }

    /// An upstream that answers every request with `body`, counting the connections it
    /// accepted.
    async fn upstream(body: &'static [u8]) -> (SocketAddr, Arc<AtomicUsize>) {
        listening(move |stream| async move {
            let svc = service_fn(move |_req: Request<Incoming>| async move {
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(body))))
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        })
        .await
    }

    /// A raw upstream: answers each request on a connection with the head, then after
    /// `body_after` the 2-byte body `ok`; with `close`, closes the connection after one
    /// response (whose headers still say keep-alive).
    async fn raw_upstream(body_after: Duration, close: bool) -> (SocketAddr, Arc<AtomicUsize>) {
        listening(move |mut stream| async move {
            loop {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n").await;
                tokio::time::sleep(body_after).await;
                let _ = stream.write_all(b"ok").await;
                if close {
                    return;
                }
            }
        })
        .await
    }

    /// A front like the proxy's: every request it serves goes to `upstream` through `pool`.
    async fn front(pool: Arc<H1Pool>, upstream: SocketAddr) -> SocketAddr {
        front_waiting(pool, upstream, Duration::from_secs(30)).await
    }

    /// [`front`], waiting `wait` for each response's headers.
    async fn front_waiting(pool: Arc<H1Pool>, upstream: SocketAddr, wait: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let pool = pool.clone();
                        async move {
                            let req = req.map(|b| RequestBody::new(b, u64::MAX, None));
                            let wait = ResponseWait::new(req.body(), wait);
                            // A failed relay fails the request: the client sees its connection close.
                            pool.send(req, upstream, &wait).await.map_err(|e| format!("{e:?}"))
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        addr
    }

    /// A client connection to `front`.
    async fn client(front: SocketAddr) -> http1::SendRequest<String> {
        let stream = TcpStream::connect(front).await.unwrap();
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        sender
    }

    async fn get(sender: &mut http1::SendRequest<String>) -> Response<Incoming> {
        sender.ready().await.unwrap();
        let req = Request::get("/").header("host", "test").body(String::new()).unwrap();
        sender.send_request(req).await.unwrap()
    }

    /// Waits (up to 5 s) until `cond` holds; the machine may be busy, so no fixed sleep.
    async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < end, "{what}: not within 5 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn pool() -> Arc<H1Pool> {
        H1Pool::new(connector(None, false), "http")
    }

    #[tokio::test]
    async fn a_connection_whose_response_was_read_is_reused() {
        let (up, accepted) = upstream(b"ok").await;
        let pool = pool();
        let mut c = client(front(pool.clone(), up).await).await;
        for _ in 0..5 {
            let body = get(&mut c).await.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        assert_eq!(accepted.load(Relaxed), 1, "five requests in turn share one upstream connection");
        assert_eq!(pool.lock()[&up].len(), 1, "the connection is back in the pool");
    }

    #[tokio::test]
    async fn requests_in_flight_at_once_get_connections_of_their_own_and_all_come_back() {
        let (up, accepted) = raw_upstream(Duration::from_millis(100), false).await;
        let pool = pool();
        let front = front(pool.clone(), up).await;
        let (mut a, mut b) = (client(front).await, client(front).await);
        // Both responses' heads before either body arrived: the first connection is busy.
        let (ra, rb) = (get(&mut a).await, get(&mut b).await);
        assert_eq!(accepted.load(Relaxed), 2);
        for r in [ra, rb] {
            assert_eq!(&r.into_body().collect().await.unwrap().to_bytes()[..], b"ok");
        }
        eventually("both connections back in the pool", || pool.lock()[&up].len() == 2).await;
        let r = get(&mut a).await.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&r[..], b"ok");
        assert_eq!(accepted.load(Relaxed), 2, "the third request reuses one of them");
    }

    /// An upstream that answers the first `answered` requests on each connection with
    /// `ok` and reads but never answers the rest.
    async fn hanging_upstream(answered: usize) -> (SocketAddr, Arc<AtomicUsize>) {
        listening(move |mut stream| async move {
            let (mut heads, mut buf, mut seen) = (Vec::new(), [0u8; 1024], 0);
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => heads.extend_from_slice(&buf[..n]),
                }
                while let Some(end) = heads.windows(4).position(|w| w == b"\r\n\r\n") {
                    heads.drain(..end + 4);
                    seen += 1;
                    if seen <= answered {
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
                    }
                }
            }
        })
        .await
    }

    /// The wait for response headers bounds a pooled connection's requests too, whose
    /// timer is the one its earlier requests moved along (and which fired while the
    /// connection sat idle): a request the upstream never answers fails at the wait, not
    /// before it and not long after.
    #[tokio::test]
    async fn a_request_the_upstream_never_answers_on_a_pooled_connection_fails_at_the_wait() {
        let (up, accepted) = hanging_upstream(2).await;
        let pool = pool();
        let wait = Duration::from_millis(300);
        let mut c = client(front_waiting(pool.clone(), up, wait).await).await;
        for _ in 0..2 {
            let body = get(&mut c).await.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
            eventually("the connection ready in the pool", || pool.lock()[&up].iter().any(|c| c.sender.is_ready()))
                .await;
        }
        // Idle past the last request's deadline: the pooled timer fires meanwhile.
        tokio::time::sleep(wait + Duration::from_millis(100)).await;
        c.ready().await.unwrap();
        let started = Instant::now();
        let req = Request::get("/").header("host", "test").body(String::new()).unwrap();
        let answer = c.send_request(req).await;
        let took = started.elapsed();
        assert!(answer.is_err(), "the unanswered request got {answer:?}");
        assert!(took >= wait && took < Duration::from_secs(3), "failed after {took:?}, the wait is {wait:?}");
        assert_eq!(accepted.load(Relaxed), 1, "all three went on the one pooled connection");
    }

    #[tokio::test]
    async fn an_idle_connection_the_upstream_closed_is_dropped_and_the_request_takes_a_new_one() {
        let (up, accepted) = raw_upstream(Duration::ZERO, true).await;
        let pool = pool();
        let mut c = client(front(pool.clone(), up).await).await;
        for round in 1..=3 {
            let body = get(&mut c).await.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok", "request {round}");
            // The pooled connection's task has seen the upstream's close.
            eventually("the close seen", || pool.lock()[&up].iter().all(|c| c.sender.is_closed())).await;
        }
        assert_eq!(accepted.load(Relaxed), 3, "each request found the last connection closed");
    }

    #[tokio::test]
    async fn a_response_body_dropped_before_its_end_leaves_the_next_request_its_own_whole_response() {
        static BIG: [u8; 4 << 20] = [b'x'; 4 << 20];
        let (up, accepted) = upstream(&BIG).await;
        let pool = pool();
        let mut c = client(front(pool.clone(), up).await).await;
        let mut body = get(&mut c).await.into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data());
        drop(body);
        // The client's connection closes with the cut-off response. The front's upstream
        // connection, its response half read, takes the next request only once hyper has
        // read (drained) the rest: none of the first response may reach the second.
        let mut c = client(front(pool.clone(), up).await).await;
        for _ in 0..3 {
            let full = get(&mut c).await.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(full.len(), BIG.len());
            assert!(full.iter().all(|&b| b == b'x'));
        }
        assert!(accepted.load(Relaxed) <= 2);
    }
}
