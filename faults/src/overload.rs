//! The sidecar in front of a real upstream at twice its capacity: open-loop arrivals
//! (`tailor-loadgen` sends each request at its time, whatever the answers do), every request
//! with a deadline (`grpc-timeout`). Measured: the upstream's capacity alone, goodput
//! (answers within their deadline per second) during the overload, what was shed and why,
//! the proxy's peak RSS, and the p99 of admitted requests before and after the overload.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tailor_loadgen::{OpenLoopConfig, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::proxyproc::{Proxy, Role, Upstream};

/// The run's shape.
#[derive(Clone, Copy, Debug)]
pub struct OverloadPlan {
    pub workers: usize,
    pub service_ms: u64,
    /// Each request's deadline after it is sent.
    pub budget_ms: u64,
    /// Offered load during the overload, as a multiple of the measured capacity.
    pub factor: f64,
    pub overload: Duration,
    /// Light load (a fifth of capacity) before and after.
    pub calm: Duration,
}

impl OverloadPlan {
    /// The documented run: 60 s at 2×.
    pub fn full() -> OverloadPlan {
        OverloadPlan {
            workers: 4,
            service_ms: 20,
            budget_ms: 100,
            factor: 2.0,
            overload: Duration::from_secs(60),
            calm: Duration::from_secs(2),
        }
    }

    /// The CI-sized run: 5 s at 2×.
    pub fn short() -> OverloadPlan {
        OverloadPlan { overload: Duration::from_secs(5), ..OverloadPlan::full() }
    }
}

/// One request as the generator saw it.
#[derive(Clone, Copy, Debug)]
struct Sent {
    /// Intended send time and answer time, from the start.
    at: Duration,
    latency: Duration,
    status: u16,
    /// `tailor-shed` value index into [`REASONS`], if any.
    shed: Option<usize>,
}

const REASONS: [&str; 4] = ["deadline_expired", "cannot_meet", "queue_full", "connection_limit"];

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct OverloadReport {
    /// Requests per second the upstream completes alone (closed loop, measured first).
    pub capacity_rps: f64,
    pub offered_rps: f64,
    /// 200s within their deadline per second, of requests sent during the overload.
    pub goodput_rps: f64,
    /// Requests sent during the overload: answered 200 in time, 200 late, shed by reason, other.
    pub sent: usize,
    pub ok_in_time: usize,
    pub ok_late: usize,
    pub shed: [usize; REASONS.len()],
    pub other: usize,
    /// p99 of 200s sent in the calm before, during the overload, in the first second after
    /// it ended, and in the second second after it, ms.
    pub p99_before_ms: f64,
    pub p99_during_ms: f64,
    pub p99_after_0_1s_ms: f64,
    pub p99_after_1_2s_ms: f64,
    /// When the last request sent during the overload and answered 200 got its answer,
    /// ms after the overload ended: the queue built during it has drained by then.
    pub drained_after_ms: f64,
    /// p99 of 200s sent from `drained_after_ms` to 1 s after the overload ended, ms (NaN
    /// if the queue took longer than that to drain): whether latency is back to normal
    /// within 1 s.
    pub p99_drained_to_1s_ms: f64,
    /// The slowest 200 among requests sent in each 100 ms of the first second after the
    /// overload, ms (NaN: none in that slot).
    pub max_after_by_100ms: Vec<f64>,
    /// The proxy's resident memory: before, and its peak (`VmHWM`), MiB.
    pub rss_before_mib: f64,
    pub rss_peak_mib: f64,
}

impl OverloadReport {
    pub fn shed_by(&self, reason: &str) -> usize {
        REASONS.iter().position(|r| *r == reason).map_or(0, |i| self.shed[i])
    }

    pub fn markdown(&self) -> String {
        let shed: Vec<String> = REASONS.iter().zip(self.shed).map(|(r, n)| format!("{r} {n}")).collect();
        format!(
            "| capacity rps | offered rps | goodput rps (% of capacity) | sent | 200 in time | 200 late | shed | other | p99 before ms | p99 during ms | p99 0–1 s after ms | p99 1–2 s after ms | queue drained after ms | p99 drained–1 s ms | RSS before MiB | RSS peak MiB |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n\
             | {:.0} | {:.0} | {:.0} ({:.0}%) | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} |\n\n\
             Slowest 200 sent in each 100 ms of the first second after, ms: {}\n",
            self.capacity_rps,
            self.offered_rps,
            self.goodput_rps,
            100.0 * self.goodput_rps / self.capacity_rps,
            self.sent,
            self.ok_in_time,
            self.ok_late,
            shed.join(", "),
            self.other,
            self.p99_before_ms,
            self.p99_during_ms,
            self.p99_after_0_1s_ms,
            self.p99_after_1_2s_ms,
            self.drained_after_ms,
            self.p99_drained_to_1s_ms,
            self.rss_before_mib,
            self.rss_peak_mib,
            self.max_after_by_100ms.iter().map(|m| format!("{m:.0}")).collect::<Vec<_>>().join(" / "),
        )
    }
}

/// One request on a fresh connection; (status, `tailor-shed` index).
async fn one(addr: SocketAddr, budget_ms: u64) -> (u16, Option<usize>) {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let req = format!("GET / HTTP/1.1\r\nhost: {addr}\r\ngrpc-timeout: {budget_ms}m\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::with_capacity(512);
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let Ok(buf) = attempt.await else { return (0, None) };
    let head = String::from_utf8_lossy(&buf);
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let shed = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("tailor-shed:").map(|v| v.trim().to_string()))
        .and_then(|v| REASONS.iter().position(|r| *r == v));
    (status, shed)
}

/// Requests outstanding at once (each holds a connection); one due beyond it is not sent and
/// counts as `other`. Far above what the documented run keeps in flight.
const MAX_IN_FLIGHT: usize = 10_000;

/// Sends at the given rates (requests per second, for how long) one phase after the other,
/// open loop (`tailor-loadgen`'s pacing); every request's outcome, in send order.
fn open_loop(addr: SocketAddr, budget_ms: u64, phases: &[(f64, Duration)]) -> Vec<Sent> {
    let mut intended = Vec::new();
    let mut phase_start = Duration::ZERO;
    for &(rate, length) in phases {
        let gap = Duration::from_secs_f64(1.0 / rate);
        let mut at = phase_start;
        while at < phase_start + length {
            intended.push(at.as_nanos() as u64);
            at += gap;
        }
        phase_start += length;
    }
    let cfg = OpenLoopConfig::new(MAX_IN_FLIGHT, Duration::from_secs(30));
    let run = tailor_loadgen::run(&intended, &cfg, move |_| one(addr, budget_ms))
        .expect("the schedule ascends and a tokio runtime starts");
    run.records
        .into_iter()
        .map(|r| {
            let (status, shed) = match r.outcome {
                Outcome::Done(answer) => answer,
                Outcome::TimedOut | Outcome::Overflow => (0, None),
            };
            let latency = Duration::from_nanos(r.done_ns.saturating_sub(r.intended_ns));
            Sent { at: Duration::from_nanos(r.intended_ns), latency, status, shed }
        })
        .collect()
}

/// The upstream's own capacity: `2 × workers` closed-loop clients straight at it for 1 s.
fn capacity(addr: SocketAddr, workers: usize) -> f64 {
    let t0 = Instant::now();
    let counts: Vec<_> = (0..2 * workers)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while t0.elapsed() < Duration::from_secs(1) {
                    if crate::client::request(addr, "/", "", Duration::from_secs(5)).is_ok_and(|a| a.status == 200) {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let done: u64 = counts.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    done as f64 / t0.elapsed().as_secs_f64()
}

fn p99(mut v: Vec<Duration>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort();
    v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1].as_secs_f64() * 1e3
}

/// Runs `plan` on real processes of `exe`.
pub fn run(exe: &Path, plan: OverloadPlan) -> OverloadReport {
    let upstream = Upstream::start(exe, "127.0.0.1:0", plan.workers, plan.service_ms);
    let capacity_rps = capacity(upstream.addr, plan.workers);
    let settings = format!("c = {}\nmax_queue = 4096\n", plan.workers);
    let proxy = Proxy::start(exe, Role::Sidecar, upstream.addr, &settings);
    let rss_before = proxy.rss_kib().1;
    let (calm, over) = (capacity_rps / 5.0, capacity_rps * plan.factor);
    let sent = open_loop(proxy.listen, plan.budget_ms, &[(calm, plan.calm), (over, plan.overload), (calm, plan.calm)]);
    let (start, end) = (plan.calm, plan.calm + plan.overload);
    let budget = Duration::from_millis(plan.budget_ms);
    let ok = |s: &&Sent| s.status == 200;
    let window = |from: Duration, to: Duration| -> Vec<Duration> {
        sent.iter().filter(ok).filter(|s| s.at >= from && s.at < to).map(|s| s.latency).collect()
    };
    let during: Vec<&Sent> = sent.iter().filter(|s| s.at >= start && s.at < end).collect();
    let mut r = OverloadReport {
        capacity_rps,
        offered_rps: over,
        sent: during.len(),
        rss_before_mib: rss_before as f64 / 1024.0,
        rss_peak_mib: proxy.rss_kib().0 as f64 / 1024.0,
        p99_before_ms: p99(window(Duration::ZERO, start)),
        p99_during_ms: p99(window(start, end)),
        p99_after_0_1s_ms: p99(window(end, end + Duration::from_secs(1))),
        p99_after_1_2s_ms: p99(window(end + Duration::from_secs(1), end + Duration::from_secs(2))),
        ..OverloadReport::default()
    };
    // The overload's queue has drained once its last admitted request was answered.
    let drained = during.iter().filter(|s| s.status == 200).map(|s| (s.at + s.latency).saturating_sub(end)).max();
    let drained = drained.unwrap_or_default();
    r.drained_after_ms = drained.as_secs_f64() * 1e3;
    let second = end + Duration::from_secs(1);
    r.p99_drained_to_1s_ms = if end + drained < second { p99(window(end + drained, second)) } else { f64::NAN };
    r.max_after_by_100ms = (0..10)
        .map(|i| {
            let from = end + Duration::from_millis(100 * i);
            let slot = window(from, from + Duration::from_millis(100));
            slot.iter().max().map_or(f64::NAN, |m| m.as_secs_f64() * 1e3)
        })
        .collect();
    for s in &during {
        match (s.status, s.shed) {
            (200, _) if s.latency <= budget => r.ok_in_time += 1,
            (200, _) => r.ok_late += 1,
            (_, Some(i)) => r.shed[i] += 1,
            _ => r.other += 1,
        }
    }
    r.goodput_rps = r.ok_in_time as f64 / plan.overload.as_secs_f64();
    r
}
