//! Node agent: tiers that keep co-located best-effort CPU load out of the tail of
//! latency-critical work, with stock Linux mechanisms (cpuset, cpu.idle, SCHED_IDLE, weights,
//! RT group budgets), an undo journal, safe mode, a supervisor and PSI attribution (issue 6).

pub mod agent;
pub mod attribution;
mod cgfs;
pub mod cli;
pub mod config;
pub mod error;
pub mod idle;
pub mod journal;
pub mod kubepods;
pub mod metrics;
pub mod probe;
pub mod procs;
pub mod runner;
pub mod sizing;
#[cfg(test)]
mod v2_file_protocol_tests;

pub use agent::Agent;
pub use config::NodeConfig;
pub use error::NodeError;
pub use probe::Capabilities;
