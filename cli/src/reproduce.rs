//! `tailor reproduce`: rerun the seeds' evaluations and write the report. A run writes to its
//! output directory (target/tailor-reproduce by default); refreshing the committed results page
//! in docs/ is the separate, explicit `--publish`, which a `--quick` run cannot do.

use std::path::{Path, PathBuf};

use clap::Args;
use tailor_sim::reproduce::{self, Options};
use tailor_sim::sweep;

use crate::output::{print_json, repo_path, OutputArg};
use crate::progress::Reporter;

/// Where a run writes unless told otherwise: never the committed docs/.
const DEFAULT_OUT: &str = "target/tailor-reproduce";
const MANIFEST: &str = "scenarios/seeds/reproduce.toml";

#[derive(Args)]
pub struct ReproduceArgs {
    #[command(flatten)]
    output: OutputArg,
    /// Fewer requests, fewer points and coarser searches (a few minutes; CI runs this).
    /// A smoke test, not a reference result: it cannot be published.
    #[arg(long, conflicts_with = "publish")]
    quick: bool,
    /// Directory for reproduction.md and reproduction/*.svg.
    #[arg(long, default_value = DEFAULT_OUT, conflicts_with = "publish")]
    out: PathBuf,
    /// Refresh the committed results page: write docs/reproduction.md and docs/reproduction/
    /// of the repository this binary was built from (a full run only).
    #[arg(long)]
    publish: bool,
    /// The reproduction manifest [default: scenarios/seeds/reproduce.toml of this repository].
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Run only the figures whose id starts with this (repeatable), plus those their claims refer to.
    #[arg(long)]
    only: Vec<String>,
    /// Seed for every scenario (default: each scenario's own).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker threads [default: all cores].
    #[arg(long)]
    jobs: Option<usize>,
}

pub fn main(args: ReproduceArgs) -> Result<(), String> {
    if args.publish && !args.only.is_empty() {
        return Err("--publish needs every figure: drop --only (the published page lists them all)".into());
    }
    let options = Options {
        quick: args.quick,
        threads: args.jobs.unwrap_or_else(sweep::default_threads),
        seed: args.seed,
        only: args.only.clone(),
    };
    // The manifest relative to the working directory when run from the repository root (the
    // report then links it relatively), else the one of the repository `tailor` was built from.
    let manifest = match &args.manifest {
        Some(m) => m.clone(),
        None if Path::new(MANIFEST).is_file() => PathBuf::from(MANIFEST),
        None => repo_path(MANIFEST),
    };
    let out = if args.publish { repo_path("docs") } else { args.out.clone() };
    let r = {
        let progress = Reporter::new();
        reproduce::run(&manifest, &options, &progress).map_err(|e| e.to_string())?
    };

    // The command that regenerates this report, as the report will print it.
    let mut command = String::from("tailor reproduce");
    if args.quick {
        command.push_str(" --quick");
    }
    if let Some(m) = &args.manifest {
        command.push_str(&format!(" --manifest {}", m.display()));
    }
    if args.publish {
        command.push_str(" --publish");
    } else if args.out != Path::new(DEFAULT_OUT) {
        command.push_str(&format!(" --out {}", args.out.display()));
    }
    for o in &args.only {
        command.push_str(&format!(" --only {o}"));
    }
    if let Some(s) = args.seed {
        command.push_str(&format!(" --seed {s}"));
    }
    let written = r.write(&out, &command).map_err(|e| format!("{}: {e}", out.display()))?;

    let claims = r.claims();
    let failed: Vec<_> = claims.iter().filter(|(_, c)| !c.passes()).collect();
    let (runs, events) = r.totals();
    if args.output.json() {
        print_json(&serde_json::json!({
            "report": written.markdown,
            "plots": written.plots,
            "figures": r.figures.len(),
            "runs": runs,
            "events": events,
            "wall_seconds": r.wall_seconds,
            "claims": claims.iter().map(|(fig, c)| serde_json::json!({
                "figure": fig, "what": c.what, "paper": c.paper, "ours": c.ours, "passes": c.passes(),
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    println!(
        "wrote {} and {} plots: {} figures, {} claims ({} assertions fail), {runs} runs, {:.0} M events, {:.0} s",
        written.markdown.display(),
        written.plots.len(),
        r.figures.len(),
        claims.len(),
        failed.len(),
        events as f64 / 1e6,
        r.wall_seconds
    );
    for (fig, c) in &failed {
        println!(
            "  FAILS {fig}: {} — ours {} (expected {})",
            c.what,
            c.ours,
            c.expect.map_or(String::new(), |e| e.to_string())
        );
    }
    Ok(())
}
