//! Clocks the benchmark reads (core's; the load generators' timer slack is `tailor-loadgen`'s).

/// The clocks are core's (one clock module for every crate); `wall_ns` is its realtime clock.
pub use tailor_core::time::{monotonic_ns, realtime_ns as wall_ns};
