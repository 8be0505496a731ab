//! Soak runs: the demo chain under the kernel backend, or the fan-out handler, held at one load
//! for many minutes while RSS, open file descriptors, threads (from /proc) and kernel table
//! slots are sampled every few seconds and the p99 of every window is kept; each series gets its
//! least-squares slope and a growth flag (`soak` binary, docs/failure-modes.md, "Soak").
//!
//! Processes are started by the demos' own code ([`crate::demo`] for the chain and its agent,
//! `fanout_demo` for the task servers and the handler's configuration), so a soak runs
//! exactly what the demos measure, only longer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::Nanos;

use crate::chain::Chain;
use crate::demo::{self, DemoConfig, DemoError, Mode};
use crate::record::Outcome;
use crate::workload::Workload;

/// What /proc says about one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub rss_kb: u64,
    pub fds: u64,
    pub threads: u64,
}

/// Resident set (VmRSS), open descriptors (/proc/PID/fd) and threads of `pid`; None once it is gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(ProcStat { rss_kb: field("VmRSS:")?, fds, threads: field("Threads:")? })
}

/// One sampled quantity over the run.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// (minutes since the run started, value).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// Least-squares slope per minute over the points at or after `from_min` (None with < 3).
    pub fn slope_per_min(&self, from_min: f64) -> Option<f64> {
        let pts: Vec<&(f64, f64)> = self.points.iter().filter(|p| p.0 >= from_min).collect();
        if pts.len() < 3 {
            return None;
        }
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }

    pub fn mean(&self) -> f64 {
        self.points.iter().map(|p| p.1).sum::<f64>() / self.points.len().max(1) as f64
    }

    pub fn first(&self) -> f64 {
        self.points.first().map_or(0.0, |p| p.1)
    }

    pub fn last(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.1)
    }

    pub fn max(&self) -> f64 {
        self.points.iter().map(|p| p.1).fold(f64::MIN, f64::max)
    }
}

/// How much fitted change over a run counts as growth, per kind of series: a leak of one
/// descriptor or thread a minute, or of a few MB over a soak, shows; allocator warm-up and the
/// jobs in flight at a sampling instant do not.
fn growth_bound(name: &str, mean: f64) -> f64 {
    let (floor, share): (f64, f64) = if name.ends_with("rss_kb") {
        (8192.0, 0.10)
    } else if name.ends_with("fds") || name.ends_with("threads") {
        (4.0, 0.10)
    } else {
        (8.0, 0.25)
    };
    floor.max(share * mean.abs())
}

/// The p99 of one window of requests.
#[derive(Clone, Debug)]
pub struct Window {
    pub index: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One series' verdict.
#[derive(Clone, Debug)]
pub struct Trend {
    pub name: String,
    pub first: f64,
    pub last: f64,
    pub max: f64,
    pub slope_per_min: f64,
    /// Slope × the fitted span: how much the series grew over the run by the fit.
    pub fitted_change: f64,
    pub bound: f64,
    /// Slope over the second half of the fitted span: what the series does at the end.
    pub late_slope_per_min: f64,
    /// The fitted change exceeds the bound and the second half still rises at a rate that
    /// would: growth that goes on. A step that then holds (the allocator keeping what a
    /// stall's burst of connections took) exceeds the first test only, and is reported as
    /// such (`step`), not as growth.
    pub grows: bool,
    /// The last sample after the load stopped and the processes sat idle (None without a
    /// settling phase, or for RSS, which an allocator keeps).
    pub settled: Option<f64>,
}

impl Trend {
    /// Grew past the bound at some point but no longer rises: bounded.
    pub fn stepped(&self) -> bool {
        self.fitted_change > self.bound && !self.grows
    }

    /// Still above its starting level by more than the bound once the load has stopped and
    /// every idle timer has fired: what a burst took (connections, pool threads, slots) is
    /// given back; a leak is not. The verdict a short run can give — its fitted slope moves
    /// with the peak concurrency a stall happened to cause.
    pub fn kept_after_the_load(&self) -> bool {
        self.settled.is_some_and(|v| v > self.first + self.bound)
    }
}

/// Series that must come back to their starting level after the load: everything but RSS
/// (an allocator keeps freed memory; RSS is judged by its slope).
fn comes_back(name: &str) -> bool {
    !name.ends_with("rss_kb")
}

/// A finished soak.
#[derive(Clone, Debug)]
pub struct SoakReport {
    pub what: String,
    pub minutes: f64,
    pub sample_every_s: f64,
    /// Slopes are fitted from here (minutes): the first window is warm-up (pools, allocator).
    pub fit_from_min: f64,
    pub trends: Vec<Trend>,
    pub windows: Vec<Window>,
    /// The samples the trends were fitted to.
    pub series: BTreeMap<String, Series>,
    /// How long the processes sat idle after the load before the settled samples (0: none).
    pub settle_s: f64,
}

impl SoakReport {
    /// A report without a settling phase (the unit tests' shorthand).
    #[cfg(test)]
    fn new(what: String, minutes: f64, every: Duration, fit_from_min: f64, series: &BTreeMap<String, Series>) -> Self {
        Self::with_settled(what, minutes, every, fit_from_min, series, &BTreeMap::new(), 0.0)
    }

    /// `series` sampled under load, `settled` the last sample of each after `settle_s` idle.
    fn with_settled(
        what: String,
        minutes: f64,
        every: Duration,
        fit_from_min: f64,
        series: &BTreeMap<String, Series>,
        settled: &BTreeMap<String, f64>,
        settle_s: f64,
    ) -> Self {
        let trends = series
            .iter()
            .map(|(name, s)| {
                let slope = s.slope_per_min(fit_from_min).unwrap_or(0.0);
                let span =
                    s.points.last().map_or(0.0, |p| p.0) - fit_from_min.min(s.points.last().map_or(0.0, |p| p.0));
                let fitted_change = slope * span.max(0.0);
                let bound = growth_bound(name, s.mean());
                let late_from = s.points.last().map_or(0.0, |p| p.0) - span.max(0.0) / 2.0;
                let late_slope = s.slope_per_min(late_from).unwrap_or(slope);
                Trend {
                    name: name.clone(),
                    first: s.first(),
                    last: s.last(),
                    max: s.max(),
                    slope_per_min: slope,
                    fitted_change,
                    bound,
                    late_slope_per_min: late_slope,
                    grows: fitted_change > bound && late_slope * span.max(0.0) > bound,
                    settled: settled.get(name).copied().filter(|_| comes_back(name)),
                }
            })
            .collect();
        SoakReport {
            what,
            minutes,
            sample_every_s: every.as_secs_f64(),
            fit_from_min,
            trends,
            windows: Vec::new(),
            series: series.clone(),
            settle_s,
        }
    }

    /// Series still above their starting level after the load (see [`Trend::kept_after_the_load`]).
    pub fn kept_after_the_load(&self) -> Vec<&Trend> {
        self.trends.iter().filter(|t| t.kept_after_the_load()).collect()
    }

    /// Every sample: one row per sampling instant (minutes since the start), one column per
    /// series, so a growth verdict can be looked at in the run's own numbers.
    pub fn samples_csv(&self) -> String {
        let names: Vec<&String> = self.series.keys().collect();
        let mut out = String::from("minutes");
        for n in &names {
            let _ = write!(out, ",{n}");
        }
        out.push('\n');
        let rows = self.series.values().map(|s| s.points.len()).max().unwrap_or(0);
        for i in 0..rows {
            let t = self.series.values().find_map(|s| s.points.get(i)).map_or(0.0, |p| p.0);
            let _ = write!(out, "{t:.3}");
            for n in &names {
                match self.series[*n].points.get(i) {
                    Some(p) => {
                        let _ = write!(out, ",{}", p.1);
                    }
                    None => out.push(','),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Series that grew beyond their bound.
    pub fn growing(&self) -> Vec<&Trend> {
        self.trends.iter().filter(|t| t.grows).collect()
    }

    /// Markdown tables: one row per series, one per window.
    pub fn markdown(&self) -> String {
        let settling = self.settle_s > 0.0;
        let mut s = format!(
            "{}: {:.1} min, sampled every {:.0} s, slopes fitted from minute {:.0}{}\n\n\
             | series | first | last | max | slope / min | fitted change | bound | slope / min, 2nd half |{} growth? |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|{}---|\n",
            self.what,
            self.minutes,
            self.sample_every_s,
            self.fit_from_min,
            if settling { format!("; then {:.0} s idle", self.settle_s) } else { String::new() },
            if settling { " after the load |" } else { "" },
            if settling { "---:|" } else { "" },
        );
        for t in &self.trends {
            let after = match (settling, t.settled) {
                (false, _) => String::new(),
                (true, Some(v)) => format!(" {v:.0} |"),
                (true, None) => " — |".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0} | {:.0} | {:+.3} | {:+.1} | {:.0} | {:+.3} |{after} {} |",
                t.name,
                t.first,
                t.last,
                t.max,
                t.slope_per_min,
                t.fitted_change,
                t.bound,
                t.late_slope_per_min,
                if t.kept_after_the_load() {
                    "**KEPT AFTER THE LOAD**"
                } else if t.grows {
                    "**GROWS**"
                } else if t.stepped() {
                    "step, then flat"
                } else {
                    "flat"
                }
            );
        }
        s.push_str("\n| window (min) | requests | errors | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|\n");
        for w in &self.windows {
            let _ =
                writeln!(s, "| {} | {} | {} | {:.2} | {:.2} |", w.index + 1, w.requests, w.errors, w.p50_ms, w.p99_ms);
        }
        let p99s: Vec<f64> = self.windows.iter().skip(1).map(|w| w.p99_ms).collect();
        if p99s.len() >= 3 {
            let series = Series { points: p99s.iter().enumerate().map(|(i, &v)| (i as f64, v)).collect() };
            let _ = writeln!(
                s,
                "\nwindow p99 after the first: min {:.2} ms, max {:.2} ms, slope {:+.3} ms per window",
                p99s.iter().cloned().fold(f64::MAX, f64::min),
                p99s.iter().cloned().fold(f64::MIN, f64::max),
                series.slope_per_min(0.0).unwrap_or(0.0)
            );
        }
        s
    }
}

/// Samples named values every `every` on its own thread until dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    series: Arc<Mutex<BTreeMap<String, Series>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    started: Instant,
}

impl Sampler {
    fn start(every: Duration, sample: impl Fn() -> Vec<(String, f64)> + Send + 'static) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let series: Arc<Mutex<BTreeMap<String, Series>>> = Arc::default();
        let (flag, out) = (stop.clone(), series.clone());
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("soak-sampler".into())
            .spawn(move || {
                let mut next = Instant::now();
                while !flag.load(Ordering::SeqCst) {
                    let t = started.elapsed().as_secs_f64() / 60.0;
                    let values = sample();
                    let mut all = out.lock().expect("series poisoned");
                    for (name, v) in values {
                        all.entry(name).or_default().points.push((t, v));
                    }
                    drop(all);
                    next += every;
                    while !flag.load(Ordering::SeqCst) && Instant::now() < next {
                        std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
                    }
                }
            })
            .expect("spawn the sampler thread");
        Sampler { stop, series, thread: Some(thread), started }
    }

    /// Call when the load has stopped: keeps sampling the idle processes until every series
    /// that must come back is within its bound of its first sample, or `max` has passed, then
    /// stops. Returns the samples taken under load, the last sample of each series after it,
    /// and how long the processes sat idle (s).
    fn settle_and_finish(self, max: Duration) -> (BTreeMap<String, Series>, BTreeMap<String, f64>, f64) {
        let load_end = Instant::now();
        let end_min = self.started.elapsed().as_secs_f64() / 60.0;
        let back = |all: &BTreeMap<String, Series>| {
            let mut sampled_after = false;
            for (name, s) in all {
                let Some(&(t, v)) = s.points.last() else { continue };
                sampled_after |= t > end_min;
                let loaded = Series { points: s.points.iter().copied().filter(|p| p.0 <= end_min).collect() };
                if comes_back(name) && v > loaded.first() + growth_bound(name, loaded.mean()) {
                    return false;
                }
            }
            sampled_after
        };
        while load_end.elapsed() < max && !back(&self.series.lock().expect("series poisoned")) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let idle_s = load_end.elapsed().as_secs_f64();
        let all = self.finish();
        let mut loaded = BTreeMap::new();
        let mut settled = BTreeMap::new();
        for (name, s) in all {
            let (under_load, after): (Vec<(f64, f64)>, Vec<(f64, f64)>) =
                s.points.into_iter().partition(|p| p.0 <= end_min);
            if let Some(&(_, v)) = after.last() {
                settled.insert(name.clone(), v);
            }
            loaded.insert(name, Series { points: under_load });
        }
        (loaded, settled, idle_s)
    }

    /// The latest sample of `name`, if any.
    fn latest(&self, name: &str) -> Option<f64> {
        self.series.lock().expect("series poisoned").get(name).and_then(|s| s.points.last()).map(|p| p.1)
    }

    fn finish(mut self) -> BTreeMap<String, Series> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.series.lock().expect("series poisoned"))
    }
}

/// /proc values of named processes, as `<name>.rss_kb` / `.fds` / `.threads`.
fn proc_values(procs: &[(String, u32)]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (name, pid) in procs {
        if let Some(s) = proc_stat(*pid) {
            out.push((format!("{name}.rss_kb"), s.rss_kb as f64));
            out.push((format!("{name}.fds"), s.fds as f64));
            out.push((format!("{name}.threads"), s.threads as f64));
        }
    }
    out
}

/// Nearest-rank quantile of `v` (sorted in place), ms.
fn quantile_ms(v: &mut [Nanos], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64 / 1e6
}

/// Settings shared by both soaks.
#[derive(Clone, Debug)]
pub struct SoakTiming {
    pub duration: Duration,
    pub window: Duration,
    pub sample_every: Duration,
    /// After the load: at most this long idle while descriptors, threads and slots are
    /// watched coming back ([`SETTLE`] covers every idle timer of the processes soaked).
    pub settle: Duration,
}

/// Long enough for every idle timer the soaked processes run: a keep-alive connection is
/// closed 10–20 s after its last use (10 s timeout, checked every 10 s by hyper's pool
/// reaper; `loadgen::IDLE_CONNECTION_S`), a job-pool thread retires after 10 s idle.
pub const SETTLE: Duration = Duration::from_secs(25);

impl SoakTiming {
    fn windows(&self) -> usize {
        ((self.duration.as_secs_f64() / self.window.as_secs_f64()).round() as usize).max(1)
    }
    /// The finished run's report: the sampler is settled (see [`SoakTiming::settle`]) and stopped.
    fn report(&self, what: String, sampler: Sampler, windows: Vec<Window>) -> SoakReport {
        let (series, settled, idle_s) = sampler.settle_and_finish(self.settle);
        let mut r = SoakReport::with_settled(
            what,
            self.duration.as_secs_f64() / 60.0,
            self.sample_every,
            self.fit_from_min(),
            &series,
            &settled,
            idle_s,
        );
        r.windows = windows;
        r
    }

    fn fit_from_min(&self) -> f64 {
        // The first window is warm-up unless there is only one.
        if self.windows() > 1 {
            self.window.as_secs_f64() / 60.0
        } else {
            0.0
        }
    }
}

/// The chain soak: `tiers` tier processes under the kernel backend (`orf`, key ordering, one
/// node-wide agent) at utilization `rho`, as `tailor demo --modes orf` runs them.
#[derive(Clone, Debug)]
pub struct ChainSoak {
    /// A binary with the demo's `tier` and `agent` entry points (`args` say how to reach them).
    pub exe: PathBuf,
    pub tier_args: Vec<String>,
    pub agent_args: Vec<String>,
    pub tiers: usize,
    pub rho: f64,
    pub mean_ms: f64,
    pub workload: Workload,
    pub seed: u64,
    pub out: PathBuf,
    pub timing: SoakTiming,
}

/// Runs the chain soak; `say` gets one line per window.
pub fn run_chain(s: &ChainSoak, mut say: impl FnMut(&str)) -> Result<SoakReport, DemoError> {
    let cores = tailor_runtime::available_cpus();
    let per_window = |rate: f64| (rate * s.timing.window.as_secs_f64()).round() as usize;
    let mut cfg = DemoConfig {
        exe: s.exe.clone(),
        tier_args: s.tier_args.clone(),
        agent_args: s.agent_args.clone(),
        tiers: s.tiers,
        cores,
        mean_ms: s.mean_ms,
        workloads: vec![s.workload],
        loads: vec![s.rho],
        modes: vec![Mode::Orf],
        requests: 1,
        warmup: 0,
        seed: s.seed,
        out: s.out.clone(),
        orf_c: cores,
        slice_us: 500.0,
        bucket_us: 2_000.0 * s.mean_ms,
        trace: None,
        timeout: Duration::from_secs(30),
        idle_states_off: false,
    };
    if let Some(reason) = demo::kernel_unavailable(&cfg) {
        return Err(DemoError::Config(format!("the chain soak runs the kernel backend: {reason}")));
    }
    std::fs::create_dir_all(s.out.join("logs"))
        .map_err(|source| DemoError::Io { what: format!("creating {}", s.out.display()), source })?;
    let calibration = demo::calibrate(&cfg)?;
    let rate = cfg.rate_for(s.workload, s.rho, calibration.overhead_us * 1e3);
    cfg.requests = per_window(rate);
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let table = dir.join(format!("tailor-soak-{}", std::process::id()));
    let agent =
        demo::start_agent(&cfg, Mode::Orf, &table, &s.out.join("logs/soak-agent.log")).map_err(DemoError::Config)?;
    let result = (|| {
        let chain = Chain::start(&demo::chain_spec(&cfg, cfg.backend(Mode::Orf, &table), "soak"))?;
        let mut procs: Vec<(String, u32)> =
            chain.pids().into_iter().rev().enumerate().map(|(i, p)| (format!("tier{i}"), p)).collect();
        procs.push(("agent".into(), agent.id()));
        let table_path = table.clone();
        let sampler = Sampler::start(s.timing.sample_every, move || {
            let mut v = proc_values(&procs);
            if let Ok(t) = tailor_runtime::kernel::table::Table::open(&table_path) {
                let used = (0..t.slots())
                    .filter(|&i| {
                        let word = t.slot(i).word.load(Ordering::Acquire);
                        tailor_runtime::kernel::table::unpack(word).1 != tailor_runtime::kernel::table::FREE
                    })
                    .count();
                v.push(("table.slots_in_use".into(), used as f64));
            }
            v
        });
        say(&format!(
            "chain soak: {} tiers, kernel backend (orf, key ordering), ρ {:.2} = {rate:.0} req/s, {} windows of {:.0} s",
            s.tiers,
            s.rho,
            s.timing.windows(),
            s.timing.window.as_secs_f64()
        ));
        let mut windows = Vec::new();
        for i in 0..s.timing.windows() {
            let plan = demo::plan_for(&cfg, s.workload, rate, s.seed.wrapping_add(i as u64))?;
            let records = crate::loadgen::run(&plan, &demo::loadgen_config(&cfg, &chain))?;
            let mut ok: Vec<Nanos> =
                records.iter().filter(|r| r.outcome == Outcome::Ok).map(|r| r.latency_ns()).collect();
            let w = Window {
                index: i,
                requests: records.len() as u64,
                errors: (records.len() - ok.len()) as u64,
                p50_ms: quantile_ms(&mut ok, 0.5),
                p99_ms: quantile_ms(&mut ok, 0.99),
            };
            say(&format!("  window {}: {} requests, {} errors, p99 {:.2} ms", i + 1, w.requests, w.errors, w.p99_ms));
            windows.push(w);
        }
        say(&format!(
            "  load stopped: up to {:.0} s idle while connections and threads are reaped",
            s.timing.settle.as_secs_f64()
        ));
        let what = format!("chain, {} tiers, kernel backend (orf), ρ {:.2}, {}", s.tiers, s.rho, s.workload);
        let report = s.timing.report(what, sampler, windows);
        drop(chain);
        Ok(report)
    })();
    demo::stop_agent(agent);
    let _ = std::fs::remove_file(&table);
    result
}

/// The fan-out soak: a configuration's task servers and handler in this process, driven
/// open-loop at `load` (its measured max load under SLO, docs/fanout.md) for the whole run.
#[derive(Clone, Debug)]
pub struct FanoutSoak {
    pub config: PathBuf,
    pub scheme: tailor_fanout::Scheme,
    pub load: f64,
    pub timing: SoakTiming,
}

/// Runs the fan-out soak; `say` gets one line per window.
pub fn run_fanout(s: &FanoutSoak, mut say: impl FnMut(&str)) -> Result<SoakReport, tailor_fanout::Error> {
    use crate::fanout_demo::{self as fdemo, loadgen};
    use tailor_fanout::{Handler, PreciseTimer};
    let l = fdemo::Loaded::load(&s.config)?;
    let rt = fdemo::probe_runtime()?;
    rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start().map_err(|e| tailor_fanout::Error::Io(e.to_string()))?);
        let servers = fdemo::spawn_servers(&l, s.scheme, &timer).await?;
        let handler = Handler::new(l.handler_config(s.scheme, servers.iter().map(|x| x.addr).collect(), None, None))?;
        let refresher = handler.spawn_refresher();
        let pid = std::process::id();
        let h = handler.clone();
        let sampler = Sampler::start(s.timing.sample_every, move || {
            let mut v = proc_values(&[("process".to_string(), pid)]);
            v.push(("handler.in_flight_tasks".into(), h.in_flight_tasks() as f64));
            v
        });
        let rate = l.rate_for(s.load);
        let classes = l.slo_classes();
        say(&format!(
            "fan-out soak: {} ({} servers), {}, load {:.3} = {rate:.0} queries/s, {} windows of {:.0} s",
            l.cfg.name,
            l.cfg.servers,
            s.scheme.name(),
            s.load,
            s.timing.windows(),
            s.timing.window.as_secs_f64()
        ));
        let mut windows = Vec::new();
        for i in 0..s.timing.windows() {
            let spec = loadgen::RunSpec {
                rate_qps: rate,
                warmup: Duration::ZERO,
                measure: s.timing.window,
                mix: l.mix(),
                seed: fdemo::probe_seed(l.cfg.seed.wrapping_add(i as u64), s.load),
                max_in_flight: 50_000,
                sequential: None,
            };
            let r = loadgen::run(handler.clone(), timer.clone(), &spec).await;
            // Every query against its own class's SLO: the worst class decides (p99 / SLO × the
            // first class's SLO would hide which); p99 of all queries for the table.
            let mut all: Vec<Nanos> = r.groups.values().flat_map(|g| g.latencies_ns.iter().copied()).collect();
            let worst = r
                .groups
                .iter()
                .map(|(&(c, _), g)| g.quantile(classes[c as usize].p) as f64 / classes[c as usize].slo_ns as f64)
                .fold(0.0, f64::max);
            let w = Window {
                index: i,
                requests: r.offered,
                errors: r.errors + r.dropped,
                p50_ms: quantile_ms(&mut all, 0.5),
                p99_ms: quantile_ms(&mut all, 0.99),
            };
            say(&format!(
                "  window {}: {} queries, {} errors, {} rejected, p99 {:.2} ms, worst group p99/SLO {worst:.2}; \
                 RSS {:.1} MB, {} fds",
                i + 1,
                w.requests,
                w.errors,
                r.rejected(),
                w.p99_ms,
                sampler.latest("process.rss_kb").unwrap_or(0.0) / 1024.0,
                sampler.latest("process.fds").unwrap_or(0.0)
            ));
            windows.push(w);
        }
        say(&format!("  load stopped: up to {:.0} s idle while connections are reaped", s.timing.settle.as_secs_f64()));
        let what = format!("fan-out handler, {}, {}, load {:.3}", l.cfg.name, s.scheme.name(), s.load);
        // The handler's pool runs on this runtime: settle without blocking it.
        let report = tokio::task::block_in_place(|| s.timing.report(what, sampler, windows));
        refresher.abort();
        drop(servers);
        Ok(report)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_a_flat_series() {
        let line = Series { points: (0..20).map(|i| (i as f64 * 0.5, 100.0 + 3.0 * i as f64 * 0.5)).collect() };
        assert!((line.slope_per_min(0.0).unwrap() - 3.0).abs() < 1e-9);
        let flat = Series { points: (0..20).map(|i| (i as f64, 7.0 + (i % 2) as f64)).collect() };
        assert!(flat.slope_per_min(1.0).unwrap().abs() < 0.05);
        let mut m = BTreeMap::new();
        m.insert("x.fds".to_string(), line);
        m.insert("y.fds".to_string(), flat);
        let r = SoakReport::new("t".into(), 10.0, Duration::from_secs(5), 0.0, &m);
        assert_eq!(r.growing().len(), 1);
        assert_eq!(r.growing()[0].name, "x.fds");
        let csv = r.samples_csv();
        assert_eq!(csv.lines().next(), Some("minutes,x.fds,y.fds"));
        assert_eq!(csv.lines().count(), 21);
        assert_eq!(csv.lines().nth(2), Some("0.500,101.5,8"));
    }

    #[test]
    fn a_step_that_then_holds_is_not_growth_and_a_late_leak_is() {
        // 20 MB taken at minute 4 (a stall's connections) and kept: bounded.
        let step =
            Series { points: (0..60).map(|i| (i as f64 * 0.5, if i < 8 { 7_000.0 } else { 27_000.0 })).collect() };
        // Flat for the first half, then 2 MB a minute: unbounded.
        let late = Series {
            points: (0..60).map(|i| (i as f64 * 0.5, 7_000.0 + (i as f64 * 0.5 - 15.0).max(0.0) * 2_000.0)).collect(),
        };
        let mut m = BTreeMap::new();
        m.insert("step.rss_kb".to_string(), step);
        m.insert("late.rss_kb".to_string(), late);
        let r = SoakReport::new("t".into(), 30.0, Duration::from_secs(30), 1.0, &m);
        let trend = |n: &str| r.trends.iter().find(|t| t.name == n).unwrap().clone();
        assert!(trend("step.rss_kb").stepped() && !trend("step.rss_kb").grows, "{:?}", trend("step.rss_kb"));
        assert!(trend("late.rss_kb").grows, "{:?}", trend("late.rss_kb"));
        assert!(r.markdown().contains("step, then flat"));
    }

    #[test]
    fn what_a_burst_took_and_gave_back_is_no_leak_and_what_it_kept_is() {
        // Descriptors that follow a stall's burst up and down: a fit over one minute reads growth.
        let burst = Series {
            points: (0..60).map(|i| (i as f64 / 60.0, if (40..55).contains(&i) { 160.0 } else { 10.0 })).collect(),
        };
        let mut m = BTreeMap::new();
        m.insert("burst.fds".to_string(), burst.clone());
        m.insert("leak.fds".to_string(), burst);
        m.insert("x.rss_kb".to_string(), Series { points: (0..60).map(|i| (i as f64 / 60.0, 5000.0)).collect() });
        let settled: BTreeMap<String, f64> =
            [("burst.fds".to_string(), 11.0), ("leak.fds".to_string(), 60.0), ("x.rss_kb".to_string(), 9000.0)].into();
        let r = SoakReport::with_settled("t".into(), 1.0, Duration::from_secs(1), 0.0, &m, &settled, 21.0);
        let trend = |n: &str| r.trends.iter().find(|t| t.name == n).unwrap().clone();
        assert!(trend("burst.fds").fitted_change > trend("burst.fds").bound, "the slope alone would call it growth");
        assert!(!trend("burst.fds").kept_after_the_load());
        assert!(trend("leak.fds").kept_after_the_load());
        assert_eq!(trend("x.rss_kb").settled, None, "RSS is judged by its slope, not by coming back");
        assert_eq!(r.kept_after_the_load().len(), 1);
        let md = r.markdown();
        assert!(
            md.contains("then 21 s idle") && md.contains("after the load") && md.contains("KEPT AFTER THE LOAD"),
            "{md}"
        );
    }

    #[test]
    fn proc_stat_reads_this_process() {
        let s = proc_stat(std::process::id()).unwrap();
        assert!(s.rss_kb > 0 && s.fds > 0 && s.threads >= 1, "{s:?}");
    }
}
