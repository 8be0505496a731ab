//! The two snapshots that rate-based checks compare: every thread's schedstat and last CPU,
//! and the per-CPU interrupt counts, taken an interval apart.

use std::collections::BTreeMap;

use tailor_core::time::monotonic_ns;

use crate::root::{numeric_entries, SysRoot};
use crate::task::{read_task, TaskSample};

/// The node at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every readable thread, keyed by (pid, tid).
    pub tasks: BTreeMap<(u32, u32), TaskSample>,
    /// `/proc/interrupts` as read.
    pub interrupts: String,
    /// CLOCK_MONOTONIC (ns) halfway through reading it.
    pub taken_ns: u64,
}

/// Reads every thread of every process, and the interrupt counts.
pub fn snapshot(root: &SysRoot) -> Snapshot {
    let started = monotonic_ns();
    let mut tasks = BTreeMap::new();
    for pid in numeric_entries(root, "proc") {
        for tid in numeric_entries(root, &format!("proc/{pid}/task")) {
            if let Some(t) = read_task(root, pid, tid) {
                tasks.insert((pid, tid), t);
            }
        }
    }
    let interrupts = root.read("proc/interrupts").unwrap_or_default();
    Snapshot { tasks, interrupts, taken_ns: started / 2 + monotonic_ns() / 2 }
}

/// What one thread did between two snapshots.
#[derive(Clone, Debug)]
pub struct TaskDelta {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// The CPU it last ran on, at the second snapshot.
    pub processor: u32,
    pub policy: u32,
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub slices: u64,
}

/// Per-thread differences for threads present in both snapshots.
pub fn deltas(before: &Snapshot, after: &Snapshot) -> Vec<TaskDelta> {
    after
        .tasks
        .iter()
        .filter_map(|(key, a)| {
            let b = before.tasks.get(key)?;
            Some(TaskDelta {
                pid: a.pid,
                tid: a.tid,
                comm: a.stat.comm.clone(),
                processor: a.stat.processor,
                policy: a.stat.policy,
                cpu_ns: a.sched.cpu_ns.saturating_sub(b.sched.cpu_ns),
                run_delay_ns: a.sched.run_delay_ns.saturating_sub(b.sched.run_delay_ns),
                slices: a.sched.slices.saturating_sub(b.sched.slices),
            })
        })
        .collect()
}

/// Takes a snapshot, waits `interval`, takes another; returns them with the time that really
/// passed between them (on a loaded node reading every thread can itself take a while).
pub fn sample(root: &SysRoot, interval: std::time::Duration) -> (Snapshot, Snapshot, std::time::Duration) {
    let before = snapshot(root);
    std::thread::sleep(interval);
    let after = snapshot(root);
    let elapsed = std::time::Duration::from_nanos(after.taken_ns.saturating_sub(before.taken_ns).max(1));
    (before, after, elapsed)
}
