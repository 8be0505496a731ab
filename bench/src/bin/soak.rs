//! `soak`: hold the demo chain (kernel backend) or the fan-out handler at one load for many
//! minutes and report whether RSS, descriptors, threads, table slots or the p99 grow
//! (docs/failure-modes.md, "Soak").
//!
//! ```text
//! soak chain  [--minutes 30] [--rho 0.8] [--tiers 3] [--mean-ms 1] [--workload exp] [--out DIR]
//! soak fanout [--minutes 30] [--config fanout/configs/exp-two-class.toml] [--scheme tf-edfq] [--load 0.2]
//! common:     [--window-s 60] [--sample-s 5] [--seed 1]
//! ```
//!
//! `soak tier …` and `soak agent …` are the chain's own processes (the demo's tier and the
//! kernel backend's node agent), so the soak needs no other binary.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tailor_bench::soak::{self, ChainSoak, FanoutSoak, SoakReport, SoakTiming};
use tailor_bench::tier::{self, TierConfig};
use tailor_bench::workload::Workload;
use tailor_fanout::flags;
use tailor_runtime::kernel::{self, AgentConfig, Enforce};

const USAGE: &str = "usage: soak chain|fanout [--minutes M] [--window-s S] [--sample-s S] [--seed N] \
                     [chain: --rho R --tiers N --mean-ms MS --workload W --out DIR] \
                     [fanout: --config FILE --scheme S --load L]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("chain") => flags(&args[1..], CHAIN_FLAGS).and_then(|f| chain(&f)),
        Some("fanout") => flags(&args[1..], FANOUT_FLAGS).and_then(|f| fanout(&f)),
        Some("tier") => flags(&args[1..], &["index", "listen", "next", "backend"]).and_then(|f| run_tier(&f)),
        Some("agent") => flags(&args[1..], &["table", "policy", "c", "slice-us", "cpus", "enforce", "bucket-us"])
            .and_then(|f| run_agent(&f)),
        _ => Err(USAGE.to_string()),
    };
    if let Err(e) = result {
        eprintln!("soak: {e}");
        std::process::exit(2);
    }
}

const CHAIN_FLAGS: &[&str] = &["minutes", "window-s", "sample-s", "seed", "rho", "tiers", "mean-ms", "workload", "out"];
const FANOUT_FLAGS: &[&str] = &["minutes", "window-s", "sample-s", "seed", "config", "scheme", "load"];

fn get<T: std::str::FromStr>(f: &HashMap<String, String>, name: &str, default: T) -> Result<T, String> {
    match f.get(name) {
        Some(v) => v.parse().map_err(|_| format!("--{name} {v}: not a valid value")),
        None => Ok(default),
    }
}

fn timing(f: &HashMap<String, String>) -> Result<SoakTiming, String> {
    let minutes: f64 = get(f, "minutes", 30.0)?;
    let window_s: f64 = get(f, "window-s", 60.0)?;
    let sample_s: f64 = get(f, "sample-s", 5.0)?;
    for (name, v) in [("minutes", minutes), ("window-s", window_s), ("sample-s", sample_s)] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("--{name} {v}: give a positive number"));
        }
    }
    Ok(SoakTiming {
        duration: Duration::from_secs_f64(minutes * 60.0),
        window: Duration::from_secs_f64(window_s),
        sample_every: Duration::from_secs_f64(sample_s),
    })
}

fn finish(report: &SoakReport) -> Result<(), String> {
    println!("\n{}", report.markdown());
    let growing = report.growing();
    if growing.is_empty() {
        println!("no series grew beyond its bound");
        Ok(())
    } else {
        let names: Vec<&str> = growing.iter().map(|t| t.name.as_str()).collect();
        Err(format!("growth beyond the bound in: {}", names.join(", ")))
    }
}

fn chain(f: &HashMap<String, String>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary to start the tiers: {e}"))?;
    let workload: Workload =
        get::<String>(f, "workload", "exp".into())?.parse().map_err(|e| format!("--workload: {e}"))?;
    let s = ChainSoak {
        exe,
        tier_args: vec!["tier".into()],
        agent_args: vec!["agent".into()],
        tiers: get(f, "tiers", 3)?,
        rho: get(f, "rho", 0.8)?,
        mean_ms: get(f, "mean-ms", 1.0)?,
        workload,
        seed: get(f, "seed", 1)?,
        out: PathBuf::from(get::<String>(f, "out", "target/tailor-soak".into())?),
        timing: timing(f)?,
    };
    if !(s.rho > 0.0 && s.rho < 1.0) {
        return Err(format!("--rho {}: give a utilization in (0, 1)", s.rho));
    }
    let report = soak::run_chain(&s, |l| println!("{l}")).map_err(|e| e.to_string())?;
    finish(&report)
}

fn fanout(f: &HashMap<String, String>) -> Result<(), String> {
    let s = FanoutSoak {
        config: PathBuf::from(get::<String>(f, "config", "fanout/configs/exp-two-class.toml".into())?),
        scheme: tailor_fanout::Scheme::parse(&get::<String>(f, "scheme", "tf-edfq".into())?)?,
        load: get(f, "load", 0.2)?,
        timing: timing(f)?,
    };
    let report = soak::run_fanout(&s, |l| println!("{l}")).map_err(|e| e.to_string())?;
    finish(&report)
}

/// One tier of the chain (the demo's `tailor demo tier`).
fn run_tier(f: &HashMap<String, String>) -> Result<(), String> {
    let backend = f.get("backend").ok_or("--backend is required")?;
    let backend = serde_json::from_str(backend).map_err(|e| format!("--backend {backend}: {e}"))?;
    let next = match f.get("next") {
        Some(n) => Some(n.parse().map_err(|e| format!("--next {n}: {e}"))?),
        None => None,
    };
    let cfg = TierConfig {
        index: get(f, "index", 0)?,
        listen: get(f, "listen", "127.0.0.1:0".parse().expect("loopback"))?,
        next,
        backend,
        max_age_ns: tier::DEFAULT_MAX_AGE_NS,
    };
    tier::serve(cfg).map_err(|e| e.to_string())
}

/// The kernel backend's node agent (the demo's `tailor agent`), until SIGTERM.
fn run_agent(f: &HashMap<String, String>) -> Result<(), String> {
    let policy = kernel::policy_from_args(
        &get::<String>(f, "policy", "orf".into())?,
        get(f, "c", 2)?,
        get(f, "slice-us", 500.0)?,
    )
    .map_err(|e| e.to_string())?;
    let cfg = AgentConfig {
        table: PathBuf::from(f.get("table").ok_or("--table is required")?),
        policy,
        cpus: get(f, "cpus", tailor_runtime::available_cpus())?,
        slots: kernel::table::DEFAULT_SLOTS,
        verbose: false,
        enforce: match get::<String>(f, "enforce", "band".into())?.as_str() {
            "priority" => Enforce::priority_us(get(f, "bucket-us", 1000.0)?).map_err(|e| format!("--bucket-us {e}"))?,
            _ => Enforce::Band,
        },
    };
    kernel::preflight().map_err(|e| e.to_string())?;
    let report = kernel::run_agent(&cfg, kernel::stop_on_signals()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&cfg.table);
    eprintln!("soak agent: stopped; {report:?}");
    Ok(())
}
