//! `tailor node`: the node tier agent (tiers, safe mode, supervisor) — see docs/node.md.

use clap::Args;
use tailor_node::cli::{self, NodeCommand};
use tailor_node::runner::AgentCommand;

#[derive(Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    command: NodeCommand,
}

/// How the supervisor restarts the agent: this binary, `tailor node ...`.
pub fn self_command() -> Result<AgentCommand, String> {
    let program = std::env::current_exe().map_err(|e| format!("locating the tailor binary: {e}"))?;
    Ok(AgentCommand { program, prefix: vec!["node".into()] })
}

pub fn main(args: NodeArgs) -> Result<(), String> {
    cli::run(args.command, self_command()?).map_err(|e| e.to_string())
}
