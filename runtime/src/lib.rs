//! Schedules real requests inside a service: context extraction and propagation
//! (`http`, `grpc`), and three backends that enforce a core [`Policy`](tailor_core::Policy)
//! on the threads serving requests:
//!
//! - `none`: the Linux default, every request at once on its own thread (baseline);
//! - `cooperative`: at most `c` jobs admitted, in the policy's order (no privileges);
//! - `kernel`: node-wide; the `tailor agent` runs the policy and turns its decisions
//!   into SCHED_FIFO / SCHED_IDLE for the job threads, so the kernel preempts for us.
//!
//! ```
//! use tailor_runtime::{BackendSpec, Scheduler};
//! use tailor_core::{Context, PolicySpec};
//!
//! let sched = Scheduler::new(BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: 2 }).unwrap();
//! let ctx = Context::stamped(1_000);
//! let answer = sched.run(&ctx, |permit| {
//!     tailor_runtime::cpu::burn_cpu(10_000);
//!     permit.blocked(|| { /* a downstream call: the slot is free meanwhile */ });
//!     42
//! });
//! assert_eq!(answer, 42);
//! ```
//!
//! The design, the measurements and how to run the agent are in `docs/runtime.md`.

mod config;
mod cooperative;
pub mod cpu;
mod current;
mod driver;
pub mod grpc;
pub mod http;
pub mod kernel;
mod pool;
mod scheduler;
mod stats;

pub use config::{available_cpus, BackendSpec, Park};
pub use current::{current, scope};
pub use scheduler::{Permit, Scheduler, SchedulerOptions};
pub use stats::RuntimeStats;

/// Why the runtime refused or failed to do something.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration cannot work; the message names the field and the fix.
    #[error("{0}")]
    Config(String),
    /// The kernel backend cannot run on this machine or with these privileges;
    /// the message names the file or capability and the fix.
    #[error("{0}")]
    Unsupported(String),
    /// Every thread of the domain pool is busy and the pool is at its bound: shed the request.
    #[error("overloaded: every domain pool thread is busy (raise SchedulerOptions::max_threads or shed load)")]
    Overloaded,
    /// The job's work panicked.
    #[error("the job panicked")]
    Panicked,
    /// The kernel's RT settings cannot be read or would let SCHED_FIFO starve the node;
    /// the message names the `/proc` file and the fix.
    #[error(transparent)]
    Sys(#[from] kernel::SysError),
    /// The policy cannot be enforced the way the agent was asked to; the message names the fix.
    #[error(transparent)]
    Enforce(#[from] kernel::EnforceError),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}
