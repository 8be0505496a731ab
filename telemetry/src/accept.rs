//! The one accept loop every Tailor server runs: the admin endpoint, the runtime's HTTP
//! server, the fan-out handler and task servers, the proxy's listeners.
//!
//! [`AcceptLoop::run`] accepts on a tokio listener until its shutdown future resolves and
//! spawns one task per connection with the future the caller's handler returns. What it
//! does for every caller:
//! - **accept errors**: an error that ends only the connection being accepted (the client
//!   reset it before the accept) is skipped at once; any other (out of descriptors —
//!   EMFILE, ENFILE — or buffers) backs off, 5 ms doubling to 200 ms, so the loop neither
//!   spins on a listener that stays readable nor stalls long once descriptors are freed.
//!   The first failure of a run logs a warning through `tracing`, the recovery an info
//!   line with the count; [`AcceptStats`] counts both.
//! - **connection limit** (optional): beyond `max` open connections the loop either waits
//!   for one to close before accepting again ([`AcceptLoop::wait_beyond`], for an admin
//!   port that is not a data path) or accepts and hands the surplus connection to a
//!   refusal function ([`AcceptLoop::refuse_beyond`], the proxy's 503).
//! - **TCP_NODELAY** on every accepted socket (request/response traffic; Nagle only
//!   delays small answers).
//! - **shutdown**: the loop returns as soon as the shutdown future resolves, also while it
//!   waits for a slot or backs off; the listener is dropped with it. Connections already
//!   spawned keep running (a caller that drains them watches them itself).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// First pause after an accept error that is not the client's.
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// Longest pause: descriptors freed by closing connections are used within this.
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// Counters of one accept loop, readable while it runs.
#[derive(Debug, Default)]
pub struct AcceptStats {
    /// Connections accepted (refused ones included).
    pub accepted: AtomicU64,
    /// Accepts that failed (each one backed off, or skipped when the client's).
    pub errors: AtomicU64,
    /// Connections handed to the refusal function because `max` were open.
    pub refused: AtomicU64,
}

type Refuse = Box<dyn FnMut(TcpStream) + Send>;

enum Beyond {
    Wait,
    Refuse(Refuse),
}

struct Limit {
    slots: Arc<Semaphore>,
    beyond: Beyond,
}

/// An accept loop, configured and not yet running.
pub struct AcceptLoop {
    what: &'static str,
    limit: Option<Limit>,
    stats: Arc<AcceptStats>,
}

impl AcceptLoop {
    /// A loop without a connection limit; `what` names the listener in log lines
    /// (e.g. "admin endpoint").
    pub fn new(what: &'static str) -> AcceptLoop {
        AcceptLoop { what, limit: None, stats: Arc::default() }
    }

    /// At most `max` connections open; with `max` open the loop accepts no more until
    /// one closes (the kernel's backlog holds the rest).
    pub fn wait_beyond(mut self, max: usize) -> AcceptLoop {
        self.limit = Some(Limit { slots: Arc::new(Semaphore::new(max)), beyond: Beyond::Wait });
        self
    }

    /// At most `max` connections served; with `max` open a new one is accepted and given
    /// to `refuse` (which answers and closes it) instead of the handler.
    pub fn refuse_beyond(mut self, max: usize, refuse: impl FnMut(TcpStream) + Send + 'static) -> AcceptLoop {
        self.limit = Some(Limit { slots: Arc::new(Semaphore::new(max)), beyond: Beyond::Refuse(Box::new(refuse)) });
        self
    }

    /// The loop's counters (shared: read them while it runs).
    pub fn stats(&self) -> Arc<AcceptStats> {
        self.stats.clone()
    }

    /// Accepts on `listener` until `shutdown` resolves; each connection runs
    /// `on_connection(stream)`'s future in a task of its own, holding its slot until the
    /// future ends.
    pub async fn run<H, F>(mut self, listener: TcpListener, shutdown: impl Future<Output = ()>, mut on_connection: H)
    where
        H: FnMut(TcpStream) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::pin!(shutdown);
        let mut failures = Failures::default();
        loop {
            let waited = match &self.limit {
                Some(Limit { slots, beyond: Beyond::Wait }) => tokio::select! {
                    _ = &mut shutdown => return,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => Some(slot),
                        Err(_) => return, // never closed; if it were, nothing could be served
                    },
                },
                _ => None,
            };
            let accepted = tokio::select! {
                _ = &mut shutdown => return,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    if let Some(pause) = failures.failed(self.what, &e) {
                        tokio::select! {
                            _ = &mut shutdown => return,
                            _ = tokio::time::sleep(pause) => {}
                        }
                    }
                    continue;
                }
            };
            failures.recovered(self.what);
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let slot = match (waited, &mut self.limit) {
                (Some(slot), _) => Some(slot),
                (None, Some(Limit { slots, beyond: Beyond::Refuse(refuse) })) => {
                    match slots.clone().try_acquire_owned() {
                        Ok(slot) => Some(slot),
                        Err(_) => {
                            self.stats.refused.fetch_add(1, Ordering::Relaxed);
                            refuse(stream);
                            continue;
                        }
                    }
                }
                (None, _) => None,
            };
            let connection = on_connection(stream);
            tokio::spawn(hold_while(slot, connection));
        }
    }
}

async fn hold_while(slot: Option<OwnedSemaphorePermit>, connection: impl Future<Output = ()>) {
    connection.await;
    drop(slot);
}

/// The current run of failed accepts: how many, and the next pause.
#[derive(Default)]
struct Failures {
    count: u64,
    pause: Option<Duration>,
}

impl Failures {
    /// Records `e`; returns how long to pause before accepting again (none when only the
    /// connection being accepted failed).
    fn failed(&mut self, what: &str, e: &io::Error) -> Option<Duration> {
        self.count += 1;
        if self.count == 1 {
            tracing::warn!(listener = what, error = %e, "accept failed; backing off until it succeeds again");
        } else {
            tracing::debug!(listener = what, error = %e, failures = self.count, "accept failed again");
        }
        if connection_only(e) {
            return None;
        }
        let pause = self.pause.map_or(FIRST_BACKOFF, |p| (p * 2).min(MAX_BACKOFF));
        self.pause = Some(pause);
        Some(pause)
    }

    fn recovered(&mut self, what: &str) {
        if self.count > 1 {
            tracing::info!(listener = what, failures = self.count, "accepting again");
        }
        *self = Failures::default();
    }
}

/// Errors that end only the connection being accepted; the listener is fine.
fn connection_only(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::oneshot;

    /// Echoes one line's worth of bytes back, then closes.
    async fn echo(mut stream: TcpStream) {
        let mut buf = [0u8; 64];
        if let Ok(n) = stream.read(&mut buf).await {
            let _ = stream.write_all(&buf[..n]).await;
        }
    }

    async fn round_trip(addr: std::net::SocketAddr) -> io::Result<Vec<u8>> {
        let mut client = TcpStream::connect(addr).await?;
        client.write_all(b"ping").await?;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await?;
        Ok(got)
    }

    /// Connects and reads what the server sends until it closes (sending nothing, so the
    /// close is a FIN, not a reset for unread input).
    async fn listen_to(addr: std::net::SocketAddr) -> io::Result<Vec<u8>> {
        let mut client = TcpStream::connect(addr).await?;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn serves_connections_and_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let accept = AcceptLoop::new("test");
        let stats = accept.stats();
        let running = tokio::spawn(accept.run(listener, async { _ = stopped.await }, echo));
        for _ in 0..3 {
            assert_eq!(round_trip(addr).await.unwrap(), b"ping");
        }
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 3);
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("loop did not stop").unwrap();
        // The listener went with the loop: nothing accepts any more.
        assert!(TcpStream::connect(addr).await.is_err(), "listener still open after shutdown");
    }

    #[tokio::test]
    async fn refuses_beyond_the_limit_and_serves_again_once_a_slot_frees() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = AcceptLoop::new("test").refuse_beyond(1, |stream: TcpStream| {
            let _ = stream.try_write(b"full");
        });
        let stats = accept.stats();
        let (release, released) = oneshot::channel::<()>();
        let mut released = Some(released);
        let running = tokio::spawn(accept.run(listener, std::future::pending(), move |mut stream: TcpStream| {
            let hold = released.take();
            async move {
                if let Some(hold) = hold {
                    let _ = hold.await; // the first connection holds the only slot
                }
                let _ = stream.write_all(b"served").await;
            }
        }));
        let mut first = TcpStream::connect(addr).await.unwrap();
        // The first connection holds the slot once it has been accepted.
        while stats.accepted.load(Ordering::Relaxed) < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(listen_to(addr).await.unwrap(), b"full");
        assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
        release.send(()).unwrap();
        let mut got = Vec::new();
        first.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"served");
        // The slot is free again once the first connection's task ended.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let got = listen_to(addr).await.unwrap();
            if got == b"served" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "slot never freed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        running.abort();
    }

    #[tokio::test]
    async fn waits_beyond_the_limit_instead_of_refusing() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = AcceptLoop::new("test").wait_beyond(1);
        let stats = accept.stats();
        let (release, released) = oneshot::channel::<()>();
        let mut released = Some(released);
        let (stop, stopped) = oneshot::channel::<()>();
        let running = tokio::spawn(accept.run(listener, async { _ = stopped.await }, move |mut stream: TcpStream| {
            let hold = released.take();
            async move {
                if let Some(hold) = hold {
                    let _ = hold.await;
                }
                let _ = stream.write_all(b"served").await;
            }
        }));
        let mut first = TcpStream::connect(addr).await.unwrap();
        let second = tokio::spawn(listen_to(addr));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The second waits in the backlog, not accepted, not refused.
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 1);
        assert!(!second.is_finished());
        release.send(()).unwrap();
        let mut got = Vec::new();
        first.read_to_end(&mut got).await.unwrap();
        assert_eq!(second.await.unwrap().unwrap(), b"served");
        assert_eq!(stats.refused.load(Ordering::Relaxed), 0);
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("loop did not stop").unwrap();
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_resets_on_success() {
        let mut f = Failures::default();
        let emfile = io::Error::from_raw_os_error(24);
        let pauses: Vec<_> = (0..8).map(|_| f.failed("test", &emfile).unwrap().as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 200, 200]);
        assert_eq!(f.failed("test", &io::Error::from(io::ErrorKind::ConnectionAborted)), None);
        f.recovered("test");
        assert_eq!(f.failed("test", &emfile), Some(FIRST_BACKOFF));
    }
}
