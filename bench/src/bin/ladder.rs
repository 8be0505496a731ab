//! `ladder`: the node tier agent's ladder (`tailor bench ladder`) without the rest of the
//! `tailor` CLI — probe p99 under 0/1/2/4/8 best-effort spinners, stock vs the agent enforcing,
//! with plain progress lines on stderr. `ladder probe-server|load-client|spinner` are the
//! ladder's own processes, so it needs no other binary (the integration test drives it).
//!
//! ```text
//! ladder [--quick] [--out DIR] [--server probe|redis] [--steps 0,1,2,4,8] …
//! ```

use clap::Parser;
use tailor_bench::ladder::{self, cli::LadderArgs, cli::LadderHelper};
use tailor_node::runner::AgentCommand;

/// Probe p99 under 0/1/2/4/8 best-effort spinners: stock vs the node tier agent enforcing.
#[derive(Parser)]
#[command(name = "ladder")]
struct Cli {
    #[command(flatten)]
    ladder: LadderArgs,
    #[command(subcommand)]
    helper: Option<LadderHelper>,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.helper {
        Some(helper) => ladder::cli::run_helper(helper),
        None => run(&cli.ladder),
    };
    if let Err(e) = result {
        eprintln!("ladder: {e}");
        std::process::exit(2);
    }
}

fn run(args: &LadderArgs) -> Result<(), String> {
    let program = std::env::current_exe().map_err(|e| format!("locating this binary: {e}"))?;
    let opts = args.options(AgentCommand { program, prefix: Vec::new() })?;
    let report = ladder::run(&opts, &|l: &str| eprintln!("{l}"))?;
    print!("{}", ladder::table(&report));
    for path in ladder::write_outputs(&report, &args.out)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
