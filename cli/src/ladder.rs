//! `tailor bench ladder`: probe latency under 0/1/2/4/8 best-effort spinners, stock vs the node
//! agent enforcing (issue 6; docs/node.md).

use std::path::PathBuf;

use clap::Args;
use tailor_node::ladder::{self, LadderOptions};
use tailor_node::NodeConfig;

#[derive(Args)]
pub struct LadderArgs {
    /// Short windows (about 1 minute in all) instead of the default (about 3 minutes).
    #[arg(long)]
    quick: bool,
    /// Directory for ladder.json, ladder.md and ladder.svg.
    #[arg(long, default_value = "out/ladder")]
    out: PathBuf,
    /// Repetitions per step and arm.
    #[arg(long)]
    reps: Option<usize>,
    /// Measured seconds per window (after the warm-up).
    #[arg(long)]
    window_s: Option<f64>,
    /// Probe requests per second (open loop, fixed rate).
    #[arg(long)]
    rate: Option<f64>,
    /// CPU time burned per request, µs (load on one CPU = rate × service).
    #[arg(long)]
    service_us: Option<f64>,
    /// Exponential instead of fixed service times.
    #[arg(long)]
    exp: bool,
    /// Probe server worker threads.
    #[arg(long)]
    workers: Option<usize>,
    /// Comma-separated spinner counts.
    #[arg(long, value_delimiter = ',')]
    steps: Option<Vec<usize>>,
    /// The latency-critical server: `probe` (this project's) or `redis` (the distribution's
    /// redis-server, each request a Lua loop calibrated to --service-us; install it first).
    #[arg(long, default_value = "probe", value_parser = ["probe", "redis"])]
    server: String,
    /// Agent config for the enforcing arm (default: the shipped defaults, `tailor node plan` sized to this node).
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn main(args: LadderArgs) -> Result<(), String> {
    let mut opts = if args.quick { LadderOptions::quick() } else { LadderOptions::standard() };
    opts.reps = args.reps.unwrap_or(opts.reps);
    opts.window_s = args.window_s.unwrap_or(opts.window_s);
    opts.rate_per_s = args.rate.unwrap_or(opts.rate_per_s);
    opts.service_us = args.service_us.unwrap_or(opts.service_us);
    opts.workers = args.workers.unwrap_or(opts.workers);
    opts.exponential = args.exp;
    opts.steps = args.steps.unwrap_or(opts.steps);
    opts.server = if args.server == "redis" { ladder::Server::Redis } else { ladder::Server::Probe };
    if let Some(path) = &args.config {
        opts.config = Some(NodeConfig::load(path).map_err(|e| e.to_string())?);
    }
    opts.helper = Some(crate::node::self_command()?);
    let report = ladder::run(&opts, |line| eprintln!("{line}"))?;
    print!("{}", ladder::table(&report));
    for path in ladder::write_outputs(&report, &args.out)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
