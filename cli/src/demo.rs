//! `tailor demo`: a real N-tier chain on loopback under every scheduling mode,
//! side by side, with the simulator's prediction next to each measured row
//! (docs/demo.md). `tailor demo tier …` is the hidden per-tier process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use tailor_bench::demo::{self, DemoConfig, Mode};
use tailor_bench::tier::{self, TierConfig};
use tailor_bench::workload::Workload;
use tailor_runtime::BackendSpec;

use crate::output::{print_json, OutputArg};
use crate::progress::Reporter;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DemoArgs {
    #[command(flatten)]
    output: OutputArg,
    #[command(subcommand)]
    tier: Option<DemoCommand>,
    /// Tiers in the chain (each its own process).
    #[arg(long, default_value_t = 3)]
    tiers: usize,
    /// CPUs the chain shares (default: the CPUs this process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// Mean CPU demand per tier, ms: TailClipper's 10 ms workloads scaled to this.
    #[arg(long, default_value_t = 1.0)]
    mean_ms: f64,
    /// Workloads, comma-separated: fixed, exp, lognormal, trimodal, bimodal.
    #[arg(long, value_delimiter = ',', default_value = "exp,trimodal", value_parser = parse_workload)]
    workload: Vec<Workload>,
    /// Utilizations ρ = λ·E[total demand]/cores, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.85")]
    loads: Vec<f64>,
    /// Modes, comma-separated: linux, fifo, rr, orf-coop, orf (kernel-enforced by key
    /// ordering: each job at a SCHED_FIFO level from its GAT); for side-by-side runs also
    /// orf-band (the agent's SCHED_FIFO band), orf-park-idle (the band with SCHED_IDLE parking)
    /// and orf-adaptive (the band with c tuned online, docs/policies.md "Adaptive c").
    #[arg(long, value_delimiter = ',', default_value = "linux,fifo,rr,orf-coop,orf", value_parser = parse_mode)]
    modes: Vec<Mode>,
    /// Measured requests per run (after the warm-up).
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// Unmeasured requests at the start of each run.
    #[arg(long, default_value_t = 300)]
    warmup: usize,
    /// Seed of the arrival and demand draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory (report.md, demo.json, per-run JSON/CSV/.hgrm, plots, logs).
    #[arg(long, default_value = "target/tailor-demo")]
    out: PathBuf,
    /// ORF's c (both the cooperative and the kernel-enforced mode). Default: --cores, i.e.
    /// global FCFS by GAT where an older request preempts the youngest running one; the
    /// simulator ranks it above c = 6 on every demo workload (docs/demo.md, "Choosing c").
    #[arg(long)]
    orf_c: Option<usize>,
    /// Time slice of the kernel-enforced modes, µs.
    #[arg(long, default_value_t = 500.0)]
    slice_us: f64,
    /// orf: the GAT span of one SCHED_FIFO level, µs (40 levels). Default: twice the mean
    /// demand per tier (2 ms at the default --mean-ms 1; docs/demo.md, "Key ordering").
    #[arg(long)]
    bucket_us: Option<f64>,
    /// Replay arrival times from a CSV with an `arrival_ms` column (rescaled to each load).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A request without a response after this many seconds is a timeout.
    #[arg(long, default_value_t = 30.0)]
    timeout_s: f64,
    /// A fast smoke run: exp only, ρ = 0.5, 300 requests per mode.
    #[arg(long)]
    quick: bool,
    /// CPU idle states during the runs: `keep` (the machine's) or `off` (hold
    /// /dev/cpu_dma_latency at 0 so idle CPUs poll; root). Applies to every mode alike.
    #[arg(long, default_value = "keep", value_parser = ["keep", "off"])]
    idle_states: String,
    /// The chain's own CPU per request, µs, that turns each ρ into a rate. Default: the
    /// calibration's median, which moves by ±10% between invocations; to compare two
    /// invocations at the same rates, give both the value the first one printed.
    #[arg(long)]
    overhead_us: Option<f64>,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse::<Workload>().map_err(|e| e.to_string())
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum DemoCommand {
    /// One tier of the chain (started by `tailor demo` itself).
    #[command(hide = true)]
    Tier(TierArgs),
}

#[derive(Args)]
struct TierArgs {
    /// Position in the chain; 0 is the edge, which stamps the GAT.
    #[arg(long)]
    index: usize,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// URL of the next tier.
    #[arg(long)]
    next: Option<String>,
    /// The runtime backend as JSON, e.g. {"kind":"none"}.
    #[arg(long)]
    backend: String,
}

pub fn main(args: DemoArgs) -> Result<(), String> {
    if let Some(DemoCommand::Tier(t)) = args.tier {
        return run_tier(t);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tailor binary to start tiers: {e}"))?;
    let (workloads, modes) = (args.workload, args.modes);
    if !(args.mean_ms > 0.0 && args.mean_ms.is_finite()) {
        return Err(format!("--mean-ms {}: give a positive number of ms, e.g. 1", args.mean_ms));
    }
    if !(args.timeout_s > 0.0 && args.timeout_s.is_finite()) {
        return Err(format!("--timeout-s {}: give a positive number of seconds", args.timeout_s));
    }
    if let Some(o) = args.overhead_us {
        if !(o >= 0.0 && o.is_finite()) {
            return Err(format!(
                "--overhead-us {o}: give the chain's CPU per request in µs, e.g. 450 (or leave it out to calibrate)"
            ));
        }
    }
    let cores = args.cores.unwrap_or_else(tailor_runtime::available_cpus);
    let mut cfg = DemoConfig {
        exe,
        tier_args: vec!["demo".into(), "tier".into()],
        agent_args: vec!["scheduler".into()],
        tiers: args.tiers,
        cores,
        mean_ms: args.mean_ms,
        workloads,
        loads: args.loads,
        modes,
        requests: args.requests,
        warmup: args.warmup,
        seed: args.seed,
        out: args.out,
        orf_c: args.orf_c.unwrap_or(cores),
        slice_us: args.slice_us,
        bucket_us: args.bucket_us.unwrap_or(2_000.0 * args.mean_ms),
        trace: args.trace,
        timeout: Duration::from_secs_f64(args.timeout_s),
        idle_states_off: args.idle_states == "off",
        overhead_us: args.overhead_us,
    };
    if args.quick {
        cfg.workloads = vec![Workload::Exp];
        cfg.loads = vec![0.5];
        cfg.requests = 300;
        cfg.warmup = 50;
    }
    eprintln!(
        "tailor demo: {} tiers on {} CPUs, modes {}, workloads {}, loads {:?}; output in {}",
        cfg.tiers,
        cfg.cores,
        cfg.modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(","),
        cfg.workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(","),
        cfg.loads,
        cfg.out.display()
    );
    // Held for the whole invocation, so every mode runs under the same idle states; the
    // kernel drops the request when this process exits, however it exits.
    let _idle = if cfg.idle_states_off {
        let guard = tailor_node::idle::IdleStatesOff::hold().map_err(|e| e.to_string())?;
        eprintln!("CPU idle states off while the demo runs ({} held at 0)", guard.path().display());
        Some(guard)
    } else {
        None
    };
    let report = demo::run(&cfg, &Reporter::new()).map_err(|e| e.to_string())?;
    if args.output.json() {
        print_json(&serde_json::to_value(&report).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("\n{}", demo::results_table(&report));
    for s in &report.skipped {
        println!("skipped {}: {}", s.mode, s.reason);
    }
    let predicted = demo::prediction_summary(&report);
    if !predicted.is_empty() {
        println!("\nThe simulator's prediction of each mode:\n{predicted}");
    }
    let verdict = demo::verdict(&report);
    if !verdict.is_empty() {
        println!("\n{verdict}");
    }
    println!("report: {}", cfg.out.join("report.md").display());
    Ok(())
}

fn run_tier(t: TierArgs) -> Result<(), String> {
    let backend: BackendSpec = serde_json::from_str(&t.backend)
        .map_err(|e| format!("--backend {}: {e}; e.g. {{\"kind\":\"none\"}}", t.backend))?;
    let next = match t.next {
        Some(n) => Some(n.parse().map_err(|e| format!("--next {n}: {e}; give a URL like http://127.0.0.1:4000/"))?),
        None => None,
    };
    tier::serve(TierConfig { index: t.index, listen: t.listen, next, backend, max_age_ns: tier::DEFAULT_MAX_AGE_NS })
        .map_err(|e| e.to_string())
}
