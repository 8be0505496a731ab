//! `tailor`: one command over Tailor's parts. Today: the simulator.

mod sim;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tailor", version, about = "Cut the end-to-end tail latency of distributed services.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario file (or the built-in TailClipper three-tier chain).
    Sim(sim::SimArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
    };
    if let Err(e) = result {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
}
