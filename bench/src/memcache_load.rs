//! An open-loop client for memcached's text protocol: requests leave at their intended times on
//! a few pipelined connections whatever the server does, and each latency is measured from the
//! intended time (no coordinated omission), so a third-party server can be held at a load and
//! compared with its ideal (`tailor doctor --ideal`).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tailor_core::Nanos;

use crate::clock::{monotonic_ns, sleep_until_monotonic, tighten_timer_slack};
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
    /// A request due while this many are outstanding on its connection is recorded as dropped.
    pub max_in_flight_per_connection: usize,
    /// How long to wait for the last responses after the last send.
    pub drain: Duration,
}

/// Requests in flight on one connection, oldest first (memcached answers in order).
type InFlight = Arc<Mutex<VecDeque<usize>>>;

/// Sends one `get` per intended time and returns one record per request, in order.
pub fn run(intended_ns: &[Nanos], cfg: &MemcacheConfig) -> std::io::Result<Vec<RequestRecord>> {
    set_value(cfg.addr)?;
    let n = intended_ns.len();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let mut writers = Vec::new();
    let mut queues: Vec<InFlight> = Vec::new();
    let mut readers = Vec::new();
    let start = monotonic_ns();
    for _ in 0..cfg.connections.max(1) {
        let stream = TcpStream::connect(cfg.addr)?;
        stream.set_nodelay(true)?;
        let queue: InFlight = Arc::default();
        let (reader_stream, q, done) = (stream.try_clone()?, queue.clone(), done.clone());
        readers.push(std::thread::spawn(move || read_responses(reader_stream, &q, &done, start)));
        writers.push(stream);
        queues.push(queue);
    }
    tighten_timer_slack();
    let request = format!("get {KEY}\r\n");
    let mut dropped = vec![false; n];
    for (i, &t) in intended_ns.iter().enumerate() {
        sleep_until_monotonic(start + t);
        let c = i % writers.len();
        {
            let mut q = queues[c].lock().expect("no reader panics holding it");
            if q.len() >= cfg.max_in_flight_per_connection {
                dropped[i] = true;
                continue;
            }
            q.push_back(i);
        }
        sent[i].store(monotonic_ns() - start, Ordering::Relaxed);
        if writers[c].write_all(request.as_bytes()).is_err() {
            break;
        }
    }
    // Wait for the stragglers, then close so the readers end.
    let deadline = monotonic_ns() + cfg.drain.as_nanos() as Nanos;
    while monotonic_ns() < deadline && queues.iter().any(|q| !q.lock().expect("no panics").is_empty()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    for w in &writers {
        let _ = w.shutdown(std::net::Shutdown::Both);
    }
    for r in readers {
        let _ = r.join();
    }
    Ok((0..n)
        .map(|i| {
            let done_ns = done[i].load(Ordering::Relaxed);
            let outcome = if dropped[i] {
                Outcome::Dropped
            } else if done_ns > 0 {
                Outcome::Ok
            } else {
                Outcome::Timeout
            };
            RequestRecord {
                id: i as u64,
                intended_ns: intended_ns[i],
                sent_ns: sent[i].load(Ordering::Relaxed),
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
/// completes the oldest request in flight on this connection.
fn read_responses(stream: TcpStream, queue: &Mutex<VecDeque<usize>>, done: &[AtomicU64], start: Nanos) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line == "END\r\n" {
            let now = monotonic_ns() - start;
            if let Some(i) = queue.lock().expect("no panics holding it").pop_front() {
                done[i].store(now.max(1), Ordering::Relaxed);
            }
        }
    }
}
