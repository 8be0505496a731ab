//! Integer time. Every timestamp and duration in Tailor is a count of nanoseconds.
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
