//! `tailor sim`: run a scenario once, as a sweep, or as a max-load search.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;
use tailor_core::PolicySpec;
use tailor_sim::model::{LoadOverride, Overrides};
use tailor_sim::report;
use tailor_sim::scenario::{LoadedScenario, Scenario};
use tailor_sim::sweep::{self, RunOutput};

use crate::output::{repo_path, OutputArg};
use crate::progress::Reporter;

/// The scenario `tailor sim` runs without a file: TailClipper's three-tier
/// chain with Exp(10 ms) demands, orf vs rr vs fair across load.
const DEFAULT_SCENARIO: &str = include_str!("../../scenarios/tailclipper-chain-exp.toml");

#[derive(Args)]
pub struct SimArgs {
    /// Scenario file (TOML). Without one, the built-in TailClipper three-tier chain.
    scenario: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
    /// Write the results as JSON to this file (`-` for stdout, the same as `-o json`; schema in docs/sim-json.md).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory for sweep CSV and SVG output [default: target/tailor-sim/<scenario name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Measured requests per run (overrides the file).
    #[arg(long)]
    requests: Option<u64>,
    /// Warm-up requests per run (overrides the file).
    #[arg(long)]
    warmup: Option<u64>,
    /// Seed (overrides the file).
    #[arg(long)]
    seed: Option<u64>,
    /// Run at this utilization of the busiest service (overrides [load]).
    #[arg(long, conflicts_with = "rps")]
    utilization: Option<f64>,
    /// Run at this request rate (overrides [load]).
    #[arg(long)]
    rps: Option<f64>,
    /// Policy for every service: a name (`orf`, `orf-adaptive`) or a TOML inline table
    /// (`{kind="orf", c=4, slice_us=30}`, `{kind="orf-adaptive", c_max=32}`).
    #[arg(long)]
    policy: Option<String>,
    /// Ignore [sweep] and [search]: one run at the file's load.
    #[arg(long)]
    single: bool,
    /// Worker threads for sweeps and searches [default: all cores].
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the built-in default scenario (a commented example to start from) and exit.
    #[arg(long)]
    example: bool,
}

fn parse_policy(s: &str) -> Result<PolicySpec, String> {
    let text = if s.trim_start().starts_with('{') { format!("p = {s}") } else { format!("p = {{ kind = {s:?} }}") };
    #[derive(serde::Deserialize)]
    struct Wrap {
        p: PolicySpec,
    }
    let w: Wrap = toml::from_str(&text).map_err(|e| format!("--policy {s:?}: {}", e.message()))?;
    w.p.validate().map_err(|e| format!("--policy {s:?}: {e}"))?;
    Ok(w.p)
}

pub fn main(args: SimArgs) -> Result<(), String> {
    if args.example {
        print!("{DEFAULT_SCENARIO}");
        return Ok(());
    }
    let loaded: LoadedScenario = match &args.scenario {
        Some(p) => Scenario::load(p).map_err(|e| e.to_string())?,
        None => Scenario::from_toml(DEFAULT_SCENARIO, &repo_path("scenarios/tailclipper-chain-exp.toml"))
            .map_err(|e| e.to_string())?,
    };
    let base = Overrides {
        load: match (args.rps, args.utilization) {
            (Some(r), _) => Some(LoadOverride::Rps(r)),
            (_, Some(u)) => Some(LoadOverride::Utilization(u)),
            _ => None,
        },
        policy: args.policy.as_deref().map(parse_policy).transpose()?,
        requests: args.requests,
        warmup: args.warmup,
        seed: args.seed,
    };
    let threads = args.jobs.unwrap_or_else(sweep::default_threads);
    let sc = &loaded.scenario;
    let json_path = if args.output.json() { Some(PathBuf::from("-")) } else { args.json.clone() };
    let quiet = json_path.as_deref() == Some(Path::new("-"));
    let say = |s: &str| {
        if !quiet {
            println!("{s}");
        }
    };
    say(&format!(
        "scenario {} ({}){}",
        sc.name,
        loaded.path.display(),
        if sc.description.is_empty() { String::new() } else { format!(": {}", sc.description) }
    ));

    let json = if sc.search.is_some() && !args.single {
        let results =
            sweep::max_load_with_progress(&loaded, &base, threads, &Reporter::new()).map_err(|e| e.to_string())?;
        say(&format!(
            "max load under SLO (every class and fanout meets its SLO), seed {}:\n",
            base.seed.unwrap_or(sc.seed)
        ));
        say(&report::search_table(&results));
        let at_max: Vec<RunOutput> = results.iter().filter_map(|r| r.at_max.clone()).collect();
        if !at_max.is_empty() {
            say("runs at each policy's max load:\n");
            say(&report::runs_table(&at_max));
        }
        json!({ "schema": "tailor.sim/v1", "kind": "search", "scenario": sc.name, "results": results })
    } else if sc.sweep.is_some() && !args.single {
        let runs = sweep::sweep_with_progress(&loaded, &base, threads, &Reporter::new()).map_err(|e| e.to_string())?;
        say(&report::runs_table(&runs));
        let out = args.out.clone().unwrap_or_else(|| PathBuf::from("target/tailor-sim").join(&sc.name));
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let by_rps = sc.sweep.as_ref().is_some_and(|s| !s.rps.is_empty());
        let csv = out.join("sweep.csv");
        let svg = out.join("p99.svg");
        std::fs::write(&csv, report::runs_csv(&runs)).map_err(|e| format!("{}: {e}", csv.display()))?;
        std::fs::write(&svg, report::sweep_plot(&format!("{}: p99 vs load", sc.name), &runs, by_rps))
            .map_err(|e| format!("{}: {e}", svg.display()))?;
        say(&format!("wrote {} and {}", csv.display(), svg.display()));
        json!({ "schema": "tailor.sim/v1", "kind": "sweep", "scenario": sc.name, "runs": runs })
    } else {
        let run = sweep::run_one(&loaded, &base).map_err(|e| e.to_string())?;
        say(&report::runs_table(std::slice::from_ref(&run)));
        say(&format!(
            "{} events in {:.2} s ({:.1} M events/s)",
            run.events,
            run.wall_seconds,
            run.events_per_sec / 1e6
        ));
        json!({ "schema": "tailor.sim/v1", "kind": "run", "scenario": sc.name, "runs": [run] })
    };
    if let Some(path) = &json_path {
        let text = serde_json::to_string_pretty(&json).expect("results serialize");
        if quiet {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
            say(&format!("wrote {}", path.display()));
        }
    }
    Ok(())
}
