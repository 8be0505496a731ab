//! The sidecar's adaptive `c` against fixed ones (`tailor bench proxy --limit`): what a
//! service nobody profiled gets from leaving `c` out, next to every fixed `c` one could
//! have tuned, on two services whose best `c` differs by an order of magnitude.
//!
//! One plain Go service (net/http, no Tailor) behind one sidecar (`order = "orf"`, the
//! default config otherwise). Each request carries a deadline (`grpc-timeout`, which the
//! sidecar turns into the context's deadline) and a profile:
//! - `cpu`: burns an exponential CPU demand (mean 1 ms) and answers: the service's
//!   capacity is its CPUs, so a `c` near them keeps the queue in the gate, where the
//!   sidecar orders it and sheds what cannot make its deadline; a large `c` moves the queue
//!   into the service, which time-slices it.
//! - `io`: burns 0.5 ms (mean) and then waits 5 ms off the CPU (a database call): a `c`
//!   near the CPUs leaves them idle while requests wait, so the best `c` is ~10× larger.
//!
//! Each run starts a fresh sidecar (the adaptive limit learns from nothing, as on a first
//! deployment), sends open-loop Poisson arrivals at a load ρ of the CPUs, and counts
//! goodput: responses within their deadline. The best fixed `c` of a point is the one with
//! the most goodput (within one point of it, the lowest p99). Every sidecar gets the same
//! requests at a point, taking turns in a different order at each.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use http::Uri;
use serde::Serialize;
use tailor_core::{Nanos, Progress, Rng};
use tailor_plot::{line_plot_scaled, Line, Scales, Series};

use super::effect::{turns, SidecarC};
use super::{load_average, sampling_limit, write_files, LimitSeen, Processes, Programs};
use crate::cpuacct;
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::polyglot::{address_in, free_port};
use crate::record::{upper_median, Outcome, RequestRecord};

/// Request header the plain Go service reads its off-CPU wait from, µs.
pub const WAIT_HEADER: &str = "tailor-wait-us";

/// What a request does in the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// CPU only: exponential demand, mean 1 ms.
    Cpu,
    /// Exponential CPU demand of mean 0.5 ms, then 5 ms off the CPU.
    Io,
}

impl Profile {
    pub const ALL: [Profile; 2] = [Profile::Cpu, Profile::Io];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Cpu => "cpu",
            Profile::Io => "io",
        }
    }

    pub fn parse(s: &str) -> Result<Profile, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown service profile `{s}`; use cpu or io"))
    }

    /// Mean CPU demand, µs.
    pub fn cpu_mean_us(self) -> f64 {
        match self {
            Profile::Cpu => 1_000.0,
            Profile::Io => 500.0,
        }
    }

    /// Time off the CPU per request, µs.
    pub fn wait_us(self) -> u32 {
        match self {
            Profile::Cpu => 0,
            Profile::Io => 5_000,
        }
    }

    /// Every request's deadline: 25× the CPU demand, or 10× the unloaded latency.
    pub fn deadline_ms(self) -> u64 {
        match self {
            Profile::Cpu => 25,
            Profile::Io => 55,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LimitConfig {
    /// CPUs ρ is computed against.
    pub cores: usize,
    /// The sidecars compared; `Adaptive` leaves `c` out.
    pub cs: Vec<SidecarC>,
    pub profiles: Vec<Profile>,
    /// ρ of the CPUs (demand plus the measured per-request overhead); above 1 is overload.
    pub loads: Vec<f64>,
    pub seeds: Vec<u64>,
    /// Seconds of arrivals per run; the first tenth is not measured.
    pub seconds: f64,
    pub out: PathBuf,
}

/// One run: one sidecar, one point.
#[derive(Clone, Debug, Serialize)]
pub struct LimitRun {
    pub profile: Profile,
    pub rho: f64,
    pub seed: u64,
    pub c: SidecarC,
    pub offered_rps: f64,
    /// Measured requests (after the first tenth).
    pub requests: u64,
    /// 200 within the deadline.
    pub good: u64,
    /// 200 after the deadline.
    pub late: u64,
    /// Answered 503 by the sidecar (`tailor-shed`).
    pub shed: u64,
    /// Anything else: other statuses, timeouts, transport errors, not sent.
    pub other: u64,
    /// Good responses per second of arrivals.
    pub goodput_rps: f64,
    /// Good responses / measured requests, %.
    pub goodput_pct: f64,
    /// Of the 200s, from the intended send time.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The sidecar's limit over the run (fixed `c` too: it reports `c`).
    pub limit: Option<LimitSeen>,
}

/// Everything one limit benchmark produced (`limit.json`).
#[derive(Clone, Debug, Serialize)]
pub struct LimitReport {
    pub cores: usize,
    pub seconds: f64,
    /// CPU per request of the sidecar, the service and the generator at zero demand, µs
    /// (ρ counts it).
    pub overhead_us: f64,
    pub runs: Vec<LimitRun>,
    pub load_average_before: String,
    pub load_average_after: String,
    pub wall_seconds: f64,
}

/// Poisson arrivals at `rate` for `seconds`, each with its profile's demand.
fn plan(profile: Profile, rate: f64, seconds: f64, seed: u64) -> Plan {
    let n = ((rate * seconds).round() as usize).max(20);
    let intended_ns = crate::arrivals::poisson(n, rate, seed);
    let mut rng = Rng::derive(seed, 2);
    let demands_us = (0..n).map(|_| vec![rng.exp(profile.cpu_mean_us()).round().min(u32::MAX as f64) as u32]).collect();
    Plan { intended_ns, demands_us }
}

/// Sends `plan` to `uri` open loop, each request with `profile`'s wait and deadline.
fn send(uri: &Uri, profile: Profile, plan: &Plan) -> Result<Vec<RequestRecord>, String> {
    let cfg =
        LoadgenConfig { uri: uri.clone(), timeout: Duration::from_secs(10), max_in_flight: 4096, rt_priority: None };
    let headers =
        [(WAIT_HEADER, profile.wait_us().to_string()), ("grpc-timeout", format!("{}m", profile.deadline_ms()))];
    loadgen::run_with_headers(plan, &cfg, &headers).map_err(|e| e.to_string())
}

/// A sidecar in front of `service`; dropping the returned processes stops it.
fn start_sidecar(
    programs: &Programs,
    service: &str,
    c: SidecarC,
    logs: &Path,
    tag: &str,
) -> Result<(Processes, Uri, String), String> {
    let (listen, admin) = (free_port()?, free_port()?);
    let toml = format!(
        "listen = \"127.0.0.1:{listen}\"\nupstream = \"{service}\"\nadmin = \"127.0.0.1:{admin}\"\norder = \"orf\"\n{}drain_timeout_ms = 100\n",
        c.fixed().map_or(String::new(), |c| format!("c = {c}\n"))
    );
    let conf = logs.join(format!("limit-{tag}.toml"));
    std::fs::write(&conf, toml).map_err(|e| format!("writing {}: {e}", conf.display()))?;
    let mut cmd = Command::new(&programs.tailor);
    cmd.args(["proxy", "sidecar", "--config"]).arg(&conf);
    let mut procs = Processes::default();
    procs.start_printing("sidecar", cmd, &logs.join(format!("limit-{tag}.log")), "sidecar ready")?;
    let uri = format!("http://127.0.0.1:{listen}/").parse().expect("valid uri");
    Ok((procs, uri, format!("127.0.0.1:{admin}")))
}

/// The run's figures from its records (the first tenth dropped).
fn score(
    profile: Profile,
    rho: f64,
    seed: u64,
    c: SidecarC,
    records: &[RequestRecord],
    limit: Option<LimitSeen>,
) -> LimitRun {
    let measured = &records[records.len() / 10..];
    let deadline_ns = profile.deadline_ms() * 1_000_000;
    let (mut good, mut late, mut shed, mut other) = (0u64, 0u64, 0u64, 0u64);
    let mut latencies = Vec::with_capacity(measured.len());
    for r in measured {
        match (r.outcome, r.status) {
            (Outcome::Ok, _) => {
                latencies.push(r.latency_ns());
                if r.latency_ns() <= deadline_ns {
                    good += 1
                } else {
                    late += 1
                }
            }
            (Outcome::HttpError, 503) => shed += 1,
            _ => other += 1,
        }
    }
    latencies.sort_unstable();
    let span_s = match (measured.first(), measured.last()) {
        (Some(a), Some(b)) if b.intended_ns > a.intended_ns => (b.intended_ns - a.intended_ns) as f64 / 1e9,
        _ => f64::NAN,
    };
    let n = measured.len() as u64;
    let q = |p: f64| tailor_sim::metrics::quantile_sorted(&latencies, p) as f64 / 1e6;
    LimitRun {
        profile,
        rho,
        seed,
        c,
        offered_rps: n as f64 / span_s,
        requests: n,
        good,
        late,
        shed,
        other,
        goodput_rps: good as f64 / span_s,
        goodput_pct: 100.0 * good as f64 / n.max(1) as f64,
        p50_ms: if latencies.is_empty() { f64::NAN } else { q(0.5) },
        p99_ms: if latencies.is_empty() { f64::NAN } else { q(0.99) },
        limit,
    }
}

/// CPU per request of the sidecar, the service and the generator (this process) at zero
/// demand and 2,000 requests/s, near the rates of the runs: at a few hundred per second
/// their idle wake-ups (Go's scheduler spinning for work, tokio parking) would be charged
/// to each request several times over. 500 warm-up requests, then 2,000 measured.
fn calibrate(programs: &Programs, service: &str, service_pid: u32, logs: &Path) -> Result<f64, String> {
    let (procs, uri, _) = start_sidecar(programs, service, SidecarC::Fixed(64), logs, "calibrate")?;
    let zero =
        |n: usize| Plan { intended_ns: (0..n).map(|i| i as Nanos * 500_000).collect(), demands_us: vec![vec![0]; n] };
    send(&uri, Profile::Cpu, &zero(500))?;
    // The sidecar's and the service's CPU time, and this process's (the generator).
    let mut pids = procs.pids();
    pids.push(service_pid);
    let before = cpuacct::snapshot(&pids);
    let records = send(&uri, Profile::Cpu, &zero(2_000))?;
    Ok(cpuacct::usage(&before, &cpuacct::snapshot(&pids), records.len()).cpu_per_request_us)
}

/// Every (seed, profile, load) point on every sidecar, taking turns.
pub fn run(programs: &Programs, cfg: &LimitConfig, say: &dyn Progress) -> Result<LimitReport, String> {
    let started = Instant::now();
    let load_average_before = load_average();
    let logs = cfg.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let mut service = Processes::default();
    let mut go = Command::new(&programs.go_service);
    go.args(["-addr", "127.0.0.1:0", "-index", "0"]);
    let line = service.start_printing("go", go, &logs.join("limit-service.log"), "listening on ")?;
    let addr = address_in(&line)?;
    let service_pid = service.pids()[0];
    let overhead_us = calibrate(programs, &addr, service_pid, &logs)?;
    say.line(&format!("sidecar + service + generator at zero demand: {overhead_us:.0} µs of CPU per request"));
    let total = cfg.seeds.len() * cfg.profiles.len() * cfg.loads.len() * cfg.cs.len();
    say.start(total as u64, "proxy limit");
    let mut runs = Vec::new();
    let mut point = 0usize;
    for &seed in &cfg.seeds {
        for &profile in &cfg.profiles {
            for &rho in &cfg.loads {
                let rate = rho * cfg.cores as f64 * 1e6 / (profile.cpu_mean_us() + overhead_us);
                let point_seed = Rng::derive(seed, (rho * 1000.0) as u64 + profile as u64 * 10_000).next_u64() >> 1;
                let asks = plan(profile, rate, cfg.seconds, point_seed);
                for k in turns(point, cfg.cs.len()) {
                    let c = cfg.cs[k];
                    let tag = format!("{}-rho{rho}-seed{seed}-c{c}", profile.name());
                    let (sidecar, uri, admin) = start_sidecar(programs, &addr, c, &logs, &tag)?;
                    let (records, limit) = sampling_limit(Some(&admin), || send(&uri, profile, &asks))?;
                    drop(sidecar);
                    let r = score(profile, rho, seed, c, &records, limit);
                    say.line(&row_line(&r));
                    runs.push(r);
                    say.advance(runs.len() as u64, &format!("{} ρ {rho} seed {seed} c {c}", profile.name()));
                }
                point += 1;
            }
        }
    }
    drop(service);
    Ok(LimitReport {
        cores: cfg.cores,
        seconds: cfg.seconds,
        overhead_us,
        runs,
        load_average_before,
        load_average_after: load_average(),
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

fn row_line(r: &LimitRun) -> String {
    format!(
        "{:<3} ρ {:.2} seed {} c {:<8} {:>5.0} req/s  goodput {:>5.1}% ({:>5.0}/s)  shed {:>5}  late {:>4}  other {:>3}  p50 {:>6.2}  p99 {:>7.2} ms{}",
        r.profile.name(),
        r.rho,
        r.seed,
        r.c.to_string(),
        r.offered_rps,
        r.goodput_pct,
        r.goodput_rps,
        r.shed,
        r.late,
        r.other,
        r.p50_ms,
        r.p99_ms,
        r.limit.map_or(String::new(), |l| format!("  limit {:.1} ({:.0}–{:.0}), queue {:.1}", l.mean, l.min, l.max, l.queue_mean))
    )
}

/// The best fixed `c` among `runs` of one point: the most goodput; within one point of it,
/// the lowest p99.
pub fn best_fixed(runs: &[&LimitRun]) -> Option<usize> {
    let fixed: Vec<(&LimitRun, usize)> = runs.iter().filter_map(|r| r.c.fixed().map(|c| (*r, c))).collect();
    let most = fixed.iter().map(|(r, _)| r.goodput_pct).fold(f64::NEG_INFINITY, f64::max);
    fixed
        .iter()
        .filter(|(r, _)| r.goodput_pct >= most - 1.0)
        .min_by(|a, b| a.0.p99_ms.total_cmp(&b.0.p99_ms))
        .map(|&(_, c)| c)
}

/// Every run, and per point the best fixed `c` against the adaptive limit.
pub fn tables(r: &LimitReport) -> String {
    let mut t = String::from(
        "| service | ρ | seed | c | limit mean (min–max) | queue | offered req/s | goodput % | shed | late | other | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for x in &r.runs {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {} | {} | {} | {:.2} | {:.2} |",
            x.profile.name(),
            x.rho,
            x.seed,
            x.c,
            x.limit.map_or("-".into(), |l| format!("{:.1} ({:.0}–{:.0})", l.mean, l.min, l.max)),
            x.limit.map_or("-".into(), |l| format!("{:.1}", l.queue_mean)),
            x.offered_rps,
            x.goodput_pct,
            x.shed,
            x.late,
            x.other,
            x.p50_ms,
            x.p99_ms
        );
    }
    let _ = write!(
        t,
        "\nPer point: the best fixed `c` (most goodput; within one point of it, the lowest p99), `c` = the CPUs ({}), and the adaptive limit.\n\n| service | ρ | seed | best fixed c: goodput % / p99 ms | c = {}: goodput % / p99 ms | adaptive: goodput % / p99 ms (limit) | adaptive − best, goodput points | adaptive ÷ best, p99 |\n|---|---|---|---|---|---|---|---|\n",
        r.cores, r.cores
    );
    for (profile, rho, seed, runs) in points(r) {
        let best = best_fixed(&runs);
        let find = |c: SidecarC| runs.iter().find(|x| x.c == c).copied();
        let fmt = |x: Option<&LimitRun>| x.map_or("-".into(), |x| format!("{:.1} / {:.1}", x.goodput_pct, x.p99_ms));
        let best_run = best.and_then(|c| find(SidecarC::Fixed(c)));
        let adaptive = find(SidecarC::Adaptive);
        let (points_diff, p99_ratio) = match (adaptive, best_run) {
            (Some(a), Some(b)) => {
                (format!("{:+.1}", a.goodput_pct - b.goodput_pct), format!("{:.2}", a.p99_ms / b.p99_ms))
            }
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            t,
            "| {} | {rho} | {seed} | {} | {} | {}{} | {points_diff} | {p99_ratio} |",
            profile.name(),
            best.map_or("-".into(), |c| format!("c = {c}: {}", fmt(best_run))),
            fmt(find(SidecarC::Fixed(r.cores))),
            fmt(adaptive),
            adaptive.and_then(|a| a.limit).map_or(String::new(), |l| format!(" ({:.1})", l.mean)),
        );
    }
    t
}

/// The runs of each (profile, load, seed) point, in run order.
fn points(r: &LimitReport) -> Vec<(Profile, f64, u64, Vec<&LimitRun>)> {
    let mut out: Vec<(Profile, f64, u64, Vec<&LimitRun>)> = Vec::new();
    for x in &r.runs {
        match out.iter_mut().find(|(p, rho, seed, _)| *p == x.profile && *rho == x.rho && *seed == x.seed) {
            Some(point) => point.3.push(x),
            None => out.push((x.profile, x.rho, x.seed, vec![x])),
        }
    }
    out
}

/// Each sidecar's goodput against the best fixed `c` of each point, in points: (mean,
/// worst) over the points where it ran.
fn gaps(r: &LimitReport, c: SidecarC) -> Option<(f64, f64)> {
    let mut gaps = Vec::new();
    for (_, _, _, runs) in points(r) {
        let best = best_fixed(&runs).and_then(|b| runs.iter().find(|x| x.c == SidecarC::Fixed(b)));
        if let (Some(best), Some(x)) = (best, runs.iter().find(|x| x.c == c)) {
            gaps.push(x.goodput_pct - best.goodput_pct);
        }
    }
    (!gaps.is_empty())
        .then(|| (gaps.iter().sum::<f64>() / gaps.len() as f64, gaps.iter().copied().fold(f64::INFINITY, f64::min)))
}

/// How the adaptive limit did against the best fixed `c` of each point, against the one
/// fixed `c` that did best over all points (what tuning once for every service would
/// give), and against `c` = the CPUs.
pub fn verdict(r: &LimitReport) -> String {
    let ratios: Vec<f64> = points(r)
        .iter()
        .filter_map(|(_, _, _, runs)| {
            let best = best_fixed(runs).and_then(|b| runs.iter().find(|x| x.c == SidecarC::Fixed(b)))?;
            let a = runs.iter().find(|x| x.c == SidecarC::Adaptive)?;
            Some(a.p99_ms / best.p99_ms)
        })
        .collect();
    let Some((mean, worst)) = gaps(r, SidecarC::Adaptive).filter(|_| !ratios.is_empty()) else {
        return "No point has both the adaptive limit and a fixed `c`.\n".into();
    };
    let mut s = format!(
        "Goodput against the best fixed `c` of each of {} points, mean / worst, in points: adaptive {mean:+.1} / {worst:+.1} (its p99 {:.2}× the best's at the median point, {:.2}× at worst)",
        ratios.len(),
        upper_median(&ratios),
        ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    );
    let mut fixed: Vec<usize> = r.runs.iter().filter_map(|x| x.c.fixed()).collect();
    fixed.sort_unstable();
    fixed.dedup();
    let one = fixed
        .iter()
        .filter_map(|&c| gaps(r, SidecarC::Fixed(c)).map(|g| (c, g)))
        .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
    if let Some((c, (mean, worst))) = one {
        let _ = write!(s, "; the best single fixed `c` over all points, {c}: {mean:+.1} / {worst:+.1}");
    }
    if let Some((mean, worst)) = gaps(r, SidecarC::Fixed(r.cores)) {
        let _ = write!(s, "; `c` = the CPUs ({}): {mean:+.1} / {worst:+.1}", r.cores);
    }
    s.push_str(".\n");
    s
}

/// Goodput against `c` for `profile`, one colour per load: each fixed `c` solid (the median
/// over seeds), the adaptive limit's goodput dashed across the whole axis (it has no `c`
/// of its own; the legend gives the median of its mean limits).
pub fn plot(r: &LimitReport, profile: Profile) -> String {
    let mut loads: Vec<f64> = r.runs.iter().filter(|x| x.profile == profile).map(|x| x.rho).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    let mut fixed: Vec<usize> = r.runs.iter().filter_map(|x| x.c.fixed()).collect();
    fixed.sort_unstable();
    fixed.dedup();
    let (lo, hi) = (fixed.first().copied().unwrap_or(1) as f64, fixed.last().copied().unwrap_or(64) as f64);
    let mut series = Vec::new();
    for rho in loads {
        let of = |c: SidecarC| -> Vec<&LimitRun> {
            r.runs.iter().filter(|x| x.profile == profile && x.rho == rho && x.c == c).collect()
        };
        let goodput = |runs: &[&LimitRun]| upper_median(&runs.iter().map(|x| x.goodput_pct).collect::<Vec<_>>());
        let label = format!("ρ {rho}");
        let pts: Vec<(f64, f64)> = fixed
            .iter()
            .filter_map(|&c| {
                let runs = of(SidecarC::Fixed(c));
                (!runs.is_empty()).then(|| (c as f64, goodput(&runs)))
            })
            .collect();
        series.push(Series::new(label.clone(), pts));
        let adaptive = of(SidecarC::Adaptive);
        if !adaptive.is_empty() {
            let g = goodput(&adaptive);
            series.push(Series::new(label, vec![(lo, g), (hi, g)]).styled(Line::Dashed));
        }
    }
    let limits: Vec<f64> = r
        .runs
        .iter()
        .filter(|x| x.profile == profile && x.c == SidecarC::Adaptive)
        .filter_map(|x| x.limit.map(|l| l.mean))
        .collect();
    let title = match profile {
        Profile::Cpu => "CPU-bound service (1 ms of CPU per request) behind a sidecar",
        Profile::Io => "I/O-bound service (0.5 ms of CPU, then 5 ms waiting) behind a sidecar",
    };
    line_plot_scaled(
        title,
        "the sidecar's c (requests let into the service at once)",
        "goodput: % answered within the deadline (median over seeds)",
        &series,
        &[
            (Line::Solid, "fixed c"),
            (Line::Dashed, &format!("adaptive (its limit: {:.0} median)", upper_median(&limits))),
        ],
        Scales { log_x: Some(true), log_y: Some(false) },
    )
}

/// Writes `limit.json`, `limit.md` (tables and verdict) and one plot per profile into
/// `out`; returns the files.
pub fn write(r: &LimitReport, out: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![
        ("limit.json".to_string(), serde_json::to_string_pretty(r).expect("serializes")),
        ("limit.md".to_string(), format!("{}\n{}", tables(r), verdict(r))),
    ];
    let ran = |p: &Profile| r.runs.iter().any(|x| x.profile == *p);
    files.extend(
        Profile::ALL.iter().filter(|p| ran(p)).map(|&p| (format!("limit-goodput-{}.svg", p.name()), plot(r, p))),
    );
    write_files(out, files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: SidecarC, goodput_pct: f64, p99_ms: f64) -> LimitRun {
        LimitRun {
            profile: Profile::Io,
            rho: 0.9,
            seed: 1,
            c,
            offered_rps: 1000.0,
            requests: 1000,
            good: (goodput_pct * 10.0) as u64,
            late: 0,
            shed: 0,
            other: 0,
            goodput_rps: goodput_pct * 10.0,
            goodput_pct,
            p50_ms: 1.0,
            p99_ms,
            limit: None,
        }
    }

    fn report(runs: Vec<LimitRun>) -> LimitReport {
        LimitReport {
            cores: 2,
            seconds: 1.0,
            overhead_us: 100.0,
            runs,
            load_average_before: String::new(),
            load_average_after: String::new(),
            wall_seconds: 1.0,
        }
    }

    #[test]
    fn the_best_fixed_c_has_the_most_goodput_and_of_near_ties_the_lowest_p99() {
        let runs = [
            run(SidecarC::Fixed(2), 40.0, 5.0),
            run(SidecarC::Fixed(16), 97.0, 30.0),
            run(SidecarC::Fixed(32), 97.8, 45.0),
            run(SidecarC::Fixed(64), 90.0, 80.0),
            run(SidecarC::Adaptive, 99.0, 10.0),
        ];
        let refs: Vec<&LimitRun> = runs.iter().collect();
        assert_eq!(best_fixed(&refs), Some(16), "16 is within a point of 32's goodput and has the lower p99");
        assert_eq!(best_fixed(&refs[..1]), Some(2));
        assert_eq!(best_fixed(&refs[4..]), None, "the adaptive limit is not a fixed c");
    }

    #[test]
    fn the_verdict_reports_the_worst_gap_and_ratio() {
        let report = report(vec![
            run(SidecarC::Fixed(2), 40.0, 5.0),
            run(SidecarC::Fixed(16), 97.0, 30.0),
            run(SidecarC::Adaptive, 95.0, 45.0),
        ]);
        let v = verdict(&report);
        assert!(v.contains("each of 1 points, mean / worst, in points: adaptive -2.0 / -2.0 (its p99 1.50×"), "{v}");
        assert!(v.contains("the best single fixed `c` over all points, 16: +0.0 / +0.0"), "{v}");
        assert!(v.contains("`c` = the CPUs (2): -57.0 / -57.0."), "{v}");
        assert!(
            tables(&report).contains("| io | 0.9 | 1 | c = 16: 97.0 / 30.0 | 40.0 / 5.0 | 95.0 / 45.0 | -2.0 | 1.50 |")
        );
    }

    #[test]
    fn the_plot_draws_fixed_c_on_a_log_axis_and_the_adaptive_limit_across_it() {
        let report = report(vec![
            run(SidecarC::Fixed(1), 5.0, 50.0),
            run(SidecarC::Fixed(64), 100.0, 20.0),
            LimitRun { limit: LimitSeen::of(&[(30.0, 0.0), (40.0, 1.0)]), ..run(SidecarC::Adaptive, 99.0, 21.0) },
        ]);
        let svg = plot(&report, Profile::Io);
        assert!(svg.contains("(log scale)") && !svg.contains("deadline (median over seeds) (log scale)"), "{svg}");
        assert_eq!(
            tailor_plot::legend_entries(&svg).expect("a legend"),
            ["ρ 0.9", "fixed c", "adaptive (its limit: 35 median)"]
        );
        let lines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert_eq!(lines.len(), 2, "the fixed-c line and the adaptive one");
        assert!(lines[1].contains("dasharray"));
    }

    #[test]
    fn profiles_parse_by_name() {
        assert_eq!(Profile::parse("io"), Ok(Profile::Io));
        assert!(Profile::parse("disk").unwrap_err().contains("use cpu or io"));
    }
}
