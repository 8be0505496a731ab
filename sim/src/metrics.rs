//! Per-request records of a run and the summary computed from them:
//! percentiles, throughput, reordering %, per-class and per-fanout tails,
//! deadline misses and rejections. Definitions are in `docs/metrics.md`.

use serde::Serialize;
use tailor_core::time::{to_millis_f64, NANOS_PER_SEC};
use tailor_core::Nanos;

use crate::key_order;
use crate::model::Model;
use crate::ranked::Ranked;

/// Everything recorded about the measured requests of one run (struct of arrays).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    pub gat: Vec<Nanos>,
    pub latency: Vec<Nanos>,
    /// Latency the request would have had with no queuing anywhere.
    pub ideal_latency: Vec<Nanos>,
    pub class: Vec<u8>,
    pub fanout: Vec<u32>,
    /// Total CPU demand of the request over all its tasks.
    pub demand: Vec<Nanos>,
    pub admitted: u64,
    pub rejected_by_class: Vec<u64>,
    pub tasks_dequeued: u64,
    pub tasks_missed: u64,
    class_names: Vec<String>,
    class_slo: Vec<Option<(f64, Nanos)>>,
    /// The records' [`arrival_order`] and their indices in (ideal completion,
    /// index) order, from an engine path that has them without sorting the
    /// records (the per-node path); each checked before it is used.
    pub(crate) known_arrival_order: Option<Vec<u32>>,
    pub(crate) known_ideal_order: Option<Vec<u32>>,
}

impl Recorder {
    pub fn new(m: &Model) -> Self {
        let n = m.requests as usize;
        Recorder {
            gat: Vec::with_capacity(n),
            latency: Vec::with_capacity(n),
            ideal_latency: Vec::with_capacity(n),
            class: Vec::with_capacity(n),
            fanout: Vec::with_capacity(n),
            demand: Vec::with_capacity(n),
            rejected_by_class: vec![0; m.classes.len()],
            class_names: m.classes.iter().map(|c| c.name.clone()).collect(),
            class_slo: m.classes.iter().map(|c| c.slo.map(|s| (c.percentile, s))).collect(),
            ..Default::default()
        }
    }

    #[inline]
    pub fn record(&mut self, gat: Nanos, done: Nanos, ideal_end: Nanos, class: u8, fanout: u32, demand: Nanos) {
        self.gat.push(gat);
        self.latency.push(done - gat);
        self.ideal_latency.push(ideal_end - gat);
        self.class.push(class);
        self.fanout.push(fanout);
        self.demand.push(demand);
    }

    /// `record` for the engine's lone-request path, where a request is one
    /// task with no network delay: its fanout is 1 and its ideal latency its
    /// demand. Those two columns are filled by `finish_lone` at the end of the run.
    /// With a single class, the class column (all 0) is filled at the end too.
    #[inline(always)]
    pub(crate) fn record_lone(&mut self, gat: Nanos, done: Nanos, class: u8, demand: Nanos) {
        self.gat.push(gat);
        self.latency.push(done - gat);
        if self.class_names.len() > 1 {
            self.class.push(class);
        }
        self.demand.push(demand);
    }

    /// Completes the records `record_lone` left out (see there).
    pub(crate) fn finish_lone(&mut self) {
        let n = self.latency.len();
        let done = self.ideal_latency.len();
        self.ideal_latency.extend_from_slice(&self.demand[done..]);
        self.fanout.resize(n, 1);
        self.class.resize(n, 0);
    }

    #[inline]
    pub fn admitted(&mut self) {
        self.admitted += 1;
    }

    #[inline]
    pub fn rejected(&mut self, class: u8) {
        self.rejected_by_class[class as usize] += 1;
    }

    #[inline]
    pub fn task_dequeued(&mut self, missed: bool) {
        self.tasks_dequeued += 1;
        self.tasks_missed += missed as u64;
    }

    /// Computes the run's summary. It runs once per run; quantiles are selected, not
    /// sorted for (the arrival-order sorts of the intervals and the reordering remain).
    /// A large run's summary uses a second thread: the two sorts run side by
    /// side, then the reordering sweep beside everything else. When the engine
    /// path gave the records' orders (checked first), there are no sorts: the
    /// ideal-completion ranks and the sweep run beside everything else.
    pub fn summarize(&self) -> Summary {
        let parallel = self.latency.len() >= PARALLEL_SUMMARY_MIN;
        let n = self.gat.len();
        let known_by_gat = self.known_arrival_order.as_deref().filter(|o| key_order::is_order(o, n, |i| self.gat[i]));
        let (reordering_pct, mut summary) = if let Some(by_gat) = known_by_gat {
            both(
                parallel,
                || {
                    let ideal_end = |i: usize| self.gat[i] + self.ideal_latency[i];
                    let known = self.known_ideal_order.as_deref().filter(|o| key_order::is_order(o, n, ideal_end));
                    let ranks = match known {
                        Some(order) => {
                            let (rank, distinct) = key_order::dense_ranks_in(order, ideal_end);
                            (rank, distinct.max(1))
                        }
                        None => ideal_ranks(&self.gat, &self.ideal_latency),
                    };
                    reordering_sweep(&self.gat, &self.latency, &ranks, by_gat)
                },
                || self.summarize_except_reordering(by_gat),
            )
        } else {
            let (ranks, by_gat) =
                both(parallel, || ideal_ranks(&self.gat, &self.ideal_latency), || arrival_order(&self.gat));
            both(
                parallel,
                || reordering_sweep(&self.gat, &self.latency, &ranks, &by_gat),
                || self.summarize_except_reordering(&by_gat),
            )
        };
        summary.reordering_pct = reordering_pct;
        summary
    }

    /// The summary with `reordering_pct` left at 0; `by_gat`: [`arrival_order`].
    fn summarize_except_reordering(&self, by_gat: &[u32]) -> Summary {
        let n = self.latency.len();
        let mut all = Ranked::new(self.latency.clone());
        let rejected: u64 = self.rejected_by_class.iter().sum();
        let offered = self.admitted + rejected;
        let span = if n > 0 {
            let first = *self.gat.iter().min().unwrap();
            let last = self.gat.iter().zip(&self.latency).map(|(g, l)| g + l).max().unwrap();
            (last - first).max(1)
        } else {
            1
        };
        let mut slowdown: Vec<f64> =
            self.latency.iter().zip(&self.demand).map(|(&l, &d)| l as f64 / d.max(1) as f64).collect();
        // Quantiles of a group are selected (O(n)), not sorted for: the value at a
        // rank is the same either way.
        let slowdown_p99 = select_quantile_f64(&mut slowdown, 0.99);

        let mut per_class = Vec::new();
        for (c, name) in self.class_names.iter().enumerate() {
            let pct = self.class_slo[c].map_or(99.0, |(p, _)| p);
            // One class holds every record: its latencies are `all`.
            let (count, tail_ms, p99_ms) = if self.class_names.len() == 1 {
                (n as u64, all.quantile_ms(pct / 100.0), all.quantile_ms(0.99))
            } else {
                let mut lat: Vec<Nanos> = self.select(|i| self.class[i] as usize == c);
                (lat.len() as u64, select_quantile_ms(&mut lat, pct / 100.0), select_quantile_ms(&mut lat, 0.99))
            };
            per_class.push(ClassSummary {
                class: name.clone(),
                count,
                rejected: self.rejected_by_class[c],
                percentile: pct,
                tail_ms,
                p99_ms,
                slo_ms: self.class_slo[c].map(|(_, s)| to_millis_f64(s)),
            });
        }
        // The distinct fanouts, ascending (few: skip runs of one value before the set).
        let mut distinct = std::collections::BTreeSet::new();
        let mut last = None;
        for &k in &self.fanout {
            if last != Some(k) {
                distinct.insert(k);
                last = Some(k);
            }
        }
        let fanouts: Vec<u32> = distinct.into_iter().collect();
        let mut per_fanout = Vec::new();
        let mut groups = Vec::new();
        for &k in &fanouts {
            let mut lat: Vec<Nanos> = self.select(|i| self.fanout[i] == k);
            let count = lat.len() as u64;
            per_fanout.push(FanoutSummary { fanout: k, count, p99_ms: select_quantile_ms(&mut lat, 0.99) });
            for (c, slo) in self.class_slo.iter().enumerate() {
                let Some((pct, slo)) = *slo else { continue };
                let mut lat: Vec<Nanos> = if self.class_names.len() == 1 {
                    // Every record is of this class: the fanout's group is the one above.
                    std::mem::take(&mut lat)
                } else {
                    self.select(|i| self.fanout[i] == k && self.class[i] as usize == c)
                };
                if lat.is_empty() {
                    continue;
                }
                let tail = select_quantile_ms(&mut lat, pct / 100.0);
                groups.push(GroupSummary {
                    class: self.class_names[c].clone(),
                    fanout: k,
                    count: lat.len() as u64,
                    percentile: pct,
                    tail_ms: tail,
                    slo_ms: to_millis_f64(slo),
                    met: tail <= to_millis_f64(slo),
                });
            }
        }
        let has_slo = self.class_slo.iter().any(Option::is_some);
        let ci95 = self.batch_ci95(&mut all, by_gat);
        Summary {
            requests: n as u64,
            offered,
            rejected,
            rejected_pct: pct_of(rejected, offered),
            latency_ms: Percentiles {
                mean: all.mean() / 1e6,
                p50: all.quantile_ms(0.50),
                p90: all.quantile_ms(0.90),
                p99: all.quantile_ms(0.99),
                p999: all.quantile_ms(0.999),
                max: all.quantile_ms(1.0),
            },
            ci95,
            throughput_rps: n as f64 / (span as f64 / NANOS_PER_SEC as f64),
            reordering_pct: 0.0,
            slowdown_p99,
            tasks: self.tasks_dequeued,
            deadline_miss_pct: pct_of(self.tasks_missed, self.tasks_dequeued),
            slo_met: if has_slo { Some(!groups.is_empty() && groups.iter().all(|g| g.met)) } else { None },
            per_class,
            per_fanout,
            per_class_fanout: groups,
        }
    }

    /// 95% confidence intervals of the mean and p99 by batch means: the
    /// measured requests in arrival order cut into 20 batches, the statistic
    /// per batch, a t-interval (19 degrees of freedom) from their spread,
    /// centred on the whole-sample statistic.
    /// Consecutive batches of a stable queue are nearly independent when each
    /// holds many busy periods; with fewer than 20 requests per batch there is
    /// no interval.
    /// `all`: every latency; `by_gat`: [`arrival_order`].
    fn batch_ci95(&self, all: &mut Ranked, by_gat: &[u32]) -> Option<ConfidenceIntervals> {
        const BATCHES: usize = 20;
        const T_19_975: f64 = 2.093;
        let n = self.latency.len();
        if n < BATCHES * 20 {
            return None;
        }
        let size = n / BATCHES;
        let (mut means, mut p99s) = (Vec::with_capacity(BATCHES), Vec::with_capacity(BATCHES));
        for b in 0..BATCHES {
            let mut lat: Vec<Nanos> =
                by_gat[b * size..(b + 1) * size].iter().map(|&i| self.latency[i as usize]).collect();
            means.push(lat.iter().map(|&x| x as f64).sum::<f64>() / size as f64 / 1e6);
            p99s.push(select_quantile_ms(&mut lat, 0.99));
        }
        // Centred on the whole-sample statistic, as benches/ciw/mmc.py does.
        let interval = |xs: &[f64], centre: f64| {
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
            let half = T_19_975 * (var / xs.len() as f64).sqrt();
            [centre - half, centre + half]
        };
        let overall_mean = all.mean() / 1e6;
        Some(ConfidenceIntervals {
            mean_ms: interval(&means, overall_mean),
            p99_ms: interval(&p99s, all.quantile_ms(0.99)),
        })
    }

    fn select(&self, keep: impl Fn(usize) -> bool) -> Vec<Nanos> {
        (0..self.latency.len()).filter(|&i| keep(i)).map(|i| self.latency[i]).collect()
    }
}

fn pct_of(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

// Percentiles are core's (`tailor_core::latency`) so that crates that only summarise
// measured latencies (the doctor) need not link the simulator.
pub use tailor_core::latency::{quantile_sorted, Percentiles};

/// [`quantile_sorted`] of unsorted values, in ms: the value at the rank is selected
/// (O(n), reordering `values`) instead of sorted for.
fn select_quantile_ms(values: &mut [Nanos], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    to_millis_f64(*values.select_nth_unstable(rank - 1).1)
}

/// Nearest-rank quantile of unsorted values in `f64::total_cmp` order (selected, O(n)).
fn select_quantile_f64(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    *values.select_nth_unstable_by(rank - 1, f64::total_cmp).1
}

/// Percentage of requests that a *later-arriving* request overtook although
/// it should have finished after them (TailClipper §2.3: "later arriving
/// requests jump ahead of requests that arrived before them"; §5.4: completion
/// order deviating from the ideal one, where every request runs on arrival
/// with no queuing).
///
/// Request i is reordered if some j has `gat_j > gat_i` (arrived later),
/// `gat_j + ideal_j > gat_i + ideal_i` (should finish later) and
/// `gat_j + latency_j < gat_i + latency_i` (finished earlier). Requiring j to
/// be younger is what separates harmful reordering from a short request
/// legitimately finishing before an older long one. O(n log n): sweep from
/// the youngest request, keeping in a Fenwick tree over ideal-completion rank
/// the earliest actual completion among the requests already swept.
pub fn reordering_pct(gat: &[Nanos], latency: &[Nanos], ideal: &[Nanos]) -> f64 {
    reordering_pct_in(gat, latency, ideal, &arrival_order(gat))
}

/// Record indices in arrival (GAT) order, equal GATs in record order: sorted as
/// (GAT, index) pairs, which compare without a lookup. Records are appended at
/// completion, nearly in arrival order.
fn arrival_order(gat: &[Nanos]) -> Vec<u32> {
    key_order::sorted_indices(gat.len(), |i| gat[i])
}

/// Summaries of at least this many records use a second thread.
const PARALLEL_SUMMARY_MIN: usize = 50_000;

/// `(a(), b())`, `a` on a second thread when `parallel`.
pub(crate) fn both<A: Send, B>(parallel: bool, a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B) -> (A, B) {
    if !parallel {
        return (a(), b());
    }
    std::thread::scope(|s| {
        let a = s.spawn(a);
        let b = b();
        match a.join() {
            Ok(a) => (a, b),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// [`reordering_pct`] given the records' [`arrival_order`].
fn reordering_pct_in(gat: &[Nanos], latency: &[Nanos], ideal: &[Nanos], by_gat: &[u32]) -> f64 {
    reordering_sweep(gat, latency, &ideal_ranks(gat, ideal), by_gat)
}

/// Rank of each record's ideal completion (`gat + ideal`), equal values sharing
/// a rank, and the number of distinct ranks.
fn ideal_ranks(gat: &[Nanos], ideal: &[Nanos]) -> (Vec<u32>, usize) {
    let (rank, distinct) = key_order::dense_ranks(gat.len(), |i| gat[i] + ideal[i]);
    (rank, distinct.max(1))
}

/// [`reordering_pct`] given the records' [`ideal_ranks`] and [`arrival_order`].
fn reordering_sweep(gat: &[Nanos], latency: &[Nanos], ranks: &(Vec<u32>, usize), by_gat: &[u32]) -> f64 {
    let n = gat.len();
    if n == 0 {
        return 0.0;
    }
    let (rank, ranks) = (&ranks.0, ranks.1);
    // Computed where used, not collected: the summary's columns are large.
    let actual_end = |x: usize| gat[x] + latency[x];
    // Fenwick tree for "min actual completion among ranks > q", indexed from the top.
    let mut tree = vec![Nanos::MAX; ranks + 1];
    let top_index = |rk: u32| ranks - rk as usize; // rank ranks-1 → 1, rank 0 → ranks
                                                   // Youngest first: the `j`-th youngest record.
    let young = |j: usize| by_gat[n - 1 - j] as usize;
    let mut reordered = 0u64;
    let mut i = 0;
    while i < n {
        // Requests with the same GAT did not arrive after one another: query
        // the whole group before inserting any of it.
        let mut j = i;
        while j < n && gat[young(j)] == gat[young(i)] {
            let x = young(j);
            // min over ranks strictly greater than rank[x] = indices 1..top_index(rank[x]) - 1
            let mut k = top_index(rank[x]) - 1;
            let mut best = Nanos::MAX;
            while k > 0 {
                best = best.min(tree[k]);
                k &= k - 1;
            }
            if best < actual_end(x) {
                reordered += 1;
            }
            j += 1;
        }
        for x in (i..j).map(young) {
            let mut k = top_index(rank[x]);
            while k <= ranks {
                tree[k] = tree[k].min(actual_end(x));
                k += k & k.wrapping_neg();
            }
        }
        i = j;
    }
    100.0 * reordered as f64 / n as f64
}

/// The summary of one run; the `--json` schema (docs/sim-json.md).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Measured requests that completed.
    pub requests: u64,
    /// Measured requests offered (completed + rejected by admission control).
    pub offered: u64,
    pub rejected: u64,
    pub rejected_pct: f64,
    pub latency_ms: Percentiles,
    /// Batch-means 95% confidence intervals (absent for small runs).
    pub ci95: Option<ConfidenceIntervals>,
    pub throughput_rps: f64,
    pub reordering_pct: f64,
    /// 99th percentile of latency / total CPU demand.
    pub slowdown_p99: f64,
    /// Tasks of measured requests that were dequeued (dispatched the first time).
    pub tasks: u64,
    pub deadline_miss_pct: f64,
    /// Every (class, fanout) group meets its class SLO; `None` without SLOs.
    pub slo_met: Option<bool>,
    pub per_class: Vec<ClassSummary>,
    pub per_fanout: Vec<FanoutSummary>,
    pub per_class_fanout: Vec<GroupSummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfidenceIntervals {
    pub mean_ms: [f64; 2],
    pub p99_ms: [f64; 2],
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassSummary {
    pub class: String,
    pub count: u64,
    pub rejected: u64,
    /// The class's SLO percentile (99 if it has no SLO) and the latency at it.
    pub percentile: f64,
    pub tail_ms: f64,
    pub p99_ms: f64,
    pub slo_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FanoutSummary {
    pub fanout: u32,
    pub count: u64,
    pub p99_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupSummary {
    pub class: String,
    pub fanout: u32,
    pub count: u64,
    pub percentile: f64,
    pub tail_ms: f64,
    pub slo_ms: f64,
    pub met: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<Nanos> = (1..=100).collect();
        assert_eq!(quantile_sorted(&v, 0.99), 99);
        assert_eq!(quantile_sorted(&v, 0.5), 50);
        assert_eq!(quantile_sorted(&v, 1.0), 100);
        assert_eq!(quantile_sorted(&v, 0.0), 1);
        assert_eq!(quantile_sorted(&[], 0.5), 0);
    }

    #[test]
    fn reordering_counts_requests_overtaken_by_younger_later_ideals() {
        // Arrivals 0, 1, 2; ideal completions 10, 20, 30; actual 35, 25, 30 →
        // request 0 finished after the younger 1 and 2, which ideally finish
        // later: reordered. Request 1 finished before 2: not reordered.
        let gat = [0, 1, 2];
        let ideal = [10, 19, 28];
        assert!((reordering_pct(&gat, &[35, 24, 28], &ideal) - 100.0 / 3.0).abs() < 1e-9);
        // In order: nobody reordered.
        assert_eq!(reordering_pct(&gat, &[10, 19, 28], &ideal), 0.0);
        // Equal ideals never count as overtaking each other.
        assert_eq!(reordering_pct(&[0, 0], &[7, 5], &[5, 5]), 0.0);
        // An OLDER request that ideally finishes later but finishes first (a
        // long request served in GAT order ahead of a short younger one) does
        // not reorder the younger one: only later arrivals jump ahead.
        assert_eq!(reordering_pct(&[0, 1], &[10, 20], &[10, 2]), 0.0);
        // A younger request that should finish later (ends 11) finishing first
        // (at 8) ahead of an older one (ideal 5, actual 12) is reordering.
        assert_eq!(reordering_pct(&[0, 1], &[12, 7], &[5, 10]), 50.0);
    }

    #[test]
    fn reordering_matches_the_quadratic_definition() {
        let mut rng = tailor_core::Rng::new(17);
        for _ in 0..50 {
            let n = 1 + rng.below(60) as usize;
            let gat: Vec<Nanos> = (0..n).map(|_| rng.below(20)).collect();
            let ideal: Vec<Nanos> = (0..n).map(|_| 1 + rng.below(20)).collect();
            let lat: Vec<Nanos> = (0..n).map(|i| ideal[i] + rng.below(30)).collect();
            let slow = (0..n)
                .filter(|&i| {
                    (0..n).any(|j| {
                        gat[j] > gat[i] && gat[j] + ideal[j] > gat[i] + ideal[i] && gat[j] + lat[j] < gat[i] + lat[i]
                    })
                })
                .count();
            assert_eq!(reordering_pct(&gat, &lat, &ideal), 100.0 * slow as f64 / n as f64);
        }
    }
}
