//! The memcached client against a real memcached on loopback: every `get` is answered and
//! matched to its own request on the pipelined connections, sends keep to the schedule, and
//! latency runs from the intended time. Skips, saying so, without `memcached` on PATH.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tailor_bench::arrivals::poisson;
use tailor_bench::memcache_load::{self, MemcacheConfig};
use tailor_bench::record::{summarize, Outcome};

/// A memcached we started, stopped by its pid when dropped.
struct Memcached(Child);

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_memcached() -> Option<(Memcached, std::net::SocketAddr)> {
    // A free port: bind, read it, let it go (memcached binds it next).
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let mut cmd = Command::new("memcached");
    cmd.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-t", "1"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "nobody"]); // memcached refuses to run as root otherwise
    }
    let child = Memcached(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((child, addr))
}

#[test]
fn every_get_is_answered_in_order_and_on_schedule() {
    let Some((_server, addr)) = start_memcached() else {
        eprintln!("SKIP every_get_is_answered_in_order_and_on_schedule: memcached is not installed or did not start");
        return;
    };
    let intended = poisson(2000, 2000.0, 3);
    let cfg =
        MemcacheConfig { addr, connections: 4, max_in_flight_per_connection: 256, timeout: Duration::from_secs(5) };
    let records = memcache_load::run(&intended, &cfg).unwrap();
    assert_eq!(records.len(), intended.len());
    for (i, r) in records.iter().enumerate() {
        assert_eq!((r.id, r.intended_ns), (i as u64, intended[i]));
        assert_eq!((r.outcome, r.status), (Outcome::Ok, 200), "request {i}: {r:?}");
        // Answered after it was sent, which was at or after its intended time.
        assert!(r.intended_ns <= r.sent_ns && r.sent_ns < r.done_ns, "request {i}: {r:?}");
    }
    let s = summarize(&records, 0, 0, 1);
    // Loopback memcached answers in tens of µs; a loaded test machine may stretch that to ms.
    assert!(s.latency_ms.p50 < 50.0, "p50 {} ms", s.latency_ms.p50);
    assert!(s.send_lag.p50_us < 5_000.0, "send lag {:?}", s.send_lag);
}
