//! `tailor bench proxy`: Tailor's sidecar and edge against nginx and HAProxy (`--cost`),
//! sidecars in front of a 3-tier chain of plain Go and Python services (`--effect`), and
//! the sidecar's adaptive `c` against fixed ones on one plain service (`--limit`); all
//! three when no flag is given (docs/results/proxy.md).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use tailor_bench::proxybench::cost::{self, CostConfig};
use tailor_bench::proxybench::effect::{self, EffectConfig, SidecarC, Sidecars};
use tailor_bench::proxybench::limit::{self, LimitConfig, Profile};
use tailor_bench::proxybench::Programs;
use tailor_bench::workload::Workload;

use crate::output::{print_json, OutputArg};
use crate::progress::Reporter;

#[derive(Args)]
pub struct BenchProxyArgs {
    #[command(flatten)]
    output: OutputArg,
    /// Run the cost benchmark (the proxies against nginx and HAProxy).
    #[arg(long)]
    cost: bool,
    /// Run the effect benchmark (the 3-tier chain with and without sidecars).
    #[arg(long)]
    effect: bool,
    /// Run the limit benchmark (one plain service behind a sidecar: the adaptive `c`
    /// against fixed ones).
    #[arg(long)]
    limit: bool,
    /// Output directory (report.md, cost.json, effect.json, limit.json, plots, logs).
    #[arg(long, default_value = "target/tailor-bench-proxy")]
    out: PathBuf,
    /// A short smoke run of each: fewer rates, seconds, loads, seeds and requests.
    #[arg(long)]
    quick: bool,

    /// Cost: open-loop rates, requests/s, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,3000,6000")]
    rates: Vec<f64>,
    /// Cost: seconds of load per rate and relay.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Cost: rounds (every relay at every rate once per round, interleaved).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Cost: closed-loop connections for the peak throughput.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Cost: seconds of the closed loop per relay and round.
    #[arg(long, default_value_t = 3.0)]
    saturate_seconds: f64,
    /// Cost: worker threads of every proxy (nginx worker_processes, HAProxy nbthread, Tailor's tokio workers).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Cost: do not install nginx and HAProxy with apt-get when missing (skip them instead).
    #[arg(long)]
    no_install: bool,

    /// Effect: utilizations ρ, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.85")]
    loads: Vec<f64>,
    /// Effect: workloads, comma-separated (fixed, exp, lognormal, trimodal, bimodal).
    #[arg(long, value_delimiter = ',', default_value = "exp,trimodal", value_parser = parse_workload)]
    workload: Vec<Workload>,
    /// Effect and limit: seeds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Effect: chains, comma-separated: none (no sidecars), fifo, orf, orf-chain (orf whose
    /// first sidecar keeps each request's slot through the chain: `c` requests in it at once),
    /// orf-first (orf-chain's first sidecar alone, the services behind it calling each other).
    #[arg(long, value_delimiter = ',', default_value = "none,fifo,orf,orf-chain", value_parser = Sidecars::parse)]
    sidecars: Vec<Sidecars>,
    /// Effect: measured requests per run (after the warm-up).
    #[arg(long, default_value_t = 1200)]
    requests: usize,
    /// Effect: unmeasured requests at the start of each run.
    #[arg(long, default_value_t = 120)]
    warmup: usize,
    /// Effect: mean CPU demand per tier, ms (TailClipper's workloads scaled to it).
    #[arg(long, default_value_t = 2.0)]
    mean_ms: f64,
    /// Effect and limit: CPUs ρ is computed against (default: the CPUs this process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// Effect: each sidecar's `c`: a count, or `adaptive` (left out of the sidecars'
    /// configurations: their own limit; the prediction models its mean over the run)
    /// (default: --cores).
    #[arg(long, value_parser = SidecarC::parse)]
    c: Option<SidecarC>,
    /// Effect: the chain's own CPU per request (µs) that ρ counts (default: the costliest
    /// chain's, measured at zero demand). Give it to split a grid over several runs: with the
    /// same value, `--sidecars` subsets get the same requests at each point.
    #[arg(long)]
    rho_overhead_us: Option<f64>,
    /// Effect: worker processes of the Python tier.
    #[arg(long, default_value_t = 2)]
    python_workers: usize,

    /// Limit: the sidecars compared, comma-separated: counts, and `adaptive` (`c` left out).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,adaptive", value_parser = SidecarC::parse)]
    limit_c: Vec<SidecarC>,
    /// Limit: the service's profiles, comma-separated: cpu (1 ms of CPU per request), io
    /// (0.5 ms of CPU, then 5 ms off it).
    #[arg(long, value_delimiter = ',', default_value = "cpu,io", value_parser = Profile::parse)]
    limit_profiles: Vec<Profile>,
    /// Limit: loads ρ of the CPUs, comma-separated; above 1 is overload.
    #[arg(long, value_delimiter = ',', default_value = "0.8,0.95,1.3")]
    limit_loads: Vec<f64>,
    /// Limit: seconds of arrivals per run (the first tenth not measured).
    #[arg(long, default_value_t = 3.0)]
    limit_seconds: f64,
}

pub fn main(mut args: BenchProxyArgs) -> Result<(), String> {
    let cores = args.cores.unwrap_or_else(tailor_runtime::available_cpus);
    if !args.cost && !args.effect && !args.limit {
        args.cost = true;
        args.effect = true;
        args.limit = true;
    }
    if args.quick {
        args.rates = vec![1000.0, 3000.0];
        args.seconds = 1.0;
        args.rounds = 1;
        args.saturate_seconds = 1.0;
        args.loads = vec![0.5, 0.85];
        args.workload = vec![Workload::Exp];
        args.seeds = vec![1];
        args.requests = 300;
        args.warmup = 30;
        args.limit_c = vec![SidecarC::Fixed(1), SidecarC::Fixed(cores), SidecarC::Fixed(64), SidecarC::Adaptive];
        // One run per `c` where the CPUs are 1 or 64 (the repeat is then next to its twin).
        args.limit_c.dedup();
        args.limit_loads = vec![0.95];
        args.limit_seconds = 1.0;
    }
    if let Some(bad) = args.limit_loads.iter().find(|&&l| !(l > 0.0 && l <= 4.0)) {
        return Err(format!("--limit-loads: {bad} is not a load in (0, 4]; use e.g. 0.8,0.95,1.3"));
    }
    if !(args.limit_seconds > 0.0 && args.limit_seconds <= 600.0) {
        return Err("--limit-seconds: must be in (0, 600], e.g. 3".into());
    }
    if let Some(bad) = args.loads.iter().find(|&&l| !(l > 0.0 && l < 1.0)) {
        return Err(format!("--loads: {bad} is not a utilization in (0, 1); use e.g. 0.5,0.7,0.85"));
    }
    if args.rho_overhead_us.is_some_and(|o| !(o >= 0.0 && o.is_finite())) {
        return Err("--rho-overhead-us: must be a number of µs ≥ 0, e.g. 2500".into());
    }
    if args.rates.iter().any(|&r| r <= 0.0) || args.rounds == 0 || args.workers == 0 || args.requests == 0 {
        return Err("--rates, --rounds, --workers and --requests must be > 0".into());
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("creating {}: {e}", args.out.display()))?;
    let tailor = std::env::current_exe().map_err(|e| format!("finding the tailor binary: {e}"))?;
    let programs = Programs::prepare(&tailor, &args.out)?;
    let progress = Reporter::new();
    let commit = env!("TAILOR_GIT_COMMIT");
    let mut md = format!("# tailor bench proxy\n\nCommit {commit}.\n\n");
    let mut json = serde_json::Map::new();
    if args.cost {
        let cfg = CostConfig {
            rates: args.rates.clone(),
            seconds: args.seconds,
            rounds: args.rounds,
            connections: args.connections,
            saturate_seconds: args.saturate_seconds,
            workers: args.workers,
            install: !args.no_install,
            out: args.out.clone(),
        };
        let report = cost::run(&programs, &cfg, &progress)?;
        let _ = writeln!(
            md,
            "## Cost\n\n{} worker thread(s) per proxy; {} s per rate, {} rounds interleaved; closed loop {} connections × {} s; {}; {}; load average {} before, {} after.\n\n{}\n{}",
            report.workers,
            report.seconds_per_rate,
            report.rounds,
            report.connections,
            report.saturate_seconds,
            report.nginx_version,
            report.haproxy_version,
            report.load_average_before,
            report.load_average_after,
            cost::tables(&report),
            cost::verdict(&report)
        );
        for s in &report.skipped {
            let _ = writeln!(md, "Skipped {s}\n");
        }
        write(&args.out.join("cost.json"), &serde_json::to_string_pretty(&report).expect("serializes"))?;
        json.insert("cost".into(), serde_json::to_value(&report).map_err(|e| e.to_string())?);
    }
    if args.effect {
        let cfg = EffectConfig {
            cores,
            c: args.c.unwrap_or(SidecarC::Fixed(cores)),
            python_workers: args.python_workers,
            mean_ms: args.mean_ms,
            workloads: args.workload.clone(),
            loads: args.loads.clone(),
            seeds: args.seeds.clone(),
            modes: args.sidecars.clone(),
            requests: args.requests,
            warmup: args.warmup,
            rho_overhead_us: args.rho_overhead_us,
            out: args.out.clone(),
        };
        let report = effect::run(&programs, &cfg, &progress)?;
        effect::write(&report, &cfg.workloads, &args.out)?;
        let _ = writeln!(
            md,
            "## Effect\n\nedge → Go → Python ({} workers) → Go, {} CPUs, c = {} per sidecar, mean demand {} ms per tier, ρ counting {:.0} µs of the chain's own CPU per request, {} measured requests per run after {}; seeds {:?}; load average {} before, {} after; {:.0} s.\n\n{}\n{}\n{}",
            report.python_workers,
            report.cores,
            report.c,
            report.mean_ms,
            report.rho_overhead_us,
            report.requests,
            report.warmup,
            cfg.seeds,
            report.load_average_before,
            report.load_average_after,
            report.wall_seconds,
            effect::table(&report),
            effect::verdict(&report),
            effect::cpu_table(&report)
        );
        for w in &cfg.workloads {
            let _ = writeln!(md, "![p99 vs load, {w}](effect-p99-{w}.svg)\n");
        }
        json.insert("effect".into(), serde_json::to_value(&report).map_err(|e| e.to_string())?);
    }
    if args.limit {
        let cfg = LimitConfig {
            cores,
            cs: args.limit_c.clone(),
            profiles: args.limit_profiles.clone(),
            loads: args.limit_loads.clone(),
            seeds: args.seeds.clone(),
            seconds: args.limit_seconds,
            out: args.out.clone(),
        };
        let report = limit::run(&programs, &cfg, &progress)?;
        let _ = writeln!(
            md,
            "## Limit\n\nOne plain Go service behind a fresh sidecar per run (`order = \"orf\"`), {} CPUs, {} s of arrivals per run, seeds {:?}; deadlines: cpu {} ms, io {} ms; ρ counting {:.0} µs of CPU per request beyond the demand; load average {} before, {} after; {:.0} s.\n\n{}\n{}",
            report.cores,
            report.seconds,
            cfg.seeds,
            Profile::Cpu.deadline_ms(),
            Profile::Io.deadline_ms(),
            report.overhead_us,
            report.load_average_before,
            report.load_average_after,
            report.wall_seconds,
            limit::tables(&report),
            limit::verdict(&report)
        );
        limit::write(&report, &args.out)?;
        for p in &cfg.profiles {
            let _ = writeln!(md, "![goodput vs c, {0} service](limit-goodput-{0}.svg)\n", p.name());
        }
        json.insert("limit".into(), serde_json::to_value(&report).map_err(|e| e.to_string())?);
    }
    let path = args.out.join("report.md");
    write(&path, &md)?;
    drop(progress);
    if args.output.json() {
        print_json(&serde_json::Value::Object(json));
    } else {
        print!("{md}");
    }
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse::<Workload>().map_err(|e| e.to_string())
}
