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

/// The proxy's runtime: tokio's multi-thread scheduler, or with one worker
/// (`TOKIO_WORKER_THREADS=1`) the current-thread one, which serves the same tasks on the
/// main thread without the hand-offs between a worker and the thread waiting in `block_on`
/// and without the atomics of work stealing.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    let one_worker = std::env::var("TOKIO_WORKER_THREADS").is_ok_and(|v| v.trim() == "1");
    let mut builder = if one_worker {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build().map_err(|e| format!("starting tokio: {e}"))
}

pub fn main(args: ProxyArgs) -> Result<(), String> {
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
