//! The node tier agent's command line, shared by `tailor node …` and the standalone `tailor-node`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};

use crate::ladder::probe::{self, ClientOptions};
use crate::runner::{self, AgentCommand};
use crate::{Capabilities, NodeConfig};

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Run the node tier agent (a daemon): apply the tiers and reconcile until SIGTERM/SIGINT,
    /// which restore every original setting.
    Run {
        /// Tier config (TOML); `tailor node example` prints one.
        #[arg(long)]
        config: PathBuf,
        /// Print one heartbeat line per reconcile on stdout (used by `supervise`).
        #[arg(long)]
        heartbeat: bool,
    },
    /// Run the node tier agent as a child with a heartbeat; on its death restore from the
    /// journal and restart it.
    Supervise {
        /// Tier config (TOML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Restore every original setting now and keep the running agent in stock mode (`--off` to resume).
    SafeMode {
        /// Tier config (TOML) of the running agent.
        #[arg(long)]
        config: PathBuf,
        /// Leave safe mode: the running agent enforces the tiers again.
        #[arg(long)]
        off: bool,
    },
    /// Print what this kernel offers (cgroup layout, cpu.idle, cpuset, RT budgets, PSI).
    Probe,
    /// Print a working, commented example tier config.
    Example,
    /// Ladder helper: the probe server (prints `port N`).
    #[command(hide = true)]
    ProbeServer {
        #[arg(long, default_value_t = 4)]
        workers: usize,
    },
    /// Ladder helper: the open-loop client (prints one JSON line).
    #[command(hide = true)]
    LoadClient {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        #[arg(long, default_value_t = 0.5)]
        warmup: f64,
        #[arg(long, default_value_t = 500.0)]
        service_us: f64,
        #[arg(long, value_enum, default_value_t = ServiceDist::Fixed)]
        dist: ServiceDist,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Ladder helper: a single-thread spinner.
    #[command(hide = true)]
    Spinner,
}

/// The probe's service-time distribution.
#[derive(Clone, Copy, ValueEnum)]
pub enum ServiceDist {
    Fixed,
    Exp,
}

/// Runs one node command. `this` is how the current binary restarts itself as the node
/// agent (the supervisor's child): e.g. `tailor` with prefix `["node"]`.
pub fn run(command: NodeCommand, this: AgentCommand) -> Result<(), String> {
    let load = |p: &PathBuf| NodeConfig::load(p).map_err(|e| e.to_string());
    let helper = |what: &str, r: std::io::Result<()>| r.map_err(|e| format!("{what}: {e}"));
    match command {
        NodeCommand::Run { config, heartbeat } => runner::run(load(&config)?, heartbeat).map_err(|e| e.to_string()),
        NodeCommand::Supervise { config } => runner::supervise(&config, this).map_err(|e| e.to_string()),
        NodeCommand::SafeMode { config, off } => {
            println!("{}", runner::safe_mode(&load(&config)?, off).map_err(|e| e.to_string())?);
            Ok(())
        }
        NodeCommand::Probe => {
            println!("{}", Capabilities::probe());
            Ok(())
        }
        NodeCommand::Example => {
            print!("{}", crate::config::EXAMPLE);
            Ok(())
        }
        NodeCommand::ProbeServer { workers } => helper("probe-server", probe::probe_server(workers)),
        NodeCommand::LoadClient { port, rate, seconds, warmup, service_us, dist, seed } => {
            let positive = |name: &str, v: f64| {
                if v.is_finite() && v > 0.0 {
                    Ok(v)
                } else {
                    Err(format!("load-client: --{name} {v}: give a positive number"))
                }
            };
            let opts = ClientOptions {
                port,
                rate_per_s: positive("rate", rate)?,
                duration: Duration::from_secs_f64(positive("seconds", seconds)?),
                warmup: Duration::from_secs_f64(warmup.max(0.0)),
                service_us: positive("service-us", service_us)?,
                exponential: matches!(dist, ServiceDist::Exp),
                seed,
            };
            helper("load-client", probe::load_client(&opts))
        }
        NodeCommand::Spinner => helper("spinner", probe::spinner()),
    }
}
