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
    /// The records' [`reordering_pct`], from an engine path that counted it
    /// over its requests in arrival order ([`reordering_in_arrival_order`]).
    pub(crate) known_reordering_pct: Option<f64>,
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
    /// sorted for (the arrival-order sort of the intervals remains, and the
    /// reordering sweep's ranks when its windows are long). A large run's
    /// summary uses a second thread: the statistics that follow the arrival
    /// order (the reordering, the batches of the intervals) and the slowdown
    /// beside the quantiles and the per-class and per-fan-out tails. When the
    /// engine path gave the records' orders (checked first), nothing is sorted.
    pub fn summarize(&self) -> Summary {
        let parallel = self.latency.len() >= PARALLEL_SUMMARY_MIN;
        let n = self.gat.len();
        let known_by_gat = self.known_arrival_order.as_deref().filter(|o| key_order::is_order(o, n, |i| self.gat[i]));
        let sorted_by_gat;
        let by_gat = match known_by_gat {
            Some(order) => order,
            None => {
                sorted_by_gat = arrival_order(&self.gat);
                &sorted_by_gat
            }
        };
        let (side, mut summary) = both(parallel, || self.in_arrival_order(by_gat), || self.summarize_the_rest());
        summary.reordering_pct = side.reordering_pct;
        summary.slowdown_p99 = side.slowdown_p99;
        summary.ci95 = side.batches.map(|b| b.intervals(summary.latency_ms.mean, summary.latency_ms.p99));
        summary
    }

    /// The reordering, the slowdown's p99 and the batches of the confidence
    /// intervals; `by_gat`: [`arrival_order`].
    fn in_arrival_order(&self, by_gat: &[u32]) -> SideStatistics {
        let reordering_pct = self
            .known_reordering_pct
            .or_else(|| reordering_by_window(&self.gat, &self.latency, &self.ideal_latency, by_gat))
            .unwrap_or_else(|| {
                let n = self.gat.len();
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
            });
        let mut slowdown: Vec<f64> =
            self.latency.iter().zip(&self.demand).map(|(&l, &d)| l as f64 / d.max(1) as f64).collect();
        // Quantiles of a group are selected (O(n)), not sorted for: the value at a
        // rank is the same either way.
        let slowdown_p99 = select_quantile_f64(&mut slowdown, 0.99);
        SideStatistics { reordering_pct, slowdown_p99, batches: self.batches(by_gat) }
    }

    /// The summary but for what [`Recorder::in_arrival_order`] gives (left at
    /// 0 and `None`).
    fn summarize_the_rest(&self) -> Summary {
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
            ci95: None,
            throughput_rps: n as f64 / (span as f64 / NANOS_PER_SEC as f64),
            reordering_pct: 0.0,
            slowdown_p99: 0.0,
            tasks: self.tasks_dequeued,
            deadline_miss_pct: pct_of(self.tasks_missed, self.tasks_dequeued),
            slo_met: if has_slo { Some(!groups.is_empty() && groups.iter().all(|g| g.met)) } else { None },
            per_class,
            per_fanout,
            per_class_fanout: groups,
        }
    }

    /// The batches of the 95% confidence intervals of the mean and p99 (see
    /// [`Batches::intervals`]): the measured requests in arrival order cut
    /// into 20 batches, the statistic per batch. With fewer than 20 requests
    /// per batch there is no interval. `by_gat`: [`arrival_order`].
    fn batches(&self, by_gat: &[u32]) -> Option<Batches> {
        let n = self.latency.len();
        if n < BATCHES * 20 {
            return None;
        }
        let size = n / BATCHES;
        let (mut means, mut p99s) = (Vec::with_capacity(BATCHES), Vec::with_capacity(BATCHES));
        let mut lat: Vec<Nanos> = Vec::with_capacity(size);
        for b in 0..BATCHES {
            lat.clear();
            lat.extend(by_gat[b * size..(b + 1) * size].iter().map(|&i| self.latency[i as usize]));
            means.push(lat.iter().map(|&x| x as f64).sum::<f64>() / size as f64 / 1e6);
            p99s.push(select_quantile_ms(&mut lat, 0.99));
        }
        Some(Batches { means, p99s })
    }

    fn select(&self, keep: impl Fn(usize) -> bool) -> Vec<Nanos> {
        (0..self.latency.len()).filter(|&i| keep(i)).map(|i| self.latency[i]).collect()
    }
}

/// Batches of the confidence intervals.
const BATCHES: usize = 20;

/// What the summary's second thread computes: see [`Recorder::in_arrival_order`].
struct SideStatistics {
    reordering_pct: f64,
    slowdown_p99: f64,
    batches: Option<Batches>,
}

/// Per batch of arrivals, the mean and p99 latency in ms.
struct Batches {
    means: Vec<f64>,
    p99s: Vec<f64>,
}

impl Batches {
    /// 95% confidence intervals of the mean and p99 by batch means: a
    /// t-interval (19 degrees of freedom) from the batches' spread, centred on
    /// the whole-sample statistic (`mean_ms`, `p99_ms`). Consecutive batches of
    /// a stable queue are nearly independent when each holds many busy periods.
    fn intervals(&self, mean_ms: f64, p99_ms: f64) -> ConfidenceIntervals {
        const T_19_975: f64 = 2.093;
        // Centred on the whole-sample statistic, as benches/ciw/mmc.py does.
        let interval = |xs: &[f64], centre: f64| {
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
            let half = T_19_975 * (var / xs.len() as f64).sqrt();
            [centre - half, centre + half]
        };
        ConfidenceIntervals { mean_ms: interval(&self.means, mean_ms), p99_ms: interval(&self.p99s, p99_ms) }
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

/// Most records a [`reordering_by_window`] scan visits per record on average
/// before it leaves the count to the sweep.
const WINDOW_STEPS_PER_RECORD: usize = 64;

/// [`reordering_pct`] given the records' [`arrival_order`], by looking at each
/// record's window: a younger request that finished earlier arrived before the
/// record completed (`gat_j ≤ end_j < end_i`), so only the records arriving
/// between its arrival and its completion can overtake it. When requests are
/// few in the system (a stable queue's usual state) that is a handful of
/// records each, read nearly in order (the records are in completion order,
/// close to arrival order), against the sweep's two walks of a Fenwick tree
/// per record. `None` once the windows hold more than
/// [`WINDOW_STEPS_PER_RECORD`] records per record on average (long queues):
/// then the sweep counts, in O(n log n). The same count either way: both
/// apply the definition.
fn reordering_by_window(gat: &[Nanos], latency: &[Nanos], ideal: &[Nanos], by_gat: &[u32]) -> Option<f64> {
    let n = by_gat.len();
    if n == 0 {
        return Some(0.0);
    }
    let budget = WINDOW_STEPS_PER_RECORD.saturating_mul(n);
    let (mut steps, mut reordered) = (0usize, 0u64);
    for k in 0..n {
        let x = by_gat[k] as usize;
        let (arrived, end, ideal_end) = (gat[x], gat[x] + latency[x], gat[x] + ideal[x]);
        let mut j = k + 1;
        while j < n {
            let y = by_gat[j] as usize;
            let g = gat[y];
            if g >= end {
                break;
            }
            // Equal arrival times did not arrive after one another.
            if g > arrived && g + latency[y] < end && g + ideal[y] > ideal_end {
                reordered += 1;
                break;
            }
            j += 1;
        }
        steps += j - k;
        if steps > budget {
            return None;
        }
    }
    Some(100.0 * reordered as f64 / n as f64)
}

/// [`reordering_by_window`] over requests already in arrival order (`gat`
/// ascending), their latencies and ideal latencies given as 32-bit values
/// (an engine path that has its requests in that order; `None` as well when
/// a latency does not fit). Each window is read in runs of 8 records tested
/// without a branch per record: whether a younger record overtook is about
/// as likely as not, so a branch per test would mispredict about as often.
pub(crate) fn reordering_in_arrival_order(gat: &[Nanos], latency: &[u32], ideal: &[u32]) -> Option<f64> {
    const RUN: usize = 8;
    let n = gat.len();
    assert!(latency.len() == n && ideal.len() == n, "one latency and one ideal latency per arrival");
    if n == 0 {
        return Some(0.0);
    }
    let budget = WINDOW_STEPS_PER_RECORD.saturating_mul(n);
    let (mut steps, mut reordered) = (0usize, 0u64);
    for k in 0..n {
        let arrived = gat[k];
        let (end, ideal_end) = (arrived + latency[k] as Nanos, arrived + ideal[k] as Nanos);
        let mut j = k + 1;
        while j < n && gat[j] < end {
            let stop = (j + RUN).min(n);
            let mut overtaken = false;
            for m in j..stop {
                let g = gat[m];
                // Past the window (`g ≥ end`) a record cannot finish before `end`.
                overtaken |= (g > arrived) & (g + (latency[m] as Nanos) < end) & (g + ideal[m] as Nanos > ideal_end);
            }
            j = stop;
            if overtaken {
                reordered += 1;
                break;
            }
        }
        steps += j - k;
        if steps > budget {
            return None;
        }
    }
    Some(100.0 * reordered as f64 / n as f64)
}

/// [`reordering_pct`] given the records' [`arrival_order`].
fn reordering_pct_in(gat: &[Nanos], latency: &[Nanos], ideal: &[Nanos], by_gat: &[u32]) -> f64 {
    reordering_by_window(gat, latency, ideal, by_gat)
        .unwrap_or_else(|| reordering_sweep(gat, latency, &ideal_ranks(gat, ideal), by_gat))
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
            let expected = 100.0 * slow as f64 / n as f64;
            assert_eq!(reordering_pct(&gat, &lat, &ideal), expected);
            // Both ways of counting, whichever `reordering_pct` took.
            let by_gat = arrival_order(&gat);
            assert_eq!(reordering_by_window(&gat, &lat, &ideal, &by_gat), Some(expected));
            assert_eq!(reordering_sweep(&gat, &lat, &ideal_ranks(&gat, &ideal), &by_gat), expected);
            let in_order = |col: &[Nanos]| -> Vec<u32> { by_gat.iter().map(|&i| col[i as usize] as u32).collect() };
            let sorted_gat: Vec<Nanos> = by_gat.iter().map(|&i| gat[i as usize]).collect();
            assert_eq!(reordering_in_arrival_order(&sorted_gat, &in_order(&lat), &in_order(&ideal)), Some(expected));
        }
    }

    #[test]
    fn long_windows_leave_the_count_to_the_sweep() {
        // Every request arrives before any completes, and they complete in
        // arrival order but the first, which completes last: each window holds
        // every younger record, ~n²/2 in all, beyond the budget for n > 128.
        let n = 400;
        let gat: Vec<Nanos> = (0..n).collect();
        let mut lat: Vec<Nanos> = vec![10 * n; n as usize];
        lat[0] = 20 * n;
        let ideal = vec![1; n as usize];
        let by_gat = arrival_order(&gat);
        assert_eq!(reordering_by_window(&gat, &lat, &ideal, &by_gat), None);
        let narrow = |col: &[Nanos]| -> Vec<u32> { col.iter().map(|&x| x as u32).collect() };
        assert_eq!(reordering_in_arrival_order(&gat, &narrow(&lat), &narrow(&ideal)), None);
        // Only the first is overtaken (by every younger one).
        assert_eq!(reordering_pct(&gat, &lat, &ideal), 100.0 / n as f64);
    }
}
