//! Clocks the benchmark reads and the precise sleep its sender uses.

use tailor_core::Nanos;

fn read(clock: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; these clock ids always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as Nanos * 1_000_000_000 + ts.tv_nsec as Nanos
}

/// CLOCK_MONOTONIC, ns: the generator's timeline (same clock across processes).
pub fn monotonic_ns() -> Nanos {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME, ns since the Unix epoch: the edge's clock for GATs (docs/design.md: GAT is wall-clock).
pub fn wall_ns() -> Nanos {
    read(libc::CLOCK_REALTIME)
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (absolute), so an
/// early wake-up or a signal never shortens or drifts the schedule.
pub fn sleep_until_monotonic(deadline_ns: Nanos) {
    let ts = libc::timespec { tv_sec: (deadline_ns / 1_000_000_000) as _, tv_nsec: (deadline_ns % 1_000_000_000) as _ };
    loop {
        // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Asks the kernel to wake this thread's timers with 1 ns of slack instead of
/// the default 50 µs, so intended send times are kept to a few µs.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_never_wakes_early() {
        tighten_timer_slack();
        let target = monotonic_ns() + 2_000_000;
        sleep_until_monotonic(target);
        assert!(monotonic_ns() >= target);
    }
}
