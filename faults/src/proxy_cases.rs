//! The proxy's faults, on real processes: the upstream killed mid-request, stopped
//! (SIGSTOP), resetting its connections; a slow client. For each: what the clients were
//! answered and when, whether the proxy's slots (`/metrics`), descriptors and threads came
//! back to where they were, and whether the next request is served again.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::client::{self, Answer};
use crate::proxyproc::{Proxy, Role, Upstream};

/// What each fault-affected request is allowed (the proxy's timeouts in these cases).
pub const UPSTREAM_TIMEOUT_MS: u64 = 1_000;
pub const BODY_TIMEOUT_MS: u64 = 1_000;
/// Requests hit by each fault.
pub const AFFECTED: usize = 4;
/// The generous bound within which everything must have come back (not a measurement).
const BOUND: Duration = Duration::from_secs(15);

/// The faults, by short name (`--only NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the upstream with requests inside it.
    UpstreamKilled,
    /// SIGSTOP of the upstream with requests inside it (it hangs; connections stay open).
    UpstreamHangs,
    /// The upstream reads each request and resets the connection (SO_LINGER 0).
    UpstreamResets,
    /// Clients send a declared body one byte every 50 ms.
    SlowClient,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::UpstreamKilled, Fault::UpstreamHangs, Fault::UpstreamResets, Fault::SlowClient];

    pub fn name(self) -> &'static str {
        match self {
            Fault::UpstreamKilled => "upstream-killed",
            Fault::UpstreamHangs => "upstream-hangs",
            Fault::UpstreamResets => "upstream-resets",
            Fault::SlowClient => "slow-client",
        }
    }

    /// The status and `tailor-error` every affected request must get.
    pub fn expected(self) -> (u16, &'static str) {
        match self {
            Fault::UpstreamKilled | Fault::UpstreamResets => (502, "upstream_closed"),
            Fault::UpstreamHangs => (504, "upstream_timeout"),
            Fault::SlowClient => (408, "body_timeout"),
        }
    }
}

/// One fault on one proxy role (a line of the report).
#[derive(Clone, Debug)]
pub struct ProxyRow {
    pub fault: Fault,
    pub role: Role,
    /// Every affected request's answer, `status reason` (or the client's error).
    pub answers: Vec<String>,
    /// Affected requests answered with the expected status and reason.
    pub as_expected: usize,
    /// Fault → the last affected request answered, ms.
    pub detect_ms: Option<f64>,
    /// Fault → no slot held (`/metrics`) and descriptors back to the baseline, ms.
    pub restore_ms: Option<f64>,
    /// Upstream back (restart, SIGCONT) → a request served again, ms.
    pub back_ms: Option<f64>,
    /// Requests the proxy accepted that got no answer at all.
    pub lost: usize,
    /// Slots (in flight + queued) still held at the end.
    pub slots_left: f64,
    /// Descriptors and threads at the end minus before the fault.
    pub fds_delta: i64,
    pub threads_delta: i64,
    /// A normal request was served while the fault was under way (slow clients only).
    pub others_served: Option<bool>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Polls `done` every 5 ms until it holds; the time from `t0`, or `None` after [`BOUND`].
fn wait_for(t0: Instant, mut done: impl FnMut() -> bool) -> Option<f64> {
    while t0.elapsed() < BOUND {
        if done() {
            return Some(ms(t0.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The proxy's settings in these cases: a small slot count, short timeouts.
pub fn proxy_settings(role: Role) -> String {
    let cap = match role {
        Role::Sidecar => "c = 4",
        Role::Edge => "max_in_flight = 4",
    };
    format!("{cap}\n[limits]\nupstream_timeout_ms = {UPSTREAM_TIMEOUT_MS}\nbody_read_timeout_ms = {BODY_TIMEOUT_MS}\n")
}

/// Sends `n` requests of `path` at once, each on its own thread; answers arrive on the channel.
fn send_all(addr: SocketAddr, path: &str, n: usize) -> mpsc::Receiver<(std::io::Result<Answer>, Instant)> {
    let (tx, rx) = mpsc::channel();
    for _ in 0..n {
        let (tx, path) = (tx.clone(), path.to_string());
        std::thread::spawn(move || {
            let a = client::request(addr, &path, "", Duration::from_secs(30));
            let _ = tx.send((a, Instant::now()));
        });
    }
    rx
}

fn describe(a: &std::io::Result<Answer>) -> String {
    match a {
        Ok(a) => format!("{} {}", a.status, a.reason()),
        Err(e) => format!("no answer ({e})"),
    }
}

/// Injects `fault` into a `role` proxy's traffic and measures it.
pub fn run(exe: &Path, role: Role, fault: Fault) -> ProxyRow {
    let mut upstream = Upstream::start(exe, "127.0.0.1:0", 8, 5);
    let proxy = Proxy::start(exe, role, upstream.addr, &proxy_settings(role));
    for _ in 0..3 {
        let a = client::request(proxy.listen, "/", "", Duration::from_secs(10));
        assert_eq!(a.as_ref().map(|a| a.status).ok(), Some(200), "warm-up: {a:?} {}", proxy.proc.stderr());
    }
    let (fds0, threads0) = (proxy.fds(), proxy.threads());
    let held = |n: f64| proxy.slots_held() == Some(n);
    let mut others_served = None;
    let (t0, answers) = match fault {
        Fault::UpstreamKilled | Fault::UpstreamHangs => {
            let rx = send_all(proxy.listen, "/?ms=3000", AFFECTED);
            // Inject only once every request is inside the upstream.
            assert!(wait_for(Instant::now(), || held(AFFECTED as f64)).is_some(), "requests never admitted");
            let t0 = Instant::now();
            upstream.proc.signal(if fault == Fault::UpstreamKilled { libc::SIGKILL } else { libc::SIGSTOP });
            (t0, rx.iter().take(AFFECTED).collect::<Vec<_>>())
        }
        Fault::UpstreamResets => {
            let t0 = Instant::now();
            (t0, send_all(proxy.listen, "/reset", AFFECTED).iter().take(AFFECTED).collect())
        }
        Fault::SlowClient => {
            let t0 = Instant::now();
            let (tx, rx) = mpsc::channel();
            // Half the slots held by slow clients; a normal request must still be served.
            for _ in 0..AFFECTED / 2 {
                let tx = tx.clone();
                let addr = proxy.listen;
                std::thread::spawn(move || {
                    let (a, _) = client::slow_body(addr, 100, Duration::from_millis(50), Duration::from_secs(30));
                    let _ = tx.send((a, Instant::now()));
                });
            }
            assert!(wait_for(Instant::now(), || held((AFFECTED / 2) as f64)).is_some(), "slow clients never admitted");
            let normal = client::request(proxy.listen, "/", "", Duration::from_secs(10));
            others_served = Some(normal.is_ok_and(|a| a.status == 200));
            (t0, rx.iter().take(AFFECTED / 2).collect())
        }
    };
    let (status, reason) = fault.expected();
    let as_expected =
        answers.iter().filter(|(a, _)| a.as_ref().is_ok_and(|a| a.status == status && a.reason() == reason)).count();
    let lost = answers.iter().filter(|(a, _)| a.is_err()).count();
    let detect_ms = answers.iter().map(|(_, at)| ms(at.duration_since(t0))).reduce(f64::max);
    let restore_ms = wait_for(t0, || held(0.0) && proxy.fds() <= fds0);
    let back = Instant::now();
    match fault {
        Fault::UpstreamKilled => {
            let addr = upstream.addr.to_string();
            upstream = Upstream::start(exe, &addr, 8, 5);
        }
        Fault::UpstreamHangs => upstream.proc.signal(libc::SIGCONT),
        _ => {}
    }
    let back_ms = wait_for(back, || {
        client::request(proxy.listen, "/", "", Duration::from_secs(5)).is_ok_and(|a| a.status == 200)
    });
    let row = ProxyRow {
        fault,
        role,
        answers: answers.iter().map(|(a, _)| describe(a)).collect(),
        as_expected,
        detect_ms,
        restore_ms,
        back_ms,
        lost,
        slots_left: proxy.slots_held().unwrap_or(f64::NAN),
        fds_delta: proxy.fds() as i64 - fds0 as i64,
        threads_delta: proxy.threads() as i64 - threads0 as i64,
        others_served,
    };
    drop(upstream);
    row
}
