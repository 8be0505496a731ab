//! The reproduction manifest (`scenarios/seeds/reproduce.toml`): every figure
//! and table of the seeds that `tailor reproduce` regenerates, the scenario
//! that reproduces it, the paper's claims and how to measure ours. The format
//! is documented in `docs/reproduction-manifest.md`; unknown keys are errors,
//! and [`Manifest::load`] reports every problem at once.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use tailor_core::PolicySpec;

mod load;
pub use load::{LoadedManifest, ManifestError};

/// The whole manifest.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The report's title.
    pub title: String,
    /// Paragraphs under the title (hand-written; no measured numbers here).
    #[serde(default)]
    pub intro: String,
    /// How `--quick` shrinks the runs.
    #[serde(default)]
    pub quick: QuickSpec,
    #[serde(rename = "paper")]
    pub papers: Vec<PaperSpec>,
    #[serde(rename = "figure")]
    pub figures: Vec<FigureSpec>,
}

/// `--quick`: fewer requests, fewer points, coarser searches.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuickSpec {
    /// Measured and warm-up requests of every run are multiplied by this.
    #[serde(default = "quarter")]
    pub requests_factor: f64,
    /// ... but never below this many measured requests.
    #[serde(default = "two_thousand")]
    pub min_requests: u64,
    /// Max-load searches stop at `tolerance` × this.
    #[serde(default = "two")]
    pub tolerance_factor: f64,
}

impl Default for QuickSpec {
    fn default() -> Self {
        QuickSpec { requests_factor: quarter(), min_requests: two_thousand(), tolerance_factor: two() }
    }
}

fn quarter() -> f64 {
    0.25
}
fn two_thousand() -> u64 {
    2000
}
fn two() -> f64 {
    2.0
}

/// A seed paper; figures refer to it by `id`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperSpec {
    pub id: String,
    /// e.g. "TailClipper (Ng et al., SoCC '24)".
    pub title: String,
    /// Paragraphs for the paper's section: setup and deviations (no measured numbers).
    #[serde(default)]
    pub note: String,
}

/// What a figure runs. Inferred from its scenario when absent: `[search]` →
/// `search`, otherwise `sweep`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FigureKind {
    /// One run per (series, vary value, load of the scenario's `[sweep]`).
    Sweep,
    /// One max-load-under-SLO search per (series, vary value).
    Search,
    /// TailGuard's unloaded tails x_p^u(k) from the planner, no simulation.
    Planner,
    /// TailGuard §IV.D: calibrate R_th, then sweep offered load with admission control.
    Admission,
    /// No runs of its own: claims over other figures' runs (every selector names a `figure`).
    Claims,
}

/// One figure or table of a paper.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureSpec {
    /// Unique, used in file names and cross-figure selectors.
    pub id: String,
    /// `id` of a [`PaperSpec`].
    pub paper: String,
    pub title: String,
    /// Where in the paper, e.g. "§5.4".
    pub section: String,
    #[serde(default)]
    pub kind: Option<FigureKind>,
    /// Scenario file, relative to the manifest.
    #[serde(default)]
    pub scenario: Option<PathBuf>,
    /// Setup and deviations from the paper, for the report (no measured numbers).
    #[serde(default)]
    pub note: String,
    /// Patches applied to the scenario for every series: dotted path → value
    /// (`"service.*.service_time"`, `"deadlines.mode"`); `*` is every element.
    #[serde(default)]
    pub set: toml::Table,
    /// The lines of the figure. Absent: one per policy of the scenario's
    /// `[sweep]`/`[search]`, or one with the scenario's own policies.
    #[serde(default)]
    pub series: Vec<SeriesSpec>,
    /// A parameter the figure varies besides the load.
    #[serde(default)]
    pub vary: Option<VarySpec>,
    /// Run only these loads of the scenario's `[sweep]` axis (default: all).
    #[serde(default)]
    pub loads: Option<Vec<f64>>,
    /// Loads to run in `--quick` (default: `loads`, or all).
    #[serde(default)]
    pub quick_loads: Option<Vec<f64>>,
    /// Vary values to run in `--quick`.
    #[serde(default)]
    pub quick_vary: Option<Vec<f64>>,
    /// The paper's load is ours times this (time scaling; shown next to our loads).
    #[serde(default)]
    pub paper_load_factor: Option<f64>,
    /// What the paper's load axis is called, e.g. "paper RPS".
    #[serde(default)]
    pub paper_load_label: Option<String>,
    #[serde(default)]
    pub plots: Vec<PlotSpec>,
    /// Columns of the figure's data table: metric names, optionally
    /// `name[class=I]`, `name[fanout=100]`.
    #[serde(default)]
    pub columns: Vec<String>,
    /// For `kind = "planner"`.
    #[serde(default)]
    pub planner: Option<PlannerSpec>,
    #[serde(default, rename = "claim")]
    pub claims: Vec<ClaimSpec>,
}

/// One line of a figure.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesSpec {
    /// The paper's name for it, e.g. "TF-EDFQ".
    pub label: String,
    /// Policy for every service (absent: the scenario's own).
    #[serde(default)]
    pub policy: Option<PolicySpec>,
    /// Patches for this series, after the figure's.
    #[serde(default)]
    pub set: toml::Table,
    /// Replaces the figure's `vary.scale` for this series.
    #[serde(default)]
    pub vary_scale: Option<BTreeMap<String, f64>>,
}

/// A parameter axis: each value is a separate run (or search).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarySpec {
    /// Axis label, e.g. "SLO (ms)".
    pub name: String,
    pub values: Vec<f64>,
    /// path → factor: the value at `path` becomes value × factor.
    #[serde(default)]
    pub scale: BTreeMap<String, f64>,
    /// Array path: keep only its first `value` elements (e.g. tiers of a chain).
    #[serde(default)]
    pub truncate: Option<String>,
}

/// An SVG plot of the figure.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    /// The y metric (see [`crate::reproduce::claims`] for names).
    pub metric: String,
    /// `load` or `vary`; default: `vary` for search figures and figures
    /// without a load axis, else `load`.
    #[serde(default)]
    pub x: Option<Axis>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub fanout: Option<u32>,
    /// Plot the latency CCDF of each series instead (y: fraction of requests
    /// with at least that latency); `metric` is `latency_ms` or `latency_us`.
    #[serde(default)]
    pub ccdf: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    Load,
    Vary,
}

/// TailGuard Table II: the planner's unloaded tails against the authors' tables.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerSpec {
    pub fanouts: Vec<u32>,
    #[serde(default = "ninety_nine")]
    pub percentile: f64,
    pub tables: Vec<PlannerTable>,
    /// Template for the rows where our number differs (see [`ClaimSpec::cause`]);
    /// also knows `{rut}`, `{name}` and `{k}`.
    pub cause: String,
    /// Template for the mean rows.
    pub mean_cause: String,
}

fn ninety_nine() -> f64 {
    99.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerTable {
    pub name: String,
    /// Tailbench quantile table, relative to the manifest.
    pub cdf: PathBuf,
    /// The authors' x_99^u(k) table (line k), relative to the manifest.
    pub rut: PathBuf,
    pub paper_mean_ms: f64,
    /// The paper's values for `fanouts`, in order.
    pub paper_ms: Vec<f64>,
}

/// A claim of the paper and how to measure ours.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimSpec {
    /// What is compared, e.g. "orf's p99 vs rr's at paper 400 RPS (ours 200)".
    pub what: String,
    /// The paper's number, in `unit`.
    #[serde(default)]
    pub paper: Option<f64>,
    /// The paper's claim in words, when it gives no number (or a bound).
    #[serde(default)]
    pub paper_text: Option<String>,
    /// Display unit: "%" (a change), "×" (a ratio), "ms", "µs", "util", "rps", "" …
    #[serde(default)]
    pub unit: String,
    pub value: ValueSpec,
    /// Our value is multiplied by this before it is shown or compared, e.g. the
    /// figure's `paper_load_factor` to state a load in the paper's units.
    #[serde(default)]
    pub ours_factor: Option<f64>,
    /// A qualitative assertion on our value: "< 0", ">= 1", "in [0.9, 1.1]".
    #[serde(default)]
    pub expect: Option<String>,
    /// Asserted by the CI test (`--quick`): the claim must hold.
    #[serde(default)]
    pub ci: bool,
    /// |ours/paper − 1| within this counts as agreement (default 0.25).
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// The sentence shown when ours differs from the paper (or the assertion
    /// fails): `{ours}`, `{paper}`, `{ratio}`, `{at}` and the names in `aux`
    /// are replaced by measured values. State the measured cause, or label a
    /// hypothesis as one.
    pub cause: String,
    /// A sentence shown whatever the outcome (after the verdict), with the
    /// same placeholders: e.g. why a match may be a coincidence.
    #[serde(default)]
    pub note: Option<String>,
    /// Extra measured values for `cause` and `note`.
    #[serde(default)]
    pub aux: BTreeMap<String, ValueSpec>,
}

/// A measured value: exactly one of `of`, `change`, `ratio`, `diff`, `max`, `min`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueSpec {
    /// A metric of one point.
    #[serde(default)]
    pub of: Option<Selector>,
    /// 100 · (a / b − 1), in %.
    #[serde(default)]
    pub change: Option<[Operand; 2]>,
    /// a / b.
    #[serde(default)]
    pub ratio: Option<[Operand; 2]>,
    /// a − b.
    #[serde(default)]
    pub diff: Option<[Operand; 2]>,
    /// The largest of several values (e.g. over the panels of a figure).
    #[serde(default)]
    pub max: Option<Vec<Operand>>,
    /// The smallest of several values.
    #[serde(default)]
    pub min: Option<Vec<Operand>>,
    /// Evaluate at every value of an axis the selectors leave open, and keep the min or max.
    #[serde(default)]
    pub agg: Option<AggSpec>,
}

/// An operand: a selector, or a nested value (`{ change = [...] }`, …).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Operand {
    Sel(Selector),
    Value(Box<ValueSpec>),
}

/// Picks one number out of a figure's results.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Another figure's id (default: this one).
    #[serde(default)]
    pub figure: Option<String>,
    /// A series label, or several with `pick`.
    pub series: SeriesRef,
    /// With several series: the smallest or largest of their values.
    #[serde(default)]
    pub pick: Option<MinMax>,
    pub metric: String,
    /// The load point (a value of the scenario's `[sweep]` axis).
    #[serde(default)]
    pub load: Option<f64>,
    /// The vary value.
    #[serde(default)]
    pub vary: Option<f64>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub fanout: Option<u32>,
    /// Instead of a point: the load at which `metric` first exceeds this
    /// (linear interpolation between the sweep's loads).
    #[serde(default)]
    pub crossing: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum SeriesRef {
    One(String),
    Many(Vec<String>),
}

impl SeriesRef {
    pub fn labels(&self) -> Vec<&str> {
        match self {
            SeriesRef::One(s) => vec![s.as_str()],
            SeriesRef::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MinMax {
    Min,
    Max,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggSpec {
    pub over: Axis,
    pub how: MinMax,
    /// The value is the axis value at the min or max (argmin/argmax), not the min or max.
    #[serde(default)]
    pub arg: bool,
    /// Keep only the axis values where this holds.
    #[serde(default, rename = "where")]
    pub filter: Option<WhereSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhereSpec {
    pub of: Selector,
    #[serde(default)]
    pub le: Option<f64>,
    #[serde(default)]
    pub ge: Option<f64>,
}

/// A parsed `expect`: `op` then a number, or `in [lo, hi]` (inclusive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expect {
    pub op: Cmp,
    pub rhs: f64,
    /// The upper end for [`Cmp::In`].
    pub hi: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    In,
}

/// Why a claim's `expect` does not parse; every variant quotes it.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum ExpectError {
    /// A range is two numbers in brackets, the smaller first.
    #[error("expect = {text:?}: write a range as \"in [lo, hi]\" with lo ≤ hi")]
    BadRange { text: String },
    /// A comparison starts with its operator.
    #[error("expect = {text:?}: start with <, <=, > or >=, e.g. \"< 0\"")]
    NoOperator { text: String },
    /// The operator must be followed by a number.
    #[error("expect = {text:?}: {operand:?} is not a number")]
    NotANumber { text: String, operand: String },
}

impl Expect {
    pub fn parse(s: &str) -> Result<Expect, ExpectError> {
        let s = s.trim();
        if let Some(r) = s.strip_prefix("in") {
            let inner = r.trim().strip_prefix('[').and_then(|r| r.strip_suffix(']'));
            let parts: Option<Vec<f64>> = inner.and_then(|i| i.split(',').map(|x| x.trim().parse().ok()).collect());
            return match parts.as_deref() {
                Some(&[lo, hi]) if lo <= hi => Ok(Expect { op: Cmp::In, rhs: lo, hi }),
                _ => Err(ExpectError::BadRange { text: s.to_string() }),
            };
        }
        let (op, rest) = if let Some(r) = s.strip_prefix("<=") {
            (Cmp::Le, r)
        } else if let Some(r) = s.strip_prefix(">=") {
            (Cmp::Ge, r)
        } else if let Some(r) = s.strip_prefix('<') {
            (Cmp::Lt, r)
        } else if let Some(r) = s.strip_prefix('>') {
            (Cmp::Gt, r)
        } else {
            return Err(ExpectError::NoOperator { text: s.to_string() });
        };
        let rhs: f64 = rest
            .trim()
            .parse()
            .map_err(|_| ExpectError::NotANumber { text: s.to_string(), operand: rest.trim().to_string() })?;
        Ok(Expect { op, rhs, hi: rhs })
    }

    /// Whether `v` satisfies the assertion (NaN never does).
    pub fn holds(&self, v: f64) -> bool {
        match self.op {
            Cmp::Lt => v < self.rhs,
            Cmp::Le => v <= self.rhs,
            Cmp::Gt => v > self.rhs,
            Cmp::Ge => v >= self.rhs,
            Cmp::In => v >= self.rhs && v <= self.hi,
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Cmp::Lt => "<",
            Cmp::Le => "≤",
            Cmp::Gt => ">",
            Cmp::Ge => "≥",
            Cmp::In => return write!(f, "in [{}, {}]", self.rhs, self.hi),
        };
        write!(f, "{op} {}", self.rhs)
    }
}

/// The direct operands of a value.
pub fn operands(v: &ValueSpec) -> Vec<&Operand> {
    let mut out: Vec<&Operand> = Vec::new();
    for pair in [&v.change, &v.ratio, &v.diff].into_iter().flatten() {
        out.extend(pair.iter());
    }
    for list in [&v.max, &v.min].into_iter().flatten() {
        out.extend(list.iter());
    }
    out
}

/// Every selector of a value, nested values and filters included, in order.
pub fn selectors(v: &ValueSpec) -> Vec<&Selector> {
    let mut out: Vec<&Selector> = Vec::new();
    out.extend(v.of.iter());
    for op in operands(v) {
        match op {
            Operand::Sel(s) => out.push(s),
            Operand::Value(inner) => out.extend(selectors(inner)),
        }
    }
    if let Some(w) = v.agg.as_ref().and_then(|a| a.filter.as_ref()) {
        out.push(&w.of);
    }
    out
}

/// `{name}` placeholders of a template, in order.
pub fn placeholders(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let Some(j) = rest[i..].find('}') else { break };
        out.push(rest[i + 1..i + j].to_string());
        rest = &rest[i + j + 1..];
    }
    out
}

/// A data-table column: `metric`, `metric[class=I]`, `metric[fanout=100]` or both.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub metric: String,
    pub class: Option<String>,
    pub fanout: Option<u32>,
}

/// Why a data-table column does not parse (the caller names the column).
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum ColumnError {
    /// Filters are closed by a bracket.
    #[error("missing `]`")]
    Unclosed,
    /// `fanout=` takes a whole number.
    #[error("fanout {value:?} is not a number")]
    BadFanout { value: String },
    /// The only filters are `class` and `fanout`.
    #[error("{filter:?}: use class=NAME or fanout=K")]
    UnknownFilter { filter: String },
    /// A column must name a metric before its filters.
    #[error("empty metric name")]
    EmptyMetric,
}

pub fn parse_column(s: &str) -> Result<Column, ColumnError> {
    let (metric, filters) = match s.split_once('[') {
        None => (s, ""),
        Some((m, rest)) => (m, rest.strip_suffix(']').ok_or(ColumnError::Unclosed)?),
    };
    let mut col = Column { metric: metric.trim().to_string(), class: None, fanout: None };
    for part in filters.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match part.split_once('=') {
            Some(("class", v)) => col.class = Some(v.trim().to_string()),
            Some(("fanout", v)) => {
                col.fanout = Some(v.trim().parse().map_err(|_| ColumnError::BadFanout { value: v.to_string() })?)
            }
            _ => return Err(ColumnError::UnknownFilter { filter: part.to_string() }),
        }
    }
    if col.metric.is_empty() {
        return Err(ColumnError::EmptyMetric);
    }
    Ok(col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn bad_expectations_and_columns_give_their_variant() {
        let text = |s: &str| s.to_string();
        assert_eq!(Expect::parse("about 3"), Err(ExpectError::NoOperator { text: text("about 3") }));
        assert_eq!(Expect::parse("in [2, 1]"), Err(ExpectError::BadRange { text: text("in [2, 1]") }));
        assert_eq!(
            Expect::parse("<= three"),
            Err(ExpectError::NotANumber { text: text("<= three"), operand: text("three") })
        );
        assert_eq!(parse_column("p99_ms[class=I"), Err(ColumnError::Unclosed));
        assert_eq!(parse_column("p99_ms[fanout=x]"), Err(ColumnError::BadFanout { value: text("x") }));
        assert_eq!(parse_column("p99_ms[tier=1]"), Err(ColumnError::UnknownFilter { filter: text("tier=1") }));
        assert_eq!(parse_column("[class=I]"), Err(ColumnError::EmptyMetric));
        assert_eq!(
            parse_column("tail_ms[class=I, fanout=100]"),
            Ok(Column { metric: text("tail_ms"), class: Some(text("I")), fanout: Some(100) })
        );
    }

    /// One figure whose column and claim are both malformed (inline tables: a figure per line).
    const MANIFEST: &str = r#"
title = "t"
paper = [{ id = "p", title = "P" }]
figure = [{ id = "f", paper = "p", title = "F", section = "§1", scenario = "s.toml", columns = ["p99_ms[tier=1]"], claim = [
    { what = "w", paper = 1, value = { of = { series = "x", metric = "p99_ms" } }, expect = "about 1", cause = "c" },
] }]
"#;

    #[test]
    fn a_bad_manifest_names_the_file_and_every_problem() {
        let path = Path::new("seeds/reproduce.toml");
        match Manifest::from_toml(MANIFEST, path) {
            Err(ManifestError::Invalid { file, problems }) => {
                assert_eq!(file, path);
                assert_eq!(problems.len(), 2, "{problems:?}");
                assert!(problems.iter().any(|p| p.contains("\"tier=1\": use class=NAME")), "{problems:?}");
                assert!(problems.iter().any(|p| p.contains("start with <, <=, > or >=")), "{problems:?}");
            }
            other => panic!("expected ManifestError::Invalid, got {other:?}"),
        }
        match Manifest::from_toml(&MANIFEST.replace("section", "sectoin"), path) {
            Err(ManifestError::Parse { file, message }) => {
                assert_eq!(file, path);
                assert!(message.contains("sectoin"), "{message}");
            }
            other => panic!("expected ManifestError::Parse, got {other:?}"),
        }
    }
}
