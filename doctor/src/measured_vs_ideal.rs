//! Measured vs ideal for a live service (Tales §3.2): estimate the amortized service time, feed
//! the measured arrivals to the G/G/c FIFO recursion, and compare percentiles.

use serde::Serialize;
use tailor_core::latency::Percentiles;
use tailor_core::Nanos;

use crate::ideal::ggc_fifo_latencies;
use crate::records::Record;

/// Where the service time comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ServiceTime {
    /// Each request's own measured service time (the records' service column).
    Measured,
    /// One core's peak throughput, requests/s: every request takes 1/peak (an M/D/c-like queue
    /// fed with the real arrivals, as Tales does).
    PeakThroughput(f64),
    /// A given amortized service time, ns.
    Fixed(Nanos),
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct IdealReport {
    pub records: usize,
    /// Requests compared (measured rows with a latency).
    pub compared: usize,
    pub cpus: usize,
    /// `measured`, `peak_throughput` or `given`.
    pub service_time_from: &'static str,
    pub amortized_service_us: f64,
    pub offered_rps: f64,
    /// Offered load × amortized service time / c.
    pub utilization: f64,
    pub measured_ms: Percentiles,
    pub ideal_ms: Percentiles,
    /// Measured / ideal per percentile.
    pub ratio: Ratios,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratios {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// Why no comparison could be made.
#[derive(Debug, thiserror::Error)]
pub enum IdealError {
    #[error("the records have no service_ns column (or zero demand): give --peak-rps (one core's peak throughput) or --service-us")]
    NoServiceTimes,
    #[error("--peak-rps must be positive, got {0}")]
    BadPeak(f64),
    #[error("--cpus must be at least 1")]
    NoCpus,
    #[error("no measured request has a latency to compare")]
    NothingToCompare,
}

/// Compares the records with their ideal G/G/c distribution.
pub fn compare(records: &[Record], service: ServiceTime, cpus: usize) -> Result<IdealReport, IdealError> {
    if cpus == 0 {
        return Err(IdealError::NoCpus);
    }
    let mut sorted: Vec<Record> = records.to_vec();
    sorted.sort_by_key(|r| r.arrival_ns);
    let (demand, from): (Vec<Nanos>, &'static str) = match service {
        ServiceTime::Measured => {
            let d: Option<Vec<Nanos>> = sorted.iter().map(|r| r.service_ns).collect();
            (d.ok_or(IdealError::NoServiceTimes)?, "measured")
        }
        ServiceTime::PeakThroughput(rps) => {
            if !(rps > 0.0 && rps.is_finite()) {
                return Err(IdealError::BadPeak(rps));
            }
            (vec![(1e9 / rps).round() as Nanos; sorted.len()], "peak_throughput")
        }
        ServiceTime::Fixed(ns) => (vec![ns; sorted.len()], "given"),
    };
    let arrivals: Vec<Nanos> = sorted.iter().map(|r| r.arrival_ns).collect();
    let ideal_all = ggc_fifo_latencies(&arrivals, &demand, cpus);
    let (mut measured, mut ideal): (Vec<Nanos>, Vec<Nanos>) = sorted
        .iter()
        .zip(&ideal_all)
        .filter(|(r, _)| r.measured)
        .filter_map(|(r, &i)| Some((r.latency_ns?, i)))
        .unzip();
    if measured.is_empty() {
        return Err(IdealError::NothingToCompare);
    }
    measured.sort_unstable();
    ideal.sort_unstable();
    let (m, i) = (Percentiles::of_sorted(&measured), Percentiles::of_sorted(&ideal));
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let span_s = (arrivals.last().unwrap() - arrivals[0]).max(1) as f64 / 1e9;
    let offered_rps = (sorted.len().saturating_sub(1)) as f64 / span_s;
    let amortized_ns = demand.iter().sum::<Nanos>() as f64 / demand.len() as f64;
    Ok(IdealReport {
        records: sorted.len(),
        compared: measured.len(),
        cpus,
        service_time_from: from,
        amortized_service_us: amortized_ns / 1e3,
        offered_rps,
        utilization: offered_rps * amortized_ns / 1e9 / cpus as f64,
        ratio: Ratios {
            p50: ratio(m.p50, i.p50),
            p90: ratio(m.p90, i.p90),
            p99: ratio(m.p99, i.p99),
            p999: ratio(m.p999, i.p999),
        },
        measured_ms: m,
        ideal_ms: i,
    })
}

/// The human table.
pub fn human(r: &IdealReport) -> String {
    let mut s = format!(
        "measured vs ideal G/G/{c} FIFO: {n} requests ({k} compared), {rps:.0} req/s offered, amortized service time {t:.1} µs ({from}), utilization {u:.2}\n\n",
        c = r.cpus,
        n = r.records,
        k = r.compared,
        rps = r.offered_rps,
        t = r.amortized_service_us,
        from = r.service_time_from,
        u = r.utilization
    );
    s.push_str("percentile   measured ms   ideal ms   measured/ideal\n");
    for (name, m, i, q) in [
        ("p50", r.measured_ms.p50, r.ideal_ms.p50, r.ratio.p50),
        ("p90", r.measured_ms.p90, r.ideal_ms.p90, r.ratio.p90),
        ("p99", r.measured_ms.p99, r.ideal_ms.p99, r.ratio.p99),
        ("p99.9", r.measured_ms.p999, r.ideal_ms.p999, r.ratio.p999),
    ] {
        s.push_str(&format!("{name:<10} {m:>12.3} {i:>10.3} {q:>15.2}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(arrival: Nanos, latency: Nanos, service: Option<Nanos>) -> Record {
        Record { arrival_ns: arrival, latency_ns: Some(latency), service_ns: service, measured: true }
    }

    #[test]
    fn an_ideal_server_has_ratio_one_and_a_slow_one_more() {
        // One server, 10 µs each, arrivals 20 µs apart: never queues; ideal = 10 µs.
        let ideal: Vec<Record> = (0..100).map(|i| rec(i * 20_000, 10_000, Some(10_000))).collect();
        let r = compare(&ideal, ServiceTime::Measured, 1).unwrap();
        assert!((r.ratio.p99 - 1.0).abs() < 1e-9 && (r.utilization - 0.5).abs() < 0.01, "{r:?}");
        // Same arrivals measured 4× slower in the tail.
        let slow: Vec<Record> =
            (0..100).map(|i| rec(i * 20_000, if i % 10 == 0 { 40_000 } else { 10_000 }, None)).collect();
        let r = compare(&slow, ServiceTime::PeakThroughput(100_000.0), 1).unwrap();
        assert!((r.ratio.p99 - 4.0).abs() < 1e-9 && r.ratio.p50 == 1.0, "{r:?}");
        assert_eq!(r.service_time_from, "peak_throughput");
        assert!(human(&r).contains("p99.9"));
    }

    #[test]
    fn missing_service_times_and_bad_flags_are_clear_errors() {
        let r = vec![rec(0, 5, None)];
        assert!(matches!(compare(&r, ServiceTime::Measured, 1), Err(IdealError::NoServiceTimes)));
        assert!(matches!(compare(&r, ServiceTime::PeakThroughput(0.0), 1), Err(IdealError::BadPeak(_))));
        assert!(matches!(compare(&r, ServiceTime::Fixed(5), 0), Err(IdealError::NoCpus)));
    }
}
