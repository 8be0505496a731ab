//! Observability for Tailor's processes: the admin endpoint (Prometheus `/metrics`, `/healthz`, `/readyz`) and logging.
//!
//! Every long-running Tailor process (the kernel scheduler agent, the node
//! agent, the fan-out handler and task servers) registers its metric families
//! in a [`prometheus_client::registry::Registry`] and serves it with an
//! [`AdminServer`]; every binary installs one `tracing` subscriber with
//! [`init_tracing`]. Libraries only emit `tracing` events and update metrics;
//! they never print.
//!
//! Naming follows the Prometheus conventions (docs/observability.md): a
//! `tailor_` prefix, counters registered without the `_total` suffix (the
//! encoder appends it), histograms in seconds named `_seconds`, base units,
//! and labels with a small fixed set of values.

pub mod accept;
pub mod admin;
pub mod exposition;
pub mod logging;
pub mod scraped;
pub mod testing;

pub use accept::{AcceptLoop, AcceptStats};
pub use admin::{AdminHandle, AdminServer, Readiness, ReadyFlag};
#[cfg(feature = "clap")]
pub use logging::LogArgs;
pub use logging::{init_tracing, take_log_flags, LogFormat, LoggingError};
/// The exposition library this crate serves, re-exported so every crate registers
/// metrics with the same version.
pub use prometheus_client;
pub use scraped::{HistogramSnapshot, Scraped};
