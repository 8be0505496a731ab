//! `tailor-node`: the node tier agent on its own (the same commands as `tailor node …`).
//! The integration tests drive this binary.

use clap::Parser;
use tailor_node::cli::{self, NodeCommand};
use tailor_node::runner::AgentCommand;
use tailor_telemetry::LogFormat;

/// The node tier agent: fences best-effort load away from latency-critical work (docs/node.md).
/// Not the kernel scheduler agent (`tailor scheduler`).
#[derive(Parser)]
#[command(name = "tailor-node", version)]
struct Cli {
    #[command(subcommand)]
    command: NodeCommand,
    #[command(flatten)]
    log: tailor_telemetry::LogArgs,
}

fn main() {
    let cli = Cli::parse();
    // Daemons log JSON lines by default (for a log shipper); every command takes --log-level/--log-format.
    let daemon = matches!(cli.command, NodeCommand::Run { .. } | NodeCommand::Supervise { .. });
    if let Err(e) = cli.log.init(if daemon { LogFormat::Json } else { LogFormat::Text }) {
        eprintln!("tailor-node: {e}");
        std::process::exit(2);
    }
    let result = std::env::current_exe().map_err(|e| format!("locating this binary: {e}")).and_then(|program| {
        cli::run(cli.command, AgentCommand { program, prefix: Vec::new() }).map_err(|e| e.to_string())
    });
    if let Err(e) = result {
        eprintln!("tailor-node: {e}");
        std::process::exit(2);
    }
}
