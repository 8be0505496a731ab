//! Online latency distributions: bounded-memory, mergeable, decaying or windowed log-linear histograms.
//!
//! [`LatencyHistogram`] is HdrHistogram's layout with 128 sub-buckets per
//! power of two: every value below 256 ns has its own bucket, and above that a
//! bucket [lo, lo + w) has w ≤ lo/128. Counts are `f64` so that old samples can
//! be faded out by [`LatencyHistogram::decay`]; [`WindowedLatency`] instead
//! keeps a ring of sub-histograms and forgets whole sub-windows. Either way the
//! memory is fixed ([`BUCKETS`] counts, 34 KiB per histogram) whatever the
//! number of samples.
//!
//! **Error bound.** [`LatencyHistogram::quantile`] returns a value in the same
//! bucket as the exact nearest-rank sample quantile, so
//! |estimate − exact| ≤ exact/128 (< 0.79%), and it is exact below 256 ns.
//! [`LatencyHistogram::cdf`] is exact at bucket boundaries and interpolates
//! linearly inside a bucket; both stay within the smallest and largest value
//! recorded since the last clear. Values above [`MAX_TRACKABLE_NS`] (≈ 18 min) are
//! counted in the top bucket (and in [`LatencyHistogram::saturated`]), but
//! [`LatencyHistogram::mean`] uses their true value.
//!
//! Nothing here reads a clock: windows rotate on the `now` the caller passes.

use crate::dist::Cdf;
use crate::time::{to_millis_f64, Nanos, NEVER};

/// log2 of the sub-buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Highest power of two covered: values up to 2^40 − 1 ns (≈ 1,100 s).
const TOP_BIT: u32 = 40;
/// Number of buckets: one group of 128 unit buckets below 128 ns, then one
/// group of 128 per power of two from 2^7 to 2^39.
pub const BUCKETS: usize = ((TOP_BIT - SUB_BITS + 1) as usize) << SUB_BITS;
/// The largest value with its own bucket; larger values saturate to it.
pub const MAX_TRACKABLE_NS: Nanos = (1 << TOP_BIT) - 1;

#[inline]
fn bucket_of(v: Nanos) -> usize {
    let v = v.min(MAX_TRACKABLE_NS);
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // ⌊log2 v⌋ ≥ 7
    let shift = e - SUB_BITS;
    (((e - SUB_BITS + 1) as usize) << SUB_BITS) + ((v >> shift) - SUB) as usize
}

/// The bucket's lowest value and width.
#[inline]
fn bucket_range(i: usize) -> (Nanos, Nanos) {
    let group = (i >> SUB_BITS) as u32;
    let sub = (i as u64) & (SUB - 1);
    if group == 0 {
        (sub, 1)
    } else {
        let shift = group - 1;
        ((SUB + sub) << shift, 1 << shift)
    }
}

// === impl LatencyHistogram ===

/// A log-linear latency histogram with decayable counts. See the module doc
/// for layout and error bound.
///
/// An empty histogram behaves as the distribution concentrated at 0
/// (`cdf` = 1, `quantile` = 0, `mean` = 0); check [`LatencyHistogram::is_empty`]
/// before trusting it.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[f64]>,
    total: f64,
    /// Σ value · weight, for an exact mean.
    sum: f64,
    /// Σ value² · weight, for an exact variance.
    sum_sq: f64,
    saturated: f64,
    /// Occupied bucket range (inclusive); `lo > hi` when empty.
    lo: usize,
    hi: usize,
    /// Smallest and largest value recorded since the last `clear` (capped at
    /// [`MAX_TRACKABLE_NS`]): quantiles and the CDF never stray outside them.
    min: Nanos,
    max: Nanos,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.total)
            .field("mean_ns", &self.mean())
            .field("p50_ns", &self.quantile(0.5))
            .field("p99_ns", &self.quantile(0.99))
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            counts: vec![0.0; BUCKETS].into_boxed_slice(),
            total: 0.0,
            sum: 0.0,
            sum_sq: 0.0,
            saturated: 0.0,
            lo: BUCKETS,
            hi: 0,
            min: NEVER,
            max: 0,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: Nanos) {
        self.record_weighted(ns, 1.0);
    }

    /// Records a latency with a weight (> 0; e.g. a count of identical samples).
    #[inline]
    pub fn record_weighted(&mut self, ns: Nanos, weight: f64) {
        if !(weight > 0.0 && weight.is_finite()) {
            return;
        }
        let i = bucket_of(ns);
        self.counts[i] += weight;
        self.total += weight;
        self.sum += ns as f64 * weight;
        self.sum_sq += ns as f64 * ns as f64 * weight;
        if ns > MAX_TRACKABLE_NS {
            self.saturated += weight;
        }
        self.lo = self.lo.min(i);
        self.hi = self.hi.max(i);
        self.min = self.min.min(ns.min(MAX_TRACKABLE_NS));
        self.max = self.max.max(ns.min(MAX_TRACKABLE_NS));
    }

    /// Adds every sample of `other` (with its current weights).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.is_empty() {
            return;
        }
        for i in other.lo..=other.hi {
            self.counts[i] += other.counts[i];
        }
        self.total += other.total;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.saturated += other.saturated;
        self.lo = self.lo.min(other.lo);
        self.hi = self.hi.max(other.hi);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Multiplies every weight by `factor` (clamped to [0, 1]): exponential
    /// forgetting. Costs one pass over the occupied buckets, so call it
    /// periodically (e.g. every 100 ms with factor 0.9), not per sample.
    pub fn decay(&mut self, factor: f64) {
        let factor = if factor.is_nan() { 0.0 } else { factor.clamp(0.0, 1.0) };
        if factor == 0.0 {
            self.clear();
            return;
        }
        if self.is_empty() {
            return;
        }
        for c in &mut self.counts[self.lo..=self.hi] {
            *c *= factor;
        }
        self.total *= factor;
        self.sum *= factor;
        self.sum_sq *= factor;
        self.saturated *= factor;
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        if !self.is_empty() {
            self.counts[self.lo..=self.hi].fill(0.0);
        }
        self.total = 0.0;
        self.sum = 0.0;
        self.sum_sq = 0.0;
        self.saturated = 0.0;
        self.lo = BUCKETS;
        self.hi = 0;
        self.min = NEVER;
        self.max = 0;
    }

    /// Total (decayed) weight recorded.
    pub fn count(&self) -> f64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.lo > self.hi || self.total <= 0.0
    }

    /// Weight of values above [`MAX_TRACKABLE_NS`].
    pub fn saturated(&self) -> f64 {
        self.saturated
    }

    /// Weighted mean of the recorded values (exact, not from buckets), ns; 0 if empty.
    pub fn mean(&self) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            self.sum / self.total
        }
    }

    /// Weighted variance of the recorded values (exact, not from buckets), ns²; 0 if empty.
    pub fn variance(&self) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            let m = self.mean();
            (self.sum_sq / self.total - m * m).max(0.0)
        }
    }

    /// The p-quantile, within 1/128 relative of the exact nearest-rank sample
    /// quantile (the ⌈p·n⌉-th smallest sample). Inside a bucket it
    /// interpolates, treating the bucket's integer values as equally likely.
    pub fn quantile(&self, p: f64) -> Nanos {
        if self.is_empty() {
            return 0;
        }
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        // A relative slack of 1e-12 keeps an exact integer rank p·n from
        // landing one sample too far through rounding (0.29·100 = 29.000000000000004).
        let target = (p * self.total * (1.0 - 1e-12)).max(f64::MIN_POSITIVE);
        let mut cum = 0.0;
        for i in self.lo..=self.hi {
            let c = self.counts[i];
            if c > 0.0 && cum + c >= target {
                let (lo, width) = bucket_range(i);
                let frac = ((target - cum) / c).clamp(0.0, 1.0);
                return (lo + ((width - 1) as f64 * frac).round() as Nanos).clamp(self.min, self.max);
            }
            cum += c;
        }
        self.max
    }

    /// Fraction of the weight at values ≤ x.
    pub fn cdf(&self, x: Nanos) -> f64 {
        if self.is_empty() {
            return 1.0;
        }
        if x < self.min {
            return 0.0;
        }
        if x >= self.max {
            return 1.0;
        }
        let b = bucket_of(x);
        let below: f64 = self.counts[self.lo..b].iter().sum();
        let (lo, width) = bucket_range(b);
        let inside = self.counts[b] * ((x.min(MAX_TRACKABLE_NS) - lo + 1) as f64 / width as f64);
        ((below + inside) / self.total).min(1.0)
    }

    /// A frozen copy with prefix sums: O(log n) `cdf` and `quantile`, for the
    /// planner, which evaluates CDFs many times per refresh.
    pub fn snapshot(&self) -> LatencySnapshot {
        if self.is_empty() {
            return LatencySnapshot { first: 0, cum: Box::new([]), total: 0.0, min: 0, max: 0 };
        }
        let mut acc = 0.0;
        let cum = self.counts[self.lo..=self.hi]
            .iter()
            .map(|c| {
                acc += c;
                acc
            })
            .collect();
        LatencySnapshot { first: self.lo, cum, total: acc, min: self.min, max: self.max }
    }
}

impl Cdf for LatencyHistogram {
    fn cdf(&self, x: Nanos) -> f64 {
        LatencyHistogram::cdf(self, x)
    }
    fn quantile(&self, p: f64) -> Nanos {
        LatencyHistogram::quantile(self, p)
    }
}

// === impl LatencySnapshot ===

/// An immutable CDF taken from a [`LatencyHistogram`], with the same values
/// and error bound, O(log n) per call. Empty snapshot: concentrated at 0.
#[derive(Clone, Debug)]
pub struct LatencySnapshot {
    first: usize,
    /// Cumulative weight of buckets first..=first+i.
    cum: Box<[f64]>,
    total: f64,
    min: Nanos,
    max: Nanos,
}

impl LatencySnapshot {
    pub fn count(&self) -> f64 {
        self.total
    }
}

impl Cdf for LatencySnapshot {
    fn cdf(&self, x: Nanos) -> f64 {
        if self.total <= 0.0 || x >= self.max {
            return 1.0;
        }
        if x < self.min {
            return 0.0;
        }
        let j = bucket_of(x) - self.first;
        let below = if j == 0 { 0.0 } else { self.cum[j - 1] };
        let (lo, width) = bucket_range(self.first + j);
        let inside = (self.cum[j] - below) * ((x.min(MAX_TRACKABLE_NS) - lo + 1) as f64 / width as f64);
        ((below + inside) / self.total).min(1.0)
    }

    fn quantile(&self, p: f64) -> Nanos {
        if self.total <= 0.0 {
            return 0;
        }
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        let target = (p * self.total * (1.0 - 1e-12)).max(f64::MIN_POSITIVE);
        let j = self.cum.partition_point(|&c| c < target).min(self.cum.len() - 1);
        let below = if j == 0 { 0.0 } else { self.cum[j - 1] };
        let c = self.cum[j] - below;
        let (lo, width) = bucket_range(self.first + j);
        let frac = if c > 0.0 { ((target - below) / c).clamp(0.0, 1.0) } else { 1.0 };
        (lo + ((width - 1) as f64 * frac).round() as Nanos).clamp(self.min, self.max)
    }
}

// === impl WindowedLatency ===

/// A latency distribution over a moving time window: a ring of `k`
/// sub-histograms, each covering `window / k` of time. At any `now` it holds
/// the samples of the current, partly filled sub-window and of the `k − 1`
/// before it, i.e. between (k−1)/k and all of the last `window` ns.
/// Memory: `k` × 34 KiB.
#[derive(Clone, Debug)]
pub struct WindowedLatency {
    subs: Box<[LatencyHistogram]>,
    sub_ns: Nanos,
    head: usize,
    /// Start of the head sub-window (a multiple of `sub_ns`).
    head_start: Nanos,
}

impl WindowedLatency {
    /// A window of `window_ns` split into `sub_windows` (≥ 1) parts. The sub-window
    /// length is `window_ns / sub_windows`, at least 1 ns.
    pub fn new(window_ns: Nanos, sub_windows: usize) -> Self {
        let k = sub_windows.max(1);
        WindowedLatency {
            subs: (0..k).map(|_| LatencyHistogram::new()).collect(),
            sub_ns: (window_ns / k as Nanos).max(1),
            head: 0,
            head_start: 0,
        }
    }

    /// Moves the window to `now`, forgetting sub-windows that fell out. Time
    /// never goes backwards here: an earlier `now` is treated as the latest seen.
    pub fn advance(&mut self, now: Nanos) {
        let k = self.subs.len() as Nanos;
        if now < self.head_start.saturating_add(self.sub_ns) {
            return;
        }
        let steps = (now - self.head_start) / self.sub_ns;
        if steps >= k {
            for s in self.subs.iter_mut() {
                s.clear();
            }
            self.head_start = now - now % self.sub_ns;
            return;
        }
        for _ in 0..steps {
            self.head = (self.head + 1) % self.subs.len();
            self.subs[self.head].clear();
            self.head_start += self.sub_ns;
        }
    }

    /// Records a latency observed at `now`.
    pub fn record(&mut self, now: Nanos, ns: Nanos) {
        self.advance(now);
        self.subs[self.head].record(ns);
    }

    /// All samples in the window at `now`, as one histogram.
    pub fn merged(&mut self, now: Nanos) -> LatencyHistogram {
        self.advance(now);
        let mut h = LatencyHistogram::new();
        for s in self.subs.iter() {
            h.merge(s);
        }
        h
    }

    /// Weight recorded in the window as of the last `advance`/`record`.
    pub fn count(&self) -> f64 {
        self.subs.iter().map(|s| s.count()).sum()
    }
}

// === sorted samples ===

/// Nearest-rank quantile of sorted values: the value at rank ⌈p·n⌉ (1-based).
pub fn quantile_sorted(sorted: &[Nanos], p: f64) -> Nanos {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Summary of a latency sample in milliseconds: mean, nearest-rank p50/p90/p99/p99.9, max.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of_sorted(sorted: &[Nanos]) -> Self {
        let mean =
            if sorted.is_empty() { 0.0 } else { sorted.iter().map(|&x| x as f64).sum::<f64>() / sorted.len() as f64 };
        Percentiles {
            mean: mean / 1e6,
            p50: to_millis_f64(quantile_sorted(sorted, 0.50)),
            p90: to_millis_f64(quantile_sorted(sorted, 0.90)),
            p99: to_millis_f64(quantile_sorted(sorted, 0.99)),
            p999: to_millis_f64(quantile_sorted(sorted, 0.999)),
            max: sorted.last().map_or(0.0, |&x| to_millis_f64(x)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::Dist;
    use crate::rng::Rng;

    #[test]
    fn buckets_tile_the_range() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (lo, w) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i}");
            assert!(w == 1 || w * SUB <= lo, "bucket {i}: width {w} > lo/128 = {}", lo / SUB);
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(lo + w - 1), i);
            next = lo + w;
        }
        assert_eq!(next, MAX_TRACKABLE_NS + 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    /// Quantiles within the documented bound of the exact nearest-rank quantile,
    /// for several shapes, small and large counts.
    #[test]
    fn quantile_within_relative_bound_of_sorted_samples() {
        let dists =
            [Dist::exp_ns(1e6), Dist::lognormal_ns(1e5, 1e6), Dist::uniform_ns(0.0, 300.0), Dist::pareto_ns(1e4, 1.2)];
        let mut rng = Rng::new(5);
        for d in &dists {
            for n in [1usize, 7, 100, 10_000, 200_000] {
                let mut h = LatencyHistogram::new();
                let mut xs: Vec<Nanos> = (0..n).map(|_| d.sample_ns(&mut rng)).collect();
                for &x in &xs {
                    h.record(x);
                }
                xs.sort_unstable();
                let snap = h.snapshot();
                for p in [0.0, 0.001, 0.1, 0.29, 0.5, 0.9, 0.99, 0.999, 1.0] {
                    let rank = ((p * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
                    let exact = xs[rank - 1].min(MAX_TRACKABLE_NS);
                    for got in [h.quantile(p), Cdf::quantile(&snap, p)] {
                        let err = got.abs_diff(exact) as f64;
                        assert!(err <= exact as f64 / 128.0, "{d:?} n={n} p={p}: {got} vs exact {exact}");
                        if exact < 256 {
                            assert_eq!(got, exact);
                        }
                    }
                }
                let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
                assert!((h.mean() - mean).abs() < 1e-6 * h.mean() + 1e-9);
                let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
                assert!(
                    (h.variance() - var).abs() <= 1e-6 * var + 1e-6,
                    "{d:?} n={n}: variance {} vs {var}",
                    h.variance()
                );
            }
        }
    }

    #[test]
    fn cdf_is_exact_at_bucket_boundaries_and_snapshot_agrees() {
        let mut rng = Rng::new(11);
        let d = Dist::exp_ns(50_000.0);
        let mut h = LatencyHistogram::new();
        let mut xs: Vec<Nanos> = (0..50_000).map(|_| d.sample_ns(&mut rng)).collect();
        xs.iter().for_each(|&x| h.record(x));
        xs.sort_unstable();
        let snap = h.snapshot();
        for i in [0, 100, 255, 1000, 1500, 2000, 2500] {
            let (lo, w) = bucket_range(i);
            let top = lo + w - 1; // F at a bucket's last value counts whole buckets
            let exact = xs.partition_point(|&x| x <= top) as f64 / xs.len() as f64;
            assert!((h.cdf(top) - exact).abs() < 1e-12, "bucket {i}");
            assert!((Cdf::cdf(&snap, top) - exact).abs() < 1e-12);
        }
        for x in [0, 10, 1234, 56_789, 1_000_000, u64::MAX] {
            assert!((h.cdf(x) - Cdf::cdf(&snap, x)).abs() < 1e-12);
        }
        assert_eq!(h.cdf(u64::MAX), 1.0);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut rng = Rng::new(2);
        let (mut a, mut b, mut all) = (LatencyHistogram::new(), LatencyHistogram::new(), LatencyHistogram::new());
        for i in 0..10_000 {
            let x = rng.below(1 << 30);
            (if i % 3 == 0 { &mut a } else { &mut b }).record(x);
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        for p in [0.01, 0.5, 0.99] {
            assert_eq!(a.quantile(p), all.quantile(p));
        }
        assert!((a.mean() - all.mean()).abs() < 1e-6);
        assert!((a.variance() - all.variance()).abs() < 1e-9 * all.variance());
    }

    #[test]
    fn decay_fades_old_samples() {
        let mut h = LatencyHistogram::new();
        for _ in 0..1000 {
            h.record(100);
        }
        h.decay(0.001); // the old 1000 now weigh 1
        for _ in 0..99 {
            h.record(10_000);
        }
        assert!((h.count() - 100.0).abs() < 1e-9);
        assert!((h.cdf(100) - 0.01).abs() < 1e-12);
        assert!(h.quantile(0.5).abs_diff(10_000) <= 10_000 / 128);
        let mean = (100.0 + 99.0 * 10_000.0) / 100.0;
        assert!((h.mean() - mean).abs() < 1e-6);
        // One sample of 100 and 99 of 10,000 by weight.
        let var = ((100.0 - mean) * (100.0f64 - mean) + 99.0 * (10_000.0 - mean) * (10_000.0f64 - mean)) / 100.0;
        assert!((h.variance() - var).abs() < 1e-6 * var);
        h.decay(0.0);
        assert!(h.is_empty());
        assert_eq!(h.quantile(0.99), 0);
    }

    #[test]
    fn window_forgets_whole_sub_windows() {
        // 1 ms window in 4 sub-windows of 250 µs.
        let mut w = WindowedLatency::new(1_000_000, 4);
        w.record(10, 100);
        w.record(300_000, 200);
        w.record(999_999, 300);
        assert_eq!(w.merged(999_999).count(), 3.0);
        // At 1,000,000 the sub-window [0, 250 µs) falls out.
        let h = w.merged(1_000_000);
        assert_eq!(h.count(), 2.0);
        assert_eq!(h.quantile(0.0), 200);
        // Far later, everything is gone; recording again works.
        assert!(w.merged(10_000_000).is_empty());
        w.record(10_000_001, 400);
        assert_eq!(w.merged(10_000_001).quantile(1.0), 400);
        // An earlier `now` is not an error.
        w.record(5, 500);
        assert_eq!(w.count(), 2.0);
    }

    #[test]
    fn saturates_above_the_trackable_range() {
        let mut h = LatencyHistogram::new();
        h.record(u64::MAX / 2);
        assert_eq!(h.saturated(), 1.0);
        assert_eq!(h.quantile(1.0), MAX_TRACKABLE_NS);
    }
}
