//! The pacing core against real loopback servers: a server that stalls does not delay later
//! sends, the in-flight cap bounds what reaches the server and counts the rest, and records
//! come back in arrival order whatever order the answers come in.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailor_loadgen::{run, Arrival, OpenLoopConfig, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MS: u64 = 1_000_000;

/// What the test server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    open: AtomicUsize,
    most_open: AtomicUsize,
}

/// A server that reads one line (a request index), waits `hold(index)` from the moment it
/// read it, answers with the index and closes. One thread per connection, so answers are not
/// serialised by the server.
fn serve(hold: impl Fn(usize) -> Duration + Send + Sync + 'static) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let (hold, server_seen) = (Arc::new(hold), seen.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (hold, seen) = (hold.clone(), server_seen.clone());
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let open = seen.open.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most_open.fetch_max(open, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).is_ok_and(|n| n == 1) && byte[0] != b'\n' {
                    line.push(byte[0]);
                }
                let index: usize = String::from_utf8_lossy(&line).trim().parse().unwrap_or(usize::MAX);
                std::thread::sleep(hold(index));
                seen.open.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.write_all(format!("{index}\n").as_bytes());
            });
        }
    });
    (addr, seen)
}

/// The transport: one request on a fresh connection; the index the server echoed.
fn fresh_connection(
    addr: SocketAddr,
) -> impl Fn(Arrival) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<usize>> + Send>> {
    move |a: Arrival| {
        Box::pin(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            s.write_all(format!("{}\n", a.index).as_bytes()).await.ok()?;
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.ok()?;
            answer.trim().parse().ok()
        })
    }
}

#[test]
fn a_stalled_server_does_not_delay_later_sends() {
    // Every answer waits until 600 ms after the first request reached the server; the
    // schedule's 100 sends span 0–198 ms. Closed loop, the second send would wait 600 ms.
    let first = Arc::new(std::sync::OnceLock::<Instant>::new());
    let release = first.clone();
    let (addr, seen) = serve(move |_| {
        let t0 = *release.get_or_init(Instant::now);
        (t0 + Duration::from_millis(600)).saturating_duration_since(Instant::now())
    });
    let intended: Vec<u64> = (0..100).map(|i| i * 2 * MS).collect();
    let cfg = OpenLoopConfig::new(1000, Duration::from_secs(120));
    let out = run(&intended, &cfg, fresh_connection(addr)).unwrap();
    assert_eq!(out.records.len(), 100);
    assert!(out.records.iter().all(|r| matches!(r.outcome, Outcome::Done(Some(_)))), "{:?}", out.records);
    let first_answer = out.records.iter().map(|r| r.done_ns).min().unwrap();
    let last_send = out.records.iter().map(|r| r.sent_ns).max().unwrap();
    // Every request was sent before any answer came: the answers piled up, the sends did not wait.
    assert!(last_send < first_answer, "last send at {last_send} ns, first answer at {first_answer} ns");
    assert!(first_answer >= 500 * MS, "the server answered at {first_answer} ns, before its stall ended");
    // And on schedule: a loaded test machine may delay a send by some ms, not by the stall.
    let lag = out.send_lag();
    assert_eq!(lag.sent, 100);
    assert!(lag.max_ns < 150 * MS, "send lag {lag:?}");
    // Latency runs from the intended time: the first request waited out the whole stall.
    assert!(out.records[0].latency_ns().unwrap() >= 500 * MS);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 100);
}

#[test]
fn the_in_flight_cap_bounds_what_reaches_the_server_and_counts_the_rest() {
    // Answers wait 400 ms. 20 arrivals in the first 20 ms with a cap of 5: 5 are sent and 15
    // overflow; 5 more after the answers came back are sent again.
    let (addr, seen) = serve(|_| Duration::from_millis(400));
    let mut intended: Vec<u64> = (0..20).map(|i| i * MS).collect();
    intended.extend((0..5).map(|i| (900 + i) * MS));
    let cfg = OpenLoopConfig::new(5, Duration::from_secs(120));
    let out = run(&intended, &cfg, fresh_connection(addr)).unwrap();
    let overflow: Vec<usize> = out.records.iter().filter(|r| r.outcome == Outcome::Overflow).map(|r| r.index).collect();
    assert_eq!(overflow, (5..20).collect::<Vec<_>>());
    assert_eq!(out.overflowed(), 15);
    for r in out.records.iter().filter(|r| r.outcome == Outcome::Overflow) {
        assert_eq!((r.sent_ns, r.done_ns, r.latency_ns(), r.send_lag_ns()), (0, 0, None, None));
    }
    assert!(out
        .records
        .iter()
        .filter(|r| r.outcome != Outcome::Overflow)
        .all(|r| r.outcome == Outcome::Done(Some(r.index))));
    assert_eq!(seen.connections.load(Ordering::SeqCst), 10, "only the requests within the cap reach the server");
    assert!(seen.most_open.load(Ordering::SeqCst) <= 5, "at most the cap is outstanding at the server");
}

#[test]
fn records_come_back_in_arrival_order_whatever_order_the_answers_do() {
    // The server holds request i for (20 − i) × 10 ms: the last sent is answered first.
    let (addr, _) = serve(|i| Duration::from_millis(10 * 20u64.saturating_sub(i as u64)));
    let intended: Vec<u64> = (0..20).map(|i| i * MS).collect();
    let out = run(&intended, &OpenLoopConfig::new(100, Duration::from_secs(120)), fresh_connection(addr)).unwrap();
    for (position, r) in out.records.iter().enumerate() {
        assert_eq!((r.index, r.intended_ns), (position, intended[position]));
        assert_eq!(r.outcome, Outcome::Done(Some(position)), "request {position} got another's answer");
    }
    // The answers did come back in the other order.
    assert!(out.records[19].done_ns < out.records[0].done_ns, "{:?}", out.records);
}
