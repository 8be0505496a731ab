//! `tailor-node`: the node tier agent on its own (the same commands as `tailor node …`), plus
//! the ladder's helper processes. The integration tests drive this binary.

use clap::Parser;
use tailor_node::cli::{self, NodeCommand};
use tailor_node::runner::AgentCommand;

/// The node tier agent: fences best-effort load away from latency-critical work (docs/node.md).
/// Not the kernel scheduler agent (`tailor scheduler`).
#[derive(Parser)]
#[command(name = "tailor-node", version)]
struct Cli {
    #[command(subcommand)]
    command: NodeCommand,
}

fn main() {
    let cli = Cli::parse();
    let result = std::env::current_exe()
        .map_err(|e| format!("locating this binary: {e}"))
        .and_then(|program| cli::run(cli.command, AgentCommand { program, prefix: Vec::new() }));
    if let Err(e) = result {
        eprintln!("tailor-node: {e}");
        std::process::exit(2);
    }
}
