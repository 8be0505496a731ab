//! Planning and running a reproduction: every figure becomes points (series ×
//! vary value × load), every point a job (a run, a max-load search or an
//! admission-control experiment); identical jobs are run once; all jobs go
//! through one pool of worker threads, longest first.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use tailor_core::dist::{DistError, DistSpec, TableError};
use tailor_core::time::{to_millis_f64, NANOS_PER_SEC};
use tailor_core::{Nanos, PolicySpec, Progress};

use super::manifest::{FigureKind, FigureSpec, LoadedManifest, SeriesSpec};
use super::patch::{self, PatchError};
use crate::engine;
use crate::metrics::{quantile_sorted, Summary};
use crate::model::{class_shares, expected_visits, LoadOverride, Model, ModelError, Overrides};
use crate::scenario::{AdmissionSpec, LoadedScenario, Scenario};
use crate::sweep::{self, policy_label};

mod plan;
pub(crate) use plan::plan;

/// Why one point of a figure could not be planned or its job could not run. The caller adds
/// which figure, series and point it was.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// The figure's or the series' `set`, or the vary value, does not fit the scenario file.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// The patched scenario no longer parses (a patch set a key to a value of the wrong type).
    #[error("after patching: {}", .0.message())]
    PatchedToml(#[source] toml::de::Error),
    /// The patched scenario parses but breaks the scenario's rules.
    #[error("after patching: {}", .0.join("; "))]
    PatchedScenario(Vec<String>),
    /// A file the scenario names could not be read, or the scenario cannot become a model.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A planner table's service-time distribution (its `cdf`) could not be built.
    #[error("table {table:?}: {source}")]
    PlannerCdf { table: String, source: DistError },
    /// A planner table's RUT file could not be read.
    #[error("table {table:?}: {source}")]
    PlannerRut { table: String, source: TableError },
    /// The RUT file has a line per fanout; it must reach the largest fanout the figure lists.
    #[error("{}: no line {fanout}; the RUT table needs a line for every fanout in `fanouts`", .path.display())]
    RutTooShort { path: PathBuf, fanout: u32 },
    /// A max-load search returned no result at all.
    #[error("the search ran no policy")]
    SearchRanNoPolicy,
    /// Admission control calibrates R_th at the max load without it; there was none.
    #[error("calibration: no load meets the SLOs without admission control")]
    NoCalibrationLoad,
}

/// A job that failed, by its label (figure, series, point).
#[derive(Debug, thiserror::Error)]
#[error("{label}: {error}")]
pub struct JobFailure {
    pub label: String,
    #[source]
    pub error: FigureError,
}

/// How to run a reproduction.
#[derive(Clone, Debug)]
pub struct Options {
    /// Fewer requests, fewer points, coarser searches (the manifest's `[quick]`).
    pub quick: bool,
    /// Worker threads.
    pub threads: usize,
    /// Replaces every scenario's seed.
    pub seed: Option<u64>,
    /// Run only figures whose id starts with one of these (plus the figures
    /// their claims refer to). Empty: all.
    pub only: Vec<String>,
}

/// Measurements beyond [`Summary`], computed from the per-request records.
#[derive(Clone, Debug, Serialize)]
pub struct Extra {
    /// p99 latency of the requests with the smallest 1% of total CPU demand
    /// (TailClipper Fig. 11b); ties in demand are broken by arrival order.
    pub short1_p99_ms: f64,
    pub short1_count: usize,
    /// Completions per second between the 5th and 95th percentile completion
    /// times of the measured requests: the throughput of a fixed-length
    /// experiment, insensitive to a few stragglers finishing long after the rest.
    pub throughput_mid_rps: f64,
    pub preemptions_per_request: f64,
    /// CPU time spent on re-dispatching preempted tasks, % of all CPUs' time
    /// (preemptions × the largest `context_switch_us` of the services).
    pub switch_cpu_pct: f64,
    /// (latency ms, fraction of requests with at least that latency), from
    /// the median to the largest latency.
    pub ccdf: Vec<(f64, f64)>,
}

/// One simulation run.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    pub policy: String,
    pub utilization: f64,
    pub offered_rps: f64,
    pub summary: Summary,
    /// Absent for the runs a max-load search made.
    pub extra: Option<Extra>,
    pub events: u64,
    pub wall_seconds: f64,
}

/// A max-load-under-SLO search (`sweep::max_load`).
#[derive(Clone, Debug, Serialize)]
pub struct SearchRecord {
    pub max_util: f64,
    pub max_rps: f64,
    pub probes: Vec<(f64, bool)>,
    pub at_max: Option<RunRecord>,
    pub events: u64,
}

/// TailGuard §IV.D: the calibration, then the runs with admission control.
#[derive(Clone, Debug, Serialize)]
pub struct AdmissionRecord {
    /// Max load meeting every SLO without admission control.
    pub max_util: f64,
    /// The deadline-miss ratio at that load: the calibrated R_th.
    pub r_th: f64,
    pub search: SearchRecord,
    /// (offered utilization, run with admission control at R_th).
    pub runs: Vec<(f64, RunRecord)>,
}

#[derive(Clone, Debug, Serialize)]
pub enum Outcome {
    Run(RunRecord),
    Search(SearchRecord),
    Admission(AdmissionRecord),
}

impl Outcome {
    pub fn events(&self) -> u64 {
        match self {
            Outcome::Run(r) => r.events,
            Outcome::Search(s) => s.events,
            Outcome::Admission(a) => a.search.events + a.runs.iter().map(|(_, r)| r.events).sum::<u64>(),
        }
    }
    pub fn runs(&self) -> usize {
        match self {
            Outcome::Run(_) => 1,
            Outcome::Search(s) => s.probes.len(),
            Outcome::Admission(a) => a.search.probes.len() + a.runs.len(),
        }
    }
}

/// What a point's numbers come from.
#[derive(Clone, Debug)]
pub enum PointData {
    /// A run or a search: the job's outcome.
    Job(usize),
    /// The i-th run of an admission job.
    AdmissionRun(usize, usize),
    /// Numbers computed without simulation (Table II).
    Scalars(BTreeMap<String, f64>),
}

/// One (series, vary value, load) of a figure.
#[derive(Clone, Debug)]
pub struct Point {
    pub series: String,
    pub vary: Option<f64>,
    pub load: Option<f64>,
    pub data: PointData,
}

/// The load axis of a figure's scenario sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadAxis {
    Rps,
    Utilization,
}

/// A figure, planned: its points and axes.
#[derive(Clone, Debug)]
pub struct FigurePlan {
    /// Index into the manifest's figures.
    pub index: usize,
    pub kind: FigureKind,
    pub scenario: Option<PathBuf>,
    /// The scenario's `name` and `requests` as run (after `--quick`).
    pub scenario_name: String,
    pub requests: u64,
    pub seed: u64,
    pub series: Vec<String>,
    pub vary: Vec<f64>,
    pub loads: Vec<f64>,
    pub load_axis: Option<LoadAxis>,
    pub points: Vec<Point>,
}

pub(crate) enum JobKind {
    Run,
    Search,
    Admission { loads: Vec<f64> },
}

pub(crate) struct Job {
    pub kind: JobKind,
    pub loaded: LoadedScenario,
    pub ov: Overrides,
    /// Rough cost, for longest-first scheduling.
    pub cost: f64,
    /// For progress lines.
    pub label: String,
}

pub(crate) struct Plan {
    pub figures: Vec<FigurePlan>,
    pub jobs: Vec<Job>,
}

/// Runs every job on `threads` threads, longest first; `progress` sees each
/// job as it finishes (its label and seconds).
pub(crate) fn execute(jobs: &[Job], threads: usize, progress: &dyn Progress) -> Result<Vec<Outcome>, Vec<JobFailure>> {
    progress.start(jobs.len() as u64, "jobs");
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[b].cost.total_cmp(&jobs[a].cost));
    let done = AtomicUsize::new(0);
    let results = sweep::parallel_map(&order, threads, |&j| {
        let started = Instant::now();
        let r = run_job(&jobs[j]);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress.advance(n as u64, &format!("{} ({:.1} s)", jobs[j].label, started.elapsed().as_secs_f64()));
        (j, r)
    });
    let mut out: Vec<Option<Outcome>> = (0..jobs.len()).map(|_| None).collect();
    let mut failures = Vec::new();
    for (j, r) in results {
        match r {
            Ok(o) => out[j] = Some(o),
            Err(error) => failures.push(JobFailure { label: jobs[j].label.clone(), error }),
        }
    }
    if !failures.is_empty() {
        return Err(failures);
    }
    Ok(out.into_iter().map(|o| o.expect("every job ran")).collect())
}

fn run_job(job: &Job) -> Result<Outcome, FigureError> {
    match &job.kind {
        JobKind::Run => {
            let model = Model::build(&job.loaded, &job.ov)?;
            Ok(Outcome::Run(run_record(&model)))
        }
        JobKind::Search => Ok(Outcome::Search(search(&job.loaded, &job.ov)?)),
        JobKind::Admission { loads } => {
            // §IV.D: find the max load without admission control; the task
            // deadline-miss ratio there is R_th.
            let configured = job.loaded.scenario.admission.clone().expect("checked when planned");
            let mut calib = job.loaded.clone();
            calib.scenario.admission = None;
            let s = search(&calib, &job.ov)?;
            let at_max = s.at_max.as_ref().ok_or(FigureError::NoCalibrationLoad)?;
            let r_th = (at_max.summary.deadline_miss_pct / 100.0).min(0.99);
            let mut runs = Vec::with_capacity(loads.len());
            for &u in loads {
                let mut l = job.loaded.clone();
                l.scenario.admission = Some(AdmissionSpec { r_th, reject_late: false, ..configured.clone() });
                let ov = Overrides { load: Some(LoadOverride::Utilization(u)), ..job.ov.clone() };
                let model = Model::build(&l, &ov)?;
                runs.push((u, run_record(&model)));
            }
            Ok(Outcome::Admission(AdmissionRecord { max_util: s.max_util, r_th, search: s, runs }))
        }
    }
}

fn search(loaded: &LoadedScenario, ov: &Overrides) -> Result<SearchRecord, FigureError> {
    let mut r = sweep::max_load(loaded, ov, 1)?;
    let r = r.pop().ok_or(FigureError::SearchRanNoPolicy)?;
    let at_max = r.at_max.map(|o| RunRecord {
        policy: o.policy,
        utilization: o.utilization,
        offered_rps: o.offered_rps,
        summary: o.summary,
        extra: None,
        events: o.events,
        wall_seconds: o.wall_seconds,
    });
    // The search does not report its probes' events; estimate from the run at max.
    let events = at_max.as_ref().map_or(0, |a| a.events * r.probes.len() as u64);
    Ok(SearchRecord { max_util: r.max_utilization, max_rps: r.max_rps, probes: r.probes, at_max, events })
}

/// Runs a model and measures everything, including [`Extra`].
pub fn run_record(model: &Model) -> RunRecord {
    let started = Instant::now();
    let (rec, stats) = engine::run(model);
    let wall = started.elapsed().as_secs_f64();
    let summary = rec.summarize();
    let n = rec.latency.len();

    // p99 of the requests with the smallest 1% of total demand.
    let mut by_demand: Vec<usize> = (0..n).collect();
    by_demand.sort_by_key(|&i| (rec.demand[i], rec.gat[i]));
    let k = n.div_ceil(100);
    let mut short: Vec<Nanos> = by_demand[..k].iter().map(|&i| rec.latency[i]).collect();
    short.sort_unstable();

    // Throughput between the 5th and 95th percentile completion times.
    let mut done: Vec<Nanos> = (0..n).map(|i| rec.gat[i] + rec.latency[i]).collect();
    done.sort_unstable();
    let throughput_mid_rps = if n >= 20 {
        let (a, b) = (n / 20, n - n / 20 - 1);
        let span = (done[b] - done[a]).max(1);
        (b - a) as f64 / (span as f64 / NANOS_PER_SEC as f64)
    } else {
        f64::NAN
    };

    let cpus: usize = model.nodes.iter().map(|n| n.cores).sum();
    let cs = model.nodes.iter().map(|n| n.context_switch).max().unwrap_or(0);
    let switch_cpu_pct =
        100.0 * stats.preemptions as f64 * cs as f64 / (stats.end_time.max(1) as f64 * cpus.max(1) as f64);

    let mut sorted = rec.latency.clone();
    sorted.sort_unstable();
    let mut ccdf = Vec::new();
    let mut tail = 0.5f64;
    while n > 0 && tail * n as f64 >= 1.0 {
        ccdf.push((to_millis_f64(quantile_sorted(&sorted, 1.0 - tail)), tail));
        tail /= 10f64.powf(0.25);
    }
    if let Some(&max) = sorted.last() {
        ccdf.push((to_millis_f64(max), 1.0 / n as f64));
    }

    let mut labels: Vec<String> = model.services.iter().map(|s| policy_label(&s.policy)).collect();
    labels.dedup();
    RunRecord {
        policy: labels.join("+"),
        utilization: model.utilization,
        offered_rps: model.rps,
        extra: Some(Extra {
            short1_p99_ms: to_millis_f64(quantile_sorted(&short, 0.99)),
            short1_count: k,
            throughput_mid_rps,
            preemptions_per_request: stats.preemptions as f64 / n.max(1) as f64,
            switch_cpu_pct,
            ccdf,
        }),
        summary,
        events: stats.events,
        wall_seconds: wall,
    }
}
