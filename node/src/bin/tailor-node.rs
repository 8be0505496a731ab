//! `tailor-node`: the node tier agent on its own (the same commands as `tailor node …`), plus
//! the ladder (`tailor bench ladder`) and its helper processes. The integration tests drive this binary.

use clap::{Parser, Subcommand};
use tailor_node::cli::{self, LadderArgs, NodeCommand};
use tailor_node::runner::AgentCommand;
use tailor_telemetry::LogFormat;

/// The node tier agent: fences best-effort load away from latency-critical work (docs/node.md).
/// Not the kernel scheduler agent (`tailor scheduler`).
#[derive(Parser)]
#[command(name = "tailor-node", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: tailor_telemetry::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Node(NodeCommand),
    /// Probe p99 under 0/1/2/4/8 best-effort spinners: stock vs the node tier agent enforcing
    /// (`tailor bench ladder`); plain progress lines on stderr.
    Ladder(LadderArgs),
}

fn main() {
    let cli = Cli::parse();
    // Daemons log JSON lines by default (for a log shipper); every command takes --log-level/--log-format.
    let daemon = matches!(cli.command, Command::Node(NodeCommand::Run { .. } | NodeCommand::Supervise { .. }));
    if let Err(e) = cli.log.init(if daemon { LogFormat::Json } else { LogFormat::Text }) {
        eprintln!("tailor-node: {e}");
        std::process::exit(2);
    }
    let result = std::env::current_exe().map_err(|e| format!("locating this binary: {e}")).and_then(|program| {
        let this = AgentCommand { program, prefix: Vec::new() };
        match cli.command {
            Command::Node(command) => cli::run(command, this),
            Command::Ladder(args) => ladder(&args, this),
        }
    });
    if let Err(e) = result {
        eprintln!("tailor-node: {e}");
        std::process::exit(2);
    }
}

fn ladder(args: &LadderArgs, this: AgentCommand) -> Result<(), String> {
    let opts = args.options(this)?;
    let report = tailor_node::ladder::run(&opts, &|l: &str| eprintln!("{l}"))?;
    print!("{}", tailor_node::ladder::table(&report));
    tailor_node::ladder::write_outputs(&report, &args.out).map(|_| ())
}
