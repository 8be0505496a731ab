//! `tailor bench ladder`: probe latency under 0/1/2/4/8 best-effort spinners, stock vs the node
//! tier agent enforcing (docs/node.md). The ladder starts its own processes as the hidden
//! `tailor bench ladder probe-server|load-client|spinner`.

use clap::Args;
use tailor_bench::ladder::{self, cli::LadderHelper};
use tailor_node::runner::AgentCommand;

use crate::output::{print_json, OutputArg};
use crate::progress::Reporter;

#[derive(Args)]
pub struct LadderArgs {
    #[command(flatten)]
    output: OutputArg,
    #[command(flatten)]
    ladder: ladder::cli::LadderArgs,
    #[command(subcommand)]
    helper: Option<LadderHelper>,
}

pub fn main(args: LadderArgs) -> Result<(), String> {
    if let Some(helper) = args.helper {
        return ladder::cli::run_helper(helper);
    }
    let program = std::env::current_exe().map_err(|e| format!("locating the tailor binary: {e}"))?;
    let opts = args.ladder.options(AgentCommand { program, prefix: vec!["bench".into(), "ladder".into()] })?;
    let report = ladder::run(&opts, &Reporter::new())?;
    let written = ladder::write_outputs(&report, &args.ladder.out)?;
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
