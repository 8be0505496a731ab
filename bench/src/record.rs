//! Per-request records of an open-loop run and their summary: latency
//! percentiles, throughput and reordering % exactly as the simulator defines
//! them (docs/metrics.md; the same functions compute them), the ideal G/G/c
//! FIFO distribution from the measured arrivals, and error counts.

use std::fmt::Write;

use serde::Serialize;
use tailor_core::time::NANOS_PER_SEC;
use tailor_core::Nanos;
use tailor_sim::metrics::{quantile_sorted, reordering_pct, Percentiles};

use crate::ideal::ggc_fifo_latencies;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A 2xx response.
    Ok,
    /// A response with another status.
    HttpError,
    /// No response within the run's timeout.
    Timeout,
    /// The connection failed or broke.
    Transport,
    /// Not sent: the generator's in-flight bound was reached (the system was
    /// overloaded; sending would have queued without bound).
    Dropped,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::HttpError => "http_error",
            Outcome::Timeout => "timeout",
            Outcome::Transport => "transport",
            Outcome::Dropped => "dropped",
        }
    }
}

/// One request, as the generator saw it. Times are ns from the run's start
/// (the generator's monotonic clock).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub id: u64,
    /// When the arrival process said to send it: latency is measured from here
    /// (no coordinated omission).
    pub intended_ns: Nanos,
    /// When the sender actually handed it to the connection pool.
    pub sent_ns: Nanos,
    /// When the whole response had arrived (0 if none).
    pub done_ns: Nanos,
    /// HTTP status (0 if none).
    pub status: u16,
    pub outcome: Outcome,
    /// CPU demand at each tier, µs (what the `tailor-demand-us` header carried).
    pub demands_us: Vec<u32>,
    /// GAT the edge stamped (wall clock, ns since the Unix epoch; 0 if unknown).
    pub gat_ns: Nanos,
    /// Tiers that reported the GAT they scheduled the request by.
    pub tiers_seen: u32,
    /// Every reporting tier saw the same GAT.
    pub gat_consistent: bool,
}

impl RequestRecord {
    pub fn latency_ns(&self) -> Nanos {
        self.done_ns.saturating_sub(self.intended_ns)
    }
    pub fn total_demand_ns(&self) -> Nanos {
        self.demands_us.iter().map(|&d| d as Nanos * 1_000).sum()
    }
}

/// Percentiles of the send lag (actual − intended send time): how far the
/// generator fell behind its schedule.
#[derive(Clone, Debug, Serialize)]
pub struct LagSummary {
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The ideal distribution and measured/ideal per percentile.
#[derive(Clone, Debug, Serialize)]
pub struct IdealSummary {
    /// CPUs of the G/G/c queue.
    pub cpus: usize,
    pub latency_ms: Percentiles,
    /// Measured / ideal at p50, p90, p99, p99.9 and the mean.
    pub ratio: RatioSummary,
}

#[derive(Clone, Debug, Serialize)]
pub struct RatioSummary {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// The summary of one run (docs/demo.md, "JSON summary").
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Measured requests (after the warm-up), whatever their outcome.
    pub requests: u64,
    /// Measured requests that got a 2xx response; the latency figures are over these.
    pub ok: u64,
    pub http_errors: u64,
    pub timeouts: u64,
    pub transport_errors: u64,
    pub dropped: u64,
    /// Measured requests whose tiers did not all report the same GAT, or fewer than all tiers.
    pub gat_mismatches: u64,
    /// Measured requests / span of their intended send times.
    pub offered_rps: f64,
    /// Latency from the intended send time to the end of the response.
    pub latency_ms: Percentiles,
    /// Completions / (last completion − first intended send), as `tailor sim` defines it.
    pub throughput_rps: f64,
    /// docs/metrics.md; arrival = intended send time, ideal latency = total CPU demand.
    pub reordering_pct: f64,
    pub send_lag: LagSummary,
    pub ideal: IdealSummary,
}

/// Summarises a run: `records` in intended-send order, the first `warmup` excluded
/// (they still load the ideal queue, as they loaded the real one); `tiers` is the
/// number of tiers that must report the GAT; `cpus` the CPUs the chain shares.
pub fn summarize(records: &[RequestRecord], warmup: usize, tiers: u32, cpus: usize) -> RunSummary {
    let measured = &records[warmup.min(records.len())..];
    let count = |o: Outcome| measured.iter().filter(|r| r.outcome == o).count() as u64;
    let ok: Vec<&RequestRecord> = measured.iter().filter(|r| r.outcome == Outcome::Ok).collect();
    let mut latency: Vec<Nanos> = ok.iter().map(|r| r.latency_ns()).collect();
    let gat: Vec<Nanos> = ok.iter().map(|r| r.intended_ns).collect();
    let ideal_lat: Vec<Nanos> = ok.iter().map(|r| r.total_demand_ns()).collect();
    let reordering = reordering_pct(&gat, &latency, &ideal_lat);
    latency.sort_unstable();

    let span_ns = |first: Nanos, last: Nanos| (last.saturating_sub(first)).max(1) as f64 / NANOS_PER_SEC as f64;
    let offered_rps = match (measured.first(), measured.last()) {
        (Some(a), Some(b)) if measured.len() > 1 => (measured.len() - 1) as f64 / span_ns(a.intended_ns, b.intended_ns),
        _ => 0.0,
    };
    let throughput_rps = match ok.first() {
        Some(first) => ok.len() as f64 / span_ns(first.intended_ns, ok.iter().map(|r| r.done_ns).max().unwrap()),
        None => 0.0,
    };

    let mut lag: Vec<Nanos> = measured
        .iter()
        .filter(|r| r.outcome != Outcome::Dropped)
        .map(|r| r.sent_ns.saturating_sub(r.intended_ns))
        .collect();
    lag.sort_unstable();
    let us = |ns: Nanos| ns as f64 / 1e3;

    // The ideal over every request in send order; report the measured OK ones.
    let arrivals: Vec<Nanos> = records.iter().map(|r| r.intended_ns).collect();
    let demands: Vec<Nanos> = records.iter().map(|r| r.total_demand_ns()).collect();
    let ideal_all = ggc_fifo_latencies(&arrivals, &demands, cpus);
    let mut ideal: Vec<Nanos> = ideal_all[warmup.min(records.len())..]
        .iter()
        .zip(measured)
        .filter(|(_, r)| r.outcome == Outcome::Ok)
        .map(|(&l, _)| l)
        .collect();
    ideal.sort_unstable();
    let measured_pct = Percentiles::of_sorted(&latency);
    let ideal_pct = Percentiles::of_sorted(&ideal);
    let ratio = |m: f64, i: f64| if i > 0.0 { m / i } else { 0.0 };
    RunSummary {
        requests: measured.len() as u64,
        ok: ok.len() as u64,
        http_errors: count(Outcome::HttpError),
        timeouts: count(Outcome::Timeout),
        transport_errors: count(Outcome::Transport),
        dropped: count(Outcome::Dropped),
        gat_mismatches: ok.iter().filter(|r| !r.gat_consistent || r.tiers_seen != tiers).count() as u64,
        offered_rps,
        throughput_rps,
        reordering_pct: reordering,
        send_lag: LagSummary {
            p50_us: us(quantile_sorted(&lag, 0.5)),
            p99_us: us(quantile_sorted(&lag, 0.99)),
            max_us: us(lag.last().copied().unwrap_or(0)),
        },
        ideal: IdealSummary {
            cpus,
            ratio: RatioSummary {
                mean: ratio(measured_pct.mean, ideal_pct.mean),
                p50: ratio(measured_pct.p50, ideal_pct.p50),
                p90: ratio(measured_pct.p90, ideal_pct.p90),
                p99: ratio(measured_pct.p99, ideal_pct.p99),
                p999: ratio(measured_pct.p999, ideal_pct.p999),
            },
            latency_ms: ideal_pct,
        },
        latency_ms: measured_pct,
    }
}

/// Latencies (ns) of the measured OK requests, for the histogram.
/// The upper median of a few per-run figures (the middle one; of an even count, the higher
/// of the two middle ones, a value some run really had); NaN when there are none.
pub fn upper_median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn measured_latencies(records: &[RequestRecord], warmup: usize) -> Vec<Nanos> {
    records[warmup.min(records.len())..].iter().filter(|r| r.outcome == Outcome::Ok).map(|r| r.latency_ns()).collect()
}

/// The per-request CSV (docs/demo.md, "Per-request CSV"): one row per request,
/// warm-up included and marked, demands as `a;b;c` µs.
pub fn records_csv(records: &[RequestRecord], warmup: usize) -> String {
    let mut s = String::with_capacity(records.len() * 96);
    s.push_str("id,warmup,intended_ns,sent_ns,done_ns,latency_us,status,outcome,demands_us,total_demand_us,gat_ns,tiers_seen,gat_consistent\n");
    for (i, r) in records.iter().enumerate() {
        let demands: Vec<String> = r.demands_us.iter().map(|d| d.to_string()).collect();
        let latency_us =
            if r.outcome == Outcome::Ok { format!("{:.3}", r.latency_ns() as f64 / 1e3) } else { String::new() };
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.id,
            (i < warmup) as u8,
            r.intended_ns,
            r.sent_ns,
            r.done_ns,
            latency_us,
            r.status,
            r.outcome.name(),
            demands.join(";"),
            r.total_demand_ns() / 1_000,
            r.gat_ns,
            r.tiers_seen,
            r.gat_consistent as u8
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, intended: Nanos, done: Nanos, demand_us: u32) -> RequestRecord {
        RequestRecord {
            id,
            intended_ns: intended,
            sent_ns: intended + 10_000,
            done_ns: done,
            status: 200,
            outcome: Outcome::Ok,
            demands_us: vec![demand_us],
            gat_ns: 1,
            tiers_seen: 1,
            gat_consistent: true,
        }
    }

    #[test]
    fn summary_excludes_warmup_counts_outcomes_and_compares_to_the_ideal() {
        let ms = 1_000_000;
        let mut r = vec![
            rec(0, 0, 100 * ms, 1000), // warm-up
            rec(1, 10 * ms, 12 * ms, 1000),
            rec(2, 20 * ms, 24 * ms, 2000),
            rec(3, 30 * ms, 0, 1000),
        ];
        r[3].outcome = Outcome::Timeout;
        r[3].status = 0;
        let s = summarize(&r, 1, 1, 1);
        assert_eq!((s.requests, s.ok, s.timeouts, s.gat_mismatches), (3, 2, 1, 0));
        assert_eq!(s.latency_ms.p50, 2.0);
        assert_eq!(s.latency_ms.max, 4.0);
        // Ideal: one CPU; r0 (1 ms) done at 1 ms, r1 alone: 1 ms, r2: 2 ms.
        assert_eq!(s.ideal.latency_ms.max, 2.0);
        assert_eq!(s.ideal.ratio.p50, 2.0);
        assert_eq!(s.send_lag.p50_us, 10.0);
        // 2 completions between 10 ms and 24 ms.
        assert!((s.throughput_rps - 2.0 / 0.014).abs() < 1e-6);
        let csv = records_csv(&r, 1);
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.lines().nth(1).unwrap().starts_with("0,1,0,10000,100000000,100000.000,200,ok,1000,1000,1,1,1"));
        assert!(csv.lines().nth(4).unwrap().contains(",timeout,"));
    }
}
