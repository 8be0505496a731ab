//! TailGuard's task queuing deadline planner: t_D = t0 + x_p^SLO − x_p^u(k_f) (paper §III.B, Eq. 1–6).
//!
//! x_p^u(k_f), the p-quantile of the *unloaded* latency of a query with k_f
//! parallel tasks, is the smallest t with F_Q^u(t) = Π_k F_{n(k)}(t) ≥ p
//! (Eq. 1–2): the query is as slow as its slowest task. We evaluate the product
//! as a sum of logarithms (F^k underflows for large k otherwise) and find t by
//! an integer bisection on the CDFs, so the answer is exact to the nanosecond
//! for whatever CDF the caller supplies: a service-time [`Dist`](crate::dist::Dist)
//! (the paper's offline estimate), or a [`LatencySnapshot`](crate::latency::LatencySnapshot)
//! of the post-queuing times measured online.
//!
//! The [`Planner`] caches x_p^u per (class, fanout) — the paper's "evaluated in
//! the background for all possible k_f in advance" — and answers
//! [`Planner::deadline`] in O(1) on the request path.

use std::path::Path;
use std::sync::Arc;

use crate::dist::{read_table, Cdf, TableError};
use crate::time::{Nanos, NANOS_PER_MILLI, NEVER};

use super::sequential::{BudgetSplit, SequentialPlan};

/// Index of an SLO class (as in [`Context::class`](crate::Context)).
pub type ClassId = u8;

/// A CDF the planner can share with whoever measures it.
pub type SharedCdf = Arc<dyn Cdf + Send + Sync>;

/// Fanouts above this are computed on every call instead of cached, so a
/// stray huge fanout cannot grow the cache without bound.
pub const MAX_CACHED_FANOUT: u32 = 1 << 16;

/// A tail-latency SLO: the p-quantile of query latency must be ≤ `slo_ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SloClass {
    /// The percentile as a fraction in (0, 1): 0.99 for p99.
    pub p: f64,
    /// x_p^SLO.
    pub slo_ns: Nanos,
}

/// Where x_p^u(k) comes from.
#[derive(Clone)]
pub enum TailModel {
    /// Every task server has the same unloaded-latency CDF F (the paper's
    /// offline estimate, or one histogram merged over all servers):
    /// F_Q^u = F^k.
    Homogeneous(SharedCdf),
    /// One CDF per task server, updated online. The cached budget for fanout
    /// k assumes the *worst* placement: tasks spread as evenly as possible
    /// (each server gets ⌊k/N⌋ or ⌈k/N⌉) with the extra ones on the servers that
    /// are slowest at the t in question. Every actual placement then has an
    /// x_p^u no larger, so the SLO guarantee (Eq. 5) holds whichever servers a
    /// query lands on. [`Planner::deadline_for_servers`] gives the exact budget
    /// for a known placement.
    PerServer(Vec<SharedCdf>),
    /// x_99^u(k) read from a TailGuard `RUT_*` table (line k, in ms). Only
    /// valid for p = 0.99 classes; fanouts beyond the table use its last line.
    Table(RutTable),
}

impl TailModel {
    fn name(&self) -> &'static str {
        match self {
            TailModel::Homogeneous(_) => "a homogeneous model",
            TailModel::PerServer(_) => "a per-server model",
            TailModel::Table(_) => "a RUT table",
        }
    }
}

impl std::fmt::Debug for TailModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TailModel::Homogeneous(_) => f.write_str("Homogeneous(..)"),
            TailModel::PerServer(v) => write!(f, "PerServer({} servers)", v.len()),
            TailModel::Table(t) => write!(f, "Table({} lines)", t.len()),
        }
    }
}

/// Errors from building or updating a planner.
#[derive(Debug, thiserror::Error)]
pub enum PlannerError {
    /// A class percentile outside (0, 1).
    #[error("class {class}: p = {p} must be a fraction in (0, 1), e.g. 0.99 for a p99 SLO")]
    BadPercentile { class: usize, p: f64 },
    /// A RUT table only knows the 99th percentile.
    #[error("class {class}: p = {p}, but a RUT table gives only x_99^u(k); use percentile 99 for every class, or compute x_p^u from a service-time distribution")]
    TableNeedsP99 { class: usize, p: f64 },
    /// A per-server model with no servers.
    #[error("the per-server model has no server CDFs; give at least one")]
    NoServers,
    /// `update_server` with an index past the model's servers.
    #[error("server {server} does not exist: the per-server model has {servers} servers")]
    NoSuchServer { server: usize, servers: usize },
    /// `update_server` on a model that has no per-server CDFs.
    #[error("update_server needs TailModel::PerServer, but this planner uses {model}; call set_model to replace the model instead")]
    NotPerServer { model: &'static str },
    /// Sequential requests need distributions, which a RUT table does not have.
    #[error("a sequential request needs each query's latency distribution, but a RUT table gives only x_99^u(k); use TailModel::Homogeneous or PerServer")]
    TableHasNoDistribution,
    /// A sequential request with no queries.
    #[error("a sequential request needs at least one query")]
    NoQueries,
    /// A query latency CDF that never reaches the needed level.
    #[error("query {query}: its latency CDF never reaches {level}, so its tail is unbounded; check the distribution or histogram it came from")]
    Unbounded { query: usize, level: f64 },
}

// === x_p^u ===

/// Smallest `t` with `pred(t)`, for `pred` monotone (false … false true … true),
/// starting from the guess `[lo, hi]` and widening it geometrically when the
/// guess is wrong. [`NEVER`] if `pred` is false everywhere.
pub(crate) fn first_at_least(lo: Nanos, hi: Nanos, pred: impl Fn(Nanos) -> bool) -> Nanos {
    let (mut lo, mut hi) = (lo.min(hi), hi.max(lo));
    if !pred(hi) {
        let mut step = (hi - lo).max(hi / 64).max(1);
        loop {
            lo = hi;
            hi = hi.saturating_add(step);
            if pred(hi) {
                break;
            }
            if hi == NEVER {
                return NEVER;
            }
            step = step.saturating_mul(2);
        }
    } else if pred(lo) {
        let mut step = (hi - lo).max(lo / 64).max(1);
        loop {
            if lo == 0 {
                return 0;
            }
            hi = lo;
            lo = lo.saturating_sub(step);
            if !pred(lo) {
                break;
            }
            step = step.saturating_mul(2);
        }
    }
    // Invariant: !pred(lo), pred(hi), lo < hi.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Bracket guess around an approximate quantile.
fn around(q: Nanos) -> (Nanos, Nanos) {
    let slack = q / 64 + 1;
    (q.saturating_sub(slack), q.saturating_add(slack))
}

/// ln F, with F clamped to [0, 1] (a CDF a hair above 1 from rounding is 1).
#[inline]
fn ln_cdf<C: Cdf + ?Sized>(c: &C, t: Nanos) -> f64 {
    c.cdf(t).min(1.0).ln()
}

/// x_p^u(k) for k i.i.d. tasks with unloaded-latency CDF `cdf`: the smallest t
/// with F(t)^k ≥ p, tested as k·ln F(t) ≥ ln p so large k cannot underflow.
/// k = 0 gives 0 (an empty query waits for nothing).
pub fn unloaded_quantile_homogeneous<C: Cdf + ?Sized>(cdf: &C, k: u32, p: f64) -> Nanos {
    if k == 0 {
        return 0;
    }
    let ln_p = p.ln();
    let kf = k as f64;
    let (lo, hi) = around(cdf.quantile((ln_p / kf).exp()));
    first_at_least(lo, hi, |t| kf * ln_cdf(cdf, t) >= ln_p)
}

/// x_p^u for one query whose tasks run on exactly `servers` (one task each):
/// the smallest t with Π F_l(t) ≥ p (Eq. 1–2).
pub fn unloaded_quantile<C: Cdf>(servers: &[C], p: f64) -> Nanos {
    if servers.is_empty() {
        return 0;
    }
    let ln_p = p.ln();
    // Π F ≥ p needs every F ≥ p (lower end) and is implied by every F ≥ p^{1/k} (upper end).
    let root = (ln_p / servers.len() as f64).exp();
    let lo = servers.iter().map(|c| c.quantile(p)).max().unwrap_or(0);
    let hi = servers.iter().map(|c| c.quantile(root)).max().unwrap_or(0);
    first_at_least(lo.saturating_sub(1), hi, |t| servers.iter().map(|c| ln_cdf(c, t)).sum::<f64>() >= ln_p)
}

/// The query latency CDF of k i.i.d. tasks: F^k. A [`Cdf`] itself, so it can
/// feed [`SequentialPlan`].
#[derive(Clone, Debug)]
pub struct MaxOf<C> {
    pub inner: C,
    pub k: u32,
}

impl<C: Cdf> Cdf for MaxOf<C> {
    fn cdf(&self, x: Nanos) -> f64 {
        if self.k == 0 {
            return 1.0;
        }
        (self.k as f64 * ln_cdf(&self.inner, x)).exp()
    }
    fn quantile(&self, p: f64) -> Nanos {
        unloaded_quantile_homogeneous(&self.inner, self.k, p)
    }
}

/// The worst-placement query latency CDF of k tasks over the servers `servers`
/// (see [`TailModel::PerServer`]): every server gets ⌊k/N⌋ tasks and the
/// k mod N extra ones go to the servers with the smallest F_l(t). Each order
/// statistic of {F_l(t)} is non-decreasing in t, so this is a CDF.
#[derive(Clone, Debug)]
pub struct WorstCaseMax<'a, C> {
    pub servers: &'a [C],
    pub k: u32,
}

impl<C: Cdf> WorstCaseMax<'_, C> {
    fn ln_cdf(&self, t: Nanos) -> f64 {
        let n = self.servers.len();
        if self.k == 0 || n == 0 {
            return 0.0;
        }
        let (each, extra) = (self.k as usize / n, self.k as usize % n);
        let mut lns: Vec<f64> = self.servers.iter().map(|c| ln_cdf(c, t)).collect();
        let mut total = if each > 0 { each as f64 * lns.iter().sum::<f64>() } else { 0.0 };
        if extra > 0 {
            lns.select_nth_unstable_by(extra - 1, |a, b| a.total_cmp(b));
            total += lns[..extra].iter().sum::<f64>();
        }
        total
    }
}

impl<C: Cdf> Cdf for WorstCaseMax<'_, C> {
    fn cdf(&self, x: Nanos) -> f64 {
        self.ln_cdf(x).exp()
    }
    fn quantile(&self, p: f64) -> Nanos {
        if self.k == 0 || self.servers.is_empty() {
            return 0;
        }
        let ln_p = p.ln();
        // Bounds as in `unloaded_quantile`: the slowest server must reach p, and
        // all reaching p^{1/k} suffices.
        let root = (ln_p / self.k as f64).exp();
        let lo = self.servers.iter().map(|c| c.quantile(p)).max().unwrap_or(0);
        let hi = self.servers.iter().map(|c| c.quantile(root)).max().unwrap_or(0);
        first_at_least(lo.saturating_sub(1), hi, |t| self.ln_cdf(t) >= ln_p)
    }
}

// === RUT tables ===

/// A TailGuard `RUT_*` table: line k (1-based) = x_99^u(k) in ms.
#[derive(Clone, Debug, PartialEq)]
pub struct RutTable {
    values: Box<[Nanos]>,
}

impl RutTable {
    /// Reads a RUT table: one non-negative, non-decreasing float (ms) per line.
    pub fn load(path: &Path) -> Result<Self, TableError> {
        Ok(RutTable { values: read_rut_table(path)?.into_boxed_slice() })
    }

    /// From x_99^u(1), x_99^u(2), … in ns.
    pub fn from_ns(values: Vec<Nanos>) -> Self {
        RutTable { values: values.into_boxed_slice() }
    }

    /// x_99^u(k): 0 for k = 0, the last line for k past the end.
    pub fn get(&self, k: u32) -> Nanos {
        match k {
            0 => 0,
            k => self.values.get(k as usize - 1).or(self.values.last()).copied().unwrap_or(0),
        }
    }

    /// Lines in the table (the largest fanout it knows).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Reads a RUT table as ns; element k−1 is x_99^u(k).
pub fn read_rut_table(path: &Path) -> Result<Vec<Nanos>, TableError> {
    let ms = read_table(path, None)?;
    Ok(ms.into_iter().map(|v| (v * NANOS_PER_MILLI as f64).round() as Nanos).collect())
}

// === impl Deadline ===

/// A task queuing deadline and the budget it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// t_D = t0 + T_b, or t0 itself if the budget is negative.
    pub at: Nanos,
    /// T_b = x_p^SLO − x_p^u(k_f); negative when the SLO cannot be met even unloaded.
    pub budget_ns: i64,
}

impl Deadline {
    /// `t0 + budget`, saturating; a negative budget clamps to `t0`.
    pub fn from_budget(t0: Nanos, budget_ns: i64) -> Self {
        let at = if budget_ns >= 0 { t0.saturating_add(budget_ns as Nanos) } else { t0 };
        Deadline { at, budget_ns }
    }

    /// Whether the SLO is attainable at all for this query (budget ≥ 0).
    pub fn feasible(&self) -> bool {
        self.budget_ns >= 0
    }
}

fn to_i64(ns: Nanos) -> i64 {
    ns.min(i64::MAX as Nanos) as i64
}

// === impl Planner ===

/// Per-class SLOs plus a [`TailModel`], with x_p^u cached per (class, fanout).
///
/// Updating the model ([`Planner::set_model`], [`Planner::update_server`])
/// marks the cache dirty; the next lookup drops it and recomputes lazily, or
/// call [`Planner::refresh`] to recompute every entry seen so far at a moment
/// of your choosing (off the request path, as the paper suggests).
#[derive(Debug)]
pub struct Planner {
    classes: Vec<SloClass>,
    model: TailModel,
    /// cache[class][k] = x_p^u(k) of that class's p, once computed.
    cache: Vec<Vec<Option<Nanos>>>,
    dirty: bool,
    infeasible: u64,
}

impl Planner {
    pub fn new(classes: Vec<SloClass>, model: TailModel) -> Result<Self, PlannerError> {
        for (class, c) in classes.iter().enumerate() {
            if !(c.p > 0.0 && c.p < 1.0) {
                return Err(PlannerError::BadPercentile { class, p: c.p });
            }
        }
        let mut planner = Planner {
            cache: vec![Vec::new(); classes.len()],
            classes,
            model: TailModel::PerServer(vec![]),
            dirty: false,
            infeasible: 0,
        };
        planner.set_model(model)?;
        planner.dirty = false;
        Ok(planner)
    }

    /// x_p^u(k) of k i.i.d. tasks with CDF `cdf` (see [`unloaded_quantile_homogeneous`]).
    pub fn unloaded_quantile_homogeneous<C: Cdf + ?Sized>(cdf: &C, k: u32, p: f64) -> Nanos {
        unloaded_quantile_homogeneous(cdf, k, p)
    }

    pub fn classes(&self) -> &[SloClass] {
        &self.classes
    }

    pub fn model(&self) -> &TailModel {
        &self.model
    }

    /// Replaces the model; cached budgets are recomputed on next use.
    pub fn set_model(&mut self, model: TailModel) -> Result<(), PlannerError> {
        match &model {
            TailModel::Table(_) => {
                if let Some((class, c)) = self.classes.iter().enumerate().find(|(_, c)| c.p != 0.99) {
                    return Err(PlannerError::TableNeedsP99 { class, p: c.p });
                }
            }
            TailModel::PerServer(v) if v.is_empty() => return Err(PlannerError::NoServers),
            _ => {}
        }
        self.model = model;
        self.dirty = true;
        Ok(())
    }

    /// Replaces server `server`'s CDF (online update, §III.B.2). Typically a
    /// fresh [`LatencySnapshot`](crate::latency::LatencySnapshot) of its post-queuing times.
    pub fn update_server(&mut self, server: usize, cdf: SharedCdf) -> Result<(), PlannerError> {
        match &mut self.model {
            TailModel::PerServer(v) => {
                let servers = v.len();
                *v.get_mut(server).ok_or(PlannerError::NoSuchServer { server, servers })? = cdf;
                self.dirty = true;
                Ok(())
            }
            other => Err(PlannerError::NotPerServer { model: other.name() }),
        }
    }

    /// Whether the model changed since the cache was last valid.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Recomputes every cached (class, fanout) entry now and clears the dirty flag.
    pub fn refresh(&mut self) {
        for class in 0..self.classes.len() {
            let p = self.classes[class].p;
            for k in 0..self.cache[class].len() {
                if self.cache[class][k].is_some() {
                    self.cache[class][k] = Some(self.compute(p, k as u32));
                }
            }
        }
        self.dirty = false;
    }

    /// Computes and caches fanouts 1..=`max_fanout` for every class.
    pub fn precompute(&mut self, max_fanout: u32) {
        for class in 0..self.classes.len() {
            for k in 1..=max_fanout.min(MAX_CACHED_FANOUT) {
                self.unloaded_tail(class as ClassId, k);
            }
        }
    }

    fn compute(&self, p: f64, k: u32) -> Nanos {
        match &self.model {
            TailModel::Homogeneous(c) => unloaded_quantile_homogeneous(c, k, p),
            TailModel::PerServer(v) => Cdf::quantile(&WorstCaseMax { servers: v, k }, p),
            TailModel::Table(t) => t.get(k),
        }
    }

    fn class(&self, class: ClassId) -> SloClass {
        *self
            .classes
            .get(class as usize)
            .unwrap_or_else(|| panic!("class {class} out of range: the planner has {} classes", self.classes.len()))
    }

    /// x_p^u(k_f) for the class's p (cached). Panics if `class` is out of range.
    pub fn unloaded_tail(&mut self, class: ClassId, fanout: u32) -> Nanos {
        let p = self.class(class).p;
        if self.dirty {
            self.cache.iter_mut().for_each(Vec::clear);
            self.dirty = false;
        }
        if fanout > MAX_CACHED_FANOUT {
            return self.compute(p, fanout);
        }
        let k = fanout as usize;
        if let Some(Some(x)) = self.cache[class as usize].get(k) {
            return *x;
        }
        let x = self.compute(p, fanout);
        let row = &mut self.cache[class as usize];
        if row.len() <= k {
            row.resize(k + 1, None);
        }
        row[k] = Some(x);
        x
    }

    /// T_b = x_p^SLO − x_p^u(k_f), in ns; negative if the SLO is infeasible for this fanout.
    pub fn budget_ns(&mut self, class: ClassId, fanout: u32) -> i64 {
        let slo = self.class(class).slo_ns;
        to_i64(slo).saturating_sub(to_i64(self.unloaded_tail(class, fanout)))
    }

    /// The task queuing deadline t_D = t0 + T_b (Eq. 6) of a query that arrived
    /// at `t0`. A negative budget clamps t_D to t0 and counts in
    /// [`Planner::infeasible_count`].
    pub fn deadline(&mut self, class: ClassId, fanout: u32, t0: Nanos) -> Deadline {
        let d = Deadline::from_budget(t0, self.budget_ns(class, fanout));
        if !d.feasible() {
            self.infeasible += 1;
        }
        d
    }

    /// The deadline for a query whose tasks go to exactly `servers` (indices
    /// into a per-server model; one task per entry). Exact Eq. 1 for that
    /// placement, not cached: O(|servers| · log) per call. Panics on a server
    /// index out of range. With a homogeneous
    /// or table model this is [`Planner::deadline`] with fanout = `servers.len()`.
    pub fn deadline_for_servers(&mut self, class: ClassId, t0: Nanos, servers: &[usize]) -> Deadline {
        let c = self.class(class);
        let x = match &self.model {
            TailModel::PerServer(v) => {
                let chosen: Vec<&SharedCdf> = servers
                    .iter()
                    .map(|&s| {
                        v.get(s).unwrap_or_else(|| panic!("server {s} out of range: the model has {} servers", v.len()))
                    })
                    .collect();
                unloaded_quantile(&chosen, c.p)
            }
            _ => return self.deadline(class, servers.len() as u32, t0),
        };
        let d = Deadline::from_budget(t0, to_i64(c.slo_ns).saturating_sub(to_i64(x)));
        if !d.feasible() {
            self.infeasible += 1;
        }
        d
    }

    /// Deadlines handed out with a negative budget (SLO infeasible even unloaded).
    pub fn infeasible_count(&self) -> u64 {
        self.infeasible
    }

    /// A budget plan for a request of sequential queries with the given fanouts
    /// under class `class`'s SLO (Eq. 7 remark); see [`SequentialPlan`].
    pub fn sequential_plan(
        &self,
        class: ClassId,
        fanouts: &[u32],
        split: BudgetSplit,
    ) -> Result<SequentialPlan, PlannerError> {
        let slo = self.class(class);
        match &self.model {
            TailModel::Homogeneous(c) => {
                let queries: Vec<MaxOf<&SharedCdf>> = fanouts.iter().map(|&k| MaxOf { inner: c, k }).collect();
                SequentialPlan::new(slo, &queries, split, SequentialPlan::DEFAULT_GRID)
            }
            TailModel::PerServer(v) => {
                let queries: Vec<WorstCaseMax<SharedCdf>> =
                    fanouts.iter().map(|&k| WorstCaseMax { servers: v, k }).collect();
                SequentialPlan::new(slo, &queries, split, SequentialPlan::DEFAULT_GRID)
            }
            TailModel::Table(_) => Err(PlannerError::TableHasNoDistribution),
        }
    }
}
