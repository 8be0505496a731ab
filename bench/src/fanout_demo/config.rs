//! The benchmark's configuration file: classes, fan-outs, servers, the search and admission sections.

use super::*;

/// A fan-out benchmark configuration (`scenarios/fanout-*.toml`). Times are in
/// the *workload's* time base (e.g. Masstree's ms); `time_scale` stretches all
/// of them (service times and SLOs) for the real run so that timer and network
/// overheads stay small next to a task.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    pub name: String,
    /// Task servers (one task in service at a time each).
    #[serde(default = "default_servers")]
    pub servers: usize,
    /// Multiplies every service time and SLO in the real run (and the simulated one, so they match).
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    /// Task service time, unscaled.
    pub service_time: DistSpec,
    #[serde(default = "default_queuing")]
    pub queuing: Queuing,
    #[serde(default = "default_schemes")]
    pub schemes: Vec<Scheme>,
    /// Query fan-outs, for every class that does not give its own.
    #[serde(default)]
    pub fanouts: Option<FanoutMix>,
    #[serde(rename = "class")]
    pub classes: Vec<ClassConfig>,
    /// Heterogeneous servers: groups that are slower and/or picked more often.
    #[serde(default, rename = "group")]
    pub groups: Vec<ServerGroup>,
    pub search: SearchConfig,
    #[serde(default)]
    pub admission: Option<AdmissionSection>,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

/// Fan-outs and their weights: the simulator's fan-out table, so both sides read one definition.
pub use tailor_sim::scenario::FanoutTable as FanoutMix;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    pub name: String,
    /// SLO on the `percentile` of query latency, unscaled ms.
    pub slo_ms: f64,
    #[serde(default = "default_percentile")]
    pub percentile: f64,
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// This class's own fan-outs (TailGuard's testbed tied each class to one
    /// fan-out); without them the class uses the top-level `fanouts`.
    #[serde(default)]
    pub fanouts: Option<FanoutMix>,
    /// This class's own placement, `placement = [{ first = 0, count = 8, weight = 12 }]`:
    /// each listed server's weight for this class's queries, the others' being
    /// one, instead of the `[[group]]` weights. TailGuard's testbed sent 80% of
    /// class A to one cluster: weight 12 on 8 of 32 servers is 96 of 120.
    #[serde(default)]
    pub placement: Vec<ServerGroup>,
}

/// Servers `first .. first + count` are `scale`× slower and `weight`× as
/// likely to be picked: the simulator's instance group, so both sides read one definition.
pub use tailor_sim::scenario::InstanceGroupSpec as ServerGroup;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    pub min_load: f64,
    pub max_load: f64,
    pub tolerance: f64,
    pub warmup_s: f64,
    pub measure_s: f64,
    /// Simulated queries per probe.
    #[serde(default = "default_sim_requests")]
    pub sim_requests: u64,
    /// One-sided confidence of each group's verdict (meets / misses) on the real side.
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// A probe whose groups are not all decided after `measure_s` is extended by
    /// further `measure_s` runs (fresh servers, next seed), pooled, up to this many seconds.
    #[serde(default)]
    pub measure_cap_s: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSection {
    /// Moving window, unscaled ms (scaled by `time_scale` like every time).
    pub window_ms: f64,
    /// At most this many of the latest task outcomes.
    #[serde(default = "default_window_tasks")]
    pub window_tasks: u64,
    /// R_th candidates for `calibrate`.
    pub r_th_candidates: Vec<f64>,
    /// Offered load for the overload check, as a multiple of the max load.
    #[serde(default = "default_overload")]
    pub overload: f64,
    /// Count predicted misses at dispatch ([`AdmissionConfig::predict`]).
    #[serde(default)]
    pub predict: bool,
    /// Admit a share of queries above R_th instead of none ([`AdmissionConfig::proportional`]).
    #[serde(default)]
    pub proportional: bool,
    /// One miss ratio per server ([`AdmissionConfig::per_server`]).
    #[serde(default)]
    pub per_server: bool,
    /// Also reject a query whose task would wait past its deadline ([`AdmissionConfig::reject_late`]).
    #[serde(default)]
    pub reject_late: bool,
    /// Queuing for the overload check and calibration (default: the config's).
    #[serde(default)]
    pub queuing: Option<Queuing>,
}

pub(super) fn default_servers() -> usize {
    32
}
pub(super) fn default_time_scale() -> f64 {
    25.0
}
pub(super) fn default_queuing() -> Queuing {
    Queuing::AtServers
}
pub(super) fn default_schemes() -> Vec<Scheme> {
    Scheme::ALL.to_vec()
}
pub(super) fn default_percentile() -> f64 {
    99.0
}
pub(super) fn default_weight() -> f64 {
    1.0
}
pub(super) fn default_seed() -> u64 {
    1
}
pub(super) fn default_sim_requests() -> u64 {
    100_000
}
pub(super) fn default_confidence() -> f64 {
    0.9
}
pub(super) fn default_window_tasks() -> u64 {
    tailor_core::tailguard::admission::PAPER_WINDOW_TASKS
}
pub(super) fn default_overload() -> f64 {
    1.5
}

/// A loaded config: the file's directory resolves relative table paths.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub cfg: DemoConfig,
    pub base_dir: PathBuf,
    /// Unscaled service time.
    pub service: Dist,
}

impl Loaded {
    pub fn from_toml(text: &str, path: &Path) -> Result<Loaded, tailor_fanout::Error> {
        let cfg: DemoConfig =
            toml::from_str(text).map_err(|e| tailor_fanout::Error::Config(format!("{}: {e}", path.display())))?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let service = cfg
            .service_time
            .build(&base_dir)
            .map_err(|e| tailor_fanout::Error::Config(format!("{}: service_time: {e}", path.display())))?;
        let problems = cfg.problems();
        if !problems.is_empty() {
            return Err(tailor_fanout::Error::Config(format!("{}: {}", path.display(), problems.join("; "))));
        }
        Ok(Loaded { cfg, base_dir, service })
    }

    pub fn load(path: &Path) -> Result<Loaded, tailor_fanout::Error> {
        let text =
            std::fs::read_to_string(path).map_err(|e| tailor_fanout::Error::Io(format!("{}: {e}", path.display())))?;
        Self::from_toml(&text, path)
    }

    fn scaled_ns(&self, ms: f64) -> Nanos {
        from_millis_f64(ms * self.cfg.time_scale)
    }

    pub fn slo_classes(&self) -> Vec<SloClass> {
        self.cfg
            .classes
            .iter()
            .map(|c| SloClass { p: c.percentile / 100.0, slo_ns: self.scaled_ns(c.slo_ms) })
            .collect()
    }

    pub fn mix(&self) -> Mix {
        Mix {
            class_weights: self.cfg.classes.iter().map(|c| c.weight).collect(),
            fanouts: (0..self.cfg.classes.len())
                .map(|c| {
                    let f = self.cfg.fanouts_of(c);
                    f.values.iter().copied().zip(f.weights.iter().copied()).collect()
                })
                .collect(),
        }
    }

    /// Per-server (service scale, pick weight).
    pub fn server_shapes(&self) -> Vec<(f64, f64)> {
        let (groups, n) = (&self.cfg.groups, self.cfg.servers);
        let scale = tailor_sim::scenario::per_instance(groups, n, |g| g.scale);
        scale.into_iter().zip(tailor_sim::scenario::per_instance(groups, n, |g| g.weight)).collect()
    }

    /// Per class, its servers' pick weights if it has its own `placement`
    /// (else an empty entry); empty if no class has one.
    pub fn class_placements(&self) -> Vec<Vec<f64>> {
        if self.cfg.classes.iter().all(|c| c.placement.is_empty()) {
            return Vec::new();
        }
        let n = self.cfg.servers;
        let of = |c: &ClassConfig| {
            if c.placement.is_empty() {
                Vec::new()
            } else {
                tailor_sim::scenario::per_instance(&c.placement, n, |g| g.weight)
            }
        };
        self.cfg.classes.iter().map(of).collect()
    }

    /// Query rate for a load fraction: load = λ · E[k] · E[S] / N (nominal E[S], scaled).
    pub fn rate_for(&self, load: f64) -> f64 {
        let mean_s = self.service.mean_ns() * self.cfg.time_scale / 1e9;
        load * self.cfg.servers as f64 / (self.mix().mean_fanout() * mean_s)
    }
}

impl Loaded {
    /// The handler of a real run of `scheme` on task servers at `servers`
    /// (`sequential`: the fan-outs of a request's queries, if requests are sequential).
    pub fn handler_config(
        &self,
        scheme: Scheme,
        servers: Vec<std::net::SocketAddr>,
        admission: Option<AdmissionConfig>,
        sequential: Option<&[u32]>,
    ) -> HandlerConfig {
        let shapes = self.server_shapes();
        let weights: Vec<f64> = shapes.iter().map(|s| s.1).collect();
        let uniform = weights.iter().all(|&w| w == 1.0);
        let scaled = |factor: f64| Arc::new(Scaled { dist: self.service.clone(), factor }) as SharedCdf;
        HandlerConfig {
            scheme,
            queuing: self.cfg.queuing,
            classes: self.slo_classes(),
            servers,
            server_weights: if uniform { Vec::new() } else { weights },
            class_server_weights: self.class_placements(),
            offline: scaled(self.cfg.time_scale),
            // Servers of known speeds ([[group]] scale) start from their own
            // offline CDF, as the simulated planner does.
            offline_per_server: if self.cfg.groups.is_empty() {
                Vec::new()
            } else {
                shapes.iter().map(|&(scale, _)| scaled(self.cfg.time_scale * scale)).collect()
            },
            admission,
            refresh: Duration::from_millis(250),
            min_samples: Handler::tail_samples(
                &self.slo_classes(),
                self.cfg.all_fanouts().iter().chain(sequential.into_iter().flatten()).copied().max().unwrap_or(1),
            ),
            seed: self.cfg.seed,
            // A measurement: every query's latency counts, however long.
            query_timeout_slos: None,
        }
    }

    /// The configuration the admission check runs: its `[admission] queuing`, if set, replaces `queuing`.
    pub fn for_admission(&self) -> Loaded {
        let mut l = self.clone();
        if let Some(q) = self.cfg.admission.as_ref().and_then(|a| a.queuing) {
            l.cfg.queuing = q;
        }
        l
    }
}

impl DemoConfig {
    /// The fan-outs of class `c`: its own, else the top-level ones (validated: one of them is there).
    pub fn fanouts_of(&self, c: usize) -> &FanoutMix {
        self.classes[c].fanouts.as_ref().or(self.fanouts.as_ref()).expect("validated: every class has fan-outs")
    }

    /// Every fan-out any class uses, ascending.
    pub fn all_fanouts(&self) -> Vec<u32> {
        let mut v: Vec<u32> = (0..self.classes.len()).flat_map(|c| self.fanouts_of(c).values.clone()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.servers == 0 {
            p.push("servers = 0: need at least one task server".into());
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            p.push(format!("time_scale = {}: must be positive", self.time_scale));
        }
        let mixes = self.fanouts.iter().map(|f| ("fanouts".to_string(), f)).chain(
            self.classes
                .iter()
                .filter_map(|c| c.fanouts.as_ref().map(|f| (format!("[[class]] {:?}: fanouts", c.name), f))),
        );
        for (what, f) in mixes {
            if f.values.len() != f.weights.len() || f.values.is_empty() {
                p.push(format!("{what}: `values` and `weights` must be non-empty and the same length"));
            }
            if let Some(k) = f.values.iter().find(|&&k| k == 0 || k as usize > self.servers) {
                p.push(format!("{what}: {k} must be between 1 and servers = {}", self.servers));
            }
            if let Some(w) = f.weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
                p.push(format!("{what}: weight {w} must be positive"));
            }
        }
        if self.fanouts.is_none() {
            for c in self.classes.iter().filter(|c| c.fanouts.is_none()) {
                p.push(format!(
                    "[[class]] {:?} has no fan-outs: give top-level `fanouts = {{ values = [...], weights = [...] }}` or the class's own",
                    c.name
                ));
            }
        }
        if self.classes.is_empty() {
            p.push("[[class]]: give at least one SLO class".into());
        }
        for (i, c) in self.classes.iter().enumerate() {
            if !(c.slo_ms > 0.0 && c.percentile > 0.0 && c.percentile < 100.0) {
                p.push(format!("[[class]] {i} ({}): slo_ms > 0 and 0 < percentile < 100", c.name));
            }
        }
        for c in &self.classes {
            for g in &c.placement {
                if !g.is_placement_within(Some(self.servers)) {
                    p.push(format!(
                        "[[class]] {:?}: placement entry {{ first = {}, count = {}, weight = {} }}: needs count ≥ 1 within \
                         the {} servers and weight > 0 (and no `scale`: speeds belong to [[group]])",
                        c.name, g.first, g.count, g.weight, self.servers
                    ));
                }
            }
        }
        for g in &self.groups {
            let positive = |x: f64| x.is_finite() && x > 0.0;
            if g.first + g.count > self.servers || !positive(g.scale) || !positive(g.weight) {
                p.push(format!(
                    "[[group]] first = {}, count = {}: must lie within the {} servers, with scale and weight > 0",
                    g.first, g.count, self.servers
                ));
            }
        }
        let s = &self.search;
        if !(0.0 < s.min_load && s.min_load < s.max_load && s.tolerance > 0.0 && s.measure_s > 0.0) {
            p.push("[search]: need 0 < min_load < max_load, tolerance > 0, measure_s > 0".into());
        }
        if !(0.5 <= s.confidence && s.confidence < 1.0) {
            p.push(format!("[search] confidence = {}: must be in [0.5, 1)", s.confidence));
        }
        if s.measure_cap_s.is_some_and(|c| c.is_nan() || c < s.measure_s) {
            p.push("[search] measure_cap_s: must be at least measure_s".into());
        }
        p
    }
}
