//! `polyglot`: the edge → Go → Python → Rust chain under each ordering (neither, the
//! SDKs' gates, kernel registration), next to the Rust-only demo chain, at several loads,
//! workloads and seeds; prints and writes the p99 table (docs/sdk.md, "The polyglot chain").
//!
//! ```text
//! bash sdk/polyglot/run.sh [--loads 0.7,0.85] [--workloads exp,trimodal] [--seeds 1,2,3]
//!     [--requests 2000] [--warmup 200] [--mean-ms 3] [--chains polyglot,rust]
//!     [--orderings neither,gates,kernel] [--out target/tailor-polyglot]
//! ```
//!
//! Needs target/release/tailor and target/release/examples/service (run.sh builds them),
//! Go and python3 with waitress; kernel ordering needs root (CAP_SYS_NICE).

use std::path::PathBuf;

use clap::Parser;
use tailor_bench::polyglot::{self, ChainKind, Ordering, PolyglotConfig, Tools};
use tailor_bench::workload::Workload;

/// The polyglot chain (edge → Go → Python → Rust) under each ordering, beside the
/// Rust-only chain; writes polyglot.md and polyglot.json under --out.
#[derive(Parser)]
#[command(name = "polyglot")]
struct Args {
    /// Utilizations in (0, 1), of --cores CPUs.
    #[arg(long, value_delimiter = ',', default_value = "0.7,0.85", value_parser = utilization)]
    loads: Vec<f64>,
    /// CPU demand shapes per tier: exp, trimodal, …
    #[arg(long, value_delimiter = ',', default_value = "exp,trimodal")]
    workloads: Vec<Workload>,
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Measured requests per run, after the warm-up.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Mean CPU demand per tier, ms.
    #[arg(long, default_value_t = 3.0)]
    mean_ms: f64,
    /// polyglot (edge → Go → Python → Rust) and/or rust (the demo's three Rust tiers).
    #[arg(long, value_delimiter = ',', default_value = "polyglot,rust", value_parser = chain_kind)]
    chains: Vec<ChainKind>,
    /// neither, gates, kernel.
    #[arg(long, value_delimiter = ',', default_value = "neither,gates,kernel", value_parser = Ordering::parse)]
    orderings: Vec<Ordering>,
    #[arg(long, default_value = "target/tailor-polyglot")]
    out: PathBuf,
    /// The checkout (for target/release and sdk/).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// CPUs ρ is computed against [default: the CPUs this process may use].
    #[arg(long)]
    cores: Option<usize>,
}

fn utilization(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(l) if l > 0.0 && l < 1.0 => Ok(l),
        _ => Err(format!("`{s}` is not a utilization in (0, 1)")),
    }
}

fn chain_kind(s: &str) -> Result<ChainKind, String> {
    match s {
        "polyglot" => Ok(ChainKind::Polyglot),
        "rust" => Ok(ChainKind::RustOnly),
        _ => Err(format!("unknown chain `{s}`; use polyglot or rust")),
    }
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("polyglot: {e}");
        std::process::exit(2);
    }
}

fn run(a: Args) -> Result<(), String> {
    let tools = Tools::find(&a.root, &a.out)?;
    let cfg = PolyglotConfig {
        tools,
        cores: a.cores.unwrap_or_else(tailor_runtime::available_cpus),
        mean_ms: a.mean_ms,
        workloads: a.workloads,
        loads: a.loads,
        seeds: a.seeds,
        requests: a.requests,
        warmup: a.warmup,
        chains: a.chains.iter().flat_map(|&k| a.orderings.iter().map(move |&o| (k, o))).collect(),
        out: a.out.clone(),
    };
    let results = polyglot::run(&cfg, |line| println!("{line}"))?;
    let table = polyglot::table(&results);
    println!("\n{table}");
    let out = &a.out;
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write("polyglot.md", table)?;
    write("polyglot.json", serde_json::to_string_pretty(&results).expect("results serialize"))?;
    println!("written: {}/polyglot.md, polyglot.json; logs in {}/logs", out.display(), out.display());
    Ok(())
}
