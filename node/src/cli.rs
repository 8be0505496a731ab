//! The node tier agent's command line, shared by `tailor node …` and the standalone `tailor-node`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::ladder::probe::{self, ClientOptions, Protocol};
use crate::ladder::{LadderOptions, Server};
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
        /// What the client talks to: the probe server, or a Redis server (`EVAL` of a Lua loop).
        #[arg(long, value_enum, default_value_t = ClientProtocol::Probe)]
        protocol: ClientProtocol,
        /// `--protocol redis`: Lua loop steps per request.
        #[arg(long, default_value_t = 10_000)]
        redis_iterations: u64,
        /// SCHED_FIFO priority for the client's threads (default: the normal policy).
        #[arg(long)]
        rt_priority: Option<i32>,
    },
    /// Ladder helper: a single-thread spinner.
    #[command(hide = true)]
    Spinner,
}

/// The ladder's parameters: `tailor bench ladder` and `tailor-node ladder`.
#[derive(Args)]
pub struct LadderArgs {
    /// Short windows (about 1 minute in all) instead of the default (about 3 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Directory for ladder.json, ladder.md and ladder.svg.
    #[arg(long, default_value = "target/tailor-ladder")]
    pub out: PathBuf,
    /// Repetitions per step and arm.
    #[arg(long)]
    reps: Option<usize>,
    /// Measured seconds per window (after the warm-up).
    #[arg(long)]
    window_s: Option<f64>,
    /// Probe requests per second (open loop, fixed rate).
    #[arg(long)]
    rate: Option<f64>,
    /// CPU time burned per request, µs (load on one CPU = rate × service).
    #[arg(long)]
    service_us: Option<f64>,
    /// Exponential instead of fixed service times.
    #[arg(long)]
    exp: bool,
    /// Probe server worker threads.
    #[arg(long)]
    workers: Option<usize>,
    /// Comma-separated spinner counts.
    #[arg(long, value_delimiter = ',')]
    steps: Option<Vec<usize>>,
    /// The latency-critical server: `probe` (this project's) or `redis` (the distribution's
    /// redis-server, each request a Lua loop calibrated to --service-us; installed with apt-get if missing).
    #[arg(long, value_enum, default_value_t = LadderServer::Probe)]
    server: LadderServer,
    /// Agent config for the enforcing arm (default: the shipped defaults, `tailor node plan` sized to this node).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The ladder's latency-critical server.
#[derive(Clone, Copy, ValueEnum)]
pub enum LadderServer {
    Probe,
    Redis,
}

impl LadderArgs {
    /// The ladder's options; `helper` is how the ladder starts its helper processes.
    pub fn options(&self, helper: AgentCommand) -> Result<LadderOptions, String> {
        let mut opts = if self.quick { LadderOptions::quick() } else { LadderOptions::standard() };
        opts.reps = self.reps.unwrap_or(opts.reps);
        opts.window_s = self.window_s.unwrap_or(opts.window_s);
        opts.rate_per_s = self.rate.unwrap_or(opts.rate_per_s);
        opts.service_us = self.service_us.unwrap_or(opts.service_us);
        opts.workers = self.workers.unwrap_or(opts.workers);
        opts.exponential = self.exp;
        opts.steps = self.steps.clone().unwrap_or(opts.steps);
        opts.server = match self.server {
            LadderServer::Probe => Server::Probe,
            LadderServer::Redis => Server::Redis,
        };
        if let Some(path) = &self.config {
            opts.config = Some(NodeConfig::load(path).map_err(|e| e.to_string())?);
        }
        opts.helper = Some(helper);
        Ok(opts)
    }
}

/// What the ladder's load client talks to.
#[derive(Clone, Copy, ValueEnum)]
pub enum ClientProtocol {
    Probe,
    Redis,
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
        NodeCommand::Run { config, heartbeat } => runner::run(&config, heartbeat).map_err(|e| e.to_string()),
        NodeCommand::Supervise { config } => runner::supervise(&config, this).map_err(|e| e.to_string()),
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
        NodeCommand::ProbeServer { workers } => helper("probe-server", probe::probe_server(workers)),
        NodeCommand::LoadClient {
            port,
            rate,
            seconds,
            warmup,
            service_us,
            dist,
            seed,
            protocol,
            redis_iterations,
            rt_priority,
        } => {
            let positive = |name: &str, v: f64| {
                if v.is_finite() && v > 0.0 {
                    Ok(v)
                } else {
                    Err(format!("load-client: --{name} {v}: give a positive number"))
                }
            };
            let opts = ClientOptions {
                protocol: match protocol {
                    ClientProtocol::Probe => Protocol::Probe,
                    ClientProtocol::Redis => Protocol::Redis { iterations: redis_iterations },
                },
                rt_priority,
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

/// How `node plan --pods` selects the critical tier: by the pod's own label, and only for
/// Guaranteed pods (the chart's default, docs/kubernetes.md).
const PODS_CRITICAL_SELECT: &str = "[tier.pods]\n\
# A pod asks for this tier with the label tailor.dev/tier: critical, which the downward API\n\
# passes to its processes as TAILOR_TIER=critical; only Guaranteed pods (CPU limit = request)\n\
# get it, so a false claim is bounded by the pod's own limit.\n\
tier_label = \"critical\"\nqos = [\"guaranteed\"]\n";

/// `node plan`: the header of the example config, then tiers sized to this node.
fn plan(demand_cpus: f64, pods: bool) -> Result<(), String> {
    if !(demand_cpus.is_finite() && demand_cpus > 0.0) {
        return Err(format!("--demand-cpus {demand_cpus}: give the critical tier's peak CPU demand, e.g. 1.5"));
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
        .map_err(|e| format!("internal: the sized config does not load on this node: {e}"))?;
    print!("{text}");
    Ok(())
}
