//! Soak runs: the demo chain under the kernel backend, or the fan-out handler, held at one load
//! for many minutes while RSS, open file descriptors, threads (from /proc) and kernel table
//! slots are sampled every few seconds and the p99 of every window is kept; each series gets its
//! least-squares slope and a growth flag (`soak` binary, docs/failure-modes.md, "Soak").
//!
//! Processes are started by the demos' own code ([`crate::demo`] for the chain and its agent,
//! `fanout_demo` for the task servers and the handler's configuration), so a soak runs
//! exactly what the demos measure, only longer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::Nanos;

use crate::chain::Chain;
use crate::demo::{self, DemoConfig, DemoError, Mode};
use crate::record::Outcome;
use crate::workload::Workload;

mod report;
use report::{comes_back, growth_bound};
pub use report::{Series, SoakReport, Trend, Window};

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
            let (under_load, after): (Vec<_>, Vec<_>) = s.points.into_iter().partition(|p| p.0 <= end_min);
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
        overhead_us: None,
    };
    if let Some(reason) = demo::kernel_unavailable(&cfg) {
        return Err(DemoError::Config(format!("the chain soak runs the kernel backend: {reason}")));
    }
    std::fs::create_dir_all(s.out.join("logs"))
        .map_err(|source| DemoError::Io { what: format!("creating {}", s.out.display()), source })?;
    let calibration = demo::calibrate(&cfg)?;
    let rate = cfg.rate_for(s.workload, s.rho, calibration.rate_overhead_us * 1e3);
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
            let r = loadgen::run(handler.clone(), &spec).await.map_err(|e| tailor_fanout::Error::Io(e.to_string()))?;
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
    fn proc_stat_reads_this_process() {
        let s = proc_stat(std::process::id()).unwrap();
        assert!(s.rss_kb > 0 && s.fds > 0 && s.threads >= 1, "{s:?}");
    }
}
