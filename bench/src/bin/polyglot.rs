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

use std::collections::HashMap;
use std::path::PathBuf;

use tailor_bench::polyglot::{self, ChainKind, Ordering, PolyglotConfig, Tools};
use tailor_bench::workload::Workload;
use tailor_fanout::flags;

const FLAGS: &[&str] =
    &["loads", "workloads", "seeds", "requests", "warmup", "mean-ms", "chains", "orderings", "out", "root", "cores"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = flags(&args, FLAGS).and_then(|f| run(&f)) {
        eprintln!("polyglot: {e}");
        std::process::exit(2);
    }
}

fn list<T>(
    f: &HashMap<String, String>,
    name: &str,
    default: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let text = f.get(name).map(String::as_str).unwrap_or(default);
    text.split(',').map(|s| parse(s.trim()).map_err(|e| format!("--{name}: {e}"))).collect()
}

fn number<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("`{s}` is not a valid number"))
}

fn run(f: &HashMap<String, String>) -> Result<(), String> {
    let root = PathBuf::from(f.get("root").map(String::as_str).unwrap_or("."));
    let out = PathBuf::from(f.get("out").map(String::as_str).unwrap_or("target/tailor-polyglot"));
    let tools = Tools::find(&root, &out)?;
    let kinds = list(f, "chains", "polyglot,rust", |s| match s {
        "polyglot" => Ok(ChainKind::Polyglot),
        "rust" => Ok(ChainKind::RustOnly),
        _ => Err(format!("unknown chain `{s}`; use polyglot or rust")),
    })?;
    let orderings = list(f, "orderings", "neither,gates,kernel", Ordering::parse)?;
    let loads = list(f, "loads", "0.7,0.85", number::<f64>)?;
    if let Some(bad) = loads.iter().find(|&&l| !(l > 0.0 && l < 1.0)) {
        return Err(format!("--loads: {bad} is not a utilization in (0, 1)"));
    }
    let cfg = PolyglotConfig {
        tools,
        cores: match f.get("cores") {
            Some(c) => number(c)?,
            None => tailor_runtime::available_cpus(),
        },
        mean_ms: number(f.get("mean-ms").map(String::as_str).unwrap_or("3"))?,
        workloads: list(f, "workloads", "exp,trimodal", |s| s.parse::<Workload>())?,
        loads,
        seeds: list(f, "seeds", "1,2,3", number::<u64>)?,
        requests: number(f.get("requests").map(String::as_str).unwrap_or("2000"))?,
        warmup: number(f.get("warmup").map(String::as_str).unwrap_or("200"))?,
        chains: kinds.iter().flat_map(|&k| orderings.iter().map(move |&o| (k, o))).collect(),
        out: out.clone(),
    };
    let results = polyglot::run(&cfg, |line| println!("{line}"))?;
    let table = polyglot::table(&results);
    println!("\n{table}");
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write("polyglot.md", table)?;
    write("polyglot.json", serde_json::to_string_pretty(&results).expect("results serialize"))?;
    println!("written: {}/polyglot.md, polyglot.json; logs in {}/logs", out.display(), out.display());
    Ok(())
}
