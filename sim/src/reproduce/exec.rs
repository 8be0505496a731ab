//! Planning and running a reproduction: every figure becomes points (series ×
//! vary value × load), every point a job (a run, a max-load search or an
//! admission-control experiment); identical jobs are run once; all jobs go
//! through one pool of worker threads, longest first.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use tailor_core::dist::DistSpec;
use tailor_core::time::{to_millis_f64, NANOS_PER_SEC};
use tailor_core::{Nanos, PolicySpec, Progress};

use super::manifest::{FigureKind, FigureSpec, LoadedManifest, SeriesSpec};
use super::patch;
use crate::engine;
use crate::metrics::{quantile_sorted, Summary};
use crate::model::{class_shares, expected_visits, LoadOverride, Model, Overrides};
use crate::scenario::{AdmissionSpec, LoadedScenario, Scenario};
use crate::sweep::{self, policy_label};

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

/// Which figures to run: those matching `only`, plus every figure their
/// claims refer to.
fn selected(lm: &LoadedManifest, only: &[String]) -> Vec<bool> {
    let figs = &lm.manifest.figures;
    let mut keep: Vec<bool> =
        figs.iter().map(|f| only.is_empty() || only.iter().any(|o| f.id.starts_with(o.as_str()))).collect();
    loop {
        let mut changed = false;
        for i in 0..figs.len() {
            if !keep[i] {
                continue;
            }
            for c in &figs[i].claims {
                let sels = super::manifest::selectors(&c.value)
                    .into_iter()
                    .chain(c.aux.values().flat_map(super::manifest::selectors));
                for s in sels {
                    if let Some(j) = s.figure.as_ref().and_then(|id| figs.iter().position(|f| &f.id == id)) {
                        if !keep[j] {
                            keep[j] = true;
                            changed = true;
                        }
                    }
                }
            }
        }
        if !changed {
            return keep;
        }
    }
}

/// Turns the manifest into figures and deduplicated jobs, checking every
/// scenario (all problems reported at once).
pub(crate) fn plan(lm: &LoadedManifest, opts: &Options) -> Result<Plan, Vec<String>> {
    let keep = selected(lm, &opts.only);
    if keep.iter().all(|k| !k) {
        return Err(vec![format!("no figure id starts with {:?}", opts.only)]);
    }
    let mut problems = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut figures = Vec::new();
    for (index, fig) in lm.manifest.figures.iter().enumerate() {
        if !keep[index] {
            continue;
        }
        match plan_figure(lm, opts, index, fig, &mut jobs, &mut by_key) {
            Ok(f) => figures.push(f),
            Err(mut p) => problems.append(&mut p),
        }
    }
    if problems.is_empty() {
        Ok(Plan { figures, jobs })
    } else {
        Err(problems)
    }
}

fn plan_figure(
    lm: &LoadedManifest,
    opts: &Options,
    index: usize,
    fig: &FigureSpec,
    jobs: &mut Vec<Job>,
    by_key: &mut HashMap<String, usize>,
) -> Result<FigurePlan, Vec<String>> {
    let at = format!("figure {:?}", fig.id);
    if fig.kind == Some(FigureKind::Planner) {
        return plan_planner(lm, index, fig).map_err(|e| vec![format!("{at}: {e}")]);
    }
    if fig.kind == Some(FigureKind::Claims) {
        return Ok(FigurePlan {
            index,
            kind: FigureKind::Claims,
            scenario: None,
            scenario_name: String::new(),
            requests: 0,
            seed: 0,
            series: Vec::new(),
            vary: Vec::new(),
            loads: Vec::new(),
            load_axis: None,
            points: Vec::new(),
        });
    }
    let rel = fig.scenario.as_ref().expect("checked by Manifest::problems");
    let path = lm.base_dir.join(rel);
    let text = std::fs::read_to_string(&path).map_err(|e| vec![format!("{at}: {}: {e}", path.display())])?;
    let base: toml::Table = toml::from_str(&text).map_err(|e| vec![format!("{at}: {}: {e}", path.display())])?;
    // Parse the unpatched file too: its errors read best against the file itself.
    let plain = Scenario::from_toml(&text, &path).map_err(|e| vec![format!("{at}: {e}")])?;
    let kind = fig.kind.unwrap_or(if plain.scenario.search.is_some() { FigureKind::Search } else { FigureKind::Sweep });
    let series: Vec<SeriesSpec> =
        if fig.series.is_empty() { default_series(&plain.scenario, kind) } else { fig.series.clone() };
    let all_vary: Vec<Option<f64>> = match &fig.vary {
        None => vec![None],
        Some(v) => match (&fig.quick_vary, opts.quick) {
            (Some(q), true) => q.iter().map(|&x| Some(x)).collect(),
            _ => v.values.iter().map(|&x| Some(x)).collect(),
        },
    };
    let mut problems = Vec::new();
    let mut points = Vec::new();
    let mut loads_seen: Vec<f64> = Vec::new();
    let mut load_axis = None;
    let mut requests = 0;
    let mut seed = 0;
    let mut scenario_name = plain.scenario.name.clone();
    for s in &series {
        for &v in &all_vary {
            let sat = format!("{at}, series {:?}{}", s.label, v.map_or(String::new(), |v| format!(", vary = {v}")));
            let loaded = match patched(&base, &path, fig, s, v) {
                Ok(l) => l,
                Err(e) => {
                    problems.push(format!("{sat}: {e}"));
                    continue;
                }
            };
            let mut loaded = loaded;
            let sc = &mut loaded.scenario;
            let mut ov = Overrides { policy: s.policy.clone(), seed: opts.seed, ..Default::default() };
            if opts.quick {
                let q = &lm.manifest.quick;
                ov.requests = Some(
                    ((sc.requests as f64 * q.requests_factor).round() as u64).max(q.min_requests).min(sc.requests),
                );
                ov.warmup = Some((sc.warmup as f64 * q.requests_factor).round() as u64);
                if let Some(search) = &mut sc.search {
                    search.tolerance *= q.tolerance_factor;
                }
            }
            requests = ov.requests.unwrap_or(sc.requests);
            seed = ov.seed.unwrap_or(sc.seed);
            scenario_name = sc.name.clone();
            // The series' policy replaces the scenario's lists of policies.
            if let Some(search) = &mut sc.search {
                search.policies.clear();
            }
            let (axis, loads) = sweep_loads(sc);
            load_axis = load_axis.or(axis);
            if let Some(only) = &fig.loads {
                if let Some(x) = only.iter().find(|x| !loads.contains(x)) {
                    problems.push(format!("{sat}: loads has {x}, which is not in the scenario's [sweep] ({loads:?})"));
                    continue;
                }
            }
            let loads: Vec<Option<f64>> = match (opts.quick, &fig.quick_loads, &fig.loads) {
                (true, Some(q), _) => q.iter().map(|&x| Some(x)).collect(),
                (_, _, Some(l)) => l.iter().map(|&x| Some(x)).collect(),
                _ if loads.is_empty() => vec![None],
                _ => loads.into_iter().map(Some).collect(),
            };
            let to_override = |l: Option<f64>| match (axis, l) {
                (Some(LoadAxis::Rps), Some(x)) => Some(LoadOverride::Rps(x)),
                (Some(LoadAxis::Utilization), Some(x)) => Some(LoadOverride::Utilization(x)),
                _ => None,
            };
            let label = format!("{} {}{}", fig.id, s.label, v.map_or(String::new(), |v| format!(" @{v}")));
            match kind {
                FigureKind::Sweep => {
                    for &l in &loads {
                        let ov = Overrides { load: to_override(l), ..ov.clone() };
                        let label = format!("{label}{}", l.map_or(String::new(), |l| format!(" load {l}")));
                        match add_job(jobs, by_key, JobKind::Run, loaded.clone(), ov, label) {
                            Ok(j) => points.push(Point {
                                series: s.label.clone(),
                                vary: v,
                                load: l,
                                data: PointData::Job(j),
                            }),
                            Err(e) => problems.push(format!("{sat}: {e}")),
                        }
                        if let Some(l) = l {
                            if !loads_seen.contains(&l) {
                                loads_seen.push(l);
                            }
                        }
                    }
                }
                FigureKind::Search => {
                    if loaded.scenario.search.is_none() {
                        problems.push(format!("{sat}: a search figure needs [search] in its scenario"));
                        continue;
                    }
                    match add_job(jobs, by_key, JobKind::Search, loaded.clone(), ov, label) {
                        Ok(j) => {
                            points.push(Point { series: s.label.clone(), vary: v, load: None, data: PointData::Job(j) })
                        }
                        Err(e) => problems.push(format!("{sat}: {e}")),
                    }
                }
                FigureKind::Admission => {
                    if loaded.scenario.search.is_none()
                        || loaded.scenario.admission.is_none()
                        || axis != Some(LoadAxis::Utilization)
                    {
                        problems.push(format!(
                            "{sat}: an admission figure needs [search] (the calibration), [admission] (its window) and a [sweep] over utilization"
                        ));
                        continue;
                    }
                    let us: Vec<f64> = loads.iter().flatten().copied().collect();
                    let n = us.len();
                    match add_job(jobs, by_key, JobKind::Admission { loads: us.clone() }, loaded.clone(), ov, label) {
                        Ok(j) => {
                            points.push(Point {
                                series: "calibration".into(),
                                vary: v,
                                load: None,
                                data: PointData::Job(j),
                            });
                            for (i, &u) in us.iter().enumerate().take(n) {
                                points.push(Point {
                                    series: s.label.clone(),
                                    vary: v,
                                    load: Some(u),
                                    data: PointData::AdmissionRun(j, i),
                                });
                                if !loads_seen.contains(&u) {
                                    loads_seen.push(u);
                                }
                            }
                        }
                        Err(e) => problems.push(format!("{sat}: {e}")),
                    }
                }
                FigureKind::Planner | FigureKind::Claims => unreachable!("handled above"),
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    loads_seen.sort_by(f64::total_cmp);
    Ok(FigurePlan {
        index,
        kind,
        scenario: Some(rel.clone()),
        scenario_name,
        requests,
        seed,
        series: series.iter().map(|s| s.label.clone()).collect(),
        vary: all_vary.into_iter().flatten().collect(),
        loads: loads_seen,
        load_axis,
        points,
    })
}

/// One series per policy of the scenario's `[sweep]`/`[search]`, or one with
/// the scenario's own policies.
fn default_series(sc: &Scenario, kind: FigureKind) -> Vec<SeriesSpec> {
    let policies: Vec<PolicySpec> = match kind {
        FigureKind::Search | FigureKind::Admission => {
            sc.search.as_ref().map(|s| s.policies.clone()).unwrap_or_default()
        }
        _ => sc.sweep.as_ref().map(|s| s.policies.clone()).unwrap_or_default(),
    };
    if policies.is_empty() {
        let mut labels: Vec<String> =
            sc.services.iter().filter_map(|s| s.effective_policy(&sc.hosts)).map(policy_label).collect();
        labels.dedup();
        return vec![SeriesSpec { label: labels.join("+"), policy: None, set: Default::default(), vary_scale: None }];
    }
    policies
        .into_iter()
        .map(|p| SeriesSpec { label: policy_label(&p), policy: Some(p), set: Default::default(), vary_scale: None })
        .collect()
}

/// The scenario with the figure's and the series' patches and the vary value applied.
fn patched(
    base: &toml::Table,
    path: &Path,
    fig: &FigureSpec,
    s: &SeriesSpec,
    v: Option<f64>,
) -> Result<LoadedScenario, String> {
    let mut t = base.clone();
    for (k, val) in fig.set.iter().chain(s.set.iter()) {
        patch::set(&mut t, k, val.clone())?;
    }
    if let (Some(vary), Some(x)) = (&fig.vary, v) {
        if let Some(arr) = &vary.truncate {
            patch::truncate(&mut t, arr, x as usize)?;
        }
        for (p, factor) in s.vary_scale.as_ref().unwrap_or(&vary.scale) {
            patch::set_number(&mut t, p, x * factor)?;
        }
    }
    let scenario: Scenario =
        toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| format!("after patching: {}", e.message()))?;
    let problems = scenario.problems();
    if !problems.is_empty() {
        return Err(format!("after patching: {}", problems.join("; ")));
    }
    Ok(LoadedScenario {
        scenario,
        path: path.to_owned(),
        base_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
    })
}

fn sweep_loads(sc: &Scenario) -> (Option<LoadAxis>, Vec<f64>) {
    match &sc.sweep {
        Some(s) if !s.rps.is_empty() => (Some(LoadAxis::Rps), s.rps.clone()),
        Some(s) if !s.utilization.is_empty() => (Some(LoadAxis::Utilization), s.utilization.clone()),
        _ => (None, Vec::new()),
    }
}

fn add_job(
    jobs: &mut Vec<Job>,
    by_key: &mut HashMap<String, usize>,
    kind: JobKind,
    loaded: LoadedScenario,
    ov: Overrides,
    label: String,
) -> Result<usize, String> {
    let tag = match &kind {
        JobKind::Run => "run".to_string(),
        JobKind::Search => "search".to_string(),
        JobKind::Admission { loads } => format!("admission {loads:?}"),
    };
    let key = format!("{tag}|{}|{:?}|{:?}", loaded.path.display(), loaded.scenario, ov);
    if let Some(&j) = by_key.get(&key) {
        return Ok(j);
    }
    // Build the model now, so a bad file fails before any simulation starts.
    let model = Model::build(&loaded, &ov).map_err(|e| e.to_string())?;
    let runs = match &kind {
        JobKind::Run => 1.0,
        JobKind::Search => 9.0,
        JobKind::Admission { loads } => 9.0 + loads.len() as f64,
    };
    let cost = runs * run_cost(&model);
    jobs.push(Job { kind, loaded, ov, cost, label });
    by_key.insert(key, jobs.len() - 1);
    Ok(jobs.len() - 1)
}

/// A rough cost of one run, in simulator events: tasks, plus slices for
/// preemptive policies (a 100 ms task under a 30 µs slice is thousands of events).
fn run_cost(m: &Model) -> f64 {
    let visits = expected_visits(&m.stages, &m.roots, m.services.len(), &class_shares(&m.classes));
    let per_request: f64 = m
        .services
        .iter()
        .zip(&visits)
        .map(|(s, v)| {
            let slice_ns = match s.policy {
                PolicySpec::Orf { slice_us, .. } | PolicySpec::Rr { slice_us } | PolicySpec::Ps { slice_us } => {
                    slice_us * 1e3
                }
                _ => f64::INFINITY,
            };
            v * (2.0 + (s.service_time.mean_ns() / slice_ns).min(1e5) * m.utilization.min(1.0))
        })
        .sum();
    (m.requests + m.warmup) as f64 * per_request
}

/// Runs every job on `threads` threads, longest first; `progress` sees each
/// job as it finishes (its label and seconds).
pub(crate) fn execute(jobs: &[Job], threads: usize, progress: &dyn Progress) -> Result<Vec<Outcome>, String> {
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
    let mut errors = Vec::new();
    for (j, r) in results {
        match r {
            Ok(o) => out[j] = Some(o),
            Err(e) => errors.push(format!("{}: {e}", jobs[j].label)),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    Ok(out.into_iter().map(|o| o.expect("every job ran")).collect())
}

fn run_job(job: &Job) -> Result<Outcome, String> {
    match &job.kind {
        JobKind::Run => {
            let model = Model::build(&job.loaded, &job.ov).map_err(|e| e.to_string())?;
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
            let at_max = s.at_max.as_ref().ok_or("calibration: no load meets the SLOs without admission control")?;
            let r_th = (at_max.summary.deadline_miss_pct / 100.0).min(0.99);
            let mut runs = Vec::with_capacity(loads.len());
            for &u in loads {
                let mut l = job.loaded.clone();
                l.scenario.admission = Some(AdmissionSpec { r_th, reject_late: false, ..configured.clone() });
                let ov = Overrides { load: Some(LoadOverride::Utilization(u)), ..job.ov.clone() };
                let model = Model::build(&l, &ov).map_err(|e| e.to_string())?;
                runs.push((u, run_record(&model)));
            }
            Ok(Outcome::Admission(AdmissionRecord { max_util: s.max_util, r_th, search: s, runs }))
        }
    }
}

fn search(loaded: &LoadedScenario, ov: &Overrides) -> Result<SearchRecord, String> {
    let mut r = sweep::max_load(loaded, ov, 1).map_err(|e| e.to_string())?;
    let r = r.pop().ok_or("the search ran no policy")?;
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

/// TailGuard Table II: mean, planner x_p^u(k) and the authors' RUT line k, per table.
fn plan_planner(lm: &LoadedManifest, index: usize, fig: &FigureSpec) -> Result<FigurePlan, String> {
    let pl = fig.planner.as_ref().expect("checked by Manifest::problems");
    let mut points = Vec::new();
    for t in &pl.tables {
        let cdf = lm.base_dir.join(&t.cdf);
        let dist = DistSpec::Empirical { file: cdf.clone(), scale: 1.0 }
            .build(Path::new(""))
            .map_err(|e| format!("table {:?}: {e}", t.name))?;
        let rut_path = lm.base_dir.join(&t.rut);
        let rut = tailor_core::tailguard::read_rut_table(&rut_path).map_err(|e| format!("table {:?}: {e}", t.name))?;
        let mut m = BTreeMap::new();
        m.insert("mean_ms".to_string(), dist.mean_ns() / 1e6);
        for &k in &pl.fanouts {
            let x = tailor_core::tailguard::unloaded_quantile_homogeneous(&dist, k, pl.percentile / 100.0);
            m.insert(format!("x_u_ms@{k}"), to_millis_f64(x));
            let r = rut.get(k as usize - 1).ok_or_else(|| format!("{}: no line {k}", rut_path.display()))?;
            m.insert(format!("rut_ms@{k}"), to_millis_f64(*r));
        }
        points.push(Point { series: t.name.clone(), vary: None, load: None, data: PointData::Scalars(m) });
    }
    Ok(FigurePlan {
        index,
        kind: FigureKind::Planner,
        scenario: None,
        scenario_name: String::new(),
        requests: 0,
        seed: 0,
        series: pl.tables.iter().map(|t| t.name.clone()).collect(),
        vary: Vec::new(),
        loads: Vec::new(),
        load_axis: None,
        points,
    })
}
