//! Loading a scenario: reading and parsing the file, then every cross-reference and range
//! checked with all problems reported at once, each naming the key and the fix.

use super::*;

/// Why a scenario cannot be used. Every message names the file and the fix.
#[derive(Debug)]
pub enum ScenarioError {
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    /// TOML syntax, a wrong type or an unknown key (the message lists valid keys).
    Parse {
        file: PathBuf,
        message: String,
    },
    /// Cross-reference and range problems, all of them.
    Invalid {
        file: PathBuf,
        problems: Vec<String>,
    },
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::Io { file, source } => write!(f, "{}: cannot read scenario: {source}", file.display()),
            ScenarioError::Parse { file, message } => write!(f, "{}: {}", file.display(), message.trim_end()),
            ScenarioError::Invalid { file, problems } => {
                write!(f, "{}: {} problem(s):", file.display(), problems.len())?;
                for p in problems {
                    write!(f, "\n  - {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ScenarioError {}

/// A parsed scenario plus where it came from (relative paths in it resolve
/// against its directory).
#[derive(Clone, Debug)]
pub struct LoadedScenario {
    pub scenario: Scenario,
    pub path: PathBuf,
    pub base_dir: PathBuf,
}

impl Scenario {
    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<LoadedScenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { file: path.to_owned(), source })?;
        Self::from_toml(&text, path)
    }

    /// Parses and validates scenario text; `path` is used for messages and relative paths.
    pub fn from_toml(text: &str, path: &Path) -> Result<LoadedScenario, ScenarioError> {
        let scenario: Scenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse { file: path.to_owned(), message: e.to_string() })?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        LoadedScenario::checked(scenario, path.to_owned(), base_dir)
    }

    /// Every semantic problem, so the user can fix them in one go.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        match (self.load.rps, self.load.utilization) {
            (Some(_), Some(_)) => p.push("[load]: give either `rps` or `utilization`, not both".into()),
            (None, None)
                if self.sweep.is_none()
                    && self.search.is_none()
                    && !matches!(self.load.arrival, ArrivalSpec::Trace { .. }) =>
            {
                p.push("[load]: give `rps` (requests/s) or `utilization` (0 < u < 1 at the busiest service), or replay a trace at its own rate".into())
            }
            _ => {}
        }
        if let Some(r) = self.load.rps {
            if !(r.is_finite() && r > 0.0) {
                p.push(format!("[load] rps = {r}: must be a positive number"));
            }
        }
        if let Some(u) = self.load.utilization {
            if !(u.is_finite() && u > 0.0) {
                p.push(format!("[load] utilization = {u}: must be positive (1.0 = the busiest service is saturated)"));
            }
        }
        if let ArrivalSpec::Pareto { alpha } = self.load.arrival {
            if !(alpha.is_finite() && alpha > 1.0) {
                p.push(format!("[load.arrival] pareto alpha = {alpha}: must be > 1 (the mean is infinite otherwise)"));
            }
        }
        if self.load.in_flight_cap == Some(0) {
            p.push("[load] in_flight_cap = 0: must be at least 1 (omit it for no cap)".into());
        }
        if self.requests == 0 {
            p.push("requests = 0: measure at least one request".into());
        }
        if self.services.is_empty() {
            p.push("no [[service]]: declare at least one service".into());
        }
        let mut host_names = std::collections::HashSet::new();
        for h in &self.hosts {
            if !host_names.insert(h.name.as_str()) {
                p.push(format!("[[host]] name = {:?} appears twice: host names must be unique", h.name));
            }
            if h.cores == 0 {
                p.push(format!("host {:?}: cores = 0; give at least 1", h.name));
            }
            if let Err(e) = h.policy.validate() {
                p.push(format!("host {:?}: {e}", h.name));
            }
            if !(h.context_switch_us.is_finite() && h.context_switch_us >= 0.0) {
                p.push(format!("host {:?}: context_switch_us = {} must be ≥ 0", h.name, h.context_switch_us));
            }
            if !self.services.iter().any(|s| s.host.as_deref() == Some(h.name.as_str())) {
                p.push(format!(
                    "host {:?}: no service is placed on it; add `host = {:?}` to a [[service]] or remove it",
                    h.name, h.name
                ));
            }
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, s) in self.services.iter().enumerate() {
            if names.insert(&s.name, i).is_some() {
                p.push(format!("[[service]] name = {:?} appears twice: service names must be unique", s.name));
            }
            if s.instances == 0 {
                p.push(format!("service {:?}: instances = 0; give at least 1", s.name));
            }
            if !(s.context_switch_us.is_finite() && s.context_switch_us >= 0.0) {
                p.push(format!("service {:?}: context_switch_us = {} must be ≥ 0", s.name, s.context_switch_us));
            }
            match &s.host {
                Some(h) => {
                    if !host_names.contains(h.as_str()) {
                        p.push(format!(
                            "service {:?}: host {h:?} is not a declared [[host]]; declared hosts: {}",
                            s.name,
                            if self.hosts.is_empty() {
                                "none".to_string()
                            } else {
                                self.hosts.iter().map(|x| x.name.as_str()).collect::<Vec<_>>().join(", ")
                            }
                        ));
                    }
                    if s.cores.is_some() || s.policy.is_some() || s.context_switch_us != 0.0 {
                        p.push(format!(
                            "service {:?}: on host {h:?} it uses the host's CPUs; remove `cores`, `policy` and `context_switch_us` (set them on the [[host]])",
                            s.name
                        ));
                    }
                    if s.instances != 1 {
                        p.push(format!(
                            "service {:?}: a service on a host has one instance; remove `instances`",
                            s.name
                        ));
                    }
                }
                None => {
                    if s.cores == Some(0) {
                        p.push(format!("service {:?}: cores = 0; give at least 1", s.name));
                    }
                    match &s.policy {
                        None => p.push(format!(
                            "service {:?}: no `policy`; give one (e.g. policy = {{ kind = \"fifo\" }}) or place it on a [[host]] with `host = ...`",
                            s.name
                        )),
                        Some(pol) => {
                            if let Err(e) = pol.validate() {
                                p.push(format!("service {:?}: {e}", s.name));
                            }
                        }
                    }
                }
            }
            for g in &s.groups {
                let positive = |x: f64| x.is_finite() && x > 0.0;
                if g.count == 0 || g.first + g.count > s.instances || !positive(g.scale) || !positive(g.weight) {
                    p.push(format!(
                        "service {:?}: groups entry {{ first = {}, count = {}, scale = {}, weight = {} }}: needs count ≥ 1 \
                         within the {} instances, and scale and weight > 0",
                        s.name, g.first, g.count, g.scale, g.weight, s.instances
                    ));
                }
            }
            if let Some(a) = &s.admit {
                if a.c == 0 {
                    p.push(format!("service {:?}: admit c = 0 would admit nothing; give at least 1", s.name));
                }
                if !(a.handoff_us.is_finite() && a.handoff_us >= 0.0) {
                    p.push(format!("service {:?}: admit handoff_us = {} must be ≥ 0 (µs)", s.name, a.handoff_us));
                }
                if s.instances != 1 {
                    p.push(format!(
                        "service {:?}: `admit` gates a single instance; remove `instances` or `admit`",
                        s.name
                    ));
                }
            }
        }
        let stage_names: HashMap<&str, &StageSpec> = self.stages.iter().map(|s| (s.name.as_str(), s)).collect();
        if stage_names.len() != self.stages.len() {
            p.push("[[stage]] names must be unique".into());
        }
        for st in &self.stages {
            // The instance bound needs the service; the rest of each fan-out is checked either way.
            let instances = match names.get(st.service.as_str()) {
                None => {
                    p.push(format!(
                        "stage {:?}: service {:?} is not declared; declared services: {}",
                        st.name,
                        st.service,
                        self.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                    None
                }
                Some(&i) => Some(self.services[i].instances),
            };
            fanout_problems(&format!("stage {:?}: fanout", st.name), &st.fanout, &st.service, instances, &mut p);
            // A per-class table's key must name a declared class.
            let unknown_class = |what: &str, class: &str| {
                (!self.classes.iter().any(|c| c.name == class)).then(|| {
                    format!(
                        "{what}: no [[class]] is named {class:?}; declared classes: {}",
                        self.classes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                    )
                })
            };
            for (class, f) in &st.fanout_by_class {
                let what = format!("stage {:?}: fanout_by_class.{class}", st.name);
                p.extend(unknown_class(&what, class));
                fanout_problems(&what, f, &st.service, instances, &mut p);
            }
            for (class, weights) in &st.weights_by_class {
                let what = format!("stage {:?}: weights_by_class.{class}", st.name);
                p.extend(unknown_class(&what, class));
                for g in weights {
                    if !g.is_placement_within(instances) {
                        p.push(format!(
                            "{what}: entry {{ first = {}, count = {}, weight = {} }}: needs count ≥ 1 within the \
                             service's {} instances and weight > 0 (and no `scale`: speeds belong to the service's `groups`)",
                            g.first,
                            g.count,
                            g.weight,
                            instances.map_or("declared".to_string(), |n| n.to_string())
                        ));
                    }
                }
            }
            if !st.next.is_empty() && !st.choose.is_empty() {
                p.push(format!("stage {:?}: use either `next` or `choose`, not both", st.name));
            }
            for e in st.next.iter().chain(&st.choose) {
                if !stage_names.contains_key(e.stage.as_str()) {
                    p.push(format!("stage {:?}: successor {:?} is not a declared [[stage]]", st.name, e.stage));
                }
                if !(e.p.is_finite() && (0.0..=1.0).contains(&e.p)) || (e.p == 0.0 && !st.choose.is_empty()) {
                    p.push(format!("stage {:?} → {:?}: p = {} must be in (0, 1]", st.name, e.stage, e.p));
                }
            }
        }
        if !self.stages.is_empty() && self.stage_cycle() {
            p.push("[[stage]]: the call graph has a cycle; it must be a DAG".into());
        }
        let mut class_names = std::collections::HashSet::new();
        for c in &self.classes {
            if !class_names.insert(c.name.as_str()) {
                p.push(format!("[[class]] name = {:?} appears twice", c.name));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                p.push(format!("class {:?}: weight = {} must be positive", c.name, c.weight));
            }
            if let Some(s) = c.slo_ms {
                if !(s.is_finite() && s > 0.0) {
                    p.push(format!("class {:?}: slo_ms = {s} must be positive", c.name));
                }
            }
            if !(c.percentile > 0.0 && c.percentile < 100.0) {
                p.push(format!("class {:?}: percentile = {} must be in (0, 100)", c.name, c.percentile));
            }
        }
        if self.classes.len() > 255 {
            p.push("at most 255 [[class]]es".into());
        }
        if self.deadlines.mode != DeadlineMode::None && self.classes.iter().all(|c| c.slo_ms.is_none()) {
            p.push("[deadlines] mode needs SLOs: give `slo_ms` in at least one [[class]]".into());
        }
        if let Some(a) = &self.admission {
            if !(a.r_th.is_finite() && (0.0..=1.0).contains(&a.r_th)) {
                p.push(format!("[admission] r_th = {}: must be in [0, 1] (1: the ratio never rejects)", a.r_th));
            }
            if let Some(w) = a.window_ms.filter(|w| !(w.is_finite() && *w > 0.0)) {
                p.push(format!("[admission] window_ms = {w}: must be positive"));
            }
            if a.window_tasks == Some(0) {
                p.push("[admission] window_tasks = 0: must be at least 1 (the paper: 100000)".into());
            }
            if a.window_tasks.is_none() && a.refused != RefusedSpec::NoOutcome {
                p.push(
                    "[admission] refused says what a refused request's tasks are in a count window: it needs window_tasks"
                        .into(),
                );
            }
            if a.window_ms.is_none() && a.window_tasks.is_none() {
                p.push(
                    "[admission] needs a window: window_ms (time) and/or window_tasks (the last N task outcomes)"
                        .into(),
                );
            }
            if self.deadlines.mode == DeadlineMode::None {
                p.push("[admission] needs task deadlines: set [deadlines] mode = \"tailguard\" or \"slo\"".into());
            }
        }
        if let Some(s) = &self.sweep {
            if s.utilization.is_empty() && s.rps.is_empty() && s.policies.is_empty() {
                p.push("[sweep]: give `utilization`, `rps` and/or `policies` to sweep".into());
            }
            if !s.utilization.is_empty() && !s.rps.is_empty() {
                p.push("[sweep]: give either `utilization` or `rps`, not both".into());
            }
            for pol in &s.policies {
                if let Err(e) = pol.validate() {
                    p.push(format!("[sweep] policies: {e}"));
                }
            }
        }
        if let Some(s) = &self.search {
            if !(0.0 < s.min_utilization && s.min_utilization < s.max_utilization) {
                p.push("[search]: need 0 < min_utilization < max_utilization".into());
            }
            if !(s.tolerance.is_finite() && s.tolerance > 0.0) {
                p.push("[search]: tolerance must be positive".into());
            }
            if self.classes.iter().all(|c| c.slo_ms.is_none()) {
                p.push("[search] needs an SLO: give `slo_ms` in at least one [[class]]".into());
            }
        }
        p
    }

    fn stage_cycle(&self) -> bool {
        let idx: HashMap<&str, usize> = self.stages.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
        // 0 = unvisited, 1 = on the stack, 2 = done.
        let mut state = vec![0u8; self.stages.len()];
        fn visit(i: usize, st: &[StageSpec], idx: &HashMap<&str, usize>, state: &mut [u8]) -> bool {
            if state[i] == 1 {
                return true;
            }
            if state[i] == 2 {
                return false;
            }
            state[i] = 1;
            for e in st[i].next.iter().chain(&st[i].choose) {
                if let Some(&j) = idx.get(e.stage.as_str()) {
                    if visit(j, st, idx, state) {
                        return true;
                    }
                }
            }
            state[i] = 2;
            false
        }
        (0..self.stages.len()).any(|i| visit(i, &self.stages, &idx, &mut state))
    }
}

/// What is wrong with a fan-out (`what` names it, e.g. `stage "q": fanout`);
/// `instances` of its service, when the service is declared.
fn fanout_problems(what: &str, f: &FanoutSpec, service: &str, instances: Option<usize>, p: &mut Vec<String>) {
    match f {
        FanoutSpec::Fixed(0) => p.push(format!("{what} = 0; give at least 1")),
        FanoutSpec::Table(t) => {
            if t.values.is_empty() || t.values.len() != t.weights.len() {
                p.push(format!("{what}: `values` and `weights` must be non-empty and of equal length"));
            }
            if t.values.contains(&0) {
                p.push(format!("{what}: values must be ≥ 1"));
            }
            if t.weights.iter().any(|w| !(w.is_finite() && *w > 0.0)) {
                p.push(format!("{what}: weights must be positive"));
            }
        }
        _ => {}
    }
    let max_k = match f {
        FanoutSpec::Fixed(k) => *k,
        FanoutSpec::Table(t) => t.values.iter().copied().max().unwrap_or(0),
    };
    if let Some(instances) = instances.filter(|&n| max_k as usize > n) {
        p.push(format!(
            "{what}: up to {max_k} but service {service:?} has only {instances} instances; raise `instances`"
        ));
    }
}
