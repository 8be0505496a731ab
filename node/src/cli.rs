//! The node tier agent's command line, shared by `tailor node …` and the standalone `tailor-node`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::runner::{self, AgentCommand};
use crate::{Capabilities, NodeConfig, NodeError};

/// Why a node command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The agent, its config or its journal failed; the message names the file and the fix.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// `node plan --demand-cpus` must be a positive number of CPUs.
    #[error("--demand-cpus {0}: give the critical tier's peak CPU demand, e.g. 1.5")]
    BadDemand(f64),
    /// The config `node plan` sized does not load on this node: a bug in the sizing rules.
    #[error("internal: the sized config does not load on this node: {0}")]
    SizedConfigRejected(#[source] NodeError),
}

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
    /// Print a working example config, sized to this node (`plan` with its defaults).
    Example,
    /// Print a config sized to this node: a fence only where the critical tier's demand fits in
    /// the physical cores minus one (and leaves it 2 or more), else an RT band; says why.
    Plan {
        /// CPUs the critical tier needs at peak (its `demand_cpus`).
        #[arg(long, default_value_t = 1.0)]
        demand_cpus: f64,
        /// Select Kubernetes pods by the kubelet's QoS classes (Guaranteed: critical,
        /// BestEffort: best-effort) instead of processes by name.
        #[arg(long)]
        pods: bool,
    },
}

/// Runs one node command. `this` is how the current binary restarts itself as the node
/// agent (the supervisor's child): e.g. `tailor` with prefix `["node"]`.
pub fn run(command: NodeCommand, this: AgentCommand) -> Result<(), CliError> {
    match command {
        NodeCommand::Run { config, heartbeat } => Ok(runner::run(&config, heartbeat)?),
        NodeCommand::Supervise { config } => Ok(runner::supervise(&config, this)?),
        NodeCommand::SafeMode { config, off } => {
            println!("{}", runner::safe_mode(&NodeConfig::load(&config)?, off)?);
            Ok(())
        }
        NodeCommand::Probe => {
            println!("{}", Capabilities::probe());
            Ok(())
        }
        NodeCommand::Example => plan(1.0, false),
        NodeCommand::Plan { demand_cpus, pods } => plan(demand_cpus, pods),
    }
}

/// How `node plan --pods` selects the critical tier: by the pod's own label, and only for
/// Guaranteed pods (the chart's default, docs/kubernetes.md).
const PODS_CRITICAL_SELECT: &str = "[tier.pods]\n\
# A pod asks for this tier with the label tailor.dev/tier: critical, which the downward API\n\
# passes to its processes as TAILOR_TIER=critical; only Guaranteed pods (CPU limit = request)\n\
# get it, so a false claim is bounded by the pod's own limit.\n\
tier_label = \"critical\"\nqos = [\"guaranteed\"]\n";

/// `node plan`: the header of the example config, then tiers sized to this node.
fn plan(demand_cpus: f64, pods: bool) -> Result<(), CliError> {
    if !(demand_cpus.is_finite() && demand_cpus > 0.0) {
        return Err(CliError::BadDemand(demand_cpus));
    }
    let caps = Capabilities::probe();
    let shape = crate::sizing::NodeShape::probe(&caps);
    let (shape, critical, best_effort) = if pods {
        (shape.for_pods(), PODS_CRITICAL_SELECT, "[tier.pods]\nqos = [\"besteffort\"]\n")
    } else {
        (shape, crate::sizing::CRITICAL_MATCH, crate::sizing::BEST_EFFORT_MATCH)
    };
    let text = format!(
        "# Tailor node agent config sized to this node by `tailor node plan` (docs/node.md, docs/kubernetes.md).\n\
         state_dir = \"/run/tailor-node\"\ncgroup_name = \"tailor\"\nreconcile_interval_ms = 200\n\
         heartbeat_timeout_ms = 1000\nwindow_ms = 10000\n\n{}",
        crate::sizing::tiers_toml(&shape, demand_cpus, critical, best_effort)
    );
    // What we print must be what the agent accepts on this node (it only reads here).
    NodeConfig::parse(&text, "tailor node plan")
        .and_then(|config| crate::Agent::new(config, caps))
        .map_err(CliError::SizedConfigRejected)?;
    print!("{text}");
    Ok(())
}
