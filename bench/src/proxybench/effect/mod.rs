//! The sidecar's effect on a chain it does not change: edge → Go → Python → Go, plain
//! services that burn the CPU demand each request carries and forward `baggage` to their
//! next hop, with no sidecars, with one sidecar per tier admitting `c` at a time in FIFO
//! order, with sidecars admitting by GAT (orf), and with orf sidecars whose first keeps a
//! request's slot while the rest of the chain serves it (`orf-chain`: the `c` oldest
//! requests in the whole chain at once). The same requests (Poisson arrivals,
//! TailClipper's Exp and Trimodal demands) go to each chain in turn at each load and seed,
//! and each run is printed beside the simulator's prediction for a run like it — the median
//! p99 of 30 simulated runs of the same length, and their 10–90% band, as `tailor demo`
//! does (the sidecar modelled as the simulator's cooperative `admit` gate, the whole-chain
//! gate as its `orf` host policy; bench/src/predict.rs).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use http::Uri;
use serde::Serialize;
use tailor_core::{Nanos, PolicySpec, Progress};
use tailor_sim::scenario::{AdmitOrder, AdmitSpec};

use super::{load_average, sampling_limit, LimitSeen, Processes, Programs};
use crate::cpuacct::{self, CpuUsage};
use crate::demo::{plan_for, DemoConfig, Mode};
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::polyglot::{address_in, free_port, http_get};
use crate::predict::{self, ModeModel, PredictSpec};
use crate::record::{summarize, RunSummary};
use crate::workload::Workload;

mod report;
pub use report::{cpu_table, plot, table, verdict, write};

/// Tiers behind the edge: Go, Python, Go.
pub const TIERS: usize = 3;
/// Each tier's service, by the name its process runs under.
const SERVICES: [&str; TIERS] = ["go-0", "python", "go-2"];

/// What sits in front of each tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sidecars {
    /// The services call each other directly; every request runs at once.
    None,
    /// A sidecar per tier, `c` inside at a time, local arrival order.
    Fifo,
    /// A sidecar per tier, `c` inside at a time, oldest GAT first.
    Orf,
    /// As `Orf`, but the first sidecar keeps a request's slot until its response ends
    /// (`release_on_egress = false`): the `c` oldest requests are in the chain at once.
    OrfChain,
    /// The whole-chain gate alone: `OrfChain`'s first sidecar and no other. The services
    /// behind it call each other directly, forwarding `baggage`; only the first sidecar
    /// orders anything in `OrfChain`, and each other sidecar costs CPU on the same host.
    OrfFirst,
}

impl Sidecars {
    pub const ALL: [Sidecars; 5] =
        [Sidecars::None, Sidecars::Fifo, Sidecars::Orf, Sidecars::OrfChain, Sidecars::OrfFirst];

    pub fn name(self) -> &'static str {
        match self {
            Sidecars::None => "none",
            Sidecars::Fifo => "fifo",
            Sidecars::Orf => "orf",
            Sidecars::OrfChain => "orf-chain",
            Sidecars::OrfFirst => "orf-first",
        }
    }

    /// Whether the first sidecar keeps a request's slot until its response ends.
    pub fn gates_whole_chain(self) -> bool {
        matches!(self, Sidecars::OrfChain | Sidecars::OrfFirst)
    }

    /// Whether tier `tier`'s service has a sidecar in front of it.
    pub fn at_tier(self, tier: usize) -> bool {
        match self {
            Sidecars::None => false,
            Sidecars::OrfFirst => tier == 0,
            Sidecars::Fifo | Sidecars::Orf | Sidecars::OrfChain => true,
        }
    }

    /// The sidecars' `order`.
    fn order(self) -> &'static str {
        match self {
            Sidecars::Fifo => "fifo",
            Sidecars::None | Sidecars::Orf | Sidecars::OrfChain | Sidecars::OrfFirst => "orf",
        }
    }

    pub fn parse(s: &str) -> Result<Sidecars, String> {
        Sidecars::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown sidecars `{s}`; use none, fifo, orf, orf-chain or orf-first"))
    }

    /// How the simulator models it: Linux's scheduler on the host and, with sidecars, the
    /// cooperative gate at each tier (`gfifo` is ORF's admission by GAT). The whole-chain
    /// gate is the `orf` host policy: the `c` oldest requests share the CPUs, the others
    /// wait (a request has one task at a time in this chain, so its `c` oldest tasks are
    /// its `c` oldest requests).
    fn model(self, demo: &DemoConfig, c: usize) -> ModeModel {
        let host_policy = demo.model(Mode::Linux).host_policy;
        let admit = match self {
            Sidecars::None => None,
            Sidecars::Fifo => Some(AdmitSpec::new(AdmitOrder::Fifo, c)),
            Sidecars::Orf => Some(AdmitSpec::new(AdmitOrder::Gfifo, c)),
            Sidecars::OrfChain | Sidecars::OrfFirst => {
                return ModeModel { host_policy: PolicySpec::Orf { c, slice_us: demo.slice_us }, admit: None }
            }
        };
        ModeModel { host_policy, admit }
    }
}

/// Each sidecar's `c`: fixed, or left out of its configuration (the sidecar's adaptive
/// limit, what a service nobody profiled gets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SidecarC {
    Fixed(usize),
    Adaptive,
}

impl SidecarC {
    /// `adaptive` or a count ≥ 1.
    pub fn parse(s: &str) -> Result<SidecarC, String> {
        match s {
            "adaptive" => Ok(SidecarC::Adaptive),
            _ => match s.parse::<usize>() {
                Ok(c) if c > 0 => Ok(SidecarC::Fixed(c)),
                _ => Err(format!("`{s}` is not a `c`: use a count ≥ 1 or `adaptive` (the sidecar's own limit)")),
            },
        }
    }

    /// What the sidecar's configuration says (`None`: `c` left out).
    pub fn fixed(self) -> Option<usize> {
        match self {
            SidecarC::Fixed(c) => Some(c),
            SidecarC::Adaptive => None,
        }
    }
}

impl std::fmt::Display for SidecarC {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SidecarC::Fixed(c) => write!(f, "{c}"),
            SidecarC::Adaptive => f.write_str("adaptive"),
        }
    }
}

/// A running chain; dropping it stops every process (edge first).
pub struct ProxyChain {
    procs: Processes,
    pub sidecars: Sidecars,
    /// The edge's address.
    pub entry: Uri,
    /// Each sidecar's inbound and admin (/metrics) address, tier order (empty without sidecars).
    pub sidecar_addrs: Vec<String>,
    pub sidecar_admins: Vec<String>,
}

/// How to start a chain.
#[derive(Clone, Debug)]
pub struct ChainSpec {
    pub sidecars: Sidecars,
    /// Requests each sidecar lets into its service at once, per tier; `None`: the sidecar's
    /// adaptive limit (`c` left out of its configuration).
    pub c: [Option<usize>; TIERS],
    /// Worker processes of the Python tier.
    pub python_workers: usize,
    pub logs: PathBuf,
}

impl ProxyChain {
    /// Starts the last tier first, each service told the address it calls (its sidecar's
    /// egress listener, or the next service without sidecars), then the edge; returns once a
    /// request has gone through every tier.
    pub fn start(programs: &Programs, spec: &ChainSpec) -> Result<ProxyChain, String> {
        std::fs::create_dir_all(&spec.logs).map_err(|e| format!("creating {}: {e}", spec.logs.display()))?;
        let name = spec.sidecars.name();
        let log = |what: &str| spec.logs.join(format!("effect-{name}-{what}.log"));
        let with = spec.sidecars != Sidecars::None;
        let mut procs = Processes::default();
        // Inbound and egress ports of every sidecar, chosen up front: a service must know
        // its egress address before its sidecar starts.
        let mut ports = Vec::new();
        for _ in 0..TIERS {
            ports.push((free_port()?, free_port()?, free_port()?));
        }
        let mut next: Option<String> = None; // what the tier being started calls
        let mut sidecar_addrs = vec![String::new(); TIERS];
        let mut sidecar_admins = vec![String::new(); TIERS];
        for tier in (0..TIERS).rev() {
            let downstream = match (&next, spec.sidecars.at_tier(tier)) {
                (None, _) => String::new(),
                (Some(_), true) => format!("http://127.0.0.1:{}/", ports[tier].1),
                (Some(n), false) => format!("http://{n}/"),
            };
            let line = if tier == 1 {
                let mut py = Command::new(&programs.python);
                py.arg(&programs.python_service)
                    .args(["--port", "0", "--index", "1", "--workers", &spec.python_workers.to_string()])
                    .args(["--downstream", &downstream]);
                procs.start_printing(SERVICES[1], py, &log("tier1"), "listening on ")?
            } else {
                let mut go = Command::new(&programs.go_service);
                go.args(["-addr", "127.0.0.1:0", "-index", &tier.to_string(), "-downstream", &downstream]);
                procs.start_printing(SERVICES[tier], go, &log(&format!("tier{tier}")), "listening on ")?
            };
            let service = address_in(&line)?;
            if !spec.sidecars.at_tier(tier) {
                next = Some(service);
                continue;
            }
            let (listen, egress, admin) = ports[tier];
            // Only the first sidecar of an `orf-chain` keeps the slot: it bounds the whole
            // chain, so the ones behind it never queue.
            let release = !(spec.sidecars.gates_whole_chain() && tier == 0);
            let mut toml = format!(
                "listen = \"127.0.0.1:{listen}\"\nupstream = \"{service}\"\nadmin = \"127.0.0.1:{admin}\"\norder = \"{}\"\n{}release_on_egress = {release}\ndrain_timeout_ms = 100\n",
                spec.sidecars.order(),
                spec.c[tier].map_or(String::new(), |c| format!("c = {c}\n"))
            );
            if let Some(n) = &next {
                let _ = write!(toml, "\n[[egress]]\nlisten = \"127.0.0.1:{egress}\"\nupstream = \"{n}\"\n");
            }
            let conf = spec.logs.join(format!("effect-{name}-sidecar{tier}.toml"));
            std::fs::write(&conf, toml).map_err(|e| format!("writing {}: {e}", conf.display()))?;
            let mut sidecar = Command::new(&programs.tailor);
            sidecar.args(["proxy", "sidecar", "--config"]).arg(&conf);
            const SIDECARS: [&str; TIERS] = ["sidecar0", "sidecar1", "sidecar2"];
            procs.start_printing(SIDECARS[tier], sidecar, &log(&format!("sidecar{tier}")), "sidecar ready")?;
            sidecar_addrs[tier] = format!("127.0.0.1:{listen}");
            sidecar_admins[tier] = format!("127.0.0.1:{admin}");
            next = Some(sidecar_addrs[tier].clone());
        }
        let first = next.expect("three tiers started");
        let port = free_port()?;
        let conf = spec.logs.join(format!("effect-{name}-edge.toml"));
        let toml = format!(
            "listen = \"127.0.0.1:{port}\"\ndrain_timeout_ms = 100\n\n[[routes]]\nname = \"chain\"\nupstreams = [\"{first}\"]\n"
        );
        std::fs::write(&conf, toml).map_err(|e| format!("writing {}: {e}", conf.display()))?;
        let mut edge = Command::new(&programs.tailor);
        edge.args(["proxy", "edge", "--config"]).arg(&conf);
        procs.start_printing("edge", edge, &log("edge"), "edge ready")?;
        let chain = ProxyChain {
            procs,
            sidecars: spec.sidecars,
            entry: format!("http://127.0.0.1:{port}/").parse().expect("valid uri"),
            sidecar_addrs: if with { sidecar_addrs } else { Vec::new() },
            sidecar_admins: if with { sidecar_admins } else { Vec::new() },
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match chain.trace(&chain.entry, &[]) {
                Ok(hops) if hops.len() == TIERS => return Ok(chain),
                Ok(_) | Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                other => {
                    return Err(format!(
                        "the {name} chain does not answer through every tier: {other:?}; see {}",
                        spec.logs.display()
                    ))
                }
            }
        }
    }

    /// Sends one request to `to` (the edge, or a sidecar to enter the chain there) with
    /// `headers` (`tailor-demand-us` defaults to no demand) and returns each tier's line of
    /// the reply, first tier first.
    pub fn trace(&self, to: &Uri, headers: &[(&str, &str)]) -> Result<Vec<TierLine>, String> {
        let mut head = String::from("GET / HTTP/1.1\r\nhost: chain\r\nconnection: close\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(loadgen::DEMAND_HEADER)) {
            head.push_str(&format!("{}: 0,0,0\r\n", loadgen::DEMAND_HEADER));
        }
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        let (status, body) = http_get(to, &(head + "\r\n"))?;
        if status != 200 {
            return Err(format!("status {status}: {body}"));
        }
        body.lines().map(TierLine::parse).collect()
    }

    /// CPU time so far of each of the chain's processes (with the processes it forked: the
    /// Python tier's workers) and of this process (the load generator and the limit
    /// sampler, named `generator`), ns; and the snapshot of their sum (what
    /// `cpuacct::usage` compares), so that each process is read once.
    fn cpu_now(&self) -> (cpuacct::CpuSnapshot, Vec<(&'static str, u64)>) {
        let mut each: Vec<(&'static str, u64)> =
            self.procs.named_pids().into_iter().map(|(name, pid)| (name, cpuacct::tree_cpu_ns(pid))).collect();
        each.push(("generator", cpuacct::process_cpu_ns(std::process::id())));
        (cpuacct::snapshot_with(each.iter().map(|&(_, ns)| ns).sum()), each)
    }

    /// A gauge or counter of tier `tier`'s sidecar, from its /metrics.
    pub fn sidecar_metric(&self, tier: usize, name: &str) -> Result<f64, String> {
        super::metric(self.sidecar_admins.get(tier).ok_or("no sidecars")?, name)
    }
}

/// One tier's line of a reply: `tier <index> seq <n> baggage <what it got>`.
#[derive(Clone, Debug, PartialEq)]
pub struct TierLine {
    pub tier: usize,
    /// The order in which this tier (this worker, for Python) started serving it.
    pub seq: u64,
    /// The Tailor context in the `baggage` the service received, if any.
    pub context: Option<tailor_core::Context>,
}

impl TierLine {
    fn parse(line: &str) -> Result<TierLine, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("unexpected reply line `{line}`");
        if w.len() < 5 || w[0] != "tier" || w[2] != "seq" || w[4] != "baggage" {
            return Err(bad());
        }
        let tier = w[1].parse().map_err(|_| bad())?;
        let seq = w[3].parse().map_err(|_| bad())?;
        let baggage = w[5..].join(" ");
        let context = tailor_core::wire::extract([("baggage", baggage.as_bytes())])
            .map_err(|e| format!("{}: {e}", bad()))?
            .map(|d| d.context);
        Ok(TierLine { tier, seq, context })
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct EffectConfig {
    /// CPUs ρ is computed against.
    pub cores: usize,
    /// Sidecars' `c` (each tier).
    pub c: SidecarC,
    pub python_workers: usize,
    /// Mean CPU demand per tier (ms) of the scaled TailClipper workloads.
    pub mean_ms: f64,
    pub workloads: Vec<Workload>,
    pub loads: Vec<f64>,
    pub seeds: Vec<u64>,
    pub modes: Vec<Sidecars>,
    /// Measured requests per run, after `warmup` unmeasured ones.
    pub requests: usize,
    pub warmup: usize,
    /// The chain's own CPU per request ρ counts, µs; `None`: the costliest chain's, measured
    /// at zero demand. Fixing it gives runs with different `--sidecars` the same requests
    /// at a point (the rate, and so the arrivals, follow from it).
    pub rho_overhead_us: Option<f64>,
    pub out: PathBuf,
}

impl EffectConfig {
    fn demo(&self, programs: &Programs) -> DemoConfig {
        DemoConfig {
            exe: programs.tailor.clone(),
            tier_args: Vec::new(),
            agent_args: Vec::new(),
            tiers: TIERS,
            cores: self.cores,
            mean_ms: self.mean_ms,
            workloads: self.workloads.clone(),
            loads: self.loads.clone(),
            modes: vec![Mode::Linux],
            requests: self.requests,
            warmup: self.warmup,
            seed: 0,
            out: self.out.clone(),
            orf_c: self.c.fixed().unwrap_or(self.cores),
            slice_us: 500.0,
            bucket_us: 2_000.0,
            trace: None,
            timeout: Duration::from_secs(20),
            idle_states_off: false,
            overhead_us: None,
        }
    }
}

/// A chain's own cost at zero demand, unloaded.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub sidecars: Sidecars,
    /// CPU per request of every process of the chain and the generator, µs.
    pub overhead_us: f64,
    /// The same per process: where the chain's own CPU goes at zero demand.
    pub cpu_by_process_us: Vec<ProcessCpu>,
    pub p50_us: f64,
    /// Latency per hop beyond that CPU (the simulator's network delay), µs.
    pub hop_us: f64,
}

/// One process's CPU per request over a run, µs: a tier's service (`go-0`, `python`,
/// `go-2`, demand included), a sidecar, the edge, or the benchmark's own process
/// (`generator`: the load generator and the limit sampler).
#[derive(Clone, Debug, Serialize)]
pub struct ProcessCpu {
    pub process: &'static str,
    pub us: f64,
}

impl ProcessCpu {
    /// The tier whose demand this process burns, if it is a tier's service.
    pub fn tier(&self) -> Option<usize> {
        SERVICES.iter().position(|&s| s == self.process)
    }
}

/// Per process, the CPU time between two `ProxyChain::cpu_ns_by_process` readings per request, µs.
fn cpu_by_process_us(
    before: &[(&'static str, u64)],
    after: &[(&'static str, u64)],
    requests: usize,
) -> Vec<ProcessCpu> {
    before
        .iter()
        .zip(after)
        .map(|(&(process, b), &(_, a))| ProcessCpu {
            process,
            us: a.saturating_sub(b) as f64 / 1e3 / requests.max(1) as f64,
        })
        .collect()
}

/// One measured run and its prediction.
#[derive(Clone, Debug, Serialize)]
pub struct EffectRun {
    pub sidecars: Sidecars,
    pub workload: String,
    pub rho: f64,
    pub seed: u64,
    pub rate_rps: f64,
    pub summary: RunSummary,
    pub cpu: CpuUsage,
    /// CPU per request beyond the demand in this run, µs (what the model charges).
    pub overhead_us: f64,
    /// CPU per request of each process, µs, and the mean demand each tier burned per
    /// request, µs (tier order): a tier's CPU less its demand is what it cost beyond it.
    pub cpu_by_process_us: Vec<ProcessCpu>,
    pub mean_demand_us: [f64; TIERS],
    /// The first sidecar's concurrency limit over the run (sampled every 250 ms).
    pub limit: Option<LimitSeen>,
    /// The `c` the prediction models (the adaptive limit's mean, rounded).
    pub predicted_c: Option<usize>,
    /// The simulator's p99 and reordering % for a run like this one: medians over
    /// `PREDICTION_RUNS` simulated runs of this run's length (None if it failed; see
    /// `predicted_error`).
    pub predicted_p99_ms: Option<f64>,
    /// Where 80% of those simulated runs' p99 fall (10th and 90th percentile, ms): at
    /// ρ 0.85 a run of 5,000 requests lands anywhere in a band about ±25% wide.
    pub predicted_p99_band_ms: Option<[f64; 2]>,
    pub predicted_reordering_pct: Option<f64>,
    pub predicted_error: Option<String>,
}

/// Everything one effect benchmark produced (`effect.json`).
#[derive(Clone, Debug, Serialize)]
pub struct EffectReport {
    pub cores: usize,
    pub c: SidecarC,
    pub python_workers: usize,
    pub mean_ms: f64,
    pub requests: usize,
    pub warmup: usize,
    /// The chain's own CPU per request ρ counts, µs (given, or the costliest calibration).
    pub rho_overhead_us: f64,
    pub calibrations: Vec<Calibration>,
    pub runs: Vec<EffectRun>,
    pub load_average_before: String,
    pub load_average_after: String,
    pub wall_seconds: f64,
}

fn send(entry: &Uri, plan: &Plan, timeout: Duration) -> Result<Vec<crate::record::RequestRecord>, String> {
    let cfg = LoadgenConfig { uri: entry.clone(), timeout, max_in_flight: 4096, rt_priority: None };
    loadgen::run(plan, &cfg).map_err(|e| e.to_string())
}

/// Sends `plan` into `chain` while sampling its first sidecar's limit and queue (none
/// without sidecars).
fn send_sampling(
    chain: &ProxyChain,
    plan: &Plan,
    timeout: Duration,
) -> Result<(Vec<crate::record::RequestRecord>, Option<LimitSeen>), String> {
    sampling_limit(chain.sidecar_admins.first().map(String::as_str), || send(&chain.entry, plan, timeout))
}

/// CPU per request and latency of `chain` at zero demand: 100 warm-up requests, then 300
/// measured, 4 ms apart.
fn calibrate(chain: &ProxyChain) -> Result<Calibration, String> {
    let zero = |n: usize| Plan {
        intended_ns: (0..n).map(|i| i as Nanos * 4_000_000).collect(),
        demands_us: vec![vec![0; TIERS]; n],
    };
    send(&chain.entry, &zero(100), Duration::from_secs(10))?;
    let (before, before_each) = chain.cpu_now();
    let records = send(&chain.entry, &zero(300), Duration::from_secs(10))?;
    let (after, after_each) = chain.cpu_now();
    let cpu = cpuacct::usage(&before, &after, records.len());
    let cpu_by_process_us = cpu_by_process_us(&before_each, &after_each, records.len());
    let s = summarize(&records, 0, TIERS as u32, 1);
    let p50_us = s.latency_ms.p50 * 1e3;
    Ok(Calibration {
        sidecars: chain.sidecars,
        overhead_us: cpu.cpu_per_request_us,
        cpu_by_process_us,
        p50_us,
        hop_us: ((p50_us - cpu.cpu_per_request_us) / (TIERS + 1) as f64).max(0.0),
    })
}

/// Runs every (workload, load, seed) on every chain, chains taking turns; all chains stay
/// up for the whole run.
pub fn run(programs: &Programs, cfg: &EffectConfig, say: &dyn Progress) -> Result<EffectReport, String> {
    let started = Instant::now();
    let load_average_before = load_average();
    let demo = cfg.demo(programs);
    let logs = cfg.out.join("logs");
    let mut chains = Vec::new();
    for &mode in &cfg.modes {
        let spec = ChainSpec {
            sidecars: mode,
            c: [cfg.c.fixed(); TIERS],
            python_workers: cfg.python_workers,
            logs: logs.clone(),
        };
        chains.push(ProxyChain::start(programs, &spec)?);
    }
    let mut calibrations = Vec::new();
    for chain in &chains {
        let c = calibrate(chain)?;
        say.line(&format!(
            "{} chain at zero demand: {:.0} µs of CPU per request (every process), p50 {:.0} µs",
            c.sidecars.name(),
            c.overhead_us,
            c.p50_us
        ));
        calibrations.push(c);
    }
    // ρ counts the costliest chain's own CPU (the one with sidecars): the chains without
    // them get the same requests, which load their CPUs a little less.
    let rho_overhead_us =
        cfg.rho_overhead_us.unwrap_or_else(|| calibrations.iter().map(|c| c.overhead_us).fold(0.0, f64::max));
    let overhead_ns = rho_overhead_us * 1e3;
    let total = cfg.workloads.len() * cfg.loads.len() * cfg.seeds.len() * chains.len();
    say.start(total as u64, "proxy effect");
    let mut runs = Vec::new();
    let mut step = 0usize;
    let mut point = 0usize;
    for &seed in &cfg.seeds {
        for &w in &cfg.workloads {
            for &rho in &cfg.loads {
                let rate = demo.rate_for(w, rho, overhead_ns);
                let point_seed =
                    tailor_core::Rng::derive(seed, (rho * 1000.0) as u64 + w as u64 * 10_000).next_u64() >> 1;
                let plan = plan_for(&demo, w, rate, point_seed).map_err(|e| e.to_string())?;
                for k in turns(point, chains.len()) {
                    let chain = &chains[k];
                    let cal = calibrations.iter().find(|c| c.sidecars == chain.sidecars).expect("calibrated");
                    let (before, before_each) = chain.cpu_now();
                    let (records, limit) = send_sampling(chain, &plan, demo.timeout)?;
                    let (after, after_each) = chain.cpu_now();
                    let cpu = cpuacct::usage(&before, &after, records.len());
                    let cpu_by_process_us = cpu_by_process_us(&before_each, &after_each, records.len());
                    let mut demand_by_tier_us = [0.0; TIERS];
                    for r in &records {
                        for (tier, d) in demand_by_tier_us.iter_mut().zip(&r.demands_us) {
                            *tier += *d as f64 / records.len() as f64;
                        }
                    }
                    let summary = summarize(&records, cfg.warmup, TIERS as u32, cfg.cores);
                    let mean_demand_us: f64 = demand_by_tier_us.iter().sum();
                    let measured = cpu.cpu_per_request_us - mean_demand_us;
                    let overhead_us = if measured > 0.0 { measured } else { cal.overhead_us };
                    let predicted_c = match cfg.c {
                        SidecarC::Fixed(c) => c,
                        SidecarC::Adaptive => limit.map_or(cfg.cores * 2, |l| l.model_c()),
                    };
                    let spec = PredictSpec {
                        name: format!("proxy-{}-{w}-rho{rho}-seed{seed}", chain.sidecars.name()),
                        model: chain.sidecars.model(&demo, predicted_c),
                        workload: w,
                        mean_ms: cfg.mean_ms,
                        tiers: TIERS,
                        cores: cfg.cores,
                        rps: if summary.offered_rps > 0.0 { summary.offered_rps } else { rate },
                        seed: point_seed,
                        requests: cfg.requests as u64,
                        warmup: cfg.warmup as u64,
                        hop_us: cal.hop_us,
                        overhead_us,
                        context_switch_us: 1.0,
                    };
                    let (p99, band, reord, err) = match predict::predict_runs_like(&spec, predict::PREDICTION_RUNS) {
                        Ok(p) => (Some(p.p99_ms), Some(p.p99_band_ms), Some(p.reordering_pct), None),
                        Err(e) => (None, None, None, Some(e)),
                    };
                    let r = EffectRun {
                        sidecars: chain.sidecars,
                        workload: w.to_string(),
                        rho,
                        seed,
                        rate_rps: rate,
                        summary,
                        cpu,
                        overhead_us,
                        cpu_by_process_us,
                        mean_demand_us: demand_by_tier_us,
                        limit,
                        predicted_c: (chain.sidecars != Sidecars::None).then_some(predicted_c),
                        predicted_p99_ms: p99,
                        predicted_p99_band_ms: band,
                        predicted_reordering_pct: reord,
                        predicted_error: err,
                    };
                    say.line(&row_line(&r));
                    runs.push(r);
                    step += 1;
                    say.advance(step as u64, &format!("{} {w} ρ {rho} seed {seed}", chain.sidecars.name()));
                }
                point += 1;
            }
        }
    }
    drop(chains);
    Ok(EffectReport {
        cores: cfg.cores,
        c: cfg.c,
        python_workers: cfg.python_workers,
        mean_ms: cfg.mean_ms,
        requests: cfg.requests,
        warmup: cfg.warmup,
        rho_overhead_us,
        calibrations,
        runs,
        load_average_before,
        load_average_after: load_average(),
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// The order in which `chains` chains take their turns at the `point`-th point: each once,
/// a different one first at each point, so none always runs right after another.
pub(super) fn turns(point: usize, chains: usize) -> impl Iterator<Item = usize> {
    (0..chains).map(move |k| (k + point) % chains)
}

fn row_line(r: &EffectRun) -> String {
    let s = &r.summary;
    format!(
        "{:<5} {:<9} ρ {:.2} seed {} {:>4.0} req/s  p50 {:>7.2}  p99 {:>7.2} ms (sim {}{})  reorder {:>4.1}% (sim {})  ok {}/{}  other jobs {:.2} CPUs{}",
        r.sidecars.name(),
        r.workload,
        r.rho,
        r.seed,
        s.offered_rps,
        s.latency_ms.p50,
        s.latency_ms.p99,
        r.predicted_p99_ms.map_or("-".into(), |p| format!("{p:.2}")),
        r.predicted_p99_band_ms.map_or(String::new(), |[lo, hi]| format!(", 80% of runs {lo:.0}–{hi:.0}")),
        s.reordering_pct,
        r.predicted_reordering_pct.map_or("-".into(), |p| format!("{p:.1}%")),
        s.ok,
        s.requests,
        r.cpu.background_cpus,
        r.limit.map_or(String::new(), |l| format!(
            "  first sidecar's limit {:.1} ({:.0}–{:.0}), queue {:.1}",
            l.mean, l.min, l.max, l.queue_mean
        ))
    )
}

#[cfg(test)]
mod tests;
