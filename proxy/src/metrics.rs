//! The proxy's counters and histograms, and the registry its admin endpoint (the shared
//! telemetry crate's) serves.
//!
//! The data path only bumps relaxed atomics; the families are read from them when a
//! scraper asks (`tailor_telemetry::Scraped`), so metrics take no lock per request.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tailor_core::wire::{WireError, WireStats};
use tailor_core::Nanos;
use tailor_telemetry::prometheus_client::registry::{Registry, Unit};
use tailor_telemetry::{HistogramSnapshot, Scraped};

use crate::forward::UpstreamError;
use crate::gate::ShedReason;
use crate::headers::Inbound;

/// Bucket upper bounds, seconds.
const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// A fixed-bucket histogram of durations.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, ns: Nanos) {
        let s = ns as f64 / 1e9;
        let i = BUCKETS.iter().position(|&b| s <= b).unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// The buckets (each alone, `+Inf` last) and the sum in seconds.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let bounds = BUCKETS.iter().copied().chain([f64::INFINITY]);
        let buckets = bounds.zip(&self.counts).map(|(b, n)| (b, n.load(Relaxed))).collect();
        HistogramSnapshot { buckets, sum: self.sum_ns.load(Relaxed) as f64 / 1e9 }
    }
}

/// Everything the proxy counts. Shared by every connection (relaxed atomics).
#[derive(Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub shed: [AtomicU64; ShedReason::ALL.len()],
    /// Requests that carried no context and were stamped by the sidecar.
    pub stamped: AtomicU64,
    pub mac_failures: AtomicU64,
    pub wire: WireStats,
    pub queue_wait: Histogram,
    pub upstream_latency: Histogram,
    /// Relays that failed, by `tailor-error` kind (in [`RELAY_ERRORS`] order).
    pub relay_errors: [AtomicU64; RELAY_ERRORS.len()],
    /// Client connections open now, on every listener but the admin one.
    pub connections_open: AtomicU64,
    /// Connections refused at `max_connections`.
    pub connections_rejected: AtomicU64,
    /// Connections to a TLS listener whose handshake failed or timed out (no TLS, a bad
    /// client hello, silence).
    pub tls_handshake_failures: AtomicU64,
    /// Client connections closed because a write to them made no progress within
    /// `client_write_timeout_ms` (a client that stopped reading its response).
    pub client_write_timeouts: AtomicU64,
}

/// Every `tailor-error` kind, as labelled in `tailor_proxy_relay_errors_total`.
pub const RELAY_ERRORS: [&str; 7] = [
    "upstream_connect",
    "upstream_tls",
    "upstream_timeout",
    "upstream_closed",
    "body_too_large",
    "body_timeout",
    "upstream_body_timeout",
];

impl Metrics {
    pub fn shed(&self, reason: ShedReason) {
        let i = ShedReason::ALL.iter().position(|r| *r == reason).expect("every reason is listed");
        self.shed[i].fetch_add(1, Relaxed);
    }

    /// Counts a failed relay by kind (and in `upstream_errors` when the upstream failed).
    pub fn relay_failed(&self, e: &UpstreamError) {
        if e.is_upstream() {
            self.upstream_errors.fetch_add(1, Relaxed);
        }
        if let Some(i) = RELAY_ERRORS.iter().position(|k| *k == e.kind()) {
            self.relay_errors[i].fetch_add(1, Relaxed);
        }
    }

    /// Counts how an inbound context was obtained.
    pub fn inbound(&self, how: Inbound) {
        match how {
            Inbound::Carried => {}
            Inbound::Stamped => {
                self.stamped.fetch_add(1, Relaxed);
            }
            Inbound::Rejected(e) => {
                if matches!(e, WireError::MissingMac | WireError::UnknownKey | WireError::BadMac) {
                    self.mac_failures.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

/// What the admin endpoint reads from the running state at each scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct GateView {
    pub queue: usize,
    pub in_flight: usize,
    /// The concurrency limit; `None` where there is no gate (an edge without a cap).
    pub limit: Option<usize>,
    /// The adaptive limit's backlog floor (1: none); `None` for a fixed limit or no gate.
    pub limit_floor: Option<usize>,
}

/// Labelled counts of `counts` in the order of `labels`.
fn labelled<const N: usize>(labels: [&'static str; N], counts: &[AtomicU64; N]) -> Vec<(String, f64)> {
    labels.iter().zip(counts).map(|(l, n)| (l.to_string(), n.load(Relaxed) as f64)).collect()
}

/// The registry of every proxy family, read from `metrics` and, for the queue, in-flight
/// and limit gauges, from `gate` (the state as it is at the scrape).
pub fn registry(metrics: &Arc<Metrics>, gate: impl Fn() -> GateView + Send + Sync + 'static) -> Registry {
    let gate = Arc::new(gate);
    let m = metrics.clone();
    let count = move |read: fn(&Metrics) -> &AtomicU64| {
        let m = m.clone();
        move || read(&m).load(Relaxed)
    };
    let (m1, m2, m3, m4, m5, m6) =
        (metrics.clone(), metrics.clone(), metrics.clone(), metrics.clone(), metrics.clone(), metrics.clone());
    let (g1, g2, g3, g4) = (gate.clone(), gate.clone(), gate.clone(), gate);
    let scraped = Scraped::new()
        .counter("tailor_proxy_requests", "Requests received.", count(|m| &m.requests))
        .counter(
            "tailor_proxy_upstream_errors",
            "Requests the upstream failed (connect, TLS, reset, timeout).",
            count(|m| &m.upstream_errors),
        )
        .counter_family(
            "tailor_proxy_relay_errors",
            "Requests not relayed, by tailor-error kind.",
            None,
            "kind",
            move || labelled(RELAY_ERRORS, &m1.relay_errors),
        )
        .gauge("tailor_proxy_connections_open", "Client connections open.", {
            let read = count(|m| &m.connections_open);
            move || read() as f64
        })
        .counter(
            "tailor_proxy_connections_rejected",
            "Connections refused at max_connections.",
            count(|m| &m.connections_rejected),
        )
        .counter(
            "tailor_proxy_tls_handshake_failures",
            "Client connections whose TLS handshake failed or timed out.",
            count(|m| &m.tls_handshake_failures),
        )
        .counter(
            "tailor_proxy_client_write_timeouts",
            "Client connections closed because the client took none of its response within client_write_timeout_ms.",
            count(|m| &m.client_write_timeouts),
        )
        .gauge("tailor_proxy_queue_length", "Requests waiting for admission.", move || g1().queue as f64)
        .gauge("tailor_proxy_in_flight", "Requests inside the upstream.", move || g2().in_flight as f64)
        .gauge_if(
            "tailor_proxy_concurrency_limit",
            "Requests allowed inside the upstream at once (absent without a gate).",
            move || g3().limit.map(|l| l as f64),
        )
        .gauge_if(
            "tailor_proxy_concurrency_limit_floor",
            "The adaptive limit's floor, raised while the gate's queue keeps growing with nothing shed (1: none; absent for a fixed c).",
            move || g4().limit_floor.map(|l| l as f64),
        )
        .counter_family("tailor_proxy_shed", "Requests shed, by reason.", None, "reason", move || {
            ShedReason::ALL
                .iter()
                .zip(&m2.shed)
                .map(|(r, n)| (r.as_str().to_string(), n.load(Relaxed) as f64))
                .collect()
        })
        .counter("tailor_proxy_context_stamped", "Requests without a context, stamped here.", count(|m| &m.stamped))
        .counter("tailor_proxy_context_accepted", "Requests whose context was decoded.", move || m3.wire.accepted())
        .counter_family("tailor_proxy_context_errors", "Contexts rejected, by kind.", None, "kind", move || {
            m4.wire.rejected().map(|(k, n)| (k.to_string(), n as f64)).collect()
        })
        .counter_family("tailor_proxy_context_clamped", "Contexts clamped, by field.", None, "field", move || {
            m5.wire.clamped().into_iter().map(|(f, n)| (f.to_string(), n as f64)).collect()
        })
        .counter(
            "tailor_proxy_mac_failures",
            "Contexts that failed the MAC (missing, unknown key, bad tag).",
            count(|m| &m.mac_failures),
        )
        .histogram("tailor_proxy_queue_wait", "Time from arrival to admission.", Some(Unit::Seconds), {
            let m = m6.clone();
            move || m.queue_wait.snapshot()
        })
        .histogram(
            "tailor_proxy_upstream_latency",
            "Time from admission to the upstream's response headers.",
            Some(Unit::Seconds),
            move || m6.upstream_latency.snapshot(),
        );
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scraped));
    registry
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(metrics: &Arc<Metrics>, view: GateView) -> String {
        let registry = registry(metrics, move || view);
        let mut openmetrics = String::new();
        tailor_telemetry::prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        tailor_telemetry::exposition::openmetrics_to_text(&openmetrics)
    }

    #[test]
    fn renders_every_family_with_stable_labels() {
        let m = Arc::new(Metrics::default());
        m.shed(ShedReason::CannotMeet);
        m.queue_wait.observe(2_000_000);
        m.inbound(Inbound::Rejected(WireError::BadMac));
        let text = render(&m, GateView { queue: 3, in_flight: 2, limit: Some(4), limit_floor: Some(1) });
        assert!(text.contains("tailor_proxy_shed_total{reason=\"cannot_meet\"} 1\n"), "{text}");
        assert!(text.contains("tailor_proxy_shed_total{reason=\"queue_full\"} 0\n"));
        assert!(text.contains("tailor_proxy_queue_wait_seconds_bucket{le=\"0.0025\"} 1\n"));
        assert!(text.contains("tailor_proxy_queue_wait_seconds_bucket{le=\"+Inf\"} 1\n"));
        assert!(text.contains("tailor_proxy_queue_wait_seconds_count 1\n"));
        assert!(text.contains("# TYPE tailor_proxy_mac_failures_total counter\ntailor_proxy_mac_failures_total 1\n"));
        assert!(text.contains("tailor_proxy_queue_length 3\n"));
        assert!(text.contains("tailor_proxy_concurrency_limit 4\n"));
        assert!(text.contains("tailor_proxy_concurrency_limit_floor 1\n"));
        assert!(text.contains("tailor_proxy_context_errors_total{kind=\"bad_mac\"} 0\n"));
        assert!(text.contains("tailor_proxy_relay_errors_total{kind=\"upstream_tls\"} 0\n"));
        assert!(text.contains("tailor_proxy_relay_errors_total{kind=\"upstream_body_timeout\"} 0\n"));
        assert!(text.contains("tailor_proxy_client_write_timeouts_total 0\n"));
        let edge = render(&m, GateView { queue: 0, in_flight: 0, limit: None, limit_floor: None });
        assert!(!edge.contains("tailor_proxy_concurrency_limit"), "{edge}");
    }
}
