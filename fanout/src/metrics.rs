//! What the fan-out services expose to Prometheus: each task server and each handler answers `GET /metrics`, `/healthz` and `/readyz` on its own port.
//!
//! The families are read from the services' atomic counters when scraped
//! (docs/observability.md lists them); the latency histograms are the only
//! thing updated per task or query.

use std::sync::Arc;

use tailor_telemetry::prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tailor_telemetry::prometheus_client::registry::{Registry, Unit};
use tailor_telemetry::{AdminServer, Scraped};

/// The admin routes a service answers next to its own.
pub(crate) fn is_admin_path(path: &str) -> bool {
    matches!(path, "/metrics" | "/healthz" | "/readyz")
}

/// A latency histogram in seconds: 10 µs to ~1.3 s in factors of 2 (task
/// service times and query latencies of the shipped configs fall inside).
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 18))
}

/// The admin routes over `scraped` and the given `(name, help, histogram)` families in seconds.
pub(crate) fn admin(scraped: Scraped, histograms: &[(&'static str, &'static str, &Histogram)]) -> AdminServer {
    let mut registry = Registry::default();
    for (name, help, histogram) in histograms {
        registry.register_with_unit(*name, *help, Unit::Seconds, (*histogram).clone());
    }
    registry.register_collector(Box::new(scraped));
    AdminServer::new(Arc::new(registry))
}
