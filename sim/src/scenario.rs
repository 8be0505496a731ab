//! Scenario files: the TOML a user writes to describe a system, its load and
//! what to measure. Parsing rejects unknown keys (naming the file, line and
//! the valid keys); [`Scenario::load`] then checks every cross-reference and
//! reports all problems at once. The same structs are built in code with
//! [`Scenario::builder`] (`builder.rs`).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tailor_core::dist::DistSpec;
use tailor_core::PolicySpec;

/// A whole scenario file. See `docs/scenarios.md` for every key.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name used in reports and output file names.
    pub name: String,
    /// One-line description shown in reports.
    #[serde(default)]
    pub description: String,
    /// Seed of every random stream in a run; the same seed gives the same numbers.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Requests measured per run (after the warm-up).
    #[serde(default = "default_requests")]
    pub requests: u64,
    /// Requests at the start of a run that are simulated but not measured.
    #[serde(default)]
    pub warmup: u64,
    pub load: LoadSpec,
    /// Per-hop network delay (edge → first stage, stage → stage, last stage → edge).
    #[serde(default)]
    pub network: Option<NetworkSpec>,
    /// Interrupt-style OS noise on every CPU of every service.
    #[serde(default)]
    pub noise: Option<NoiseSpec>,
    /// Machines whose CPUs several services share (e.g. a whole chain on one
    /// node). Absent: every service instance has CPUs of its own.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostSpec>,
    #[serde(rename = "service")]
    pub services: Vec<ServiceSpec>,
    /// The call graph. Absent: a chain through the services in file order.
    #[serde(default, rename = "stage")]
    pub stages: Vec<StageSpec>,
    /// SLO classes. Absent: one class without an SLO.
    #[serde(default, rename = "class")]
    pub classes: Vec<ClassSpec>,
    /// How task queuing deadlines are set (TailGuard).
    #[serde(default)]
    pub deadlines: DeadlineSpec,
    /// Query admission control on the task deadline-miss ratio (TailGuard §III.C).
    #[serde(default)]
    pub admission: Option<AdmissionSpec>,
    /// Run the scenario at several loads and/or policies.
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    /// Find the highest load at which every class and fanout meets its SLO.
    #[serde(default)]
    pub search: Option<SearchSpec>,
}

fn default_seed() -> u64 {
    1
}
fn default_requests() -> u64 {
    100_000
}

/// Offered load and the arrival process.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Requests per second entering the system. Exactly one of `rps` and `utilization`.
    #[serde(default)]
    pub rps: Option<f64>,
    /// Utilization of the busiest service: λ · E[tasks per request at s] · E[S_s] /
    /// (instances_s · cores_s), maximised over services s (docs/scenarios.md).
    #[serde(default)]
    pub utilization: Option<f64>,
    #[serde(default)]
    pub arrival: ArrivalSpec,
    /// Most requests inside the system at once; more wait at the edge, in order,
    /// and their latency includes that wait (TailClipper caps at 200).
    #[serde(default)]
    pub in_flight_cap: Option<u64>,
}

/// How requests arrive.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ArrivalSpec {
    /// Exponential inter-arrival times.
    #[default]
    Poisson,
    /// Equal inter-arrival times.
    Deterministic,
    /// Pareto inter-arrival times (bursty); `alpha` > 1, smaller is burstier.
    Pareto { alpha: f64 },
    /// Replay arrival times from a CSV file with an `arrival_ms` column
    /// (ascending). With a load given, gaps are scaled to that mean rate; the
    /// trace repeats if it is shorter than the run.
    Trace { file: PathBuf },
    /// Gaps drawn from any distribution (its shape: e.g. lognormal with a given
    /// coefficient of variation), rescaled so their mean matches the load.
    Gaps { dist: DistSpec },
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way delay of each hop.
    pub delay: DistSpec,
    /// Where the answers go (see [`Returns`]).
    #[serde(default)]
    pub returns: Returns,
}

/// How answers travel back, which decides how many return hops a request pays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Returns {
    /// A pipeline: each stage forwards to the next, and the request pays one hop
    /// back to the edge at the end.
    #[default]
    PerRequest,
    /// Every task is a call from the edge (a query handler): each task's answer
    /// comes back over its own hop and the stage joins when the slowest answer
    /// arrives, so a fan-out of k waits for the slowest of k returns; no final hop.
    PerTask,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseSpec {
    /// Interrupts per second on each CPU (Poisson).
    pub rate_per_sec: f64,
    /// How long each interrupt steals the CPU.
    pub duration: DistSpec,
}

/// A service: `instances` identical nodes, each with `cores` CPUs scheduled by
/// `policy`; or, with `host`, one instance running on a shared host's CPUs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    pub name: String,
    /// CPUs per node (default 1). Not with `host`: the host has the CPUs.
    #[serde(default)]
    pub cores: Option<usize>,
    /// Identical nodes (e.g. the N task servers of a fan-out). Each has its own queue.
    #[serde(default = "one_usize")]
    pub instances: usize,
    /// The node's scheduler. Required without `host`; not allowed with it.
    #[serde(default)]
    pub policy: Option<PolicySpec>,
    /// CPU demand of one task at this service.
    pub service_time: DistSpec,
    /// CPU time lost each time a preempted task is dispatched again.
    #[serde(default)]
    pub context_switch_us: f64,
    /// Run on this `[[host]]`'s CPUs, under the host's policy, together with
    /// the other services placed there.
    #[serde(default)]
    pub host: Option<String>,
    /// A cooperative admission gate in front of the CPUs: at most `c` of this
    /// service's tasks are on the CPUs at once, admitted in `kind` order; the
    /// others wait in the gate (the runtime's cooperative backend).
    #[serde(default)]
    pub admit: Option<AdmitSpec>,
    /// Heterogeneous instances: `groups = [{ first = 0, count = 8, scale = 2.0,
    /// weight = 0.5 }]` makes instances 0–7 take twice the service time and be
    /// picked half as often (a fan-out picks distinct instances by weight, as
    /// the fan-out handler does). `[load] utilization` stays nominal: it counts
    /// every task at the service's own `service_time`, whatever its instance.
    #[serde(default)]
    pub groups: Vec<InstanceGroupSpec>,
}

/// Instances `first .. first + count` of a service: `scale`× its service time, picked with `weight`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceGroupSpec {
    pub first: usize,
    pub count: usize,
    #[serde(default = "one_f64")]
    pub scale: f64,
    #[serde(default = "one_f64")]
    pub weight: f64,
}

impl InstanceGroupSpec {
    /// Valid as a placement entry (a stage's `weights_by_class`, the fan-out
    /// demo's `[[class]] placement`): at least one instance, within `instances`
    /// when known, a positive weight, and no `scale` (speeds belong to the
    /// service's `groups`).
    pub fn is_placement_within(&self, instances: Option<usize>) -> bool {
        self.count > 0
            && instances.is_none_or(|n| self.first + self.count <= n)
            && self.weight.is_finite()
            && self.weight > 0.0
            && self.scale == 1.0
    }
}

/// A machine whose CPUs are shared by the services placed on it; one policy
/// instance schedules all of their tasks (a node-wide scheduler, or Linux's).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    pub cores: usize,
    pub policy: PolicySpec,
    /// CPU time lost each time a preempted task is dispatched again.
    #[serde(default)]
    pub context_switch_us: f64,
}

/// `admit = { kind = "fifo", c = 2 }`: at most `c` admitted, in `kind` order.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdmitSpec {
    pub kind: AdmitOrder,
    pub c: usize,
}

/// The order in which a gate admits waiting tasks. Only non-preemptive
/// disciplines: a cooperative gate cannot take back an admission.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AdmitOrder {
    /// Local arrival order: a local FIFO pool of `c` workers.
    Fifo,
    /// GAT order: the oldest request first (TailClipper's ORF, cooperatively).
    Gfifo,
    /// Earliest deadline first.
    Edf,
    /// Strict class priority.
    Priq,
    Lifo,
}

impl AdmitOrder {
    /// The core policy that implements this order (built with `c` CPUs, its
    /// running set is the admitted set).
    pub fn policy(self) -> PolicySpec {
        match self {
            AdmitOrder::Fifo => PolicySpec::Fifo,
            AdmitOrder::Gfifo => PolicySpec::Gfifo,
            AdmitOrder::Edf => PolicySpec::Edf,
            AdmitOrder::Priq => PolicySpec::Priq,
            AdmitOrder::Lifo => PolicySpec::Lifo,
        }
    }
}

impl ServiceSpec {
    /// The policy written in the file, or the host's.
    pub fn effective_policy<'a>(&'a self, hosts: &'a [HostSpec]) -> Option<&'a PolicySpec> {
        match &self.host {
            Some(h) => hosts.iter().find(|x| &x.name == h).map(|x| &x.policy),
            None => self.policy.as_ref(),
        }
    }
}

fn one_usize() -> usize {
    1
}

/// One step of the call graph: `fanout` tasks sent to distinct instances of `service`.
/// The stage is done when its slowest task is (join); then its successors start.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub name: String,
    pub service: String,
    #[serde(default)]
    pub fanout: FanoutSpec,
    /// Per-class fan-outs, `fanout_by_class = { A = 1, B = 4, C = { values = [16, 32], weights = [1, 1] } }`:
    /// a query of a class named here fans out so, the others by `fanout`
    /// (TailGuard's testbed tied each class to one fan-out).
    #[serde(default)]
    pub fanout_by_class: std::collections::BTreeMap<String, FanoutSpec>,
    /// Per-class placement, `weights_by_class = { A = [{ first = 0, count = 8, weight = 12 }] }`:
    /// a query of a class named here picks its instances with these weights
    /// (instances not listed weigh 1) instead of the service's `groups` weights.
    /// TailGuard's testbed sent 80% of class A to one cluster of 8 of 32 nodes:
    /// weight 12 on those 8 is 96 of 120.
    #[serde(default)]
    pub weights_by_class: std::collections::BTreeMap<String, Vec<InstanceGroupSpec>>,
    /// Successors, each started independently with probability `p` (default 1:
    /// all of them, in parallel).
    #[serde(default)]
    pub next: Vec<EdgeSpec>,
    /// Successors of which exactly one is started, chosen by `p` (normalised).
    #[serde(default)]
    pub choose: Vec<EdgeSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeSpec {
    pub stage: String,
    #[serde(default = "one_f64")]
    pub p: f64,
}

/// One value per instance from `groups` (a later group overrides an earlier
/// one; 1 where none applies), e.g. `per_instance(&s.groups, s.instances, |g| g.scale)`.
pub fn per_instance(groups: &[InstanceGroupSpec], instances: usize, f: impl Fn(&InstanceGroupSpec) -> f64) -> Vec<f64> {
    let mut v = vec![1.0; instances];
    for g in groups {
        for x in v.iter_mut().skip(g.first).take(g.count) {
            *x = f(g);
        }
    }
    v
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

fn one_f64() -> f64 {
    1.0
}

/// How many tasks a stage sends: a number, or a table of values and weights
/// (`{ values = [1, 10, 100], weights = [100, 10, 1] }`, TailGuard's P(k) ∝ 1/k).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum FanoutSpec {
    Fixed(u32),
    Table(FanoutTable),
}

impl Default for FanoutSpec {
    fn default() -> Self {
        FanoutSpec::Fixed(1)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FanoutTable {
    pub values: Vec<u32>,
    pub weights: Vec<f64>,
}

/// An SLO class: requests are assigned to classes at random by `weight`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    pub name: String,
    #[serde(default = "one_f64")]
    pub weight: f64,
    /// The tail-latency SLO: the `percentile`-th percentile must be ≤ `slo_ms`.
    #[serde(default)]
    pub slo_ms: Option<f64>,
    #[serde(default = "default_percentile")]
    pub percentile: f64,
}

fn default_percentile() -> f64 {
    99.0
}

/// Task queuing deadlines.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeadlineSpec {
    #[serde(default)]
    pub mode: DeadlineMode,
    /// Load x_p^u(k) from a TailGuard `RUT_*` table (line k = x_99^u(k) in ms)
    /// instead of computing it from the service-time distribution.
    #[serde(default)]
    pub rut_file: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeadlineMode {
    /// No deadlines (edf then degenerates to fifo).
    #[default]
    None,
    /// t_D = t0 + SLO: T-EDFQ.
    Slo,
    /// t_D = t0 + SLO − x_p^u(k_f): TailGuard's TF-EDFQ.
    Tailguard,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSpec {
    /// Reject new requests while the task deadline-miss ratio exceeds this.
    pub r_th: f64,
    /// Time window: the outcomes of the last `window_ms` (TailGuard §III.C).
    #[serde(default)]
    pub window_ms: Option<f64>,
    /// Count window: the last `window_tasks` task outcomes (§IV.D: 100000, 1,000
    /// queries of fanout 100); a rejected request's tasks move it too. With both,
    /// whichever holds fewer. At least one must be given.
    #[serde(default)]
    pub window_tasks: Option<u64>,
    /// Also reject a request at once when one of its tasks would, at its class's SLO
    /// percentile, wait past its deadline behind the tasks already sent to the instance it
    /// picked (the query handler's `reject_late`). Needs one root stage and no in-flight cap.
    #[serde(default)]
    pub reject_late: bool,
}

/// Loads and policies to sweep. Each point is a full run with the scenario's seed.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Utilizations to run at (as `load.utilization`).
    #[serde(default)]
    pub utilization: Vec<f64>,
    /// Request rates to run at (as `load.rps`).
    #[serde(default)]
    pub rps: Vec<f64>,
    /// Policies to compare; each replaces the policy of every service. Empty: the file's own.
    #[serde(default)]
    pub policies: Vec<PolicySpec>,
}

/// Max load under SLO (TailGuard §IV): bisection on utilization per policy.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    #[serde(default)]
    pub policies: Vec<PolicySpec>,
    #[serde(default = "default_search_lo")]
    pub min_utilization: f64,
    #[serde(default = "default_search_hi")]
    pub max_utilization: f64,
    /// Stop when the bracket is narrower than this.
    #[serde(default = "default_search_tol")]
    pub tolerance: f64,
}

fn default_search_lo() -> f64 {
    0.02
}
fn default_search_hi() -> f64 {
    0.99
}
fn default_search_tol() -> f64 {
    0.005
}

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
