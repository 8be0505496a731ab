//! CPU clocks: this thread's CPU time and a loop that burns an exact amount of it.
//!
//! Demo tiers burn *CPU time* (CLOCK_THREAD_CPUTIME_ID), not wall time: a
//! request preempted halfway still owes the rest of its work, exactly as in
//! the simulator where a preempted job keeps its remaining demand.

/// The clocks live in core (one clock module for every crate); re-exported where the
/// runtime has always offered them.
pub use tailor_core::time::{monotonic_ns, realtime_ns, thread_cpu_ns};
use tailor_core::Nanos;

/// Burns `ns` of this thread's CPU time (not wall time): time the thread
/// spends preempted does not count, so the work done is the same under every
/// scheduler.
pub fn burn_cpu(ns: Nanos) {
    let end = thread_cpu_ns().saturating_add(ns);
    // Reading the thread clock costs ~50-100 ns (vDSO falls back to a syscall
    // for CPU clocks on some kernels), so spin a little between reads.
    while thread_cpu_ns() < end {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burns_at_least_the_requested_cpu_time() {
        let before = thread_cpu_ns();
        burn_cpu(2_000_000);
        let used = thread_cpu_ns() - before;
        assert!(used >= 2_000_000, "burned {used} ns");
        // Overshoot is at most a few loop iterations, even on a busy machine.
        assert!(used < 3_000_000, "burned {used} ns");
    }
}
