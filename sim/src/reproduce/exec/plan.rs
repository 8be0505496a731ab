//! Planning a reproduction: the figures selected (with every figure their claims refer to),
//! each figure's series, vary values and loads turned into points, each point into a job —
//! identical jobs planned once, each with a rough cost so the longest run first.

use super::*;

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
                let sels = crate::reproduce::manifest::selectors(&c.value)
                    .into_iter()
                    .chain(c.aux.values().flat_map(crate::reproduce::manifest::selectors));
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
) -> Result<LoadedScenario, FigureError> {
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
    let scenario: Scenario = toml::Value::Table(t).try_into().map_err(FigureError::PatchedToml)?;
    let problems = scenario.problems();
    if !problems.is_empty() {
        return Err(FigureError::PatchedScenario(problems));
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
) -> Result<usize, FigureError> {
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
    let model = Model::build(&loaded, &ov)?;
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

/// TailGuard Table II: mean, planner x_p^u(k) and the authors' RUT line k, per table.
fn plan_planner(lm: &LoadedManifest, index: usize, fig: &FigureSpec) -> Result<FigurePlan, FigureError> {
    let pl = fig.planner.as_ref().expect("checked by Manifest::problems");
    let mut points = Vec::new();
    for t in &pl.tables {
        let cdf = lm.base_dir.join(&t.cdf);
        let dist = DistSpec::Empirical { file: cdf.clone(), scale: 1.0 }
            .build(Path::new(""))
            .map_err(|source| FigureError::PlannerCdf { table: t.name.clone(), source })?;
        let rut_path = lm.base_dir.join(&t.rut);
        let rut = tailor_core::tailguard::read_rut_table(&rut_path)
            .map_err(|source| FigureError::PlannerRut { table: t.name.clone(), source })?;
        let mut m = BTreeMap::new();
        m.insert("mean_ms".to_string(), dist.mean_ns() / 1e6);
        for &k in &pl.fanouts {
            let x = tailor_core::tailguard::unloaded_quantile_homogeneous(&dist, k, pl.percentile / 100.0);
            m.insert(format!("x_u_ms@{k}"), to_millis_f64(x));
            let r = rut
                .get(k as usize - 1)
                .ok_or_else(|| FigureError::RutTooShort { path: rut_path.clone(), fanout: k })?;
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
