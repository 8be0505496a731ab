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
        NodeCommand::Example => plan(1.0, false),
        NodeCommand::Plan { demand_cpus, pods } => plan(demand_cpus, pods),
        NodeCommand::ProbeServer(h) => helper("probe-server", h),
        NodeCommand::LoadClient(h) => helper("load-client", h),
        NodeCommand::Spinner(h) => helper("spinner", h),
    }
}

/// `tailor node plan`: the header of the example config, then tiers sized to this node.
fn plan(demand_cpus: f64, pods: bool) -> Result<(), String> {
    if !(demand_cpus.is_finite() && demand_cpus > 0.0) {
        return Err(format!("--demand-cpus {demand_cpus}: give the critical tier's peak CPU demand, e.g. 1.5"));
    }
    let shape = tailor_node::sizing::NodeShape::probe(&Capabilities::probe());
    let (critical, best_effort) = if pods {
        ("[tier.pods]\nqos = [\"guaranteed\"]\n", "[tier.pods]\nqos = [\"besteffort\"]\n")
    } else {
        (
            "[tier.match]\ncomm = [\"nginx\", \"envoy\", \"redis-server\"]\n",
            "[tier.match]\ncomm = [\"stress-ng\", \"ffmpeg\"]\n",
        )
    };
    let shape = if pods {
        // The kubelet owns pod cpusets: pod tiers are never fenced (see docs/kubernetes.md).
        tailor_node::sizing::NodeShape { cpuset: false, ..shape }
    } else {
        shape
    };
    let text = format!(
        "# Tailor node agent config sized to this node by `tailor node plan` (docs/node.md, docs/kubernetes.md).\n\
         state_dir = \"/run/tailor-node\"\ncgroup_name = \"tailor\"\nreconcile_interval_ms = 200\n\
         heartbeat_timeout_ms = 1000\nwindow_ms = 10000\n\n{}",
        tailor_node::sizing::tiers_toml(&shape, demand_cpus, critical, best_effort)
    );
    NodeConfig::parse(&text, "tailor node plan")
        .map_err(|e| format!("internal: the sized config does not load: {e}"))?;
    print!("{text}");
    Ok(())
}
