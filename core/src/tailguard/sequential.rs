//! Budgets for requests made of M sequential queries (TailGuard §III.B, remark on Eq. 7).
//!
//! The unloaded request latency is the sum of the M unloaded query latencies,
//! so x_p^{R,u} is a quantile of their convolution, and the request
//! pre-dequeuing budget is T_b^R = x_p^{R,SLO} − x_p^{R,u}. Eq. 7 shows the
//! SLO holds as long as the queries' pre-dequeuing times add up to at most
//! T_b^R, whatever the split; the paper leaves the split to future work.
//!
//! **Our split.** Query i (0-based) starts at `start_i` with the request's
//! remaining budget R_i = T_b^R − Σ_{j<i} t_pr,j, where t_pr,j is what query j
//! actually spent before its last task was dequeued. It gets
//! B_i = R_i · w_i / Σ_{j≥i} w_j and the deadline start_i + B_i. So:
//! - if every query uses exactly its share, the shares are T_b^R·w_i/Σw and sum to T_b^R;
//! - budget a query leaves unused carries forward to the later queries, in
//!   proportion to their weights; the last query gets all that remains;
//! - the total pre-dequeuing time never exceeds T_b^R while every query meets
//!   its deadline, which is exactly Eq. 7's condition.
//!
//! Weights: [`BudgetSplit::Equal`] (w_i = 1), or [`BudgetSplit::Proportional`]
//! (w_i = x_p^u of query i alone: a query with a longer unloaded tail, e.g. a
//! larger fanout, is given more queuing slack).

use crate::dist::Cdf;
use crate::time::{Nanos, NEVER};

use super::planner::{first_at_least, Deadline, PlannerError, SloClass};

/// How a request budget is divided among its sequential queries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BudgetSplit {
    /// Every query has weight 1.
    #[default]
    Equal,
    /// Query i has weight x_p^u of its own unloaded latency.
    Proportional,
}

/// The p-quantile of X_1 + … + X_M for independent X_i with the given CDFs,
/// as a bracket `(lower, upper)` that contains the exact value, or `None` if
/// some CDF never gets close to 1.
///
/// Method (deterministic): each X_i is truncated where its CDF passes
/// 1 − ε (ε = 10⁻⁶·(1−p)/M) and put on a grid of step h = ⌈ΣT_i / grid⌉ ns,
/// twice: rounded up to the next grid point (so X̃ ≥ X; the mass beyond T_i
/// goes to +∞) and down (X̃ ≤ X; the mass beyond T_i goes to T_i). The
/// discrete sums are convolved exactly, and their p-quantiles bound the true
/// one: lower ≤ x_p ≤ upper, and upper − lower ≤ M·h. Cost: O(grid²) flops
/// whatever M is (8192 → ~70 M multiply-adds, tens of ms).
pub fn sum_quantile<C: Cdf>(parts: &[C], p: f64, grid: usize) -> Option<(Nanos, Nanos)> {
    if parts.is_empty() {
        return Some((0, 0));
    }
    let m = parts.len();
    let level = 1.0 - 1e-6 * (1.0 - p) / m as f64;
    let mut tops = Vec::with_capacity(m);
    for c in parts {
        let q = c.quantile(level);
        let t = first_at_least(q.saturating_sub(q / 64 + 1), q.saturating_add(q / 64 + 1), |t| c.cdf(t) >= level);
        if t == NEVER {
            return None;
        }
        tops.push(t);
    }
    let span: u128 = tops.iter().map(|&t| t as u128).sum();
    let h = (span.div_ceil(grid.max(1) as u128) as Nanos).max(1);

    let mut upper = vec![1.0f64];
    let mut lower = vec![1.0f64];
    for (c, &top) in parts.iter().zip(&tops) {
        let n = top.div_ceil(h) as usize;
        // G at grid points 0, h, …, n·h, forced non-decreasing against rounding.
        let mut g = Vec::with_capacity(n + 1);
        let mut run = 0.0f64;
        for j in 0..=n {
            run = run.max(c.cdf(j as Nanos * h).clamp(0.0, 1.0));
            g.push(run);
        }
        // Up: mass of ((j−1)h, jh] at jh; the rest (beyond n·h) dropped to +∞.
        let up: Vec<f64> = (0..=n).map(|j| if j == 0 { g[0] } else { g[j] - g[j - 1] }).collect();
        // Down: mass of (jh, (j+1)h] at jh, F(0) at 0, the rest at n·h.
        let mut down: Vec<f64> = (0..=n).map(|j| if j < n { g[j + 1] - g[j] } else { 1.0 - g[n] }).collect();
        down[0] += g[0];
        upper = convolve(&upper, &up);
        lower = convolve(&lower, &down);
    }
    let q = |pmf: &[f64]| -> Option<Nanos> {
        let mut cum = 0.0;
        // The 1e-12 slack keeps summation rounding from skipping the exact cell.
        for (j, &v) in pmf.iter().enumerate() {
            cum += v;
            if cum >= p * (1.0 - 1e-12) {
                return Some(j as Nanos * h);
            }
        }
        None
    };
    Some((q(&lower)?, q(&upper)?))
}

fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; a.len() + b.len() - 1];
    for (i, &x) in a.iter().enumerate() {
        if x == 0.0 {
            continue;
        }
        for (o, &y) in out[i..].iter_mut().zip(b) {
            *o += x * y;
        }
    }
    out
}

/// The budget plan of one kind of sequential request: computed once, then
/// [`SequentialPlan::query_deadline`] is O(1) per query.
#[derive(Clone, Debug)]
pub struct SequentialPlan {
    slo: SloClass,
    /// x_p^{R,u}: the upper end of the bracket (conservative: a smaller budget).
    x_r: Nanos,
    x_r_lower: Nanos,
    budget_ns: i64,
    x_u: Box<[Nanos]>,
    weights: Box<[f64]>,
    /// Σ_{j≥i} w_j.
    suffix: Box<[f64]>,
}

impl SequentialPlan {
    /// Grid cells for [`sum_quantile`]: error ≤ M·ΣT_i/8192.
    pub const DEFAULT_GRID: usize = 8192;

    /// `queries[i]` is the unloaded latency CDF of query i (e.g. a
    /// [`MaxOf`](super::MaxOf) for a fan-out query); `slo` is the request's SLO.
    pub fn new<C: Cdf>(slo: SloClass, queries: &[C], split: BudgetSplit, grid: usize) -> Result<Self, PlannerError> {
        if queries.is_empty() {
            return Err(PlannerError::NoQueries);
        }
        let mut x_u = Vec::with_capacity(queries.len());
        for (query, c) in queries.iter().enumerate() {
            let q = c.quantile(slo.p);
            let x = first_at_least(q.saturating_sub(q / 64 + 1), q.saturating_add(q / 64 + 1), |t| c.cdf(t) >= slo.p);
            if x == NEVER {
                return Err(PlannerError::Unbounded { query, level: slo.p });
            }
            x_u.push(x);
        }
        let (x_r_lower, x_r) = sum_quantile(queries, slo.p, grid).ok_or_else(|| {
            // Find the culprit for the message.
            let level = 1.0 - 1e-6 * (1.0 - slo.p) / queries.len() as f64;
            let query = queries.iter().position(|c| c.cdf(NEVER) < level).unwrap_or(0);
            PlannerError::Unbounded { query, level }
        })?;
        let mut weights: Vec<f64> = match split {
            BudgetSplit::Equal => vec![1.0; queries.len()],
            BudgetSplit::Proportional => x_u.iter().map(|&x| x as f64).collect(),
        };
        if weights.iter().sum::<f64>() <= 0.0 {
            weights.iter_mut().for_each(|w| *w = 1.0);
        }
        let mut suffix = weights.clone();
        for i in (0..suffix.len().saturating_sub(1)).rev() {
            suffix[i] += suffix[i + 1];
        }
        let budget_ns = (slo.slo_ns.min(i64::MAX as Nanos) as i64).saturating_sub(x_r.min(i64::MAX as Nanos) as i64);
        Ok(SequentialPlan {
            slo,
            x_r,
            x_r_lower,
            budget_ns,
            x_u: x_u.into(),
            weights: weights.into(),
            suffix: suffix.into(),
        })
    }

    /// Number of queries M.
    pub fn len(&self) -> usize {
        self.x_u.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x_u.is_empty()
    }

    pub fn slo(&self) -> SloClass {
        self.slo
    }

    /// T_b^R = x_p^{R,SLO} − x_p^{R,u}; negative if infeasible.
    pub fn budget_ns(&self) -> i64 {
        self.budget_ns
    }

    /// x_p^{R,u}, the upper end of its bracket (see [`sum_quantile`]).
    pub fn unloaded_tail(&self) -> Nanos {
        self.x_r
    }

    /// (lower, upper) bracket of x_p^{R,u}.
    pub fn unloaded_tail_bounds(&self) -> (Nanos, Nanos) {
        (self.x_r_lower, self.x_r)
    }

    /// x_p^u of query i alone.
    pub fn query_unloaded_tail(&self, i: usize) -> Nanos {
        self.x_u[i]
    }

    /// Query i's weight in the split.
    pub fn weight(&self, i: usize) -> f64 {
        self.weights[i]
    }

    /// B_i = (T_b^R − used) · w_i / Σ_{j≥i} w_j, where `used_ns` is the
    /// pre-dequeuing time the earlier queries actually spent. The last query
    /// gets all that remains. Panics if `i` ≥ [`SequentialPlan::len`].
    pub fn query_budget_ns(&self, i: usize, used_ns: Nanos) -> i64 {
        let remaining = self.budget_ns.saturating_sub(used_ns.min(i64::MAX as Nanos) as i64);
        if i + 1 == self.len() {
            return remaining;
        }
        let share = if self.suffix[i] > 0.0 { self.weights[i] / self.suffix[i] } else { 1.0 / (self.len() - i) as f64 };
        (remaining as f64 * share).floor() as i64
    }

    /// Query i's task queuing deadline: `start + B_i` (clamped to `start` when
    /// B_i < 0, which [`Deadline::feasible`] reports).
    pub fn query_deadline(&self, i: usize, start: Nanos, used_ns: Nanos) -> Deadline {
        Deadline::from_budget(start, self.query_budget_ns(i, used_ns))
    }
}
