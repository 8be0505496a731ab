//! Metric families whose values are read from the process's own state when a scraper asks.
//!
//! Daemons already keep their counts in atomics (or in state they lock once
//! per pass anyway); registering a [`Scraped`] collector exposes them without
//! touching the hot path: nothing is updated per event on the metrics' behalf,
//! each `read` closure runs once per scrape on the admin thread.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

type Read<T> = Box<dyn Fn() -> T + Send + Sync>;

enum Values {
    Counter(Read<f64>),
    Gauge(Read<f64>),
    /// A gauge that exists only while the closure gives a value (a family with no sample is omitted).
    OptionalGauge(Read<Option<f64>>),
    /// One label; the closure returns each label value with its sample.
    CounterFamily(&'static str, Read<Vec<(String, f64)>>),
    GaugeFamily(&'static str, Read<Vec<(String, f64)>>),
    Histogram(Read<HistogramSnapshot>),
}

/// A histogram as its owner counts it, read at scrape time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Each bucket's upper bound with the observations in it alone (not cumulative), in
    /// increasing order; the last bound `f64::INFINITY` (or `f64::MAX`) is `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the observed values, in the family's unit.
    pub sum: f64,
}

struct Family {
    /// Without the `_total` of a counter (the encoder appends it) and without the unit suffix.
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    values: Values,
}

/// A set of scrape-time families; register it with `Registry::register_collector`.
#[derive(Default)]
pub struct Scraped {
    families: Vec<Family>,
}

impl Scraped {
    pub fn new() -> Scraped {
        Scraped::default()
    }

    fn push(mut self, name: &'static str, help: &'static str, unit: Option<Unit>, values: Values) -> Scraped {
        self.families.push(Family { name, help, unit, values });
        self
    }

    /// A counter (`name_total`) read from a monotonic count.
    pub fn counter(
        self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, None, Values::Counter(Box::new(move || read() as f64)))
    }

    /// A counter in `unit` (`name_<unit>_total`), e.g. CPU seconds.
    pub fn counter_in(
        self,
        name: &'static str,
        help: &'static str,
        unit: Unit,
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, Some(unit), Values::Counter(Box::new(read)))
    }

    /// A gauge read at scrape time.
    pub fn gauge(
        self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, None, Values::Gauge(Box::new(read)))
    }

    /// A gauge shown only while `read` gives a value, e.g. a limit that a reload may remove.
    pub fn gauge_if(
        self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> Option<f64> + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, None, Values::OptionalGauge(Box::new(read)))
    }

    /// A gauge in `unit` (`name_<unit>`), e.g. an age in seconds.
    pub fn gauge_in(
        self,
        name: &'static str,
        help: &'static str,
        unit: Unit,
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, Some(unit), Values::Gauge(Box::new(read)))
    }

    /// A counter with one label, each label value with its count, in `unit` if
    /// given (the label's values must be a small fixed set, e.g. tier names from the config).
    pub fn counter_family(
        self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        label: &'static str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, unit, Values::CounterFamily(label, Box::new(read)))
    }

    /// A gauge with one label (a small fixed set of values), in `unit` if given.
    pub fn gauge_family(
        self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        label: &'static str,
        read: impl Fn() -> Vec<(String, f64)> + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, unit, Values::GaugeFamily(label, Box::new(read)))
    }
}

impl Scraped {
    /// A histogram in `unit` (`name_<unit>_bucket`, `_sum`, `_count`) read from buckets
    /// the owner keeps (e.g. atomics on a data path that must not take a lock).
    pub fn histogram(
        self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        read: impl Fn() -> HistogramSnapshot + Send + Sync + 'static,
    ) -> Scraped {
        self.push(name, help, unit, Values::Histogram(Box::new(read)))
    }
}

impl fmt::Debug for Scraped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.families.iter().map(|m| m.name)).finish()
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for family in &self.families {
            if let Values::Histogram(read) = &family.values {
                let snapshot = read();
                let out =
                    encoder.encode_descriptor(family.name, family.help, family.unit.as_ref(), MetricType::Histogram)?;
                encode_histogram(&snapshot, out)?;
                continue;
            }
            let (kind, label, samples): (MetricType, Option<&str>, Vec<(String, f64)>) = match &family.values {
                Values::Counter(read) => (MetricType::Counter, None, vec![(String::new(), read())]),
                Values::Gauge(read) => (MetricType::Gauge, None, vec![(String::new(), read())]),
                Values::OptionalGauge(read) => match read() {
                    Some(value) => (MetricType::Gauge, None, vec![(String::new(), value)]),
                    None => continue,
                },
                Values::CounterFamily(label, read) => (MetricType::Counter, Some(label), read()),
                Values::GaugeFamily(label, read) => (MetricType::Gauge, Some(label), read()),
                Values::Histogram(_) => unreachable!("encoded above"),
            };
            let mut out = encoder.encode_descriptor(family.name, family.help, family.unit.as_ref(), kind)?;
            match label {
                None => encode_sample(kind, samples[0].1, out)?,
                Some(label) => {
                    for (value, sample) in samples {
                        encode_sample(kind, sample, out.encode_family(&[(label, value.as_str())])?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_histogram(h: &HistogramSnapshot, mut out: MetricEncoder) -> Result<(), fmt::Error> {
    // The encoder writes `+Inf` for `f64::MAX` only.
    let buckets: Vec<(f64, u64)> =
        h.buckets.iter().map(|&(bound, n)| (if bound.is_infinite() { f64::MAX } else { bound }, n)).collect();
    let count = buckets.iter().map(|(_, n)| n).sum();
    out.encode_histogram::<prometheus_client::encoding::NoLabelSet>(h.sum, count, &buckets, None)
}

/// Whole numbers as integers (`3`, not `3.0`: counts read as counts), others as floats.
fn encode_sample(kind: MetricType, value: f64, out: MetricEncoder) -> Result<(), fmt::Error> {
    let whole = value.fract() == 0.0 && value.abs() < 9.0e15;
    match (kind, whole) {
        (MetricType::Counter, true) => ConstCounter::new(value as u64).encode(out),
        (MetricType::Counter, false) => ConstCounter::new(value).encode(out),
        (_, true) => ConstGauge::new(value as i64).encode(out),
        (_, false) => ConstGauge::new(value).encode(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn values_are_read_at_encoding_time() {
        let jobs = Arc::new(AtomicU64::new(0));
        let read = jobs.clone();
        let scraped = Scraped::new()
            .counter("tailor_t_jobs", "Jobs.", move || read.load(Ordering::Relaxed))
            .gauge_in("tailor_t_age", "Age.", Unit::Seconds, || 1.5)
            .gauge_family("tailor_t_procs", "Per tier.", None, "tier", || vec![("lc".into(), 2.0), ("be".into(), 5.0)])
            .gauge_if("tailor_t_limit", "Shown with a value.", || Some(4.0))
            .gauge_if("tailor_t_absent", "Shown without one.", || None);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(scraped));
        jobs.store(9, Ordering::Relaxed);
        let text = crate::exposition::openmetrics_to_text(&encode(&registry));
        assert!(text.contains("# TYPE tailor_t_jobs_total counter\ntailor_t_jobs_total 9\n"), "{text}");
        assert!(text.contains("tailor_t_age_seconds 1.5\n"), "{text}");
        assert!(text.contains("tailor_t_procs{tier=\"be\"} 5\n"), "{text}");
        assert!(text.contains("tailor_t_limit 4\n") && !text.contains("tailor_t_absent"), "{text}");
    }

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket() {
        let snapshot = HistogramSnapshot { buckets: vec![(0.001, 2), (0.01, 1), (f64::INFINITY, 1)], sum: 1.5 };
        let scraped = Scraped::new().histogram("tailor_t_wait", "Wait.", Some(Unit::Seconds), move || snapshot.clone());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(scraped));
        let text = crate::exposition::openmetrics_to_text(&encode(&registry));
        assert!(text.contains("# TYPE tailor_t_wait_seconds histogram\n"), "{text}");
        assert!(text.contains("tailor_t_wait_seconds_bucket{le=\"0.001\"} 2\n"), "{text}");
        assert!(text.contains("tailor_t_wait_seconds_bucket{le=\"0.01\"} 3\n"), "{text}");
        assert!(text.contains("tailor_t_wait_seconds_bucket{le=\"+Inf\"} 4\n"), "{text}");
        assert!(
            text.contains("tailor_t_wait_seconds_count 4\n") && text.contains("tailor_t_wait_seconds_sum 1.5\n"),
            "{text}"
        );
    }

    fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }
}
