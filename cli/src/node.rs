//! `tailor node`: the node agent (tiers, safe mode, supervisor) — see docs/node.md.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tailor_node::runner::{self, AgentCommand};
use tailor_node::{Capabilities, NodeConfig};

#[derive(Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    command: NodeCommand,
}

#[derive(Subcommand)]
enum NodeCommand {
    /// Run the agent: apply the tiers and reconcile until SIGTERM/SIGINT, which restore everything.
    Run {
        /// Tier config (TOML); `tailor node example` prints one.
        #[arg(long)]
        config: PathBuf,
        /// Print one heartbeat line per reconcile on stdout (used by `supervise`).
        #[arg(long)]
        heartbeat: bool,
    },
    /// Run the agent as a child with a heartbeat; on its death restore from the journal and restart it.
    Supervise {
        #[arg(long)]
        config: PathBuf,
    },
    /// Restore every original setting now and keep the agent in stock mode (`--off` to resume).
    SafeMode {
        #[arg(long)]
        config: PathBuf,
        /// Leave safe mode: the running agent enforces the tiers again.
        #[arg(long)]
        off: bool,
    },
    /// Print what this kernel offers (cgroup layout, cpu.idle, cpuset, RT budgets, PSI).
    Probe,
    /// Print a working example config.
    Example,
    /// Ladder helper: the probe server.
    #[command(hide = true)]
    ProbeServer(Helper),
    /// Ladder helper: the open-loop client.
    #[command(hide = true)]
    LoadClient(Helper),
    /// Ladder helper: a single-thread spinner.
    #[command(hide = true)]
    Spinner(Helper),
}

#[derive(Args)]
struct Helper {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// How the supervisor and the ladder start helper processes: this binary, `tailor node ...`.
pub fn self_command() -> Result<AgentCommand, String> {
    let program = std::env::current_exe().map_err(|e| format!("locating the tailor binary: {e}"))?;
    Ok(AgentCommand { program, prefix: vec!["node".into()] })
}

pub fn main(args: NodeArgs) -> Result<(), String> {
    let load = |p: &PathBuf| NodeConfig::load(p).map_err(|e| e.to_string());
    let helper = |name: &str, h: Helper| {
        tailor_node::ladder::probe::helper_main(name, &h.args).unwrap_or_else(|| Err(format!("no helper {name}")))
    };
    match args.command {
        NodeCommand::Run { config, heartbeat } => runner::run(&config, heartbeat).map_err(|e| e.to_string()),
        NodeCommand::Supervise { config } => runner::supervise(&config, self_command()?).map_err(|e| e.to_string()),
        NodeCommand::SafeMode { config, off } => {
            println!("{}", runner::safe_mode(&load(&config)?, off).map_err(|e| e.to_string())?);
            Ok(())
        }
        NodeCommand::Probe => {
            println!("{}", Capabilities::probe());
            Ok(())
        }
        NodeCommand::Example => {
            print!("{}", tailor_node::config::EXAMPLE);
            Ok(())
        }
        NodeCommand::ProbeServer(h) => helper("probe-server", h),
        NodeCommand::LoadClient(h) => helper("load-client", h),
        NodeCommand::Spinner(h) => helper("spinner", h),
    }
}
