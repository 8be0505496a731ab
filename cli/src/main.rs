//! `tailor`: one command over Tailor's parts — the simulator, the reproduction of the papers'
//! evaluations, the real-chain demo and benchmarks, TailGuard's fan-out, and the two node
//! daemons (the kernel scheduler agent and the node tier agent).

mod agent;
mod benchproxy;
mod demo;
mod doctor;
mod fanout;
mod fanout_probe;
mod ladder;
mod node;
mod output;
mod progress;
mod proxy;
mod reproduce;
mod sim;

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use tailor_telemetry::LogFormat;

/// `tailor --version`: the crate version and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TAILOR_GIT_COMMIT"), ")");

/// Cut the end-to-end tail latency of distributed services.
#[derive(Parser)]
#[command(name = "tailor", version = VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: tailor_telemetry::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario file, or the built-in TailClipper three-tier chain without one.
    Sim(sim::SimArgs),
    /// Rerun the seed papers' evaluations in the simulator; writes a results page to
    /// target/tailor-reproduce (`--publish` refreshes docs/reproduction.md).
    Reproduce(reproduce::ReproduceArgs),
    /// Real N-tier chain on loopback under every scheduling mode, side by side (same as `tailor bench chain`).
    Demo(demo::DemoArgs),
    /// Measurements on real processes: the chain demo, the fan-out demo, the node ladder.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// TailGuard on real sockets: the fan-out demo and R_th calibration (docs/fanout.md).
    Fanout(fanout::FanoutArgs),
    /// Node tier agent (daemon): fences best-effort load from latency-critical work with
    /// cgroups and tiers; run, supervise, safe mode (docs/node.md).
    Node(node::NodeArgs),
    /// Kernel scheduler agent (daemon): orders every registered job thread on this node by one
    /// policy, in a SCHED_FIFO band (default) or by per-key SCHED_FIFO levels
    /// (`--enforce priority`) (docs/runtime.md). Also `tailor agent`.
    #[command(visible_alias = "agent")]
    Scheduler(agent::AgentArgs),
    /// Tailor in front of any HTTP/gRPC service: the edge and the sidecar proxy (docs/proxy.md).
    Proxy(proxy::ProxyArgs),
    /// Find what makes a service's tail exceed its ideal on this node (Tales of the Tail's
    /// sources: background work, non-FIFO scheduling, per-worker queues, IRQs, NUMA, power
    /// saving), or compare measured latencies with the ideal (`--ideal`) (docs/doctor.md).
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script: `tailor completions bash > /etc/bash_completion.d/tailor`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Real N-tier chain on loopback under every scheduling mode, real vs simulated (`tailor demo`).
    Chain(demo::DemoArgs),
    /// TailGuard's handler and task servers on loopback: max load under SLO per scheme (`tailor fanout demo`).
    Fanout(fanout::DemoArgs),
    /// Probe p99 under 0/1/2/4/8 best-effort spinners: stock vs the node tier agent enforcing.
    Ladder(ladder::LadderArgs),
    /// Tailor's proxies against nginx and HAProxy, sidecars in front of a chain of plain Go/Python services, and the sidecar's adaptive `c` against fixed ones.
    Proxy(benchproxy::BenchProxyArgs),
}

fn main() {
    let cli = Cli::parse();
    // The scheduler agent is a daemon: JSON log lines unless --log-format says otherwise.
    let log_format = if matches!(cli.command, Command::Scheduler(_)) { LogFormat::Json } else { LogFormat::Text };
    if let Err(e) = cli.log.init(log_format) {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        Command::Reproduce(args) => reproduce::main(args),
        Command::Node(args) => node::main(args),
        Command::Bench(BenchCommand::Ladder(args)) => ladder::main(args),
        Command::Bench(BenchCommand::Proxy(args)) => benchproxy::main(args),
        Command::Bench(BenchCommand::Chain(args)) | Command::Demo(args) => demo::main(args),
        Command::Bench(BenchCommand::Fanout(args)) => fanout::run_demo(args),
        Command::Fanout(args) => fanout::main(args),
        Command::Scheduler(args) => agent::main(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "tailor", &mut std::io::stdout());
            Ok(())
        }
        Command::Proxy(args) => proxy::main(args),
        Command::Doctor(args) => doctor::main(args),
    };
    if let Err(e) = result {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }
}
