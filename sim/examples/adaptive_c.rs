//! The adaptive-`c` sweep (docs/policies.md, "Adaptive c"): every fixed `c` against
//! `orf-adaptive` on TailClipper's five service-time distributions at ρ 0.5–0.9.
//!
//! `cargo run --release -p tailor-sim --example adaptive_c -- [--topology node|chain]
//! [--seeds N] [--requests N] [--jobs N] [--workloads Fixed,Bimodal] [--loads 0.8,0.9] [--json FILE]`

use std::time::Instant;

use tailor_sim::adaptive_c::{self, Plan, Topology};

fn main() {
    if let Err(e) = run() {
        eprintln!("adaptive_c: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut topology = Topology::Node;
    let (mut seeds, mut requests) = (3u64, 100_000u64);
    let mut threads = tailor_sim::sweep::default_threads();
    let mut json: Option<String> = None;
    let mut workloads: Option<Vec<String>> = None;
    let mut loads: Option<Vec<f64>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--topology" => {
                topology = match value()?.as_str() {
                    "node" => Topology::Node,
                    "chain" => Topology::Chain,
                    other => return Err(format!("--topology {other}: use node or chain")),
                }
            }
            "--seeds" => seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--requests" => requests = value()?.parse().map_err(|e| format!("--requests: {e}"))?,
            "--jobs" => threads = value()?.parse().map_err(|e| format!("--jobs: {e}"))?,
            "--json" => json = Some(value()?),
            "--workloads" => workloads = Some(value()?.split(',').map(str::to_string).collect()),
            "--loads" => {
                loads = Some(
                    value()?
                        .split(',')
                        .map(|x| x.parse::<f64>().map_err(|e| format!("--loads {x}: {e}")))
                        .collect::<Result<_, _>>()?,
                )
            }
            other => {
                return Err(format!(
                    "unknown argument {other}; use --topology node|chain, --seeds N, --requests N, --jobs N, \
                     --workloads A,B, --loads 0.5,0.9, --json FILE"
                ))
            }
        }
    }
    let mut plan = Plan::full(topology, seeds, requests);
    if let Some(w) = workloads {
        for name in &w {
            if !adaptive_c::WORKLOADS.iter().any(|(n, _)| n == name) {
                return Err(format!("--workloads {name}: unknown; use Fixed, Exp, Lognormal, Trimodal, Bimodal"));
            }
        }
        plan.workloads.retain(|(n, _)| w.contains(n));
    }
    if let Some(l) = loads {
        plan.utilizations = l;
    }
    let started = Instant::now();
    let points = adaptive_c::run(&plan, threads).map_err(|e| e.to_string())?;
    let verdicts = adaptive_c::verdicts(&points);
    println!(
        "{:?}, {} seeds, {} measured requests per run (+{} warm-up), p99 in ms (mean over seeds), {:.0} s\n",
        topology,
        plan.seeds.len(),
        plan.requests,
        plan.warmup,
        started.elapsed().as_secs_f64()
    );
    println!("{}", adaptive_c::table(&verdicts));
    let met = verdicts.iter().filter(|v| v.met()).count();
    println!("adaptive within 5% of the best fixed c in {met} of {} settings", verdicts.len());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "points": points, "verdicts": verdicts }))
            .map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}
