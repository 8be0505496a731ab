//! The proxy's counters and histograms, rendered in the Prometheus text format.
//!
//! Minimal on purpose: the project's shared telemetry crate was not yet available when
//! this was written; the metric names follow Prometheus conventions so a later switch
//! keeps dashboards working.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tailor_core::wire::{WireError, WireStats};
use tailor_core::Nanos;

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

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_ns.load(Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {cumulative}");
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
}

/// Every `tailor-error` kind, as labelled in `tailor_proxy_relay_errors_total`.
pub const RELAY_ERRORS: [&str; 5] =
    ["upstream_connect", "upstream_timeout", "upstream_closed", "body_too_large", "body_timeout"];

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: usize) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

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

    /// The Prometheus text exposition; `queue`, `in_flight` and `limit` are read by the caller.
    pub fn render(&self, queue: usize, in_flight: usize, limit: Option<usize>) -> String {
        let mut out = String::with_capacity(4096);
        counter(&mut out, "tailor_proxy_requests_total", "Requests received.", self.requests.load(Relaxed));
        counter(
            &mut out,
            "tailor_proxy_upstream_errors_total",
            "Requests the upstream failed (connect, reset, timeout).",
            self.upstream_errors.load(Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP tailor_proxy_relay_errors_total Requests not relayed, by tailor-error kind.\n# TYPE tailor_proxy_relay_errors_total counter"
        );
        for (i, kind) in RELAY_ERRORS.iter().enumerate() {
            let _ = writeln!(out, "tailor_proxy_relay_errors_total{{kind=\"{kind}\"}} {}", self.relay_errors[i].load(Relaxed));
        }
        gauge(
            &mut out,
            "tailor_proxy_connections_open",
            "Client connections open.",
            self.connections_open.load(Relaxed) as usize,
        );
        counter(
            &mut out,
            "tailor_proxy_connections_rejected_total",
            "Connections refused at max_connections.",
            self.connections_rejected.load(Relaxed),
        );
        gauge(&mut out, "tailor_proxy_queue_length", "Requests waiting for admission.", queue);
        gauge(&mut out, "tailor_proxy_in_flight", "Requests inside the upstream.", in_flight);
        if let Some(limit) = limit {
            gauge(&mut out, "tailor_proxy_concurrency_limit", "Requests allowed inside the upstream at once.", limit);
        }
        let _ = writeln!(
            out,
            "# HELP tailor_proxy_shed_total Requests shed, by reason.\n# TYPE tailor_proxy_shed_total counter"
        );
        for (i, r) in ShedReason::ALL.iter().enumerate() {
            let _ =
                writeln!(out, "tailor_proxy_shed_total{{reason=\"{}\"}} {}", r.as_str(), self.shed[i].load(Relaxed));
        }
        counter(
            &mut out,
            "tailor_proxy_context_stamped_total",
            "Requests without a context, stamped here.",
            self.stamped.load(Relaxed),
        );
        counter(
            &mut out,
            "tailor_proxy_context_accepted_total",
            "Requests whose context was decoded.",
            self.wire.accepted(),
        );
        let _ = writeln!(
            out,
            "# HELP tailor_proxy_context_errors_total Contexts rejected, by kind.\n# TYPE tailor_proxy_context_errors_total counter"
        );
        for (kind, n) in self.wire.rejected() {
            let _ = writeln!(out, "tailor_proxy_context_errors_total{{kind=\"{kind}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP tailor_proxy_context_clamped_total Contexts clamped, by field.\n# TYPE tailor_proxy_context_clamped_total counter"
        );
        for (field, n) in self.wire.clamped() {
            let _ = writeln!(out, "tailor_proxy_context_clamped_total{{field=\"{field}\"}} {n}");
        }
        counter(
            &mut out,
            "tailor_proxy_mac_failures_total",
            "Contexts that failed the MAC (missing, unknown key, bad tag).",
            self.mac_failures.load(Relaxed),
        );
        self.queue_wait.render(&mut out, "tailor_proxy_queue_wait_seconds", "Time from arrival to admission.");
        self.upstream_latency.render(
            &mut out,
            "tailor_proxy_upstream_latency_seconds",
            "Time from admission to the upstream's response headers.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_stable_labels() {
        let m = Metrics::default();
        m.shed(ShedReason::CannotMeet);
        m.queue_wait.observe(2_000_000);
        m.inbound(Inbound::Rejected(WireError::BadMac));
        let text = m.render(3, 2, Some(4));
        assert!(text.contains("tailor_proxy_shed_total{reason=\"cannot_meet\"} 1"));
        assert!(text.contains("tailor_proxy_shed_total{reason=\"queue_full\"} 0"));
        assert!(text.contains("tailor_proxy_queue_wait_seconds_bucket{le=\"0.0025\"} 1"));
        assert!(text.contains("tailor_proxy_queue_wait_seconds_count 1"));
        assert!(text.contains("tailor_proxy_mac_failures_total 1"));
        assert!(text.contains("tailor_proxy_queue_length 3"));
        assert!(text.contains("tailor_proxy_context_errors_total{kind=\"bad_mac\"} 0"));
    }
}
