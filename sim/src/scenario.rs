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

mod load;
pub use load::{LoadedScenario, ScenarioError};

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
    /// `handoff_us = 40`: a task that waited in the gate reaches the CPUs this long after
    /// the task that freed its slot admitted it, holding the slot meanwhile. The
    /// runtime's gate parks a waiting thread and the freeing one unparks it: a wake-up,
    /// often across CPUs, that costs time but no CPU of the jobs (`tailor demo` measures
    /// it per run; docs/demo.md). 0 (the default): admission is instant.
    #[serde(default, skip_serializing_if = "is_default")]
    pub handoff_us: f64,
}

impl AdmitSpec {
    /// A gate admitting `c` in `kind` order, with instant admission.
    pub fn new(kind: AdmitOrder, c: usize) -> AdmitSpec {
        AdmitSpec { kind, c, handoff_us: 0.0 }
    }
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
    /// What a refused request's tasks are in a count window: `"no_outcome"` (slots that
    /// move the window, the ratio over admitted tasks), `"on_time"` (the ratio over offered
    /// tasks) or `"ignored"` (only outcomes move the window).
    #[serde(default, skip_serializing_if = "is_default")]
    pub refused: RefusedSpec,
    /// Admit the share R_th / ratio of the requests while the ratio exceeds R_th, instead of none.
    #[serde(default, skip_serializing_if = "is_default")]
    pub proportional: bool,
    /// Never reject on fewer task outcomes than this in the window (default 0).
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_tasks: u64,
}

/// `[admission] refused`: see [`AdmissionSpec::refused`].
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RefusedSpec {
    #[default]
    NoOutcome,
    OnTime,
    Ignored,
}

impl RefusedSpec {
    pub fn tasks(self) -> tailor_core::tailguard::RefusedTasks {
        use tailor_core::tailguard::RefusedTasks;
        match self {
            RefusedSpec::NoOutcome => RefusedTasks::NoOutcome,
            RefusedSpec::OnTime => RefusedTasks::OnTime,
            RefusedSpec::Ignored => RefusedTasks::Ignored,
        }
    }
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
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
