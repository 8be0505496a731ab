//! Running many simulations: load sweeps and the max-load-under-SLO search,
//! spread over the machine's cores but deterministic: every run's numbers
//! depend only on the scenario and its seed, never on which thread ran it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;
use tailor_core::progress::Silent;
use tailor_core::{PolicySpec, Progress};

use crate::engine;
use crate::metrics::Summary;
use crate::model::{LoadOverride, Model, ModelError, Overrides};
use crate::scenario::{LoadedScenario, SearchSpec};

/// One simulation run and what it measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub offered_rps: f64,
    pub utilization: f64,
    pub events: u64,
    /// Requests simulated (warm-up, measured and those arriving until the last measured one finished).
    pub arrivals: u64,
    pub wall_seconds: f64,
    pub events_per_sec: f64,
    pub arrivals_per_sec: f64,
    pub summary: Summary,
}

/// A human-readable policy label with its parameters, e.g. `orf(c=6,slice=30us)`.
pub fn policy_label(p: &PolicySpec) -> String {
    match p {
        PolicySpec::Orf { c, slice_us } => format!("orf(c={c},slice={slice_us}us)"),
        PolicySpec::OrfAdaptive { c_max, slice_us, window_jobs } => {
            format!("orf(c=adaptive<={c_max},window={window_jobs},slice={slice_us}us)")
        }
        PolicySpec::Rr { slice_us } => format!("rr(slice={slice_us}us)"),
        PolicySpec::Ps { slice_us } => format!("ps(slice={slice_us}us)"),
        PolicySpec::Fair { min_granularity_ms, latency_ms } => {
            format!("fair(min={min_granularity_ms}ms,lat={latency_ms}ms)")
        }
        PolicySpec::Random { seed } if *seed != 0 => format!("random(seed={seed})"),
        PolicySpec::Keyed { key, bucket_us } => format!("keyed(key={},bucket={bucket_us}us)", key.name()),
        other => other.name().to_string(),
    }
}

/// Builds and runs one simulation.
pub fn run_one(loaded: &LoadedScenario, ov: &Overrides) -> Result<RunOutput, ModelError> {
    let model = Model::build(loaded, ov)?;
    Ok(run_model(&model))
}

/// Runs an already-built model.
pub fn run_model(model: &Model) -> RunOutput {
    let started = Instant::now();
    let (rec, stats) = engine::run(model);
    let wall = started.elapsed().as_secs_f64();
    let policies: Vec<String> = {
        let mut v: Vec<String> = model.services.iter().map(|s| policy_label(&s.policy)).collect();
        v.dedup();
        v
    };
    RunOutput {
        scenario: model.name.clone(),
        policy: policies.join("+"),
        seed: model.seed,
        offered_rps: model.rps,
        utilization: model.utilization,
        events: stats.events,
        arrivals: stats.arrivals,
        wall_seconds: wall,
        events_per_sec: stats.events as f64 / wall.max(1e-9),
        arrivals_per_sec: stats.arrivals as f64 / wall.max(1e-9),
        summary: rec.summarize(),
    }
}

/// Runs `jobs` on up to `threads` threads; results come back in job order.
pub fn parallel_map<J: Sync, R: Send>(jobs: &[J], threads: usize, f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs.len() {
                    break;
                }
                let r = f(&jobs[i]);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|r| r.expect("every job ran")).collect()
}

/// The default number of worker threads: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Every (policy, load) point of the scenario's `[sweep]`.
pub fn sweep(loaded: &LoadedScenario, base: &Overrides, threads: usize) -> Result<Vec<RunOutput>, ModelError> {
    sweep_with_progress(loaded, base, threads, &Silent)
}

/// [`sweep`], reporting one step per finished point to `progress`.
pub fn sweep_with_progress(
    loaded: &LoadedScenario,
    base: &Overrides,
    threads: usize,
    progress: &dyn Progress,
) -> Result<Vec<RunOutput>, ModelError> {
    let sw = loaded.scenario.sweep.clone().expect("sweep() needs a [sweep] table");
    let policies: Vec<Option<PolicySpec>> =
        if sw.policies.is_empty() { vec![None] } else { sw.policies.iter().cloned().map(Some).collect() };
    let loads: Vec<Option<LoadOverride>> = if !sw.utilization.is_empty() {
        sw.utilization.iter().map(|&u| Some(LoadOverride::Utilization(u))).collect()
    } else if !sw.rps.is_empty() {
        sw.rps.iter().map(|&r| Some(LoadOverride::Rps(r))).collect()
    } else {
        vec![base.load]
    };
    let mut jobs = Vec::new();
    for p in &policies {
        for l in &loads {
            jobs.push(Overrides { load: *l, policy: p.clone().or(base.policy.clone()), ..base.clone() });
        }
    }
    // Build every model first so a bad file fails before hours of simulation.
    let models: Vec<Model> = jobs.iter().map(|ov| Model::build(loaded, ov)).collect::<Result<_, _>>()?;
    progress.start(models.len() as u64, "points");
    let done = AtomicUsize::new(0);
    Ok(parallel_map(&models, threads, |m| {
        let r = run_model(m);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress.advance(n as u64, &format!("{} at {:.3}", r.policy, r.utilization));
        r
    }))
}

/// The outcome of the max-load-under-SLO search for one policy.
#[derive(Clone, Debug, Serialize)]
pub struct SearchResult {
    pub policy: String,
    /// Highest utilization found at which every class and fanout met its SLO
    /// (0 if even `min_utilization` failed).
    pub max_utilization: f64,
    pub max_rps: f64,
    /// The run at `max_utilization` (absent if none passed).
    pub at_max: Option<RunOutput>,
    /// Every (utilization, met) evaluated, in order.
    pub probes: Vec<(f64, bool)>,
}

/// Bisection on utilization for each policy of `[search]` (TailGuard §IV's
/// "maximum load that meets the tail-latency SLOs"). Every probe is a full run
/// with the same seed (common random numbers across loads and policies).
pub fn max_load(loaded: &LoadedScenario, base: &Overrides, threads: usize) -> Result<Vec<SearchResult>, ModelError> {
    max_load_with_progress(loaded, base, threads, &Silent)
}

/// [`max_load`], reporting one step per policy searched to `progress`.
pub fn max_load_with_progress(
    loaded: &LoadedScenario,
    base: &Overrides,
    threads: usize,
    progress: &dyn Progress,
) -> Result<Vec<SearchResult>, ModelError> {
    let search = loaded.scenario.search.clone().expect("max_load() needs a [search] table");
    let policies: Vec<Option<PolicySpec>> =
        if search.policies.is_empty() { vec![None] } else { search.policies.iter().cloned().map(Some).collect() };
    // Validate every model up front.
    for p in &policies {
        Model::build(
            loaded,
            &Overrides {
                load: Some(LoadOverride::Utilization(search.min_utilization)),
                policy: p.clone(),
                ..base.clone()
            },
        )?;
    }
    progress.start(policies.len() as u64, "policies");
    let done = AtomicUsize::new(0);
    let results = parallel_map(&policies, threads, |p| {
        let result = search_one(loaded, base, &search, p);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress.advance(n as u64, &result.policy);
        result
    });
    Ok(results)
}

/// Bisection for one policy: [`max_load`]'s per-policy job.
fn search_one(loaded: &LoadedScenario, base: &Overrides, search: &SearchSpec, p: &Option<PolicySpec>) -> SearchResult {
    let probe = |u: f64| -> RunOutput {
        let ov = Overrides {
            load: Some(LoadOverride::Utilization(u)),
            policy: p.clone().or(base.policy.clone()),
            ..base.clone()
        };
        run_one(loaded, &ov).expect("model validated above")
    };
    let met = |r: &RunOutput| r.summary.slo_met.unwrap_or(false);
    let mut probes = Vec::new();
    let (mut lo, mut hi) = (search.min_utilization, search.max_utilization);
    let first = probe(lo);
    probes.push((lo, met(&first)));
    let label = first.policy.clone();
    if !met(&first) {
        return SearchResult { policy: label, max_utilization: 0.0, max_rps: 0.0, at_max: None, probes };
    }
    let mut best = first;
    let top = probe(hi);
    probes.push((hi, met(&top)));
    if met(&top) {
        return SearchResult {
            policy: label,
            max_utilization: hi,
            max_rps: top.offered_rps,
            at_max: Some(top),
            probes,
        };
    }
    while hi - lo > search.tolerance {
        let mid = 0.5 * (lo + hi);
        let r = probe(mid);
        probes.push((mid, met(&r)));
        if met(&r) {
            lo = mid;
            best = r;
        } else {
            hi = mid;
        }
    }
    SearchResult { policy: label, max_utilization: lo, max_rps: best.offered_rps, at_max: Some(best), probes }
}
