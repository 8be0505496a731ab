//! The simulated side: the same configuration as a simulator scenario (with the measured per-task overhead as
//! network delay), its max load under SLO, and admission at overload.

use super::*;

/// The per-hop network delay the simulated side adds, standing for the real
/// side's per-task overhead (loopback HTTP, tokio, timer lateness).
#[derive(Clone, Debug)]
pub enum HopDelay {
    /// The same delay on every hop.
    Fixed { ns: f64 },
    /// Drawn from what the handler measured ([`Overhead::per_hop`]: dispatch
    /// and after-service samples together), as an empirical table. The
    /// simulator draws both hops per task (`[network] returns = "per-task"`):
    /// a query of fan-out k waits for the slowest of k dispatch-serve-return
    /// paths, as a real query does. (Until 24 Nov the return hop was drawn once
    /// per query, which left the simulator optimistic for large k.)
    Measured(Arc<LatencyHistogram>),
}

impl HopDelay {
    /// Half a per-task overhead on each hop.
    pub fn fixed_total(overhead_ns: f64) -> HopDelay {
        HopDelay::Fixed { ns: overhead_ns / 2.0 }
    }

    /// The measured distribution if there is one, else half the mean overhead per hop.
    pub fn from_measured(o: &Overhead) -> HopDelay {
        match &o.per_hop {
            Some(h) if !h.is_empty() => HopDelay::Measured(h.clone()),
            _ => HopDelay::fixed_total(o.mean_ns + o.dispatch_mean_ns),
        }
    }

    pub fn mean_ns(&self) -> f64 {
        match self {
            HopDelay::Fixed { ns } => *ns,
            HopDelay::Measured(h) => h.mean(),
        }
    }
}

/// The 10,000 quantiles F⁻¹(i / 10⁴), i = 0..9999, in ms: the Tailbench table format core's `empirical` reads.
pub fn quantile_table_ms(h: &LatencyHistogram) -> String {
    (0..tailor_core::dist::TABLE_LEN)
        .map(|i| format!("{}\n", h.quantile(i as f64 / tailor_core::dist::TABLE_LEN as f64) as f64 / 1e6))
        .collect()
}

/// A simulator scenario built from a config; the hop-delay table it names (if
/// any) is a temporary file, removed when this is dropped (the simulator reads
/// it while it compiles the scenario).
pub struct SimScenario {
    pub loaded: LoadedScenario,
    _hop_table: Option<TempFile>,
}

/// A file removed on drop.
pub(super) struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The simulator scenario equivalent to the config, for one scheme. With
/// `delay` (from the per-task overhead measured on the real run), the scenario
/// gets a network delay on each hop (to the server, and back with the
/// answer), so a simulated query's latency carries the same overhead as a
/// real one's, its spread included ([`HopDelay::from_measured`]). The
/// simulated deadlines stay SLO − x_p^u(k) of the service time: the overhead
/// shifts every deadline by the same amount, which changes no EDF order.
pub fn sim_scenario(l: &Loaded, scheme: Scheme, delay: Option<HopDelay>) -> Result<SimScenario, tailor_fanout::Error> {
    sim_scenario_with(l, scheme, delay, None)
}

/// [`sim_scenario`] with the simulator's admission control.
pub(super) fn sim_scenario_with(
    l: &Loaded,
    scheme: Scheme,
    delay: Option<HopDelay>,
    admission: Option<AdmissionSpec>,
) -> Result<SimScenario, tailor_fanout::Error> {
    let policy = match scheme {
        Scheme::TfEdfq | Scheme::TEdfq => PolicySpec::Edf,
        Scheme::Priq => PolicySpec::Priq,
        Scheme::Fifo => PolicySpec::Fifo,
    };
    let mode = if scheme == Scheme::TEdfq { DeadlineMode::Slo } else { DeadlineMode::Tailguard };
    let s = &l.cfg.search;
    // Any distribution the config takes, with its times stretched as the real
    // servers stretch them; heterogeneous servers: the simulator scales and
    // picks its instances as the real run does.
    let service = ServiceSpec::new(SERVER, policy.clone(), l.cfg.service_time.scaled(l.cfg.time_scale))
        .instances(l.cfg.servers)
        .cores(1)
        .groups(l.cfg.groups.clone());
    // Classes with their own fan-outs; the stage's `fanout` is for the others
    // (with none left, any valid table: class 0's). Classes with their own
    // placement pick the simulated instances as the handler picks servers.
    let mut stage = StageSpec::new("query", SERVER).fanout(FanoutSpec::Table(l.cfg.fanouts_of(0).clone()));
    for c in &l.cfg.classes {
        if let Some(f) = &c.fanouts {
            stage = stage.fanout_for(c.name.clone(), FanoutSpec::Table(f.clone()));
        }
        if !c.placement.is_empty() {
            stage = stage.weights_for(c.name.clone(), c.placement.clone());
        }
    }
    let mode_name = if mode == DeadlineMode::Slo { "slo" } else { "tailguard" };
    let mut b = Scenario::builder(format!("{}-{}-{mode_name}", l.cfg.name, policy.name()))
        .seed(l.cfg.seed)
        .requests(s.sim_requests)
        .warmup(s.sim_requests / 10)
        .load(LoadSpec::utilization(s.min_load))
        .service(service)
        .stage(stage)
        .deadlines(mode)
        .search(SearchSpec {
            policies: vec![policy],
            min_utilization: s.min_load,
            max_utilization: s.max_load,
            tolerance: s.tolerance.min(0.01),
        })
        .base_dir(l.base_dir.clone());
    for c in &l.cfg.classes {
        b = b.class(ClassSpec::new(c.name.clone()).weight(c.weight).slo(c.slo_ms * l.cfg.time_scale, c.percentile));
    }
    if let Some(a) = admission {
        b = b.admission(a);
    }
    let mut hop_table = None;
    match delay.filter(|d| d.mean_ns() > 0.0) {
        Some(HopDelay::Fixed { ns }) => b = b.network(DistSpec::Fixed { value_ms: ns / 1e6 }, Returns::PerTask),
        Some(HopDelay::Measured(h)) => {
            // The table goes to a temporary file the scenario names (absolute path).
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("tailor-fanout-hop-{}-{n}.txt", std::process::id()));
            std::fs::write(&path, quantile_table_ms(&h))
                .map_err(|e| tailor_fanout::Error::Io(format!("{}: {e}", path.display())))?;
            b = b.network(DistSpec::Empirical { file: path.clone(), scale: 1.0 }, Returns::PerTask);
            hop_table = Some(TempFile(path));
        }
        None => {}
    }
    let loaded = b.build().map_err(|e| tailor_fanout::Error::Config(format!("simulator scenario: {e}")))?;
    Ok(SimScenario { loaded, _hop_table: hop_table })
}

/// The simulated service: the config's task servers.
pub(super) const SERVER: &str = "server";

/// Max load under SLO in the simulator for one scheme (with the measured per-task overhead, if given).
pub fn search_sim(l: &Loaded, scheme: Scheme, delay: Option<HopDelay>) -> Result<f64, tailor_fanout::Error> {
    let scenario = sim_scenario(l, scheme, delay)?;
    let results = tailor_sim::sweep::max_load(&scenario.loaded, &Overrides::default(), 1)
        .map_err(|e| tailor_fanout::Error::Config(format!("simulator: {e}")))?;
    Ok(results.first().map_or(0.0, |r| r.max_utilization))
}

/// Simulated queries per admission check: enough for a fan-out-32 group's p99 at 1.5×.
pub(super) const SIM_ADMISSION_REQUESTS: u64 = 300_000;

/// The overload check in the simulator: the config's scenario under TF-EDFQ (with
/// `delay`, the per-task overhead measured on the real run, on each hop) at `offered`,
/// with the config's `[admission]` window and `reject_late` and R_th `r_th`. The
/// simulator has the paper's ratio (a miss counted when the task is dequeued) and
/// `reject_late`; not `predict`, `proportional` or `per_server`, which the real run may
/// add. Accepted load counts tasks, as on the real side.
pub fn sim_admission(
    l: &Loaded,
    r_th: f64,
    offered: f64,
    delay: Option<HopDelay>,
) -> Result<AdmissionResult, tailor_fanout::Error> {
    let a = l
        .cfg
        .admission
        .as_ref()
        .ok_or_else(|| tailor_fanout::Error::Config(format!("{}: needs an [admission] section", l.cfg.name)))?;
    let l = &l.for_admission();
    let admission = AdmissionSpec {
        r_th,
        window_ms: Some(a.window_ms * l.cfg.time_scale),
        window_tasks: Some(a.window_tasks),
        reject_late: a.reject_late,
        refused: Default::default(),
        proportional: false,
        min_tasks: 0,
    };
    let scenario = sim_scenario_with(l, Scheme::TfEdfq, delay, Some(admission))?;
    let ov = Overrides {
        load: Some(LoadOverride::Utilization(offered)),
        requests: Some(SIM_ADMISSION_REQUESTS),
        warmup: Some(SIM_ADMISSION_REQUESTS / 10),
        ..Default::default()
    };
    let model =
        Model::build(&scenario.loaded, &ov).map_err(|e| tailor_fanout::Error::Config(format!("simulator: {e}")))?;
    let rec = tailor_sim::engine::run(&model).0;
    let s = rec.summarize();
    let class_of = |name: &str, count: u64, rejected: u64, tail_ms: f64, slo_ms: f64| ClassAtOverload {
        name: name.to_string(),
        quantile_ms: tail_ms,
        slo_ms,
        accepted: if count + rejected > 0 { count as f64 / (count + rejected) as f64 } else { 0.0 },
    };
    let classes = s
        .per_class
        .iter()
        .map(|c| class_of(&c.class, c.count, c.rejected, c.tail_ms, c.slo_ms.unwrap_or(f64::INFINITY)))
        .collect();
    // Rejections are counted per class, not per (class, fan-out): a group's admitted share is unknown.
    let worst_group = s
        .per_class_fanout
        .iter()
        .filter(|g| g.count >= 100)
        .max_by(|x, y| (x.tail_ms / x.slo_ms).total_cmp(&(y.tail_ms / y.slo_ms)))
        .map(|g| {
            (g.fanout, ClassAtOverload { accepted: f64::NAN, ..class_of(&g.class, g.count, 0, g.tail_ms, g.slo_ms) })
        });
    let tasks_admitted: u64 = rec.fanout.iter().map(|&k| k as u64).sum();
    let tasks_offered = s.offered as f64 * l.mix().mean_fanout();
    Ok(AdmissionResult {
        r_th,
        offered_load: offered,
        accepted_load: if tasks_offered > 0.0 { offered * tasks_admitted as f64 / tasks_offered } else { 0.0 },
        classes,
        worst_group,
        rejected_pct: s.rejected_pct,
        overhead: Overhead::default(),
        simulated: None,
    })
}
