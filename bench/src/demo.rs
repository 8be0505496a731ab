//! `tailor demo`: the N-tier chain on loopback under every scheduling mode at
//! several loads, side by side in one invocation, each run next to the
//! simulator's prediction and the ideal G/G/c FIFO distribution.
//!
//! Every mode at a given (workload, load) sees the very same requests: the
//! arrival times and demands come from a seed derived from the run's seed,
//! the workload and the load, never from the mode.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use tailor_core::policy::{keyed, KeyField};
use tailor_core::{Nanos, PolicySpec, Progress, Rng};
use tailor_runtime::{BackendSpec, Park};
use tailor_sim::plot::{line_plot_styled, Line, Series};
use tailor_sim::report::table;
use tailor_sim::scenario::{AdmitOrder, AdmitSpec};

use crate::chain::{has_cap_sys_nice, stop_child, Chain, ChainSpec};
use crate::cpuacct::{self, CpuUsage};
use crate::hgrm::{histogram_us, percentile_distribution};
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::predict::{self, ModeModel, PredictSpec};
use crate::record::{measured_latencies, records_csv, summarize, RunSummary};
use crate::workload::Workload;

/// A way of scheduling the chain's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Linux default: every request on its own thread at once (backend `none`).
    Linux,
    /// A local FIFO pool per tier: at most `cores` jobs admitted, in local arrival order.
    Fifo,
    /// Kernel-enforced round-robin over every job, short slice (Shinjuku-like).
    Rr,
    /// ORF cooperatively: each tier admits at most `orf_c` jobs, oldest GAT first.
    OrfCoop,
    /// ORF kernel-enforced by key ordering: one node-wide `tailor agent --enforce
    /// priority` for all tiers; each job takes a SCHED_FIFO level from its GAT and the
    /// kernel runs the `orf_c` (= cores) oldest.
    Orf,
    /// ORF kernel-enforced through the agent's band (`--enforce band`: the agent runs the
    /// policy and moves jobs in and out of a SCHED_FIFO band). Not in the default set: the
    /// design before key ordering, for side-by-side runs.
    OrfBand,
    /// `orf-band` with the band's earlier parking (`park = "idle"`: a waiting job is
    /// parked at SCHED_IDLE, not blocked). Not in the default set: for side-by-side runs.
    OrfParkIdle,
    /// `orf-band` whose `c` the adaptive controller tunes (`tailor agent --policy
    /// orf-adaptive`, docs/policies.md "Adaptive c"). Not in the default set: for
    /// side-by-side runs against `orf-band`.
    OrfAdaptive,
}

impl Mode {
    pub const ALL: [Mode; 8] = [
        Mode::Linux,
        Mode::Fifo,
        Mode::Rr,
        Mode::OrfCoop,
        Mode::Orf,
        Mode::OrfBand,
        Mode::OrfParkIdle,
        Mode::OrfAdaptive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Linux => "linux",
            Mode::Fifo => "fifo",
            Mode::Rr => "rr",
            Mode::OrfCoop => "orf-coop",
            Mode::Orf => "orf",
            Mode::OrfParkIdle => "orf-park-idle",
            Mode::OrfBand => "orf-band",
            Mode::OrfAdaptive => "orf-adaptive",
        }
    }

    /// Needs the kernel backend (CAP_SYS_NICE and the agent).
    pub fn kernel_enforced(self) -> bool {
        matches!(self, Mode::Rr | Mode::Orf | Mode::OrfBand | Mode::OrfParkIdle | Mode::OrfAdaptive)
    }

    pub fn parse(s: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mode `{s}`; use one of {}", names.join(", "))
        })
    }
}

/// Everything `tailor demo` runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The `tailor` binary; tiers run as `<exe> <tier_args…>`, the agent as `<exe> <agent_args…>`.
    pub exe: PathBuf,
    pub tier_args: Vec<String>,
    pub agent_args: Vec<String>,
    /// Tiers in the chain.
    pub tiers: usize,
    /// CPUs the chain shares (the machine's): ρ and the ideal use it.
    pub cores: usize,
    /// Mean CPU demand per tier of the paper's 10 ms workloads, after scaling (ms).
    pub mean_ms: f64,
    pub workloads: Vec<Workload>,
    /// Utilizations ρ = λ · E[total demand] / cores.
    pub loads: Vec<f64>,
    pub modes: Vec<Mode>,
    /// Measured requests per run, after `warmup` unmeasured ones.
    pub requests: usize,
    pub warmup: usize,
    pub seed: u64,
    pub out: PathBuf,
    /// `c` of ORF (both modes).
    pub orf_c: usize,
    /// Time slice of the kernel-enforced modes (µs).
    pub slice_us: f64,
    /// `orf` (key ordering): the GAT span of one SCHED_FIFO level (µs).
    pub bucket_us: f64,
    /// Replay arrival times from this CSV (`arrival_ms` column), rescaled to each load.
    pub trace: Option<PathBuf>,
    /// Requests without a response after this long count as timeouts.
    pub timeout: Duration,
    /// The caller holds CPU idle states off for the whole demo (recorded, not applied here).
    pub idle_states_off: bool,
}

impl DemoConfig {
    /// Mean total CPU demand of a request (ns).
    pub fn mean_total_demand_ns(&self, w: Workload) -> f64 {
        let d = w.dist(self.mean_ms).build(Path::new(".")).expect("built-in workloads are valid");
        d.mean_ns() * self.tiers as f64
    }

    /// Arrival rate for utilization `rho` of the shared CPUs:
    /// λ = ρ · cores / (E[total demand] + the chain's own CPU per request),
    /// so ρ is how busy the CPUs really are (docs/demo.md, "Workloads and load").
    pub fn rate_for(&self, w: Workload, rho: f64, overhead_ns: f64) -> f64 {
        rho * self.cores as f64 / ((self.mean_total_demand_ns(w) + overhead_ns) / 1e9)
    }

    /// The runtime backend of `mode` (`table`: the agent's table for kernel modes).
    pub fn backend(&self, mode: Mode, table: &Path) -> BackendSpec {
        match mode {
            Mode::Linux => BackendSpec::None,
            Mode::Fifo => BackendSpec::Cooperative { policy: PolicySpec::Fifo, c: self.cores },
            Mode::OrfCoop => BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: self.orf_c },
            Mode::Rr | Mode::Orf | Mode::OrfBand | Mode::OrfAdaptive => BackendSpec::kernel(table),
            Mode::OrfParkIdle => {
                let mut spec = BackendSpec::kernel(table);
                if let BackendSpec::Kernel { park, .. } = &mut spec {
                    *park = Park::Idle;
                }
                spec
            }
        }
    }

    /// `orf-adaptive` with its defaults (`c_max` 64, 2,000-job windows) and the kernel
    /// modes' slice: what the `orf-adaptive` mode's agent runs.
    pub fn adaptive_policy(&self) -> PolicySpec {
        let defaults = tailor_runtime::kernel::AdaptiveArgs::default();
        PolicySpec::OrfAdaptive { c_max: defaults.c_max, slice_us: self.slice_us, window_jobs: defaults.window_jobs }
    }

    /// How the simulator models `mode`. Linux's EEVDF is modelled as `fair`
    /// with its base slice, 0.75 ms · (1 + log2 CPUs) as the kernel scales it.
    pub fn model(&self, mode: Mode) -> ModeModel {
        let linux_slice_ms = 0.75 * (1.0 + (self.cores as f64).log2().floor());
        let linux = PolicySpec::Fair { min_granularity_ms: linux_slice_ms, latency_ms: linux_slice_ms };
        match mode {
            Mode::Linux => ModeModel { host_policy: linux, admit: None },
            Mode::Fifo => {
                ModeModel { host_policy: linux, admit: Some(AdmitSpec { kind: AdmitOrder::Fifo, c: self.cores }) }
            }
            Mode::OrfCoop => {
                ModeModel { host_policy: linux, admit: Some(AdmitSpec { kind: AdmitOrder::Gfifo, c: self.orf_c }) }
            }
            Mode::Rr => ModeModel { host_policy: PolicySpec::Rr { slice_us: self.slice_us }, admit: None },
            Mode::OrfBand | Mode::OrfParkIdle => {
                ModeModel { host_policy: PolicySpec::Orf { c: self.orf_c, slice_us: self.slice_us }, admit: None }
            }
            // What the agent enforces for `--policy orf --c orf_c --enforce priority
            // --bucket-us bucket_us` on these CPUs: core's key ordering by GAT, the same
            // bucket and level count. (An `orf_c` other than the CPU count makes the agent
            // refuse to start, so no run of this mode is ever predicted with that.)
            Mode::Orf => {
                let orf = PolicySpec::Orf { c: self.orf_c, slice_us: self.slice_us };
                let key = keyed::key_field_of(&orf, self.cores).unwrap_or(KeyField::Gat);
                ModeModel { host_policy: PolicySpec::Keyed { key, bucket_us: self.bucket_us }, admit: None }
            }
            Mode::OrfAdaptive => ModeModel { host_policy: self.adaptive_policy(), admit: None },
        }
    }
}

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
    /// The simulator's p99 / mean / reordering % for this run (None if it failed; see `predicted_error`).
    pub predicted_p99_ms: Option<f64>,
    pub predicted_mean_ms: Option<f64>,
    pub predicted_reordering_pct: Option<f64>,
    pub predicted_error: Option<String>,
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
    /// End-to-end p50, µs.
    pub p50_us: f64,
    /// CPU time per request of all the demo's processes, µs (the simulator adds it as a CPU stage).
    pub overhead_us: f64,
    /// Latency per hop beyond that CPU, µs (the simulator's fixed network delay).
    pub hop_us: f64,
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
        "unloaded chain with zero demand: p50 {:.0} µs end to end; {:.0} µs of CPU per request (all processes); {:.0} µs per hop of latency beyond that ({} hops)",
        calibration.p50_us,
        calibration.overhead_us,
        calibration.hop_us,
        cfg.tiers + 1
    ));

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
    // Point-major order: at each (workload, load) every mode runs back to back
    // with a fresh chain, so background load on a shared machine (which comes
    // and goes) hits the modes alike instead of one mode's whole sweep.
    for (wi, &w) in cfg.workloads.iter().enumerate() {
        for (li, &load) in cfg.loads.iter().enumerate() {
            let rate = cfg.rate_for(w, load, calibration.overhead_us * 1e3);
            let seed = point_seed(cfg.seed, wi, li);
            let plan = plan_for(cfg, w, rate, seed)?;
            for &mode in &cfg.modes {
                if skipped.iter().any(|s| s.mode == mode.name()) {
                    continue;
                }
                match run_mode(cfg, mode, &plan, &logs_dir, &run_stem(mode, w, load)) {
                    Ok((records, usage)) => {
                        let result =
                            finish_run(cfg, mode, w, load, rate, seed, &calibration, &records, usage, &runs_dir)?;
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
    let n = 400;
    let plan = zero_demand(n);
    let before = cpuacct::snapshot(&chain.pids());
    let records = loadgen::run(&plan, &loadgen_config(cfg, &chain))?;
    let cpu = cpuacct::usage(&before, &cpuacct::snapshot(&chain.pids()), n);
    drop(chain);
    let s = summarize(&records, 20, cfg.tiers as u32, cfg.cores);
    let hops = (cfg.tiers + 1) as f64;
    Ok(Calibration {
        overhead_us: cpu.cpu_per_request_us,
        hop_us: ((s.latency_ms.p50 * 1e3 - cpu.cpu_per_request_us) / hops).max(0.0),
        p50_us: s.latency_ms.p50 * 1e3,
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

#[allow(clippy::too_many_arguments)]
fn finish_run(
    cfg: &DemoConfig,
    mode: Mode,
    w: Workload,
    load: f64,
    rate: f64,
    seed: u64,
    calibration: &Calibration,
    records: &[crate::record::RequestRecord],
    cpu: CpuUsage,
    runs_dir: &Path,
) -> Result<RunResult, DemoError> {
    let mean_demand_us =
        records.iter().map(|r| r.total_demand_ns() as f64 / 1e3).sum::<f64>() / records.len().max(1) as f64;
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
    let spec = PredictSpec {
        name: format!("demo-{stem}"),
        model: cfg.model(mode),
        workload: w,
        mean_ms: cfg.mean_ms,
        tiers: cfg.tiers,
        cores: cfg.cores,
        rps: if summary.offered_rps > 0.0 { summary.offered_rps } else { rate },
        seed,
        requests: (cfg.requests as u64).max(20_000),
        warmup: (cfg.warmup as u64).max(2_000),
        hop_us: calibration.hop_us,
        overhead_us: model_overhead_us,
        context_switch_us: 1.0,
    };
    let (p99, mean, reord, err) = match predict::predict(&spec) {
        Ok(s) => (Some(s.latency_ms.p99), Some(s.latency_ms.mean), Some(s.reordering_pct), None),
        Err(e) => (None, None, None, Some(e)),
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
        cpu,
        predicted_p99_ms: p99,
        predicted_mean_ms: mean,
        predicted_reordering_pct: reord,
        predicted_error: err,
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

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn errors(s: &RunSummary) -> u64 {
    s.http_errors + s.timeouts + s.transport_errors + s.dropped
}

fn row_line(r: &RunResult) -> String {
    let s = &r.summary;
    format!(
        "{:<8} {:<9} ρ={:.2} (effective {:.2}) {:>5.0} req/s  p50 {:>7.2}  p99 {:>7.2} (sim {:>7})  p99.9 {:>7.2}  mean {:>6.2} ms  reorder {:>4.1}%  errors {}  background {:.1} CPUs  overhead {:.0} µs/req",
        r.mode_name,
        r.workload,
        r.load,
        r.effective_utilization,
        s.offered_rps,
        s.latency_ms.p50,
        s.latency_ms.p99,
        fmt_opt(r.predicted_p99_ms, 2),
        s.latency_ms.p999,
        s.latency_ms.mean,
        s.reordering_pct,
        errors(s),
        r.cpu.background_cpus,
        r.overhead_per_request_us
    )
}

/// The results table (plain text, one row per run).
pub fn results_table(report: &DemoReport) -> String {
    let header = [
        "mode",
        "workload",
        "ρ",
        "eff ρ",
        "req/s",
        "p50 ms",
        "p99 ms",
        "sim p99",
        "p99/sim",
        "p99.9 ms",
        "mean ms",
        "thr req/s",
        "reorder %",
        "p99/ideal",
        "errors",
        "bg CPUs",
    ];
    let rows: Vec<Vec<String>> = report
        .runs
        .iter()
        .map(|r| {
            let s = &r.summary;
            vec![
                r.mode_name.to_string(),
                r.workload.clone(),
                format!("{:.2}", r.load),
                format!("{:.2}", r.effective_utilization),
                format!("{:.0}", s.offered_rps),
                format!("{:.2}", s.latency_ms.p50),
                format!("{:.2}", s.latency_ms.p99),
                fmt_opt(r.predicted_p99_ms, 2),
                fmt_opt(r.predicted_p99_ms.map(|p| s.latency_ms.p99 / p), 2),
                format!("{:.2}", s.latency_ms.p999),
                format!("{:.2}", s.latency_ms.mean),
                format!("{:.0}", s.throughput_rps),
                format!("{:.1}", s.reordering_pct),
                format!("{:.2}", s.ideal.ratio.p99),
                errors(s).to_string(),
                format!("{:.2}", r.cpu.background_cpus),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// For each workload at the highest load: orf's p99 change versus linux and
/// fifo, and whether the project's goals are met (≥ 40% below linux, ≥ 25% below
/// fifo; docs/demo.md says where they come from).
pub fn verdict(report: &DemoReport) -> String {
    let mut s = String::new();
    let mut workloads: Vec<&str> = report.runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let top = report.runs.iter().filter(|r| r.workload == w).map(|r| r.load).fold(0.0, f64::max);
        let at = |m: &str| report.runs.iter().find(|r| r.workload == w && r.load == top && r.mode_name == m);
        let Some(orf) = at("orf").or_else(|| at("orf-coop")) else { continue };
        for base in ["linux", "fifo"] {
            let Some(b) = at(base) else { continue };
            let cut = 100.0 * (1.0 - orf.summary.latency_ms.p99 / b.summary.latency_ms.p99);
            let target = if base == "linux" { 40.0 } else { 25.0 };
            let _ = writeln!(
                s,
                "- {w}, ρ={top:.2}: {} p99 {:.2} ms vs {base} {:.2} ms: {cut:+.0}% cut (goal ≥ {target:.0}%: {}); reordering {:.1}% vs {:.1}%; mean {:.2} vs {:.2} ms; throughput {:.0} vs {:.0} req/s",
                orf.mode_name,
                orf.summary.latency_ms.p99,
                b.summary.latency_ms.p99,
                if cut >= target { "met" } else { "not met" },
                orf.summary.reordering_pct,
                b.summary.reordering_pct,
                orf.summary.latency_ms.mean,
                b.summary.latency_ms.mean,
                orf.summary.throughput_rps,
                b.summary.throughput_rps,
            );
        }
    }
    s
}

fn report_markdown(cfg: &DemoConfig, report: &DemoReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tailor demo\n");
    let _ = writeln!(
        s,
        "{} tiers on loopback sharing {} CPUs; per-tier demand = TailClipper §5.1's workloads scaled to a {} ms mean; seed {}; {} measured requests per run after {} warm-up. ρ = λ·(E[total demand] + the chain's own CPU per request)/CPUs: how busy the CPUs are. Latency from the intended send time (open loop). Reordering % as in docs/metrics.md. `sim p99`: the same chain simulated at the measured rate (runs/*.toml); `p99/ideal`: measured / the G/G/{} FIFO recursion fed with the measured arrivals and demands.\n",
        report.tiers, report.cores, report.mean_ms_per_tier, report.seed, cfg.requests, cfg.warmup, report.cores
    );
    let _ = writeln!(
        s,
        "Load generator alone: {:.0} req/s completed of {:.0} offered (p99 send lag {:.0} µs). The chain with zero demand, unloaded: p50 {:.0} µs, {:.0} µs of CPU per request (the simulator adds it as a CPU stage on the shared host), {:.0} µs per hop beyond it (the simulator's network delay). `bg CPUs`: CPUs' worth used by other processes during the run (a quiet machine has ~0). CPU idle states: {}.\n",
        report.generator_max_rps, report.generator_offered_rps, report.generator_p99_lag_us, report.calibration.p50_us, report.calibration.overhead_us, report.calibration.hop_us,
        if report.idle_states == "off" { "off (/dev/cpu_dma_latency held at 0: idle CPUs poll)" } else { "the machine's" }
    );
    let _ = writeln!(
        s,
        "ORF: c = {}. `orf` is kernel-enforced by key ordering (each job at a SCHED_FIFO level from its GAT, {} µs of GAT per level); `orf-band` and `rr` through the agent's band, slice {} µs; `orf-coop` cooperatively (docs/runtime.md).\n",
        report.orf_c, report.bucket_us, report.slice_us
    );
    let _ = writeln!(s, "```\n{}```\n", results_table(report));
    for sk in &report.skipped {
        let _ = writeln!(s, "Skipped `{}`: {}\n", sk.mode, sk.reason);
    }
    let v = verdict(report);
    if !v.is_empty() {
        let _ = writeln!(s, "## ORF against the Linux default and a FIFO pool (highest load)\n\n{v}");
    }
    for w in &cfg.workloads {
        let _ = writeln!(s, "![p99 vs load, {w}](p99-{w}.svg)\n");
    }
    let _ = writeln!(s, "Per run: `runs/<mode>-<workload>-rho<ρ>.{{json,csv,hgrm,toml}}`; all runs: `demo.json`; each run's tier and agent logs: `logs/<mode>-<workload>-rho<ρ>-*.log`. Took {:.0} s.", report.wall_seconds);
    s
}

fn plot(report: &DemoReport, w: Workload) -> String {
    let mut series = Vec::new();
    // Each mode once, in the order the runs came (they interleave across loads).
    let mut modes: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !modes.contains(&r.mode_name) {
            modes.push(r.mode_name);
        }
    }
    for m in modes {
        let pts = |f: &dyn Fn(&RunResult) -> Option<f64>| -> Vec<(f64, f64)> {
            report
                .runs
                .iter()
                .filter(|r| r.mode_name == m && r.workload == w.name())
                .filter_map(|r| f(r).map(|y| (r.load, y)))
                .collect()
        };
        series.push(Series::new(m, pts(&|r| Some(r.summary.latency_ms.p99))));
        series.push(Series::new(m, pts(&|r| r.predicted_p99_ms)).styled(Line::Dashed));
    }
    line_plot_styled(
        &format!("tailor demo: p99 vs load, {w}"),
        "utilization ρ",
        "p99 latency (ms)",
        &series,
        &[(Line::Solid, "measured"), (Line::Dashed, "simulated")],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cores: usize) -> DemoConfig {
        DemoConfig {
            exe: PathBuf::from("tailor"),
            tier_args: vec![],
            agent_args: vec![],
            tiers: 3,
            cores,
            mean_ms: 1.0,
            workloads: vec![Workload::Exp],
            loads: vec![0.5],
            modes: Mode::ALL.to_vec(),
            requests: 1000,
            warmup: 100,
            seed: 1,
            out: PathBuf::from("out"),
            orf_c: cores,
            slice_us: 500.0,
            bucket_us: 2000.0,
            trace: None,
            timeout: Duration::from_secs(1),
            idle_states_off: false,
        }
    }

    /// Each mode is predicted by the policy it runs: `orf` by the key ordering its agent
    /// enforces (same key, bucket and level count), the band modes by the policy their
    /// agent runs, the cooperative ones by their gate's policy on Linux's scheduler.
    #[test]
    fn every_mode_is_predicted_by_the_policy_it_runs() {
        let cfg = config(2);
        let orf = cfg.model(Mode::Orf);
        assert_eq!(orf.host_policy, PolicySpec::Keyed { key: KeyField::Gat, bucket_us: 2000.0 });
        assert_eq!(orf.admit, None);
        // The agent decides the key the same way (`--policy orf --c 2 --cpus 2`).
        let agent_key = tailor_runtime::kernel::Enforce::key_of(&PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2);
        assert_eq!(agent_key, Ok(KeyField::Gat as u32));
        for mode in [Mode::OrfBand, Mode::OrfParkIdle] {
            assert_eq!(cfg.model(mode).host_policy, PolicySpec::Orf { c: 2, slice_us: 500.0 });
        }
        assert_eq!(cfg.model(Mode::Rr).host_policy, PolicySpec::Rr { slice_us: 500.0 });
        assert_eq!(cfg.model(Mode::OrfCoop).admit, Some(AdmitSpec { kind: AdmitOrder::Gfifo, c: 2 }));
        assert_eq!(cfg.model(Mode::Fifo).admit, Some(AdmitSpec { kind: AdmitOrder::Fifo, c: 2 }));
        // The cooperative gates are the backends those modes run.
        let table = Path::new("/dev/shm/unused");
        for mode in [Mode::OrfCoop, Mode::Fifo] {
            let BackendSpec::Cooperative { policy, c } = cfg.backend(mode, table) else { panic!("{mode:?}") };
            assert_eq!(cfg.model(mode).admit.map(|a| (a.kind.policy(), a.c)), Some((policy, c)), "{mode:?}");
        }
    }

    #[test]
    fn every_mode_parses_from_its_name_and_orf_adaptive_is_kernel_enforced() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Ok(m));
        }
        assert_eq!(Mode::parse("orf-adaptive"), Ok(Mode::OrfAdaptive));
        assert!(Mode::OrfAdaptive.kernel_enforced());
        assert!(Mode::parse("orf-adaptiv").unwrap_err().contains("orf-adaptive"));
    }
}
