//! `tailor doctor`: inspects a node for the sources of excess tail latency that Tales of the
//! Tail lists in its Table 1 (background work, non-FIFO scheduling, per-worker queues,
//! interrupt routing, NUMA, power saving, plus RT throttling), and compares a service's
//! measured latency with the ideal G/G/c distribution of its own arrivals.
//!
//! Every read of `/proc` and `/sys` goes through [`root::SysRoot`], so the checks run on
//! recorded fixture trees in tests exactly as on the live node. `target` resolves what to
//! inspect (a pid, a service name, a cgroup or the whole node), `sample` takes the two
//! snapshots the rate-based checks compare, `checks` holds one module per source, `finding`
//! the shape of a result and `report` its human rendering. `records`, `ideal` and
//! `measured_vs_ideal` are the `--ideal` half.

pub mod checks;
pub mod cpulist;
pub mod finding;
#[cfg(test)]
mod fixtures;
pub mod ideal;
pub mod inspect;
pub mod measured_vs_ideal;
pub mod records;
pub mod report;
pub mod root;
pub mod sample;
pub mod target;
pub mod task;

pub use finding::{Finding, Severity, Source};
pub use inspect::{inspect, Diagnosis, InspectOptions};
pub use root::SysRoot;
pub use target::{Target, TargetSpec};
