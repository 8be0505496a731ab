//! `tailor proxy edge|sidecar --config FILE` and `tailor proxy example edge|sidecar`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Args)]
pub struct ProxyArgs {
    #[command(subcommand)]
    command: ProxyCommand,
}

#[derive(Subcommand)]
enum ProxyCommand {
    /// The entry point: strip client contexts, stamp GAT/class/deadline per route, balance.
    Edge {
        #[arg(long)]
        config: PathBuf,
    },
    /// In front of one local service: queue its requests by the policy, at most `c` inside.
    Sidecar {
        #[arg(long)]
        config: PathBuf,
    },
    /// Print a commented configuration.
    Example { which: Which },
}

#[derive(Clone, Copy, ValueEnum)]
enum Which {
    Edge,
    Sidecar,
}

pub fn main(args: ProxyArgs) -> Result<(), String> {
    let runtime =
        || tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("starting tokio: {e}"));
    match args.command {
        ProxyCommand::Example { which: Which::Edge } => print!("{}", tailor_proxy::example::EDGE),
        ProxyCommand::Example { which: Which::Sidecar } => print!("{}", tailor_proxy::example::SIDECAR),
        ProxyCommand::Edge { config } => {
            runtime()?.block_on(tailor_proxy::serve::run_edge(config)).map_err(|e| e.to_string())?
        }
        ProxyCommand::Sidecar { config } => {
            runtime()?.block_on(tailor_proxy::serve::run_sidecar(config)).map_err(|e| e.to_string())?
        }
    }
    Ok(())
}
