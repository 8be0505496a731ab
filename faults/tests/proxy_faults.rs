//! The proxy's faults and hostile clients on real processes and loopback sockets
//! (docs/failure-modes.md, docs/proxy.md): the edge and the sidecar in front of an upstream
//! process that is killed, stopped or resets its connections, slow clients, slowloris,
//! oversized heads and bodies, the connection cap, and 2× overload. No privileges needed.
//! Times are only bounded generously (readiness); the properties are exact: every affected
//! request answered with its status and reason, no slot, descriptor or thread left behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tailor_faults::client;
use tailor_faults::overload::{self, OverloadPlan};
use tailor_faults::proxy_cases::{self, Fault, ProxyRow};
use tailor_faults::proxyproc::{Proxy, Role, Upstream};

/// One case at a time: descriptor and thread counts are read per process, but the CPUs are shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tailor-faults"))
}

fn check(row: &ProxyRow) {
    eprintln!("{row:?}");
    let (status, reason) = row.fault.expected();
    assert_eq!(row.lost, 0, "admitted requests without an answer: {row:?}");
    assert_eq!(row.as_expected, row.answers.len(), "every affected request gets `{status} {reason}`: {row:?}");
    assert!(row.detect_ms.is_some(), "{row:?}");
    assert!(row.restore_ms.is_some(), "slots or descriptors never came back: {row:?}");
    assert_eq!(row.slots_left, 0.0, "slots leaked: {row:?}");
    // One pooled upstream connection may be open at the end that was idle at the start.
    assert!(row.fds_delta <= 1, "descriptors leaked: {row:?}");
    assert!(row.threads_delta <= 0, "threads leaked: {row:?}");
    assert!(row.back_ms.is_some(), "never served again: {row:?}");
}

fn fault_on_both(fault: Fault) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for role in [Role::Sidecar, Role::Edge] {
        let row = proxy_cases::run(exe(), role, fault);
        check(&row);
        if fault == Fault::SlowClient {
            assert_eq!(row.others_served, Some(true), "a normal client waited behind slow ones: {row:?}");
        }
    }
}

#[test]
fn upstream_killed_mid_request_answers_502_and_frees_every_slot() {
    fault_on_both(Fault::UpstreamKilled);
}

#[test]
fn hung_upstream_answers_504_after_the_upstream_timeout() {
    fault_on_both(Fault::UpstreamHangs);
}

#[test]
fn upstream_resets_answer_502() {
    fault_on_both(Fault::UpstreamResets);
}

#[test]
fn slow_client_bodies_time_out_with_408_and_others_are_served() {
    fault_on_both(Fault::SlowClient);
}

/// Polls until `done`, at most 20 s (a readiness bound, not a measurement).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn slowloris_connections_are_closed_at_the_header_timeout_and_do_not_block_others() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const SLOW: usize = 500;
    let upstream = Upstream::start(exe(), "127.0.0.1:0", 4, 1);
    let proxy = Proxy::start(exe(), Role::Sidecar, upstream.addr, "c = 4\n[limits]\nheader_read_timeout_ms = 3000\n");
    assert_eq!(client::request(proxy.listen, "/", "", Duration::from_secs(10)).map(|a| a.status).ok(), Some(200));
    let fds0 = proxy.fds();
    let t0 = Instant::now();
    let mut slow: Vec<TcpStream> = (0..SLOW).map(|_| client::slowloris_start(proxy.listen).expect("connect")).collect();
    // Also: one that sends nothing, one that trickles an HTTP/2 preface (hyper's own header
    // timeout does not cover either).
    slow.push(TcpStream::connect(proxy.listen).expect("connect"));
    let mut preface = TcpStream::connect(proxy.listen).expect("connect");
    preface.write_all(b"PRI * HT").expect("write");
    slow.push(preface);
    // Opening them takes milliseconds; the header timeout is generous next to that.
    eventually("all slow connections open", || proxy.metric("tailor_proxy_connections_open") >= Some(SLOW as f64));
    let normal = client::request(proxy.listen, "/", "", Duration::from_secs(10));
    assert_eq!(normal.as_ref().map(|a| a.status).ok(), Some(200), "a normal client among slowloris: {normal:?}");
    // Every slow connection trickles on; the proxy closes each at its header timeout.
    for s in slow.iter_mut() {
        let _ = client::slowloris_trickle(s);
    }
    eventually("slow connections closed and descriptors back", || {
        proxy.metric("tailor_proxy_connections_open") == Some(0.0) && proxy.fds() <= fds0
    });
    let closed_after = t0.elapsed();
    assert!(closed_after >= Duration::from_millis(2900), "closed before the header timeout: {closed_after:?}");
    for s in slow.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        // EOF, a reset, or hyper's 400 on a head it gave up on: the proxy closed every one.
        let n = s.read(&mut buf).unwrap_or(0);
        assert!(n == 0 || buf.starts_with(b"HTTP/1.1 4"), "{:?}", String::from_utf8_lossy(&buf[..n]));
        if n > 0 {
            assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "the connection stays closed");
        }
    }
    eprintln!("{SLOW} slowloris connections closed {closed_after:?} after they opened; fds back to {fds0}");
}

/// The header timeout also bounds the heads after the first on a kept-alive connection
/// (hyper's own timer, armed per head from reused tokio timers: `proxy/src/timer.rs`):
/// connections that were served once and then trickle their next head are closed at the
/// timeout, not before, and each was answered in full first.
#[test]
fn kept_alive_connections_that_trickle_their_next_head_are_closed_at_the_header_timeout() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const CONNECTIONS: usize = 50;
    let upstream = Upstream::start(exe(), "127.0.0.1:0", 4, 1);
    let proxy = Proxy::start(exe(), Role::Sidecar, upstream.addr, "c = 4\n[limits]\nheader_read_timeout_ms = 1500\n");
    let mut slow = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut s = TcpStream::connect(proxy.listen).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(format!("GET / HTTP/1.1\r\nhost: {}\r\n\r\n", proxy.listen).as_bytes()).expect("write");
        let head = read_kept_alive_answer(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        slow.push(s);
    }
    // Every connection starts its next head at once (the first request's heads were
    // timed before; these are the later ones) and trickles it.
    let t0 = Instant::now();
    for s in slow.iter_mut() {
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").expect("write");
    }
    let mut open = slow.len();
    while open > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        open = slow.iter_mut().map(client::slowloris_trickle).filter(|&open| open).count();
    }
    let closed_after = t0.elapsed();
    assert_eq!(open, 0, "{open} of {CONNECTIONS} still open after {closed_after:?}");
    assert!(closed_after >= Duration::from_millis(1400), "closed before the header timeout: {closed_after:?}");
    eventually("connections closed", || proxy.metric("tailor_proxy_connections_open") == Some(0.0));
    assert_eq!(client::request(proxy.listen, "/", "", Duration::from_secs(10)).map(|a| a.status).ok(), Some(200));
    eprintln!(
        "{CONNECTIONS} kept-alive connections trickling their second head closed {closed_after:?} after it began"
    );
}

/// Reads one answer on a kept-alive connection (its head, then `content-length` bytes of
/// body); returns the head.
fn read_kept_alive_answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).expect("read the answer");
        assert!(n > 0, "closed before the answer's head: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .expect("a content-length");
    while got.len() < end + length {
        let n = s.read(&mut buf).expect("read the body");
        assert!(n > 0, "closed before the body's end");
        got.extend_from_slice(&buf[..n]);
    }
    head
}

#[test]
fn oversized_heads_get_431_and_oversized_bodies_413() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let upstream = Upstream::start(exe(), "127.0.0.1:0", 4, 1);
    for role in [Role::Sidecar, Role::Edge] {
        let proxy =
            Proxy::start(exe(), role, upstream.addr, "[limits]\nmax_header_bytes = 16384\nmax_body_bytes = 1048576\n");
        let big = format!("x-big: {}\r\n", "a".repeat(64 * 1024));
        let a = client::request(proxy.listen, "/", &big, Duration::from_secs(10));
        assert_eq!(a.as_ref().map(|a| a.status).ok(), Some(431), "{}: {a:?}", role.name());
        // Declared too large: refused before it waits for a slot or reaches the upstream.
        let a = client::request(proxy.listen, "/", "content-length: 2000000\r\n", Duration::from_secs(10)).unwrap();
        assert_eq!((a.status, a.reason()), (413, "body_too_large"), "{}: {a:?}", role.name());
        // Chunked: counted as it is relayed.
        let mut s = TcpStream::connect(proxy.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
        let chunk = vec![b'y'; 64 * 1024];
        for _ in 0..32 {
            if write!(s, "{:x}\r\n", chunk.len()).is_err()
                || s.write_all(&chunk).is_err()
                || s.write_all(b"\r\n").is_err()
            {
                break;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n");
        let a = client::read_answer(&mut s).unwrap();
        assert_eq!((a.status, a.reason()), (413, "body_too_large"), "{}: {a:?}", role.name());
        // A body within the limit passes.
        let mut s = TcpStream::connect(proxy.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n{}",
            "z".repeat(1000)
        )
        .unwrap();
        assert_eq!(client::read_answer(&mut s).unwrap().status, 200);
        eventually("no slot held", || proxy.slots_held() == Some(0.0));
    }
}

#[test]
fn connections_beyond_the_cap_get_503_and_the_cap_frees() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let upstream = Upstream::start(exe(), "127.0.0.1:0", 4, 1);
    let proxy = Proxy::start(exe(), Role::Sidecar, upstream.addr, "[limits]\nmax_connections = 20\n");
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(proxy.listen).unwrap()).collect();
    eventually("20 connections open", || proxy.metric("tailor_proxy_connections_open") == Some(20.0));
    let a = client::request(proxy.listen, "/", "", Duration::from_secs(10)).unwrap();
    assert_eq!((a.status, a.reason()), (503, "connection_limit"), "{a:?}");
    assert_eq!(proxy.metric("tailor_proxy_connections_rejected_total"), Some(1.0));
    drop(idle);
    eventually("the cap frees", || {
        client::request(proxy.listen, "/", "", Duration::from_secs(10)).is_ok_and(|a| a.status == 200)
    });
}

#[test]
fn twice_the_capacity_keeps_goodput_sheds_by_deadline_and_recovers() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The timing checks get a second run: a 5 s overload on a shared 2-vCPU VM is sometimes
    // caught by a stall of the machine (once in CI: goodput 63%, a third of the answers
    // late, where every rerun gave 97–99%). The exact properties are checked on every run.
    let mut failures = Vec::new();
    for attempt in 1..=2 {
        let r = overload::run(exe(), OverloadPlan::short());
        eprintln!("run {attempt}:\n{}", r.markdown());
        assert!(r.capacity_rps > 0.0 && r.sent > 0, "{r:?}");
        assert_eq!(r.shed_by("queue_full") + r.shed_by("connection_limit"), 0, "shed by deadline first: {r:?}");
        assert!(r.shed_by("deadline_expired") + r.shed_by("cannot_meet") > 0, "nothing shed at 2x: {r:?}");
        assert_eq!(r.other, 0, "answers neither 200 nor shed: {r:?}");
        assert!(r.rss_peak_mib < 256.0, "RSS not bounded: {r:?}");
        match overload_timing_failure(&r) {
            None => return,
            Some(why) => failures.push(format!("run {attempt}: {why}: {r:?}")),
        }
    }
    panic!("the overload's timing failed in both runs:\n{}", failures.join("\n"));
}

/// Which of the overload's timing checks `r` fails, if any. Generous CI margins; the 60 s
/// run's numbers are in docs/proxy.md.
fn overload_timing_failure(r: &overload::OverloadReport) -> Option<&'static str> {
    if r.goodput_rps < 0.75 * r.capacity_rps {
        return Some("goodput below 75% of capacity");
    }
    // Back to normal: the second second after the overload is no worse than 3x the calm
    // before it plus one budget (the overload's queue is bounded by the deadlines).
    if r.p99_after_1_2s_ms > 3.0 * r.p99_before_ms + 100.0 {
        return Some("p99 after the overload did not come back");
    }
    // The queue the overload built (bounded by the 100 ms deadlines) is gone within 1 s.
    if r.drained_after_ms >= 1000.0 {
        return Some("the overload's queue took over 1 s to drain");
    }
    None
}
