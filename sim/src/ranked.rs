//! Nearest-rank quantiles of one set of latencies without sorting it.
//!
//! A run's summary asks the whole sample for a handful of ranks (p50, p90, p99,
//! p99.9, a class's SLO percentile, the max). Each is selected
//! (`select_nth_unstable`) inside the stretch between the ranks already
//! selected: selecting rank k leaves every smaller value before it and every
//! larger one after, so the values between two selected ranks are exactly the
//! ones of the ranks between them. The answers are the values a sort would put
//! at those ranks, at a few linear passes instead of an O(n log n) sort.

use tailor_core::time::to_millis_f64;
use tailor_core::Nanos;

/// Largest integer below which every partial sum of non-negative integers is
/// exact in f64, whatever the order of the additions.
const EXACT_F64_INT: u128 = 1 << 53;

pub(crate) struct Ranked {
    values: Vec<Nanos>,
    /// Ranks (0-based) already selected, ascending.
    selected: Vec<usize>,
}

impl Ranked {
    pub(crate) fn new(values: Vec<Nanos>) -> Self {
        Ranked { values, selected: Vec::new() }
    }

    /// The value of 0-based rank `k` in ascending order (k < len).
    pub(crate) fn at(&mut self, k: usize) -> Nanos {
        let at = self.selected.partition_point(|&s| s < k);
        if self.selected.get(at) == Some(&k) {
            return self.values[k];
        }
        let lo = if at == 0 { 0 } else { self.selected[at - 1] + 1 };
        let hi = self.selected.get(at).copied().unwrap_or(self.values.len());
        self.values[lo..hi].select_nth_unstable(k - lo);
        self.selected.insert(at, k);
        self.values[k]
    }

    /// Nearest-rank quantile (as [`tailor_core::latency::quantile_sorted`]): the
    /// value at rank ⌈p·n⌉ (1-based); 0 for no values.
    pub(crate) fn quantile(&mut self, p: f64) -> Nanos {
        let n = self.values.len();
        if n == 0 {
            return 0;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        self.at(rank - 1)
    }

    pub(crate) fn quantile_ms(&mut self, p: f64) -> f64 {
        to_millis_f64(self.quantile(p))
    }

    /// The mean in ns, equal to the f64 sum of the values in ascending order
    /// divided by their count: while the total stays below 2^53 every partial
    /// sum is an exact integer in any order, and beyond it (never for a run's
    /// latencies in ns short of ~100 days in total) the values are sorted and
    /// summed in that order.
    pub(crate) fn mean(&mut self) -> f64 {
        let n = self.values.len();
        if n == 0 {
            return 0.0;
        }
        let total: u128 = self.values.iter().map(|&x| x as u128).sum();
        let sum = if total < EXACT_F64_INT {
            total as f64
        } else {
            self.values.sort_unstable();
            self.selected = (0..n).collect();
            self.values.iter().map(|&x| x as f64).sum::<f64>()
        };
        sum / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::latency::quantile_sorted;
    use tailor_core::rng::Rng;

    #[test]
    fn selected_quantiles_and_mean_equal_the_sorted_ones() {
        let mut rng = Rng::new(3);
        for n in [0usize, 1, 2, 7, 100, 1_001, 50_000] {
            // Many ties: values from a small range.
            let values: Vec<Nanos> = (0..n).map(|_| rng.below(500) * 1_000).collect();
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let mut ranked = Ranked::new(values);
            for p in [0.99, 0.5, 0.999, 0.9, 0.0, 1.0, 0.95, 0.5, 0.123] {
                assert_eq!(ranked.quantile(p), quantile_sorted(&sorted, p), "n={n} p={p}");
            }
            let mean = if n == 0 { 0.0 } else { sorted.iter().map(|&x| x as f64).sum::<f64>() / n as f64 };
            assert_eq!(ranked.mean().to_bits(), mean.to_bits(), "n={n}");
        }
    }

    #[test]
    fn a_huge_total_is_summed_in_ascending_order() {
        let values: Vec<Nanos> = vec![u64::MAX / 4, 3, u64::MAX / 8, 1 << 60, 17];
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let mut ranked = Ranked::new(values);
        let want = sorted.iter().map(|&x| x as f64).sum::<f64>() / 5.0;
        assert_eq!(ranked.mean().to_bits(), want.to_bits());
        assert_eq!(ranked.quantile(0.5), sorted[2]);
        assert_eq!(ranked.quantile(1.0), sorted[4]);
    }
}
