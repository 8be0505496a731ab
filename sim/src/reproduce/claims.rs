//! Evaluating the manifest's claims against the runs: selectors pick numbers
//! out of figures, expressions combine them, `expect` asserts, and the
//! `cause` template becomes the report's sentence with measured values filled in.
//!
//! Metric names (a selector's `metric`; `_us` instead of `_ms` gives µs):
//! - every run: `mean_ms`, `p50_ms`, `p90_ms`, `p99_ms`, `p999_ms`, `max_ms`,
//!   `throughput_rps`, `reordering_pct`, `slowdown_p99`, `deadline_miss_pct`,
//!   `rejected_pct`, `utilization`, `offered_rps`, `requests`,
//!   `accepted_util` (utilization × admitted share), `rejected_util`,
//!   `slo_ratio` (largest tail / SLO over the (class, fanout) groups),
//!   `p99_ci_lo_ms`, `p99_ci_hi_ms` (batch-means 95% interval);
//!   with `class`: `p99_ms`, `tail_ms`, `slo_ratio`, `rejected`;
//!   with `fanout`: `p99_ms`; with both: `tail_ms`, `slo_ratio`;
//! - sweep runs also: `short1_p99_ms`, `short1_count`, `throughput_mid_rps`,
//!   `preemptions_per_request`, `switch_cpu_pct` (see [`super::exec::Extra`]);
//! - searches: `max_util`, `max_rps`, `probes`; any other metric is read from
//!   the run at the maximum load;
//! - admission calibration (series "calibration"): `max_util`, `r_th_pct`;
//! - planner tables: `mean_ms`, `x_u_ms` and `rut_ms` (with `fanout`).

use std::collections::BTreeMap;

use super::exec::{FigurePlan, Outcome, Point, PointData, RunRecord};
use super::manifest::{Axis, ClaimSpec, Expect, MinMax, Operand, Selector, ValueSpec};
use super::Reproduction;

/// A measured number; `bound` when it is only a bound (a crossing outside
/// the measured loads) or derived from one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Val {
    pub v: f64,
    pub bound: Option<Bound>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The true value is above `v`.
    Above,
    /// The true value is below `v`.
    Below,
    /// Derived from bounds both ways: only indicative.
    Approx,
}

impl Val {
    fn exact(v: f64) -> Val {
        Val { v, bound: None }
    }
}

/// Why a value could not be measured. `missing`: a point the manifest names
/// was not run (expected in `--quick`, which runs fewer points).
#[derive(Clone, Debug)]
pub struct EvalError {
    pub msg: String,
    pub missing: bool,
}

impl From<String> for EvalError {
    fn from(msg: String) -> Self {
        EvalError { msg, missing: false }
    }
}

impl From<&str> for EvalError {
    fn from(msg: &str) -> Self {
        EvalError { msg: msg.to_string(), missing: false }
    }
}

impl From<MetricError> for EvalError {
    fn from(e: MetricError) -> Self {
        EvalError { msg: e.to_string(), missing: false }
    }
}

/// Why a record has no value for a metric (a selector or a column names it).
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum MetricError {
    /// Scalar points (planner tables) hold a fixed set of numbers.
    #[error("no metric {key:?} here; have {have:?}")]
    NoScalar { key: String, have: Vec<String> },
    /// The metric name is not one a run measures for this class/fanout filter.
    #[error(
        "unknown metric {name:?}{}{}",
        .class.as_ref().map_or(String::new(), |c| format!(" for class {c:?}")),
        .fanout.map_or(String::new(), |k| format!(" for fanout {k}"))
    )]
    Unknown { name: String, class: Option<String>, fanout: Option<u32> },
    /// Per class-and-fanout groups exist only for classes with an SLO.
    #[error("no group class {class:?}, fanout {fanout} (has it an SLO?)")]
    NoGroup { class: String, fanout: u32 },
    /// The scenario has no class of that name.
    #[error("no class {class:?}")]
    NoClass { class: String },
    /// No request of the run had that fanout.
    #[error("no fanout {fanout}")]
    NoFanout { fanout: u32 },
}

/// What a point's data is, resolved.
pub enum Record<'a> {
    Run(&'a RunRecord),
    Search(&'a super::exec::SearchRecord),
    Admission(&'a super::exec::AdmissionRecord),
    Scalars(&'a BTreeMap<String, f64>),
}

impl Reproduction {
    pub fn record<'a>(&'a self, p: &'a Point) -> Record<'a> {
        match &p.data {
            PointData::Job(j) => match &self.outcomes[*j] {
                Outcome::Run(r) => Record::Run(r),
                Outcome::Search(s) => Record::Search(s),
                Outcome::Admission(a) => Record::Admission(a),
            },
            PointData::AdmissionRun(j, i) => match &self.outcomes[*j] {
                Outcome::Admission(a) => Record::Run(&a.runs[*i].1),
                _ => unreachable!("admission points point at admission jobs"),
            },
            PointData::Scalars(m) => Record::Scalars(m),
        }
    }

    pub fn figure_plan(&self, id: &str) -> Option<&FigurePlan> {
        self.figures.iter().find(|f| self.manifest.manifest.figures[f.index].id == id)
    }
}

/// A metric of a record; NaN when the record has no such number (e.g. a
/// search in which no load met the SLO).
pub fn metric(rec: &Record, name: &str, class: Option<&str>, fanout: Option<u32>) -> Result<f64, MetricError> {
    if let Some(stem) = name.strip_suffix("_us") {
        return Ok(metric(rec, &format!("{stem}_ms"), class, fanout)? * 1000.0);
    }
    match rec {
        Record::Scalars(m) => {
            let key = match fanout {
                Some(k) => format!("{name}@{k}"),
                None => name.to_string(),
            };
            m.get(&key).copied().ok_or_else(|| MetricError::NoScalar { have: m.keys().cloned().collect(), key })
        }
        Record::Search(s) => match name {
            "max_util" => Ok(s.max_util),
            "max_rps" => Ok(s.max_rps),
            "probes" => Ok(s.probes.len() as f64),
            _ => match &s.at_max {
                Some(r) => run_metric(r, name, class, fanout),
                None => Ok(f64::NAN),
            },
        },
        Record::Admission(a) => match name {
            "max_util" => Ok(a.max_util),
            "r_th_pct" => Ok(100.0 * a.r_th),
            _ => metric(&Record::Search(&a.search), name, class, fanout),
        },
        Record::Run(r) => run_metric(r, name, class, fanout),
    }
}

fn run_metric(r: &RunRecord, name: &str, class: Option<&str>, fanout: Option<u32>) -> Result<f64, MetricError> {
    let s = &r.summary;
    let unknown = || MetricError::Unknown { name: name.to_string(), class: class.map(str::to_string), fanout };
    match (class, fanout) {
        (Some(c), Some(k)) => {
            let g = s
                .per_class_fanout
                .iter()
                .find(|g| g.class == c && g.fanout == k)
                .ok_or_else(|| MetricError::NoGroup { class: c.to_string(), fanout: k })?;
            match name {
                "tail_ms" => Ok(g.tail_ms),
                "slo_ratio" => Ok(g.tail_ms / g.slo_ms),
                _ => Err(unknown()),
            }
        }
        (Some(c), None) => {
            let pc = s
                .per_class
                .iter()
                .find(|x| x.class == c)
                .ok_or_else(|| MetricError::NoClass { class: c.to_string() })?;
            match name {
                "p99_ms" => Ok(pc.p99_ms),
                "tail_ms" => Ok(pc.tail_ms),
                "rejected" => Ok(pc.rejected as f64),
                "slo_ratio" => Ok(s
                    .per_class_fanout
                    .iter()
                    .filter(|g| g.class == c)
                    .map(|g| g.tail_ms / g.slo_ms)
                    .fold(f64::NAN, f64::max)),
                _ => Err(unknown()),
            }
        }
        (None, Some(k)) => {
            let pf = s.per_fanout.iter().find(|x| x.fanout == k).ok_or(MetricError::NoFanout { fanout: k })?;
            match name {
                "p99_ms" => Ok(pf.p99_ms),
                _ => Err(unknown()),
            }
        }
        (None, None) => {
            let l = &s.latency_ms;
            let x = r.extra.as_ref();
            let nan = f64::NAN;
            Ok(match name {
                "mean_ms" => l.mean,
                "p50_ms" => l.p50,
                "p90_ms" => l.p90,
                "p99_ms" => l.p99,
                "p999_ms" => l.p999,
                "max_ms" => l.max,
                "throughput_rps" => s.throughput_rps,
                "reordering_pct" => s.reordering_pct,
                "slowdown_p99" => s.slowdown_p99,
                "deadline_miss_pct" => s.deadline_miss_pct,
                "rejected_pct" => s.rejected_pct,
                "utilization" => r.utilization,
                "offered_rps" => r.offered_rps,
                "requests" => s.requests as f64,
                "accepted_util" => r.utilization * (1.0 - s.rejected_pct / 100.0),
                "rejected_util" => r.utilization * s.rejected_pct / 100.0,
                "slo_ratio" => s.per_class_fanout.iter().map(|g| g.tail_ms / g.slo_ms).fold(f64::NAN, f64::max),
                "p99_ci_lo_ms" => s.ci95.as_ref().map_or(nan, |c| c.p99_ms[0]),
                "p99_ci_hi_ms" => s.ci95.as_ref().map_or(nan, |c| c.p99_ms[1]),
                "short1_p99_ms" => x.map_or(nan, |x| x.short1_p99_ms),
                "short1_count" => x.map_or(nan, |x| x.short1_count as f64),
                "throughput_mid_rps" => x.map_or(nan, |x| x.throughput_mid_rps),
                "preemptions_per_request" => x.map_or(nan, |x| x.preemptions_per_request),
                "switch_cpu_pct" => x.map_or(nan, |x| x.switch_cpu_pct),
                _ => return Err(unknown()),
            })
        }
    }
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Fills the axes a selector leaves open (for `agg`).
#[derive(Clone, Copy, Default)]
struct Fill {
    load: Option<f64>,
    vary: Option<f64>,
}

impl Fill {
    fn with(self, axis: Axis, x: f64) -> Fill {
        match axis {
            Axis::Load => Fill { load: Some(x), ..self },
            Axis::Vary => Fill { vary: Some(x), ..self },
        }
    }
}

impl Reproduction {
    /// The figure a selector reads (its `figure`, else `ctx`).
    fn target<'a>(&'a self, ctx: &'a FigurePlan, sel: &Selector) -> Result<&'a FigurePlan, EvalError> {
        match &sel.figure {
            None => Ok(ctx),
            Some(id) => self
                .figure_plan(id)
                .ok_or_else(|| EvalError { msg: format!("figure {id:?} was not run"), missing: true }),
        }
    }

    fn select(&self, ctx: &FigurePlan, sel: &Selector, fill: Fill) -> Result<Val, EvalError> {
        let fig = self.target(ctx, sel)?;
        let load = sel.load.or(fill.load);
        let vary = sel.vary.or(fill.vary);
        let mut vals = Vec::new();
        for label in sel.series.labels() {
            let v = match sel.crossing {
                Some(threshold) => self.crossing(fig, label, vary, sel, threshold)?,
                None => {
                    let p = find_point(fig, label, vary, load)?;
                    Val::exact(metric(&self.record(p), &sel.metric, sel.class.as_deref(), sel.fanout)?)
                }
            };
            vals.push(v);
        }
        let pick = |a: Val, b: Val| match sel.pick {
            Some(MinMax::Max) if b.v > a.v => b,
            Some(MinMax::Min) if b.v < a.v => b,
            _ => a,
        };
        Ok(vals.into_iter().reduce(pick).expect("at least one series"))
    }

    /// The load at which `metric` first exceeds `threshold`, interpolated
    /// between the two sweep points around it.
    fn crossing(
        &self,
        fig: &FigurePlan,
        label: &str,
        vary: Option<f64>,
        sel: &Selector,
        threshold: f64,
    ) -> Result<Val, EvalError> {
        let mut pts: Vec<(f64, f64)> = Vec::new();
        for p in &fig.points {
            if p.series != label || !vary_matches(fig, p.vary, vary)? {
                continue;
            }
            let Some(l) = p.load else { continue };
            pts.push((l, metric(&self.record(p), &sel.metric, sel.class.as_deref(), sel.fanout)?));
        }
        if pts.is_empty() {
            return Err(EvalError { msg: format!("no sweep points for series {label:?}"), missing: true });
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        for i in 0..pts.len() {
            let (x1, y1) = pts[i];
            if y1 > threshold || y1.is_nan() {
                if i == 0 {
                    return Ok(Val { v: x1, bound: Some(Bound::Below) });
                }
                let (x0, y0) = pts[i - 1];
                if y1.is_nan() {
                    return Ok(Val { v: x0, bound: Some(Bound::Above) });
                }
                return Ok(Val::exact(x0 + (threshold - y0) / (y1 - y0) * (x1 - x0)));
            }
        }
        Ok(Val { v: pts.last().unwrap().0, bound: Some(Bound::Above) })
    }

    fn operand(&self, ctx: &FigurePlan, op: &Operand, fill: Fill) -> Result<Val, EvalError> {
        match op {
            Operand::Sel(s) => self.select(ctx, s, fill),
            Operand::Value(v) => Ok(self.eval_with(ctx, v, fill)?.0),
        }
    }

    fn eval_at(&self, ctx: &FigurePlan, v: &ValueSpec, fill: Fill) -> Result<Val, EvalError> {
        let two = |pair: &[Operand; 2]| -> Result<(Val, Val), EvalError> {
            Ok((self.operand(ctx, &pair[0], fill)?, self.operand(ctx, &pair[1], fill)?))
        };
        let combine = |a: Val, b: Val, f: fn(f64, f64) -> f64| {
            let bound = match (a.bound, b.bound) {
                (None, None) => None,
                (x, None) => x,
                (None, Some(Bound::Above)) => Some(Bound::Below),
                (None, Some(Bound::Below)) => Some(Bound::Above),
                _ => Some(Bound::Approx),
            };
            Val { v: f(a.v, b.v), bound }
        };
        let extreme = |list: &[Operand], how: MinMax| -> Result<Val, EvalError> {
            let mut best: Option<Val> = None;
            for op in list {
                let x = self.operand(ctx, op, fill)?;
                let better = match (&best, how) {
                    (None, _) => true,
                    (Some(b), MinMax::Max) => x.v > b.v,
                    (Some(b), MinMax::Min) => x.v < b.v,
                };
                if better {
                    best = Some(x);
                }
            }
            best.ok_or_else(|| EvalError::from("an empty list"))
        };
        if let Some(s) = &v.of {
            self.select(ctx, s, fill)
        } else if let Some(p) = &v.change {
            let (a, b) = two(p)?;
            Ok(combine(a, b, |a, b| 100.0 * (a / b - 1.0)))
        } else if let Some(p) = &v.ratio {
            let (a, b) = two(p)?;
            Ok(combine(a, b, |a, b| a / b))
        } else if let Some(p) = &v.diff {
            let (a, b) = two(p)?;
            Ok(combine(a, b, |a, b| a - b))
        } else if let Some(l) = &v.max {
            extreme(l, MinMax::Max)
        } else if let Some(l) = &v.min {
            extreme(l, MinMax::Min)
        } else {
            unreachable!("checked by Manifest::problems")
        }
    }

    /// A value, and the axis value `agg` picked (if any).
    pub fn eval(&self, ctx: &FigurePlan, v: &ValueSpec) -> Result<(Val, Option<f64>), EvalError> {
        self.eval_with(ctx, v, Fill::default())
    }

    fn eval_with(&self, ctx: &FigurePlan, v: &ValueSpec, fill: Fill) -> Result<(Val, Option<f64>), EvalError> {
        let Some(agg) = &v.agg else { return Ok((self.eval_at(ctx, v, fill)?, None)) };
        let first = super::manifest::selectors(v)[0];
        let fig = self.target(ctx, first)?;
        let xs = match agg.over {
            Axis::Load => &fig.loads,
            Axis::Vary => &fig.vary,
        };
        let mut best: Option<(Val, f64)> = None;
        for &x in xs {
            let fill = fill.with(agg.over, x);
            if let Some(w) = &agg.filter {
                let c = self.select(ctx, &w.of, fill)?.v;
                // A NaN never passes.
                let passes = w.le.is_none_or(|le| c <= le) && w.ge.is_none_or(|ge| c >= ge) && !c.is_nan();
                if !passes {
                    continue;
                }
            }
            let val = self.eval_at(ctx, v, fill)?;
            if val.v.is_nan() {
                continue;
            }
            let better = match (&best, agg.how) {
                (None, _) => true,
                (Some((b, _)), MinMax::Min) => val.v < b.v,
                (Some((b, _)), MinMax::Max) => val.v > b.v,
            };
            if better {
                best = Some((val, x));
            }
        }
        match best {
            Some((_, x)) if agg.arg => Ok((Val::exact(x), None)),
            Some((v, x)) => Ok((v, Some(x))),
            None => Err("no axis value passes the `where` filter".into()),
        }
    }
}

fn vary_matches(fig: &FigurePlan, have: Option<f64>, want: Option<f64>) -> Result<bool, EvalError> {
    match (have, want) {
        (None, _) => Ok(true),
        (Some(h), Some(w)) => Ok(same(h, w)),
        (Some(_), None) if fig.vary.len() <= 1 => Ok(true),
        (Some(_), None) => Err(format!("the figure varies over {:?}: give `vary`", fig.vary).into()),
    }
}

fn find_point<'a>(
    fig: &'a FigurePlan,
    label: &str,
    vary: Option<f64>,
    load: Option<f64>,
) -> Result<&'a Point, EvalError> {
    let mut found = None;
    for p in &fig.points {
        if p.series != label || !vary_matches(fig, p.vary, vary)? {
            continue;
        }
        let ok = match (p.load, load) {
            (None, _) => true,
            (Some(h), Some(w)) => same(h, w),
            (Some(_), None) if fig.loads.len() <= 1 => true,
            (Some(_), None) => return Err(format!("the figure has loads {:?}: give `load`", fig.loads).into()),
        };
        if ok {
            found = Some(p);
            break;
        }
    }
    found.ok_or_else(|| EvalError {
        missing: true,
        msg: format!(
            "no point for series {label:?}{}{} (series: {:?}, loads: {:?}, vary: {:?})",
            vary.map_or(String::new(), |v| format!(", vary {v}")),
            load.map_or(String::new(), |l| format!(", load {l}")),
            fig.series,
            fig.loads,
            fig.vary
        ),
    })
}

/// A claim, evaluated.
#[derive(Clone, Debug)]
pub struct ClaimResult {
    pub what: String,
    pub paper: String,
    pub ours: String,
    pub value: Option<Val>,
    /// ours / paper, when the paper gives a number.
    pub ratio: Option<f64>,
    pub expect: Option<Expect>,
    /// Whether `expect` holds.
    pub holds: Option<bool>,
    /// Whether ours is within the tolerance of the paper's number.
    pub agrees: Option<bool>,
    pub tolerance: f64,
    pub sentence: String,
    pub ci: bool,
    pub error: Option<String>,
    /// Not evaluated: `--quick` did not run a point it needs.
    pub skipped: bool,
}

impl ClaimResult {
    /// Passes: the assertion holds (claims without one, and claims skipped
    /// in `--quick`, always pass).
    pub fn passes(&self) -> bool {
        self.skipped || (self.error.is_none() && self.holds != Some(false))
    }
}

/// Formats a number with about three significant digits.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        let digits = (2 - a.log10().floor() as i32).clamp(2, 6) as usize;
        format!("{x:.digits$}")
    }
}

/// A value in a claim's unit.
pub fn with_unit(x: f64, unit: &str) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    match unit {
        "Δ%" => {
            if x.abs() >= 10.0 {
                format!("{x:+.0}%")
            } else {
                format!("{x:+.1}%")
            }
        }
        "%" => format!("{}%", num(x)),
        "×" => format!("{x:.2}×"),
        "int" => format!("{x:.0}"),
        "util" => format!("{:.1}%", 100.0 * x),
        "ms" => format!("{} ms", num(x)),
        "µs" => format!("{} µs", num(x)),
        "rps" => format!("{} RPS", num(x)),
        "" => num(x),
        other => format!("{} {other}", num(x)),
    }
}

fn show(v: Val, unit: &str) -> String {
    let s = with_unit(v.v, unit);
    match v.bound {
        None => s,
        Some(Bound::Above) => format!("> {s}"),
        Some(Bound::Below) => format!("< {s}"),
        Some(Bound::Approx) => format!("~{s}"),
    }
}

/// Replaces `{name}` in a template.
pub fn render(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        match rest[i..].find('}') {
            Some(j) => {
                let name = &rest[i + 1..i + j];
                match values.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&rest[i..i + j + 1]),
                }
                rest = &rest[i + j + 1..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

impl Reproduction {
    /// Evaluates one claim of figure `ctx`.
    pub fn claim(&self, ctx: &FigurePlan, c: &ClaimSpec) -> ClaimResult {
        let tolerance = c.tolerance.unwrap_or(0.25);
        let expect = c.expect.as_deref().map(|e| Expect::parse(e).expect("checked by Manifest::problems"));
        let paper = match (c.paper, &c.paper_text) {
            (_, Some(t)) => t.clone(),
            (Some(p), None) => with_unit(p, &c.unit),
            (None, None) => "—".into(),
        };
        let mut r = ClaimResult {
            what: c.what.clone(),
            paper,
            ours: "n/a".into(),
            value: None,
            ratio: None,
            expect,
            holds: None,
            agrees: None,
            tolerance,
            sentence: String::new(),
            ci: c.ci,
            error: None,
            skipped: false,
        };
        let (val, at) = match self.eval(ctx, &c.value) {
            Ok(x) => x,
            Err(e) if e.missing && self.options.quick => {
                r.skipped = true;
                r.sentence = "Not run in `--quick` mode.".into();
                return r;
            }
            Err(e) => {
                r.sentence = format!("Not measured: {}.", e.msg);
                r.holds = expect.map(|_| false);
                r.error = Some(e.msg);
                return r;
            }
        };
        let val = Val { v: val.v * c.ours_factor.unwrap_or(1.0), ..val };
        r.value = Some(val);
        r.ours = show(val, &c.unit);
        if let Some(at) = at {
            r.ours = format!("{} (at {})", r.ours, num(at));
        }
        r.holds = expect.map(|e| e.holds(val.v));
        if let Some(p) = c.paper {
            if p != 0.0 && val.v.is_finite() {
                let ratio = val.v / p;
                r.ratio = Some(ratio);
                r.agrees = Some((ratio - 1.0).abs() <= tolerance && val.bound.is_none());
            }
        }
        let differs = r.agrees == Some(false) || r.holds == Some(false) || (r.agrees.is_none() && c.paper.is_some());
        let mut values = BTreeMap::new();
        values.insert("ours".to_string(), show(val, &c.unit));
        values.insert("paper".to_string(), c.paper.map_or(r.paper.clone(), |p| with_unit(p, &c.unit)));
        values.insert("ratio".to_string(), r.ratio.map_or("n/a".into(), |x| format!("{x:.2}×")));
        values.insert("at".to_string(), at.map_or("n/a".into(), num));
        if differs || c.note.is_some() {
            for (name, spec) in &c.aux {
                let s = match self.eval(ctx, spec) {
                    Ok((v, _)) => show(v, ""),
                    Err(e) => format!("(n/a: {})", e.msg),
                };
                values.insert(name.clone(), s);
            }
        }
        r.sentence = if !differs {
            match r.agrees {
                Some(true) => format!("Agrees within ±{:.0}%.", 100.0 * tolerance),
                _ => "Holds.".into(),
            }
        } else {
            render(&c.cause, &values)
        };
        if let Some(note) = &c.note {
            r.sentence = format!("{} {}", r.sentence, render(note, &values));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_known_names_and_keep_unknown_ones() {
        let mut v = BTreeMap::new();
        v.insert("ours".to_string(), "12%".to_string());
        assert_eq!(render("we get {ours}, {x}", &v), "we get 12%, {x}");
        assert_eq!(render("no braces", &v), "no braces");
    }

    #[test]
    fn numbers_and_units() {
        assert_eq!(num(0.0456), "0.0456");
        assert_eq!(num(1234.5), "1234");
        assert_eq!(with_unit(-81.2, "Δ%"), "-81%");
        assert_eq!(with_unit(0.28, "util"), "28.0%");
        assert_eq!(with_unit(1.5, "×"), "1.50×");
    }

    #[test]
    fn expectations_can_fail() {
        let e = Expect::parse("< 0").unwrap();
        assert!(e.holds(-1.0));
        assert!(!e.holds(0.0));
        assert!(!e.holds(f64::NAN), "a missing value never satisfies an assertion");
        assert!(Expect::parse(">= 1.5").unwrap().holds(1.5));
        assert!(Expect::parse("about 3").is_err());
    }
}
