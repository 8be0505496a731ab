//! Tailor's vocabulary: time, request context, scheduling policies, latency
//! distributions, the TailGuard deadline planner and admission control.
//!
//! Nothing in this crate reads a clock, sleeps, does I/O or draws hidden random
//! numbers: time is passed in as [`Nanos`], randomness comes from an [`Rng`]
//! the caller seeded. That is what lets the simulator (virtual time) and the
//! runtime (real threads) drive the very same policy code.

pub mod context;
pub mod policy;
pub mod rng;
pub mod time;

pub use context::Context;
pub use policy::{Job, JobId, Policy, PolicySpec};
pub use rng::Rng;
pub use time::Nanos;
