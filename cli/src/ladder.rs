//! `tailor bench ladder`: probe latency under 0/1/2/4/8 best-effort spinners, stock vs the node
//! tier agent enforcing (docs/node.md).

use std::path::PathBuf;

use clap::Args;
use tailor_node::ladder::{self, LadderOptions};
use tailor_node::NodeConfig;

use crate::output::{print_json, OutputArg};
use crate::progress::Reporter;

#[derive(Args)]
pub struct LadderArgs {
    #[command(flatten)]
    output: OutputArg,
    /// Short windows (about 1 minute in all) instead of the default (about 3 minutes).
    #[arg(long)]
    quick: bool,
    /// Directory for ladder.json, ladder.md and ladder.svg.
    #[arg(long, default_value = "target/tailor-ladder")]
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
    /// Agent config for the enforcing arm (default: critical tier on CPUs 1.., best-effort on CPU 0 with cpu.idle).
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
    if let Some(path) = &args.config {
        opts.config = Some(NodeConfig::load(path).map_err(|e| e.to_string())?);
    }
    opts.helper = Some(crate::node::self_command()?);
    let report = ladder::run(&opts, &Reporter::new())?;
    let written = ladder::write_outputs(&report, &args.out)?;
    if args.output.json() {
        print_json(&serde_json::to_value(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", ladder::table(&report));
    }
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
