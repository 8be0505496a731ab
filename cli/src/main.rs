//! `tailor`: one command over Tailor's parts. Today: the simulator and the
//! reproduction of the seeds' evaluations.

mod agent;
mod demo;
mod fanout;
mod ladder;
mod node;
mod proxy;
mod reproduce;
mod sim;

use clap::{Parser, Subcommand};
use tailor_telemetry::LogFormat;

#[derive(Parser)]
#[command(name = "tailor", version, about = "Cut the end-to-end tail latency of distributed services.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: tailor_telemetry::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario file (or the built-in TailClipper three-tier chain).
    Sim(sim::SimArgs),
    /// Rerun the seed papers' evaluations and regenerate docs/reproduction.md.
    Reproduce(reproduce::ReproduceArgs),
    /// Run a real N-tier chain on loopback under every scheduling mode, side by side (docs/demo.md).
    Demo(demo::DemoArgs),
    /// TailGuard on real sockets: the fan-out demo and R_th calibration (docs/fanout.md).
    Fanout(fanout::FanoutArgs),
    /// Node agent: tiers that fence best-effort load from latency-critical work (docs/node.md).
    Node(node::NodeArgs),
    /// The kernel-enforced runtime's node agent: one policy for every service on this node (docs/runtime.md).
    Agent(agent::AgentArgs),
    /// Tailor in front of any HTTP/gRPC service: the edge and the sidecar proxy (docs/proxy.md).
    Proxy(proxy::ProxyArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Probe p99 under 0/1/2/4/8 best-effort spinners: stock vs the node agent enforcing.
    Ladder(ladder::LadderArgs),
}

fn main() {
    let cli = Cli::parse();
    // The scheduler agent is a daemon: JSON log lines unless --log-format says otherwise.
    let log_format = if matches!(cli.command, Command::Agent(_)) { LogFormat::Json } else { LogFormat::Text };
    if let Err(e) = cli.log.init(log_format) {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        Command::Reproduce(args) => reproduce::main(args),
        Command::Node(args) => node::main(args),
        Command::Bench(BenchCommand::Ladder(args)) => ladder::main(args),
        Command::Demo(args) => demo::main(args),
        Command::Fanout(args) => fanout::main(args),
        Command::Agent(args) => agent::main(args),
        Command::Proxy(args) => proxy::main(args),
    };
    if let Err(e) = result {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
}
