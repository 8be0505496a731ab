//! `tailor demo`: the N-tier chain on loopback under every scheduling mode at
//! several loads, side by side in one invocation, each run next to the
//! simulator's prediction and the ideal G/G/c FIFO distribution.
//!
//! Every mode at a given (workload, load) sees the very same requests: the
//! arrival times and demands come from a seed derived from the run's seed,
//! the workload and the load, never from the mode.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use tailor_core::{Nanos, PolicySpec, Progress, Rng};
use tailor_runtime::kernel::AgentReport;
use tailor_runtime::BackendSpec;

use crate::chain::{has_cap_sys_nice, stop_child, Chain, ChainSpec};
use crate::cpuacct::{self, CpuUsage};
use crate::hgrm::{histogram_us, percentile_distribution};
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::predict::{self, PredictSpec, PREDICTION_RUNS};
use crate::record::{measured_latencies, records_csv, summarize, upper_median, RunSummary};
use crate::tier::TierStats;
use crate::workload::Workload;

mod config;
mod report;
pub use config::{DemoConfig, Mode};
use report::{plot, report_markdown, row_line};
pub use report::{prediction_summary, results_table, verdict};

/// One measured run and its prediction.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub mode: Mode,
    pub mode_name: &'static str,
    pub workload: String,
    /// Target utilization ρ of the shared CPUs, the chain's own CPU cost included.
    pub load: f64,
    /// The part of it that is demand: λ · E[total demand] / cores.
    pub demand_utilization: f64,
    /// What this run really loaded the CPUs with: offered rate × (its measured demand +
    /// its measured overhead per request) / cores. Differs from `load` when the mode's
    /// overhead differs from the calibration's.
    pub effective_utilization: f64,
    /// Arrival rate the plan was generated for.
    pub target_rps: f64,
    pub seed: u64,
    pub requests: usize,
    pub warmup: usize,
    pub tiers: usize,
    pub cores: usize,
    pub summary: RunSummary,
    /// CPU used by the demo and by everything else during the run.
    pub cpu: CpuUsage,
    /// The demo's CPU time per request minus its mean CPU demand, µs: what
    /// HTTP, the generator, scheduling and the kernel cost per request.
    pub overhead_per_request_us: f64,
    /// Cooperative modes: gate hand-offs (a parked job admitted by the one that freed its
    /// slot) per request, over all tiers, from the tiers' own counters.
    pub handoffs_per_request: f64,
    /// Their mean time from admission to the job running, µs, and the part of it not
    /// spent waiting on a run queue for a CPU (the wake-up): the model adds the latter to
    /// every hand-off (the simulator's fair host models the run-queue wait itself).
    pub handoff_us: Option<f64>,
    pub handoff_wakeup_us: Option<f64>,
    /// Kernel modes: the agent's band rotations (slice expiries that moved a job out of the
    /// band and another in) per request, and the agent's CPU per rotation, µs (all its
    /// CPU over its rotations: an upper bound of what one slice costs it). From the report
    /// the agent logs as it stops.
    pub agent_rotations_per_request: Option<f64>,
    pub agent_cpu_per_rotation_us: Option<f64>,
    /// The simulator's p99 / mean / reordering % for a run like this one: medians over
    /// `PREDICTION_RUNS` simulated runs of this run's length (None if it failed; see
    /// `predicted_error`).
    pub predicted_p99_ms: Option<f64>,
    /// Where 80% of those simulated runs' p99 fall (10th and 90th percentile, ms).
    pub predicted_p99_band_ms: Option<[f64; 2]>,
    pub predicted_mean_ms: Option<f64>,
    pub predicted_reordering_pct: Option<f64>,
    pub predicted_error: Option<String>,
    /// Attempts at this run discarded because other processes took CPU time during them
    /// (≥ `DISTURBED_BACKGROUND_CPUS`); this is the quietest attempt. Its logs are
    /// `logs/<run>-rerunN-*.log` when a rerun was kept.
    pub disturbed_runs: u32,
    /// Files written for this run, relative to the output directory.
    pub files: Vec<String>,
}

/// A mode that did not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub mode: &'static str,
    pub reason: String,
}

/// What the chain costs by itself: measured with zero demand at 250 req/s.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// End-to-end p50, µs (the median of the blocks' p50s).
    pub p50_us: f64,
    /// CPU time per request of all the demo's processes, µs (the simulator adds it as a CPU
    /// stage): the median of `overhead_blocks_us`.
    pub overhead_us: f64,
    /// Each measured block's CPU per request, µs: how much it moves within one chain.
    pub overhead_blocks_us: Vec<f64>,
    /// Latency per hop beyond that CPU, µs (the simulator's fixed network delay).
    pub hop_us: f64,
    /// The CPU per request that turned each ρ into a rate, µs: `overhead_us`, or the
    /// value given with `--overhead-us`.
    pub rate_overhead_us: f64,
}

/// Everything a demo produced (`demo.json`).
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    pub tiers: usize,
    pub cores: usize,
    pub mean_ms_per_tier: f64,
    pub seed: u64,
    pub orf_c: usize,
    pub slice_us: f64,
    /// `orf` (key ordering): the GAT span of one SCHED_FIFO level, µs.
    pub bucket_us: f64,
    /// `keep` or `off` (idle CPUs polled, /dev/cpu_dma_latency held at 0) for every run.
    pub idle_states: String,
    /// The generator alone against a null server: offered rate, completions/s, p99 send lag.
    pub generator_offered_rps: f64,
    pub generator_max_rps: f64,
    pub generator_p99_lag_us: f64,
    /// The chain with zero demand, unloaded.
    pub calibration: Calibration,
    pub runs: Vec<RunResult>,
    pub skipped: Vec<Skipped>,
    pub wall_seconds: f64,
}

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(transparent)]
    Chain(#[from] crate::chain::ChainError),
    #[error(transparent)]
    Loadgen(#[from] loadgen::LoadgenError),
    #[error(transparent)]
    Trace(#[from] crate::arrivals::TraceError),
    #[error("{0}")]
    Config(String),
}

fn write_file(path: &Path, text: &str) -> Result<(), DemoError> {
    std::fs::write(path, text).map_err(|source| DemoError::Io { what: format!("writing {}", path.display()), source })
}

/// The requests of one (workload, load) point: the same for every mode.
pub fn plan_for(cfg: &DemoConfig, w: Workload, rate: f64, seed: u64) -> Result<Plan, DemoError> {
    let n = cfg.warmup + cfg.requests;
    let intended_ns = match &cfg.trace {
        Some(path) => crate::arrivals::from_trace(path, n, Some(rate))?,
        None => crate::arrivals::poisson(n, rate, seed),
    };
    let dist = w.dist(cfg.mean_ms).build(Path::new(".")).expect("built-in workloads are valid");
    let mut rng = Rng::derive(seed, 2);
    let demands_us = (0..n)
        .map(|_| {
            (0..cfg.tiers).map(|_| ((dist.sample_ns(&mut rng) + 500) / 1_000).min(u32::MAX as Nanos) as u32).collect()
        })
        .collect();
    Ok(Plan { intended_ns, demands_us })
}

/// The seed of one (workload, load) point.
fn point_seed(seed: u64, wi: usize, li: usize) -> u64 {
    // 63 bits: scenario files (TOML integers) hold the seed too.
    Rng::derive(seed, 1000 + (wi as u64) * 100 + li as u64).next_u64() >> 1
}

/// Starts the node agent for a kernel mode; returns it once its table exists.
pub(crate) fn start_agent(cfg: &DemoConfig, mode: Mode, table: &Path, log: &Path) -> Result<Child, String> {
    let policy = match mode {
        Mode::Rr => "rr",
        Mode::OrfAdaptive => "orf-adaptive",
        _ => "orf",
    };
    let stderr = std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let _ = std::fs::remove_file(table);
    let mut child = Command::new(&cfg.exe)
        .args(&cfg.agent_args)
        .args(["--table", &table.display().to_string(), "--policy", policy])
        .args([
            "--c",
            &cfg.orf_c.to_string(),
            "--slice-us",
            &cfg.slice_us.to_string(),
            "--cpus",
            &cfg.cores.to_string(),
        ])
        .args(match mode {
            Mode::Orf => {
                vec!["--enforce".to_string(), "priority".into(), "--bucket-us".into(), cfg.bucket_us.to_string()]
            }
            Mode::OrfAdaptive => match cfg.adaptive_policy() {
                PolicySpec::OrfAdaptive { c_max, window_jobs, .. } => {
                    vec!["--c-max".to_string(), c_max.to_string(), "--window-jobs".into(), window_jobs.to_string()]
                }
                _ => vec![],
            },
            _ => vec![],
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting `{} {}`: {e}", cfg.exe.display(), cfg.agent_args.join(" ")))?;
    // Ready when its table exists; an agent that exits first failed (its log says why).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains("unrecognized subcommand") {
                return Err(format!(
                    "this `{}` has no `agent` subcommand (the kernel backend's node agent); build one that has it",
                    cfg.exe.display()
                ));
            }
            let line = text
                .lines()
                .find(|l| l.starts_with("error"))
                .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()));
            return Err(format!(
                "the agent exited ({status}): {}; see {}",
                line.unwrap_or("(no output)"),
                log.display()
            ));
        }
        if table.exists() {
            return Ok(child);
        }
        if Instant::now() > deadline {
            stop_child(&mut child, Instant::now());
            return Err(format!("the agent did not create {} within 10 s; see {}", table.display(), log.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the agent: SIGTERM by pid (it restores every thread and exits), SIGKILL after 3 s.
pub(crate) fn stop_agent(mut agent: Child) {
    // SAFETY: kill(2) on the pid of a child we started and have not reaped yet.
    unsafe { libc::kill(agent.id() as libc::pid_t, libc::SIGTERM) };
    stop_child(&mut agent, Instant::now() + Duration::from_secs(3));
}

/// Runs the whole demo, reporting one step per measured run and each result row to `progress`.
pub fn run(cfg: &DemoConfig, progress: &dyn Progress) -> Result<DemoReport, DemoError> {
    if cfg.tiers == 0 || cfg.cores == 0 || cfg.requests == 0 || cfg.loads.is_empty() || cfg.modes.is_empty() {
        return Err(DemoError::Config(
            "--tiers, --cores, --requests, --loads and --modes must be non-empty and > 0".into(),
        ));
    }
    if let Some(bad) = cfg.loads.iter().find(|&&l| !(l > 0.0 && l < 1.0)) {
        return Err(DemoError::Config(format!("--loads: {bad} is not a utilization in (0, 1); use e.g. 0.5,0.7,0.85")));
    }
    let started = Instant::now();
    let out = &cfg.out;
    let runs_dir = out.join("runs");
    let logs_dir = out.join("logs");
    for d in [out, &runs_dir, &logs_dir] {
        std::fs::create_dir_all(d)
            .map_err(|source| DemoError::Io { what: format!("creating {}", d.display()), source })?;
    }

    // The generator's own ceiling, so a reader can see it is not the bottleneck.
    let top_rate = cfg
        .workloads
        .iter()
        .map(|&w| cfg.rate_for(w, cfg.loads.iter().cloned().fold(0.0, f64::max), 0.0))
        .fold(0.0, f64::max);
    let gen_offered = (top_rate * 8.0).clamp(2_000.0, 10_000.0);
    let (gen_max, gen_lag) =
        loadgen::max_rate(gen_offered, if cfg.requests < 1000 { 0.3 } else { 1.0 }, generator_priority())?;
    progress.line(&format!(
        "load generator: {gen_max:.0} req/s completed of {gen_offered:.0} offered against a null server (p99 send lag {gen_lag:.0} µs); the demo's rates are below {top_rate:.0} req/s"
    ));

    let calibration = calibrate(cfg)?;
    progress.line(&format!(
        "unloaded chain with zero demand: p50 {:.0} µs end to end; {:.0} µs of CPU per request (all processes; median of {}); {:.0} µs per hop of latency beyond that ({} hops)",
        calibration.p50_us,
        calibration.overhead_us,
        calibration.overhead_blocks_us.iter().map(|o| format!("{o:.0}")).collect::<Vec<_>>().join(", "),
        calibration.hop_us,
        cfg.tiers + 1
    ));
    progress.line(&match cfg.overhead_us {
        Some(o) => format!("rates from --overhead-us {o:.0} (not the calibration's {:.0})", calibration.overhead_us),
        None => format!(
            "rates from {:.0} µs of overhead per request; --overhead-us {:.0} gives another invocation the same rates",
            calibration.overhead_us, calibration.overhead_us
        ),
    });

    let kernel_block = kernel_unavailable(cfg);
    let mut runs = Vec::new();
    let mut skipped: Vec<Skipped> = Vec::new();
    if let Some(reason) = &kernel_block {
        for m in cfg.modes.iter().filter(|m| m.kernel_enforced()) {
            progress.line(&format!("skipping {}: {reason}", m.name()));
            skipped.push(Skipped { mode: m.name(), reason: reason.clone() });
        }
    }
    let runnable = cfg.modes.iter().filter(|m| !skipped.iter().any(|s| s.mode == m.name())).count();
    progress.start((cfg.workloads.len() * cfg.loads.len() * runnable) as u64, "runs");
    let mut steps = 0u64;
    // Runs in a row whose reruns found no quiet attempt: past `BUSY_THROUGHOUT_AFTER`, the
    // machine is taken to be busy throughout and reruns stop (they would triple the time).
    let mut rerun_in_vain = 0;
    // Point-major order: at each (workload, load) every mode runs back to back
    // with a fresh chain, so background load on a shared machine (which comes
    // and goes) hits the modes alike instead of one mode's whole sweep.
    for (wi, &w) in cfg.workloads.iter().enumerate() {
        for (li, &load) in cfg.loads.iter().enumerate() {
            let rate = cfg.rate_for(w, load, calibration.rate_overhead_us * 1e3);
            let seed = point_seed(cfg.seed, wi, li);
            let plan = plan_for(cfg, w, rate, seed)?;
            for &mode in &cfg.modes {
                if skipped.iter().any(|s| s.mode == mode.name()) {
                    continue;
                }
                let stem = run_stem(mode, w, load);
                let mut attempt = run_mode(cfg, mode, &plan, &logs_dir, &stem).map(|(r, u)| (r, u, stem.clone()));
                let mut disturbed_runs = 0;
                // A run during which other jobs took CPU time says more about them than
                // about the mode: run it again, and keep the quietest of the attempts.
                while let Ok((_, usage, _)) = &attempt {
                    if usage.background_cpus < DISTURBED_BACKGROUND_CPUS
                        || disturbed_runs == RERUNS_WHEN_DISTURBED
                        || rerun_in_vain >= BUSY_THROUGHOUT_AFTER
                    {
                        break;
                    }
                    disturbed_runs += 1;
                    progress.line(&format!(
                        "{} {w} ρ={load}: other processes took {:.2} CPUs during the run; running it again ({disturbed_runs} of at most {RERUNS_WHEN_DISTURBED})",
                        mode.name(),
                        usage.background_cpus
                    ));
                    let log_stem = format!("{stem}-rerun{disturbed_runs}");
                    match run_mode(cfg, mode, &plan, &logs_dir, &log_stem) {
                        Ok((records, again)) => {
                            if again.background_cpus < usage.background_cpus {
                                attempt = Ok((records, again, log_stem));
                            }
                        }
                        Err(RunModeError::Skip(reason)) => {
                            progress.line(&format!("the rerun could not run ({reason}); keeping the first"));
                            disturbed_runs -= 1;
                            break;
                        }
                        Err(RunModeError::Fatal(e)) => return Err(e),
                    }
                }
                match attempt {
                    Ok((records, usage, log_stem)) => {
                        if disturbed_runs > 0 && usage.background_cpus >= DISTURBED_BACKGROUND_CPUS {
                            rerun_in_vain += 1;
                            if rerun_in_vain == BUSY_THROUGHOUT_AFTER {
                                progress.line(&format!(
                                    "other processes stayed busy through the reruns of {rerun_in_vain} runs in a row: the remaining runs run once each (their bg CPUs say how busy)"
                                ));
                            }
                        } else if usage.background_cpus < DISTURBED_BACKGROUND_CPUS {
                            rerun_in_vain = 0;
                        }
                        let mut result = finish_run(
                            cfg,
                            mode,
                            (w, load, rate, seed),
                            &calibration,
                            &records,
                            usage,
                            (&runs_dir, &log_stem),
                        )?;
                        result.disturbed_runs = disturbed_runs;
                        progress.line(&row_line(&result));
                        runs.push(result);
                    }
                    Err(RunModeError::Skip(reason)) => {
                        progress.line(&format!("skipping {}: {reason}", mode.name()));
                        skipped.push(Skipped { mode: mode.name(), reason });
                    }
                    Err(RunModeError::Fatal(e)) => return Err(e),
                }
                steps += 1;
                progress.advance(steps, &format!("{} {w} ρ={load}", mode.name()));
            }
        }
    }

    let report = DemoReport {
        tiers: cfg.tiers,
        cores: cfg.cores,
        mean_ms_per_tier: cfg.mean_ms,
        seed: cfg.seed,
        orf_c: cfg.orf_c,
        slice_us: cfg.slice_us,
        bucket_us: cfg.bucket_us,
        idle_states: if cfg.idle_states_off { "off" } else { "keep" }.into(),
        generator_offered_rps: gen_offered,
        generator_max_rps: gen_max,
        generator_p99_lag_us: gen_lag,
        calibration,
        runs,
        skipped,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    write_file(&out.join("demo.json"), &serde_json::to_string_pretty(&report).expect("serializes"))?;
    write_file(&out.join("report.md"), &report_markdown(cfg, &report))?;
    for w in &cfg.workloads {
        write_file(&out.join(format!("p99-{w}.svg")), &plot(&report, *w))?;
    }
    Ok(report)
}

/// The chain's own cost with zero demand at a low rate: the CPU each request costs beyond its
/// demand (HTTP on every hop, thread hand-offs, the generator), and the latency per hop that is
/// not that CPU.
pub(crate) fn calibrate(cfg: &DemoConfig) -> Result<Calibration, DemoError> {
    let chain = Chain::start(&chain_spec(cfg, BackendSpec::None, "calibration"))?;
    let zero_demand = |n: usize| Plan {
        intended_ns: (0..n).map(|i| i as Nanos * 4_000_000).collect(),
        demands_us: vec![vec![0; cfg.tiers]; n],
    };
    // A warm-up first, not measured: the first requests of a fresh chain pay for
    // connections, pool threads and page faults (one 400-request calibration read
    // 950 µs per request where a warm one reads ~425).
    loadgen::run(&zero_demand(100), &loadgen_config(cfg, &chain))?;
    // Blocks of 400, median: one block's CPU per request ranges over ±20% (417–672 µs in
    // four blocks of one chain on this VM: wake-up costs at a low rate come and go), and a
    // single block moved the offered rates of two invocations apart by up to 19%.
    let (n, blocks) = (400, 3);
    let plan = zero_demand(n);
    let (mut overheads, mut p50s) = (Vec::new(), Vec::new());
    for _ in 0..blocks {
        let before = cpuacct::snapshot(&chain.pids());
        let records = loadgen::run(&plan, &loadgen_config(cfg, &chain))?;
        overheads.push(cpuacct::usage(&before, &cpuacct::snapshot(&chain.pids()), n).cpu_per_request_us);
        p50s.push(summarize(&records, 20, cfg.tiers as u32, cfg.cores).latency_ms.p50 * 1e3);
    }
    drop(chain);
    let (overhead_us, p50_us) = (upper_median(&overheads), upper_median(&p50s));
    let hops = (cfg.tiers + 1) as f64;
    Ok(Calibration {
        overhead_us,
        overhead_blocks_us: overheads,
        hop_us: ((p50_us - overhead_us) / hops).max(0.0),
        p50_us,
        rate_overhead_us: cfg.overhead_us.unwrap_or(overhead_us),
    })
}

enum RunModeError {
    /// The mode cannot run here (no agent, backend refused): skip it, say why.
    Skip(String),
    Fatal(DemoError),
}

/// A run's file name stem: `runs/<stem>.*` and `logs/<stem>-*.log`.
fn run_stem(mode: Mode, w: Workload, load: f64) -> String {
    format!("{}-{}-rho{:.2}", mode.name(), w, load)
}

/// One mode on one plan: agent (kernel modes), chain, load, teardown. Its agent and tier
/// logs are named after the run (`stem`), so every run's agent report is kept.
fn run_mode(
    cfg: &DemoConfig,
    mode: Mode,
    plan: &Plan,
    logs_dir: &Path,
    stem: &str,
) -> Result<(Vec<crate::record::RequestRecord>, CpuUsage), RunModeError> {
    // The agent's shared-memory table: tmpfs, one per run, never the node's default one.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let table = dir.join(format!("tailor-demo-{}-{}", std::process::id(), mode.name()));
    let agent = if mode.kernel_enforced() {
        let log = logs_dir.join(format!("{stem}-agent.log"));
        Some(start_agent(cfg, mode, &table, &log).map_err(RunModeError::Skip)?)
    } else {
        None
    };
    let result = match Chain::start(&chain_spec(cfg, cfg.backend(mode, &table), stem)) {
        Ok(chain) => {
            let mut pids = chain.pids();
            pids.extend(agent.as_ref().map(|a| a.id()));
            let before = cpuacct::snapshot(&pids);
            let r = loadgen::run(plan, &loadgen_config(cfg, &chain)).map_err(|e| RunModeError::Fatal(e.into()));
            let usage = cpuacct::usage(&before, &cpuacct::snapshot(&pids), plan.intended_ns.len());
            drop(chain);
            r.map(|records| (records, usage))
        }
        Err(e) => Err(RunModeError::Skip(e.to_string())),
    };
    if let Some(a) = agent {
        stop_agent(a);
    }
    let _ = std::fs::remove_file(&table);
    result
}

pub(crate) fn chain_spec(cfg: &DemoConfig, backend: BackendSpec, prefix: &str) -> ChainSpec {
    ChainSpec {
        exe: cfg.exe.clone(),
        tier_args: cfg.tier_args.clone(),
        tiers: cfg.tiers,
        backend,
        log_dir: cfg.out.join("logs"),
        log_prefix: prefix.to_string(),
    }
}

pub(crate) fn loadgen_config(cfg: &DemoConfig, chain: &Chain) -> LoadgenConfig {
    LoadgenConfig {
        uri: chain.entry.clone(),
        timeout: cfg.timeout,
        max_in_flight: 4096,
        rt_priority: generator_priority(),
    }
}

/// The generator runs above the kernel backend's job band (as the tiers' I/O
/// threads do), in every mode alike, when the privilege is there.
fn generator_priority() -> Option<i32> {
    has_cap_sys_nice().then_some(tailor_runtime::kernel::IO_PRIORITY)
}

/// Why the kernel-enforced modes cannot run here, if they cannot.
pub fn kernel_unavailable(cfg: &DemoConfig) -> Option<String> {
    if !has_cap_sys_nice() {
        return Some(
            "no CAP_SYS_NICE (kernel-enforced scheduling sets SCHED_FIFO priorities); run as root or grant the capability"
                .into(),
        );
    }
    if cfg.cores > tailor_runtime::available_cpus() {
        return Some(format!(
            "--cores {} exceeds the {} CPUs this process may use",
            cfg.cores,
            tailor_runtime::available_cpus()
        ));
    }
    None
}

/// Other processes' CPUs during a run (`CpuUsage::background_cpus`) from which the run is
/// taken as disturbed and run again. A quiet machine reads ~0.0; at ρ 0.85 a fifth of a
/// CPU taken by a build or a copy turned a linux run's p99 from ~50 ms into 746 ms.
const DISTURBED_BACKGROUND_CPUS: f64 = 0.1;
/// How many times a disturbed run is run again at most (the quietest attempt is kept).
const RERUNS_WHEN_DISTURBED: u32 = 2;
/// Runs in a row whose reruns were all disturbed, after which reruns stop.
const BUSY_THROUGHOUT_AFTER: u32 = 3;

/// `point`: the run's workload, load, rate and seed; `files`: the runs directory and the
/// stem its agent and tier logs were written under (a rerun's differs from the run's).
fn finish_run(
    cfg: &DemoConfig,
    mode: Mode,
    point: (Workload, f64, f64, u64),
    calibration: &Calibration,
    records: &[crate::record::RequestRecord],
    cpu: CpuUsage,
    files: (&Path, &str),
) -> Result<RunResult, DemoError> {
    let (w, load, rate, seed) = point;
    let (runs_dir, log_stem) = files;
    let requests_run = records.len().max(1) as f64;
    let mean_demand_us = records.iter().map(|r| r.total_demand_ns() as f64 / 1e3).sum::<f64>() / requests_run;
    let summary = summarize(records, cfg.warmup, cfg.tiers as u32, cfg.cores);
    let stem = run_stem(mode, w, load);
    let hist = histogram_us(&measured_latencies(records, cfg.warmup));
    write_file(&runs_dir.join(format!("{stem}.hgrm")), &percentile_distribution(&hist))?;
    write_file(&runs_dir.join(format!("{stem}.csv")), &records_csv(records, cfg.warmup))?;
    // The model charges each run the CPU per request that run was measured to cost beyond
    // the demand (its own backend's overhead: the kernel modes' agent wake-ups and priority
    // changes cost ~0.3 ms more per request than the zero-demand calibration, which made
    // their predictions optimistic); the calibration's value only if that reading is unusable.
    let overhead_per_request_us = cpu.cpu_per_request_us - mean_demand_us;
    let model_overhead_us =
        if overhead_per_request_us > 0.0 { overhead_per_request_us } else { calibration.overhead_us };
    // The gate's hand-off: measured by the tiers in this run (their last log line).
    let logs_dir = cfg.out.join("logs");
    let tiers = TierStats::sum((0..cfg.tiers).filter_map(|i| {
        let log = logs_dir.join(format!("{log_stem}-tier{i}.log"));
        TierStats::from_log(&std::fs::read_to_string(log).ok()?)
    }));
    let handoff_wakeup_us = tiers.handoff_wakeup_us();
    let agent = mode
        .kernel_enforced()
        .then(|| std::fs::read_to_string(logs_dir.join(format!("{log_stem}-agent.log"))).ok())
        .flatten()
        .and_then(|text| AgentReport::from_log(&text));
    let agent_cpu_per_rotation_us =
        agent.filter(|a| a.rotations > 0).map(|a| a.cpu_ns as f64 / a.rotations as f64 / 1e3);
    let mut model = cfg.model(mode);
    if let (Some(gate), Some(us)) = (&mut model.admit, handoff_wakeup_us) {
        gate.handoff_us = us;
    }
    // A mode whose agent rotates the band pays the agent's CPU per slice, not per request:
    // the model charges its CPU per rotation to every re-dispatch of a preempted task and
    // takes the same CPU out of the per-request overhead (which measured it too).
    let (context_switch_us, model_overhead_us) = match (agent, agent_cpu_per_rotation_us) {
        (Some(a), Some(per_rotation_us)) => {
            (per_rotation_us, (model_overhead_us - a.cpu_ns as f64 / 1e3 / requests_run).max(0.0))
        }
        _ => (1.0, model_overhead_us),
    };
    let spec = PredictSpec {
        name: format!("demo-{stem}"),
        model,
        workload: w,
        mean_ms: cfg.mean_ms,
        tiers: cfg.tiers,
        cores: cfg.cores,
        rps: if summary.offered_rps > 0.0 { summary.offered_rps } else { rate },
        seed,
        requests: cfg.requests as u64,
        warmup: cfg.warmup as u64,
        hop_us: calibration.hop_us,
        overhead_us: model_overhead_us,
        context_switch_us,
    };
    let (p99, band, mean, reord, err) = match predict::predict_runs_like(&spec, PREDICTION_RUNS) {
        Ok(p) => (Some(p.p99_ms), Some(p.p99_band_ms), Some(p.mean_ms), Some(p.reordering_pct), None),
        Err(e) => (None, None, None, None, Some(e)),
    };
    let mut result = RunResult {
        mode,
        mode_name: mode.name(),
        workload: w.to_string(),
        load,
        demand_utilization: rate * cfg.mean_total_demand_ns(w) / 1e9 / cfg.cores as f64,
        effective_utilization: summary.offered_rps * cpu.cpu_per_request_us / 1e6 / cfg.cores as f64,
        target_rps: rate,
        seed,
        requests: cfg.requests,
        warmup: cfg.warmup,
        tiers: cfg.tiers,
        cores: cfg.cores,
        summary,
        overhead_per_request_us,
        handoffs_per_request: tiers.handoffs as f64 / requests_run,
        handoff_us: (tiers.handoffs > 0).then(|| tiers.handoff_ns as f64 / tiers.handoffs as f64 / 1e3),
        handoff_wakeup_us,
        agent_rotations_per_request: agent.map(|a| a.rotations as f64 / requests_run),
        agent_cpu_per_rotation_us,
        cpu,
        predicted_p99_ms: p99,
        predicted_p99_band_ms: band,
        predicted_mean_ms: mean,
        predicted_reordering_pct: reord,
        predicted_error: err,
        disturbed_runs: 0,
        files: vec![
            format!("runs/{stem}.json"),
            format!("runs/{stem}.csv"),
            format!("runs/{stem}.hgrm"),
            format!("runs/{stem}.toml"),
        ],
    };
    // The predicted scenario as a file `tailor sim` runs, for a user to vary.
    if let Some(toml) = predict::scenario(&spec).ok().and_then(|l| l.scenario.to_toml().ok()) {
        write_file(&runs_dir.join(format!("{stem}.toml")), &toml)?;
    }
    write_file(&runs_dir.join(format!("{stem}.json")), &serde_json::to_string_pretty(&result).expect("serializes"))?;
    result.files.sort();
    Ok(result)
}
