//! `openloop`: holds a third-party server at an open-loop Poisson load and writes the
//! per-request records `tailor doctor --ideal --records` reads (docs/doctor.md).
//!
//! ```text
//! openloop http URL       --rate R --seconds S [--seed N] [--out FILE]
//! openloop memcached ADDR --rate R --seconds S [--seed N] [--out FILE] [--connections C]
//! ```
//! Prints one JSON line: offered and completed requests/s, outcomes, p50/p99/p99.9 ms.

use std::collections::HashMap;
use std::time::Duration;

use tailor_bench::arrivals::poisson;
use tailor_bench::loadgen::{self, LoadgenConfig, Plan};
use tailor_bench::memcache_load::{self, MemcacheConfig};
use tailor_bench::record::{records_csv, summarize};

const USAGE: &str =
    "usage: openloop http URL|memcached ADDR --rate R --seconds S [--seed N] [--out FILE] [--connections C]";

fn main() {
    if let Err(e) = run(&std::env::args().skip(1).collect::<Vec<_>>()) {
        eprintln!("openloop: {e}");
        std::process::exit(2);
    }
}

fn get<T: std::str::FromStr>(f: &HashMap<String, String>, name: &str, default: Option<T>) -> Result<T, String> {
    match (f.get(name), default) {
        (Some(v), _) => v.parse().map_err(|_| format!("--{name} {v}: not a valid value")),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(format!("--{name} is required; {USAGE}")),
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (kind, target) = match args {
        [k, t, ..] if k == "http" || k == "memcached" => (k.as_str(), t.as_str()),
        _ => return Err(USAGE.into()),
    };
    let f = flags(&args[2..], &["rate", "seconds", "seed", "out", "connections"])?;
    let rate: f64 = get(&f, "rate", None)?;
    let seconds: f64 = get(&f, "seconds", None)?;
    if !(rate > 0.0 && seconds > 0.0) {
        return Err("--rate and --seconds must be positive".into());
    }
    let n = (rate * seconds).round() as usize;
    let intended = poisson(n, rate, get(&f, "seed", Some(1u64))?);
    let records = if kind == "http" {
        let plan = Plan { demands_us: vec![Vec::new(); n], intended_ns: intended };
        let cfg = LoadgenConfig {
            uri: target.parse().map_err(|e| format!("{target}: not a URL ({e})"))?,
            timeout: Duration::from_secs(5),
            max_in_flight: 4096,
            rt_priority: None,
        };
        loadgen::run(&plan, &cfg).map_err(|e| e.to_string())?
    } else {
        let cfg = MemcacheConfig {
            addr: target.parse().map_err(|e| format!("{target}: not HOST:PORT ({e})"))?,
            connections: get(&f, "connections", Some(4usize))?,
            max_in_flight_per_connection: 1024,
            timeout: Duration::from_secs(2),
        };
        memcache_load::run(&intended, &cfg).map_err(|e| format!("memcached {target}: {e}"))?
    };
    // The first 10% warm the server up; they still load the ideal queue.
    let warmup = n / 10;
    if let Some(out) = f.get("out") {
        std::fs::write(out, records_csv(&records, warmup)).map_err(|e| format!("{out}: {e}"))?;
    }
    let s = summarize(&records, warmup, 0, 1);
    println!(
        "{}",
        serde_json::json!({
            "offered_rps": s.offered_rps, "throughput_rps": s.throughput_rps, "ok": s.ok,
            "dropped": s.dropped, "timeouts": s.timeouts, "errors": s.http_errors + s.transport_errors,
            "p50_ms": s.latency_ms.p50, "p99_ms": s.latency_ms.p99, "p999_ms": s.latency_ms.p999,
        })
    );
    Ok(())
}

/// `--name value` pairs (a later one overrides an earlier one). A misspelt or unknown
/// flag, or one without its value, is an error naming it: silently ignoring it would run
/// the process without the setting the caller asked for.
fn flags(args: &[String], known: &[&str]) -> Result<std::collections::HashMap<String, String>, String> {
    let mut out = std::collections::HashMap::new();
    for pair in args.chunks(2) {
        let name =
            pair[0].strip_prefix("--").ok_or_else(|| format!("`{}`: expected a flag `--name value`", pair[0]))?;
        if !known.contains(&name) {
            return Err(format!("unknown flag --{name}; known: --{}", known.join(", --")));
        }
        let value = pair.get(1).ok_or_else(|| format!("--{name} needs a value"))?;
        out.insert(name.to_string(), value.clone());
    }
    Ok(out)
}
