//! TailGuard on real services: a query handler with SLO- and fan-out-aware task deadlines, EDF task servers, admission control.
//!
//! - [`handler`]: the query handler (library and HTTP front end in [`service`]).
//! - `metrics`: the Prometheus families both services serve on `GET /metrics`.
//! - [`server`]: task servers that queue by a core policy and emulate a shard.
//! - [`timer`]: the precise timer thread the emulated service times run on.
//!
//! Decisions (deadlines, queue order, admission) are core's: the same
//! `Planner`, `AdmissionController` and policies the simulator runs.

pub mod clock;
pub mod handler;
mod metrics;
pub mod server;
pub mod service;
pub mod timer;

pub use handler::{
    AdmissionConfig, Handler, HandlerConfig, HandlerConfigError, Overhead, QueryError, QueryOutcome, QuerySpec,
    Queuing, Scheme, TaskError, TaskTrace,
};
pub use server::{TaskServer, TaskServerConfig};
pub use timer::PreciseTimer;

/// Errors setting things up (serving errors are per query).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    /// The handler's configuration is invalid; the variant names the field.
    #[error("configuration: {0}")]
    Handler(#[from] HandlerConfigError),
    #[error("I/O: {0}")]
    Io(String),
}
