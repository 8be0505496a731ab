//! Counters of what a [`Scheduler`](crate::Scheduler) did, for metrics and tests.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters (relaxed atomics: each is exact, several read together are not a snapshot).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub admitted: AtomicU64,
    pub completed: AtomicU64,
    pub waited_ns: AtomicU64,
    pub blocked: AtomicU64,
    pub priority_changes: AtomicU64,
    pub overloaded: AtomicU64,
    pub panicked: AtomicU64,
    pub errors: AtomicU64,
    pub fallbacks: AtomicU64,
    pub reattached: AtomicU64,
    pub max_running: AtomicU64,
    pub handoffs: AtomicU64,
    pub handoff_ns: AtomicU64,
    pub handoff_run_queue_ns: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn snapshot(&self) -> RuntimeStats {
        RuntimeStats {
            admitted: self.admitted.load(Relaxed),
            completed: self.completed.load(Relaxed),
            waited_ns: self.waited_ns.load(Relaxed),
            blocked: self.blocked.load(Relaxed),
            priority_changes: self.priority_changes.load(Relaxed),
            overloaded: self.overloaded.load(Relaxed),
            panicked: self.panicked.load(Relaxed),
            errors: self.errors.load(Relaxed),
            fallbacks: self.fallbacks.load(Relaxed),
            reattached: self.reattached.load(Relaxed),
            max_running: self.max_running.load(Relaxed),
            handoffs: self.handoffs.load(Relaxed),
            handoff_ns: self.handoff_ns.load(Relaxed),
            handoff_run_queue_ns: self.handoff_run_queue_ns.load(Relaxed),
        }
    }
}

/// What a scheduler has done since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Jobs admitted (first admission of each job; re-admissions after `blocked` not counted).
    pub admitted: u64,
    /// Jobs that left the scheduler (normally or by panic).
    pub completed: u64,
    /// Total time jobs spent waiting for admission (first admission and after `blocked`), ns.
    pub waited_ns: u64,
    /// Calls to [`Permit::blocked`](crate::Permit::blocked).
    pub blocked: u64,
    /// Scheduling policy/priority changes made for jobs of this process (kernel backend).
    pub priority_changes: u64,
    /// `spawn` calls refused with [`RuntimeError::Overloaded`](crate::RuntimeError::Overloaded).
    pub overloaded: u64,
    /// Jobs whose work panicked (they still completed in the policy).
    pub panicked: u64,
    /// Failed system calls and other recoverable errors (each also logged once).
    pub errors: u64,
    /// Times the kernel backend fell back to cooperative (agent gone).
    pub fallbacks: u64,
    /// Times the kernel backend re-attached to an agent after a fallback.
    pub reattached: u64,
    /// Most jobs admitted at the same time (cooperative backend), a check of the `c` bound.
    pub max_running: u64,
    /// Admissions of a parked thread (cooperative backend): a job that waited, admitted
    /// by the job that freed its slot, which then unparks it.
    pub handoffs: u64,
    /// Total time from those admissions to the parked thread running again, ns.
    pub handoff_ns: u64,
    /// The part of `handoff_ns` the threads spent on a run queue waiting for a CPU
    /// (schedstat); the rest is the wake-up itself (0 where schedstat is unavailable).
    pub handoff_run_queue_ns: u64,
}
