//! Integer time, and the clocks that give it. Every timestamp and duration in Tailor is a
//! count of nanoseconds.
//!
//! A plain `u64` keeps the simulator's hot loop free of conversions and makes
//! every computation exact and deterministic; 2^64 ns is 584 years.

/// Nanoseconds: a timestamp (since an arbitrary epoch) or a duration.
pub type Nanos = u64;

pub const NANOS_PER_MICRO: Nanos = 1_000;
pub const NANOS_PER_MILLI: Nanos = 1_000_000;
pub const NANOS_PER_SEC: Nanos = 1_000_000_000;

/// "No deadline": sorts after every real deadline.
pub const NEVER: Nanos = Nanos::MAX;

/// Converts (possibly fractional) milliseconds to nanoseconds, rounding to nearest.
pub fn from_millis_f64(ms: f64) -> Nanos {
    (ms * NANOS_PER_MILLI as f64).round().max(0.0) as Nanos
}

/// Converts (possibly fractional) microseconds to nanoseconds, rounding to nearest.
pub fn from_micros_f64(us: f64) -> Nanos {
    (us * NANOS_PER_MICRO as f64).round().max(0.0) as Nanos
}

/// Nanoseconds as fractional milliseconds, for reports.
pub fn to_millis_f64(ns: Nanos) -> f64 {
    ns as f64 / NANOS_PER_MILLI as f64
}

// The clocks every Tailor process reads: one place, so policies, agents, load generators
// and probes that compare timestamps across processes read the same clock the same way.

fn clock_ns(clock: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as Nanos * NANOS_PER_SEC + ts.tv_nsec as Nanos
}

/// CLOCK_MONOTONIC in ns: the time the runtime feeds its policies and the load
/// generators' timeline (the same clock in every process on a host).
pub fn monotonic_ns() -> Nanos {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in ns since the Unix epoch: the edge clock GATs and deadlines are
/// stamped with (comparable across processes and hosts).
pub fn realtime_ns() -> Nanos {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time consumed by the calling thread, in ns (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_ns() -> Nanos {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (absolute), so an early wake-up
/// or a signal never shortens or drifts a schedule.
pub fn sleep_until_monotonic(deadline_ns: Nanos) {
    let ts = libc::timespec { tv_sec: (deadline_ns / NANOS_PER_SEC) as _, tv_nsec: (deadline_ns % NANOS_PER_SEC) as _ };
    loop {
        // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if rc != libc::EINTR {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_agrees_with_std_instant_and_sleep_until_never_wakes_early() {
        let (before, instant) = (monotonic_ns(), std::time::Instant::now());
        let target = before + 2 * NANOS_PER_MILLI;
        sleep_until_monotonic(target);
        let after = monotonic_ns();
        assert!(after >= target, "woke {} ns early", target - after);
        // std's Instant is CLOCK_MONOTONIC too: both saw the same interval, give or take.
        let by_std = instant.elapsed().as_nanos() as Nanos;
        assert!(by_std.abs_diff(after - before) < 50 * NANOS_PER_MILLI, "{by_std} vs {}", after - before);
    }

    #[test]
    fn realtime_is_the_unix_epoch_clock() {
        let std_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as Nanos;
        assert!(realtime_ns().abs_diff(std_now) < NANOS_PER_SEC);
    }

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let before = thread_cpu_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let slept = thread_cpu_ns() - before;
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < 5 * NANOS_PER_MILLI {}
        assert!(slept < 10 * NANOS_PER_MILLI, "a 20 ms sleep used {slept} ns of CPU");
        assert!(thread_cpu_ns() - before >= 5 * NANOS_PER_MILLI);
    }
}
