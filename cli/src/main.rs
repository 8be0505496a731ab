//! `tailor`: one command over Tailor's parts. Today: the simulator and the
//! reproduction of the seeds' evaluations.

mod reproduce;
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
    /// Rerun the seed papers' evaluations and regenerate docs/reproduction.md.
    Reproduce(reproduce::ReproduceArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        Command::Reproduce(args) => reproduce::main(args),
    };
    if let Err(e) = result {
        eprintln!("tailor: {e}");
        std::process::exit(2);
    }
}
