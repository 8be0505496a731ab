//! The checks, one per source of Tales' Table 1 (and RT throttling). Each reads what it needs
//! through the context's root and snapshots and returns its findings.

pub mod background;
pub mod concurrency;
pub mod interrupts;
pub mod numa;
pub mod power;
pub mod pressure;
pub mod rt_throttle;
pub mod sched_class;

use crate::finding::Finding;
use crate::root::SysRoot;
use crate::sample::{deltas, Snapshot, TaskDelta};
use crate::target::Target;

/// What every check sees.
pub struct Context<'a> {
    pub root: &'a SysRoot,
    pub target: &'a Target,
    pub before: &'a Snapshot,
    pub after: &'a Snapshot,
    /// Time between the snapshots.
    pub interval_ns: u64,
    /// Processes that are not "other work" (the doctor itself).
    pub ignore_pids: Vec<u32>,
}

impl Context<'_> {
    /// Per-thread activity between the snapshots.
    pub fn deltas(&self) -> Vec<TaskDelta> {
        deltas(self.before, self.after)
    }

    /// Whether a thread belongs to the target (every thread does, for the node).
    pub fn is_target(&self, pid: u32) -> bool {
        self.target.is_node() || self.target.pids.contains(&pid)
    }
}

/// Runs every check.
pub fn run_all(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(background::check(ctx));
    out.extend(sched_class::check(ctx));
    out.extend(concurrency::check(ctx));
    out.extend(interrupts::check(ctx));
    out.extend(numa::check(ctx));
    out.extend(power::check(ctx));
    out.extend(rt_throttle::check(ctx));
    out
}
