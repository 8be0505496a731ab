//! Wall-clock nanoseconds for contexts, and the mapping to `Instant` for the timer.
//!
//! Deadlines travel in the context as Unix-epoch nanoseconds (the wire
//! format's GAT and deadline), so a handler and task servers in different
//! processes on one host compare them directly. Waits use `Instant`, which is
//! monotonic; the two are related at the moment of conversion.

use std::time::{Duration, Instant};

/// Now, in Unix-epoch nanoseconds (core's realtime clock).
pub use tailor_core::time::realtime_ns as wall_ns;
use tailor_core::time::Nanos;

/// The `Instant` `ns` nanoseconds from now.
pub fn instant_in(ns: Nanos) -> Instant {
    Instant::now() + Duration::from_nanos(ns)
}
