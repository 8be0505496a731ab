//! Clocks the benchmark reads (core's) and the timer slack its sender sets.

/// The clocks are core's (one clock module for every crate); `wall_ns` is its realtime clock.
pub use tailor_core::time::{monotonic_ns, realtime_ns as wall_ns, sleep_until_monotonic};

/// Asks the kernel to wake this thread's timers with 1 ns of slack instead of
/// the default 50 µs, so intended send times are kept to a few µs.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}
