//! The ladder's command line, shared by `tailor bench ladder` and the harness binary `ladder`:
//! the measurement's flags, and the hidden helper commands the ladder starts as its own
//! processes (the probe server, the open-loop client, the spinners).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use tailor_node::runner::AgentCommand;
use tailor_node::NodeConfig;

use super::processes::{self, ClientOptions, Protocol};
use super::{LadderOptions, Server};

/// The ladder's parameters.
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
    /// The ladder's options; `helper` is how the ladder starts its helper processes (a
    /// program and the arguments that lead to [`LadderHelper`]).
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

/// The ladder's own processes, started by the ladder itself (hidden from help).
#[derive(Subcommand)]
pub enum LadderHelper {
    /// The probe server (prints `port N`).
    #[command(hide = true)]
    ProbeServer {
        #[arg(long, default_value_t = 4)]
        workers: usize,
    },
    /// The open-loop client (prints one JSON line).
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
    /// A single-thread spinner.
    #[command(hide = true)]
    Spinner,
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

/// Runs one of the ladder's helper processes until its stdin closes.
pub fn run_helper(helper: LadderHelper) -> Result<(), String> {
    let named = |what: &str, r: std::io::Result<()>| r.map_err(|e| format!("{what}: {e}"));
    match helper {
        LadderHelper::ProbeServer { workers } => named("probe-server", processes::probe_server(workers)),
        LadderHelper::LoadClient {
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
            named("load-client", processes::load_client(&opts))
        }
        LadderHelper::Spinner => named("spinner", processes::spinner()),
    }
}
