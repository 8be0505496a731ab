//! Tailor's vocabulary: time, request context and its wire codec, scheduling
//! policies, latency distributions, the TailGuard deadline planner and admission control.
//!
//! Nothing in this crate reads a clock, sleeps or draws hidden random numbers:
//! time is passed in as [`Nanos`], randomness comes from an [`Rng`] the caller
//! seeded. The only I/O is reading tables (Tailbench quantiles, `RUT_*`) when
//! a configuration is built, never in a policy or on a hot path. That is what lets the simulator (virtual time) and the
//! runtime (real threads) drive the very same policy code.

pub mod context;
pub mod dist;
pub mod latency;
pub mod pick;
pub mod policy;
pub mod progress;
pub mod rng;
pub mod tailguard;
pub mod time;
pub mod wire;

pub use context::Context;
pub use dist::{Cdf, Dist, DistError, DistSpec};
pub use latency::{LatencyHistogram, WindowedLatency};
pub use policy::{AnyPolicy, Job, JobId, Policy, PolicySpec};
pub use progress::Progress;
pub use rng::Rng;
pub use tailguard::{AdmissionController, Deadline, Planner, SloClass, TailModel};
pub use time::Nanos;
pub use wire::{Clamped, Decoded, EdgeRoute, WireError, WireStats};
