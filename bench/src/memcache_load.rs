//! An open-loop client for memcached's text protocol: requests leave at their intended times on
//! a few pipelined connections whatever the server does, and each latency is measured from the
//! intended time (no coordinated omission), so a third-party server can be held at a load and
//! compared with its ideal (`tailor doctor --ideal`).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tailor_core::Nanos;
use tailor_loadgen::{Arrival, OpenLoopConfig, Outcome as SendOutcome};

use crate::clock::monotonic_ns;
use crate::record::{Outcome, RequestRecord};

/// The key every request reads (set once before the run).
const KEY: &str = "tailor-doctor";
const VALUE_BYTES: usize = 32;

/// How to reach the server and how much may be outstanding.
#[derive(Clone, Debug)]
pub struct MemcacheConfig {
    pub addr: SocketAddr,
    /// Connections the requests are spread over, round robin.
    pub connections: usize,
    /// Requests outstanding per connection (the cap is this times `connections`, over all of
    /// them; round robin spreads them evenly); one due beyond it is recorded as dropped.
    pub max_in_flight_per_connection: usize,
    /// A request without its answer this long after its send is a timeout.
    pub timeout: Duration,
}

/// One pipelined connection: its writer, and the requests in flight on it oldest first
/// (memcached answers in order), each with where its answer's arrival time goes. The reader
/// takes only the queue's lock, so a writer blocked on a full socket never stops it reading.
struct Connection {
    writer: Mutex<TcpStream>,
    in_flight: Mutex<VecDeque<tokio::sync::oneshot::Sender<Nanos>>>,
}

/// Sends one `get` per intended time and returns one record per request, in order.
pub fn run(intended_ns: &[Nanos], cfg: &MemcacheConfig) -> std::io::Result<Vec<RequestRecord>> {
    set_value(cfg.addr)?;
    let mut connections: Vec<Arc<Connection>> = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..cfg.connections.max(1) {
        let stream = TcpStream::connect(cfg.addr)?;
        stream.set_nodelay(true)?;
        let connection = Arc::new(Connection { writer: Mutex::new(stream.try_clone()?), in_flight: Mutex::default() });
        let c = connection.clone();
        readers.push(std::thread::spawn(move || read_responses(stream, &c)));
        connections.push(connection);
    }
    let open = OpenLoopConfig::new(cfg.max_in_flight_per_connection * connections.len(), cfg.timeout);
    let request = format!("get {KEY}\r\n");
    let writers = connections.clone();
    let sent = tailor_loadgen::run(intended_ns, &open, move |a: Arrival| {
        let (answered_tx, answered) = tokio::sync::oneshot::channel();
        let c = &writers[a.index % writers.len()];
        let written = {
            // Queued and written under the writer's lock, so the queue's order is the wire's.
            let mut writer = c.writer.lock().expect("no panics holding it");
            c.in_flight.lock().expect("no panics holding it").push_back(answered_tx);
            writer.write_all(request.as_bytes())
        };
        async move {
            written.ok()?;
            answered.await.ok()
        }
    })
    .map_err(std::io::Error::other)?;
    // Close so the readers end.
    for c in &connections {
        let _ = c.writer.lock().expect("no panics holding it").shutdown(std::net::Shutdown::Both);
    }
    for r in readers {
        let _ = r.join();
    }
    Ok(sent
        .records
        .into_iter()
        .map(|r| {
            let (outcome, done_ns) = match r.outcome {
                SendOutcome::Overflow => (Outcome::Dropped, 0),
                SendOutcome::TimedOut => (Outcome::Timeout, 0),
                SendOutcome::Done(None) => (Outcome::Transport, 0),
                // The reader's clock reading when the answer arrived, on the run's time line.
                SendOutcome::Done(Some(at)) => (Outcome::Ok, at.saturating_sub(sent.start_ns).max(1)),
            };
            RequestRecord {
                id: r.index as u64,
                intended_ns: r.intended_ns,
                sent_ns: r.sent_ns,
                done_ns,
                status: if outcome == Outcome::Ok { 200 } else { 0 },
                outcome,
                demands_us: Vec::new(),
                gat_ns: 0,
                tiers_seen: 0,
                gat_consistent: false,
            }
        })
        .collect())
}

/// Stores the value every `get` reads.
fn set_value(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "set {KEY} 0 0 {VALUE_BYTES}\r\n{}\r\n", "x".repeat(VALUE_BYTES))?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    if line.trim_end() != "STORED" {
        return Err(std::io::Error::other(format!("memcached at {addr} answered {line:?} to set, expected STORED")));
    }
    Ok(())
}

/// Reads `get` responses (`VALUE …` / data / `END`, or `END` for a miss) in order; each `END`
/// answers the oldest request in flight on this connection with the time it arrived.
fn read_responses(stream: TcpStream, connection: &Connection) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line == "END\r\n" {
            let now = monotonic_ns();
            if let Some(answered) = connection.in_flight.lock().expect("no panics holding it").pop_front() {
                // A request that timed out no longer listens; its answer is dropped.
                let _ = answered.send(now);
            }
        }
    }
}
