//! `tailor bench ladder`: probe latency under 0/1/2/4/8 best-effort spinners, stock vs the node
//! tier agent enforcing (docs/node.md).

use clap::Args;
use tailor_node::ladder;

use crate::output::{print_json, OutputArg};
use crate::progress::Reporter;

#[derive(Args)]
pub struct LadderArgs {
    #[command(flatten)]
    output: OutputArg,
    #[command(flatten)]
    ladder: tailor_node::cli::LadderArgs,
}

pub fn main(args: LadderArgs) -> Result<(), String> {
    let opts = args.ladder.options(crate::node::self_command()?)?;
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
