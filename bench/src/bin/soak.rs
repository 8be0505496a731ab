//! `soak`: hold the demo chain (kernel backend) or the fan-out handler at one load for many
//! minutes and report whether RSS, descriptors, threads, table slots or the p99 grow
//! (docs/failure-modes.md, "Soak").
//!
//! ```text
//! soak chain  [--minutes 30] [--rho 0.8] [--tiers 3] [--mean-ms 1] [--workload exp] [--out DIR]
//! soak fanout [--minutes 30] [--config fanout/configs/exp-two-class.toml] [--scheme tf-edfq] [--load 0.2] [--out DIR]
//! common:     [--window-s 60] [--sample-s 5] [--seed 1]
//! ```
//!
//! `soak tier …` and `soak agent …` are the chain's own processes (the demo's tier and the
//! kernel backend's node agent), so the soak needs no other binary.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tailor_bench::soak::{self, ChainSoak, FanoutSoak, SoakReport, SoakTiming};
use tailor_bench::tier::{self, TierConfig};
use tailor_bench::workload::Workload;
use tailor_runtime::kernel::{self, AgentConfig, Enforce};

/// Hold the demo chain (kernel backend) or the fan-out handler at one load and report
/// whether RSS, descriptors, threads, table slots or the p99 grow.
#[derive(Parser)]
#[command(name = "soak")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The demo chain under the kernel backend, with its node agent.
    Chain(ChainArgs),
    /// The fan-out handler and its task servers at one load.
    Fanout(FanoutArgs),
    /// One tier of the chain (started by `soak chain`).
    #[command(hide = true)]
    Tier(TierArgs),
    /// The kernel backend's node agent (started by `soak chain`).
    #[command(hide = true)]
    Agent(AgentArgs),
}

#[derive(Args)]
struct Timing {
    #[arg(long, default_value_t = 30.0, value_parser = positive)]
    minutes: f64,
    /// Width of each p99 window, s.
    #[arg(long, default_value_t = 60.0, value_parser = positive)]
    window_s: f64,
    /// How often RSS, descriptors, threads and slots are sampled, s.
    #[arg(long, default_value_t = 5.0, value_parser = positive)]
    sample_s: f64,
}

#[derive(Args)]
struct ChainArgs {
    #[command(flatten)]
    timing: Timing,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Utilization in (0, 1).
    #[arg(long, default_value_t = 0.8, value_parser = utilization)]
    rho: f64,
    #[arg(long, default_value_t = 3)]
    tiers: usize,
    /// Mean CPU demand per tier, ms.
    #[arg(long, default_value_t = 1.0)]
    mean_ms: f64,
    #[arg(long, default_value = "exp")]
    workload: Workload,
    #[arg(long, default_value = "target/tailor-soak")]
    out: PathBuf,
}

#[derive(Args)]
struct FanoutArgs {
    #[command(flatten)]
    timing: Timing,
    #[arg(long, default_value = "fanout/configs/exp-two-class.toml")]
    config: PathBuf,
    #[arg(long, default_value = "tf-edfq", value_parser = tailor_fanout::Scheme::parse)]
    scheme: tailor_fanout::Scheme,
    /// Load as a fraction of the task servers' capacity.
    #[arg(long, default_value_t = 0.2)]
    load: f64,
    /// Where the report and every sample go (`report.md`, `samples.csv`).
    #[arg(long, default_value = "target/tailor-soak/fanout")]
    out: PathBuf,
}

#[derive(Args)]
struct TierArgs {
    #[arg(long, default_value_t = 0)]
    index: usize,
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    #[arg(long)]
    next: Option<http::Uri>,
    /// The runtime backend, JSON as in a config file.
    #[arg(long)]
    backend: String,
}

#[derive(Args)]
struct AgentArgs {
    #[arg(long)]
    table: PathBuf,
    #[arg(long, default_value = "orf")]
    policy: String,
    #[arg(long, default_value_t = 2)]
    c: usize,
    #[arg(long, default_value_t = 500.0)]
    slice_us: f64,
    #[arg(long)]
    cpus: Option<usize>,
    #[arg(long, default_value = "band", value_parser = ["band", "priority"])]
    enforce: String,
    #[arg(long, default_value_t = 1000.0)]
    bucket_us: f64,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

fn utilization(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("`{s}` is not a utilization in (0, 1)")),
    }
}

fn main() {
    let result = match Cli::parse().command {
        Command::Chain(a) => chain(a),
        Command::Fanout(a) => fanout(a),
        Command::Tier(a) => run_tier(a),
        Command::Agent(a) => run_agent(a),
    };
    if let Err(e) = result {
        eprintln!("soak: {e}");
        std::process::exit(2);
    }
}

impl Timing {
    fn soak(&self) -> SoakTiming {
        SoakTiming {
            duration: Duration::from_secs_f64(self.minutes * 60.0),
            window: Duration::from_secs_f64(self.window_s),
            sample_every: Duration::from_secs_f64(self.sample_s),
            settle: tailor_bench::soak::SETTLE,
        }
    }
}

fn finish(report: &SoakReport, out: &std::path::Path) -> Result<(), String> {
    println!("\n{}", report.markdown());
    std::fs::create_dir_all(out)
        .map_err(|e| format!("{}: {e}. Fix: give --out a writable directory", out.display()))?;
    for (file, text) in [("report.md", report.markdown()), ("samples.csv", report.samples_csv())] {
        let path = out.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("report and samples in {}", out.display());
    let growing = report.growing();
    let kept = report.kept_after_the_load();
    if growing.is_empty() && kept.is_empty() {
        println!("no series grew beyond its bound, and every descriptor, thread and slot came back after the load");
        return Ok(());
    }
    let names = |ts: &[&tailor_bench::soak::Trend]| ts.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
    let mut problems = Vec::new();
    if !growing.is_empty() {
        problems.push(format!("growth beyond the bound in: {}", names(&growing)));
    }
    if !kept.is_empty() {
        problems.push(format!("still held {:.0} s after the load: {}", report.settle_s, names(&kept)));
    }
    Err(problems.join("; "))
}

fn chain(a: ChainArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary to start the tiers: {e}"))?;
    let s = ChainSoak {
        exe,
        tier_args: vec!["tier".into()],
        agent_args: vec!["agent".into()],
        tiers: a.tiers,
        rho: a.rho,
        mean_ms: a.mean_ms,
        workload: a.workload,
        seed: a.seed,
        out: a.out.clone(),
        timing: a.timing.soak(),
    };
    let report = soak::run_chain(&s, |l| println!("{l}")).map_err(|e| e.to_string())?;
    finish(&report, &a.out)
}

fn fanout(a: FanoutArgs) -> Result<(), String> {
    let s = FanoutSoak { config: a.config, scheme: a.scheme, load: a.load, timing: a.timing.soak() };
    let report = soak::run_fanout(&s, |l| println!("{l}")).map_err(|e| e.to_string())?;
    finish(&report, &a.out)
}

/// One tier of the chain (the demo's `tailor demo tier`).
fn run_tier(a: TierArgs) -> Result<(), String> {
    let backend = serde_json::from_str(&a.backend).map_err(|e| format!("--backend {}: {e}", a.backend))?;
    let cfg =
        TierConfig { index: a.index, listen: a.listen, next: a.next, backend, max_age_ns: tier::DEFAULT_MAX_AGE_NS };
    tier::serve(cfg).map_err(|e| e.to_string())
}

/// The kernel backend's node agent (the demo's `tailor agent`), until SIGTERM.
fn run_agent(a: AgentArgs) -> Result<(), String> {
    let policy = kernel::policy_from_args(&a.policy, a.c, a.slice_us, kernel::AdaptiveArgs::default())
        .map_err(|e| e.to_string())?;
    let cfg = AgentConfig {
        table: a.table,
        policy,
        cpus: a.cpus.unwrap_or_else(tailor_runtime::available_cpus),
        slots: kernel::table::DEFAULT_SLOTS,
        verbose: false,
        enforce: match a.enforce.as_str() {
            "priority" => Enforce::priority_us(a.bucket_us).map_err(|e| format!("--bucket-us {e}"))?,
            _ => Enforce::Band,
        },
    };
    kernel::preflight().map_err(|e| e.to_string())?;
    let report = kernel::run_agent(&cfg, kernel::stop_on_signals()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&cfg.table);
    // The same JSON line as `tailor agent` (AgentReport::from_log reads it).
    eprintln!("{}", report.log_line());
    Ok(())
}
