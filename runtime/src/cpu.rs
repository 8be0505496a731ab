//! CPU clocks: this thread's CPU time and a loop that burns an exact amount of it.
//!
//! Demo tiers burn *CPU time* (CLOCK_THREAD_CPUTIME_ID), not wall time: a
//! request preempted halfway still owes the rest of its work, exactly as in
//! the simulator where a preempted job keeps its remaining demand.

use tailor_core::Nanos;

fn clock_ns(clock: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as Nanos * 1_000_000_000 + ts.tv_nsec as Nanos
}

/// CPU time consumed by the calling thread, in ns.
pub fn thread_cpu_ns() -> Nanos {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_MONOTONIC in ns: the time the runtime feeds its policies.
pub fn monotonic_ns() -> Nanos {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in ns: the edge clock GATs are stamped with (comparable across processes and hosts).
pub fn realtime_ns() -> Nanos {
    clock_ns(libc::CLOCK_REALTIME)
}

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
