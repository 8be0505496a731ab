//! `tailor reproduce`: rerun the seeds' evaluations and regenerate the report.

use std::path::{Path, PathBuf};

use clap::Args;
use tailor_sim::reproduce::{self, Options};
use tailor_sim::sweep;

#[derive(Args)]
pub struct ReproduceArgs {
    /// Fewer requests, fewer points and coarser searches (a few minutes; CI runs this).
    #[arg(long)]
    quick: bool,
    /// Directory for reproduction.md and reproduction/*.svg.
    #[arg(long, default_value = "docs")]
    out: PathBuf,
    /// The reproduction manifest.
    #[arg(long, default_value = "scenarios/seeds/reproduce.toml")]
    manifest: PathBuf,
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
    let options = Options {
        quick: args.quick,
        threads: args.jobs.unwrap_or_else(sweep::default_threads),
        seed: args.seed,
        only: args.only.clone(),
    };
    let progress = |done: usize, total: usize, label: &str, secs: f64| {
        eprintln!("[{done:>4}/{total}] {label} ({secs:.1} s)");
    };
    let r = reproduce::run(&args.manifest, &options, &progress).map_err(|e| e.to_string())?;

    // The command that regenerates this report, as the report will print it.
    let mut command = String::from("tailor reproduce");
    if args.quick {
        command.push_str(" --quick");
    }
    if args.manifest != Path::new("scenarios/seeds/reproduce.toml") {
        command.push_str(&format!(" --manifest {}", args.manifest.display()));
    }
    if args.out != Path::new("docs") {
        command.push_str(&format!(" --out {}", args.out.display()));
    }
    for o in &args.only {
        command.push_str(&format!(" --only {o}"));
    }
    if let Some(s) = args.seed {
        command.push_str(&format!(" --seed {s}"));
    }
    let written = r.write(&args.out, &command).map_err(|e| format!("{}: {e}", args.out.display()))?;

    let claims = r.claims();
    let failed: Vec<_> = claims.iter().filter(|(_, c)| !c.passes()).collect();
    let (runs, events) = r.totals();
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
