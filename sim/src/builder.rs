//! Scenarios built in code: the same [`Scenario`] a TOML file parses into,
//! assembled with typed values (core's [`DistSpec`] and [`PolicySpec`]) and
//! checked by the same rules, so a program never writes TOML text to drive
//! the simulator. In the manner of nexosim's `SimInit`: add the parts, then
//! [`ScenarioBuilder::build`] validates and hands back what
//! [`crate::sweep::run_one`] and [`crate::model::Model::build`] take.
//!
//! ```
//! use tailor_core::dist::DistSpec;
//! use tailor_core::PolicySpec;
//! use tailor_sim::scenario::{LoadSpec, Scenario, ServiceSpec};
//!
//! let loaded = Scenario::builder("mm2")
//!     .seed(7)
//!     .requests(2_000)
//!     .load(LoadSpec::utilization(0.5))
//!     .service(ServiceSpec::new("web", PolicySpec::Fifo, DistSpec::Exp { mean_ms: 1.0 }).cores(2))
//!     .build()
//!     .expect("a valid scenario");
//! let run = tailor_sim::sweep::run_one(&loaded, &Default::default()).unwrap();
//! assert_eq!(run.summary.requests, 2_000);
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use tailor_core::dist::DistSpec;
use tailor_core::PolicySpec;

use crate::scenario::{
    AdmissionSpec, AdmitSpec, ArrivalSpec, ClassSpec, DeadlineMode, DeadlineSpec, EdgeSpec, FanoutSpec, HostSpec,
    InstanceGroupSpec, LoadSpec, LoadedScenario, NetworkSpec, NoiseSpec, Returns, Scenario, ScenarioError, SearchSpec,
    ServiceSpec, StageSpec, SweepSpec,
};

/// Assembles a [`Scenario`]; every field starts at the TOML front end's default.
#[derive(Clone, Debug)]
pub struct ScenarioBuilder {
    scenario: Scenario,
    base_dir: PathBuf,
}

impl Scenario {
    /// A scenario named `name` with the file defaults (seed 1, 100,000
    /// requests, no warm-up); give at least a load and a service.
    pub fn builder(name: impl Into<String>) -> ScenarioBuilder {
        ScenarioBuilder {
            scenario: Scenario {
                name: name.into(),
                description: String::new(),
                seed: 1,
                requests: 100_000,
                warmup: 0,
                load: LoadSpec { rps: None, utilization: None, arrival: ArrivalSpec::Poisson, in_flight_cap: None },
                network: None,
                noise: None,
                hosts: Vec::new(),
                services: Vec::new(),
                stages: Vec::new(),
                classes: Vec::new(),
                deadlines: DeadlineSpec::default(),
                admission: None,
                sweep: None,
                search: None,
            },
            base_dir: PathBuf::new(),
        }
    }
}

impl Scenario {
    /// The scenario as a file `tailor sim` reads back into the same scenario
    /// (for a user to keep or vary a scenario built in code).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

impl ScenarioBuilder {
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.scenario.description = text.into();
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.scenario.seed = seed;
        self
    }
    /// Requests measured per run.
    pub fn requests(mut self, n: u64) -> Self {
        self.scenario.requests = n;
        self
    }
    /// Requests simulated before measuring starts.
    pub fn warmup(mut self, n: u64) -> Self {
        self.scenario.warmup = n;
        self
    }
    pub fn load(mut self, load: LoadSpec) -> Self {
        self.scenario.load = load;
        self
    }
    /// The same delay distribution on every hop.
    pub fn network(mut self, delay: DistSpec, returns: Returns) -> Self {
        self.scenario.network = Some(NetworkSpec { delay, returns });
        self
    }
    pub fn noise(mut self, rate_per_sec: f64, duration: DistSpec) -> Self {
        self.scenario.noise = Some(NoiseSpec { rate_per_sec, duration });
        self
    }
    /// A machine whose CPUs the services placed on it (`ServiceSpec::on_host`) share.
    pub fn host(mut self, name: impl Into<String>, cores: usize, policy: PolicySpec, context_switch_us: f64) -> Self {
        self.scenario.hosts.push(HostSpec { name: name.into(), cores, policy, context_switch_us });
        self
    }
    pub fn service(mut self, service: ServiceSpec) -> Self {
        self.scenario.services.push(service);
        self
    }
    /// A step of the call graph; with none, requests go through the services in order.
    pub fn stage(mut self, stage: StageSpec) -> Self {
        self.scenario.stages.push(stage);
        self
    }
    pub fn class(mut self, class: ClassSpec) -> Self {
        self.scenario.classes.push(class);
        self
    }
    pub fn deadlines(mut self, mode: DeadlineMode) -> Self {
        self.scenario.deadlines.mode = mode;
        self
    }
    pub fn admission(mut self, admission: AdmissionSpec) -> Self {
        self.scenario.admission = Some(admission);
        self
    }
    pub fn sweep(mut self, sweep: SweepSpec) -> Self {
        self.scenario.sweep = Some(sweep);
        self
    }
    pub fn search(mut self, search: SearchSpec) -> Self {
        self.scenario.search = Some(search);
        self
    }
    /// Where relative paths in the scenario (empirical tables, traces) resolve; default: the working directory.
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = dir.into();
        self
    }

    /// Checks the scenario by the file's rules; the error lists every problem,
    /// under the label `<name> (built in code)`.
    pub fn build(self) -> Result<LoadedScenario, ScenarioError> {
        let label = PathBuf::from(format!("<{} (built in code)>", self.scenario.name));
        LoadedScenario::checked(self.scenario, label, self.base_dir)
    }
}

impl LoadedScenario {
    /// `scenario` if [`Scenario::problems`] finds none; `label` names it in messages.
    pub(crate) fn checked(scenario: Scenario, label: PathBuf, base_dir: PathBuf) -> Result<Self, ScenarioError> {
        let problems = scenario.problems();
        if !problems.is_empty() {
            return Err(ScenarioError::Invalid { file: label, problems });
        }
        Ok(LoadedScenario { scenario, path: label, base_dir })
    }
}

impl LoadSpec {
    /// `rps` requests per second, Poisson arrivals.
    pub fn rps(rps: f64) -> Self {
        LoadSpec { rps: Some(rps), utilization: None, arrival: ArrivalSpec::Poisson, in_flight_cap: None }
    }
    /// The rate at which the busiest service runs at utilization `u`, Poisson arrivals.
    pub fn utilization(u: f64) -> Self {
        LoadSpec { rps: None, utilization: Some(u), arrival: ArrivalSpec::Poisson, in_flight_cap: None }
    }
    pub fn arrival(mut self, arrival: ArrivalSpec) -> Self {
        self.arrival = arrival;
        self
    }
    pub fn in_flight_cap(mut self, cap: u64) -> Self {
        self.in_flight_cap = Some(cap);
        self
    }
}

impl ServiceSpec {
    /// One instance with one CPU of its own, scheduled by `policy`.
    pub fn new(name: impl Into<String>, policy: PolicySpec, service_time: DistSpec) -> Self {
        ServiceSpec {
            name: name.into(),
            cores: None,
            instances: 1,
            policy: Some(policy),
            service_time,
            context_switch_us: 0.0,
            host: None,
            admit: None,
            groups: Vec::new(),
        }
    }
    /// A service running on the CPUs of the builder's host `host`, under its policy.
    pub fn on_host(name: impl Into<String>, host: impl Into<String>, service_time: DistSpec) -> Self {
        ServiceSpec { policy: None, host: Some(host.into()), ..ServiceSpec::new(name, PolicySpec::Fifo, service_time) }
    }
    pub fn cores(mut self, cores: usize) -> Self {
        self.cores = Some(cores);
        self
    }
    pub fn instances(mut self, instances: usize) -> Self {
        self.instances = instances;
        self
    }
    pub fn context_switch_us(mut self, us: f64) -> Self {
        self.context_switch_us = us;
        self
    }
    /// A cooperative gate: at most `admit.c` of its tasks on the CPUs at once.
    pub fn admit(mut self, admit: AdmitSpec) -> Self {
        self.admit = Some(admit);
        self
    }
    /// Heterogeneous instances (speed and pick weight per group).
    pub fn groups(mut self, groups: Vec<InstanceGroupSpec>) -> Self {
        self.groups = groups;
        self
    }
}

impl StageSpec {
    /// One task to `service`, no successors.
    pub fn new(name: impl Into<String>, service: impl Into<String>) -> Self {
        StageSpec {
            name: name.into(),
            service: service.into(),
            fanout: FanoutSpec::default(),
            fanout_by_class: BTreeMap::new(),
            weights_by_class: BTreeMap::new(),
            next: Vec::new(),
            choose: Vec::new(),
        }
    }
    pub fn fanout(mut self, fanout: FanoutSpec) -> Self {
        self.fanout = fanout;
        self
    }
    /// Queries of `class` fan out by `fanout` instead.
    pub fn fanout_for(mut self, class: impl Into<String>, fanout: FanoutSpec) -> Self {
        self.fanout_by_class.insert(class.into(), fanout);
        self
    }
    /// Queries of `class` pick their instances with these weights.
    pub fn weights_for(mut self, class: impl Into<String>, weights: Vec<InstanceGroupSpec>) -> Self {
        self.weights_by_class.insert(class.into(), weights);
        self
    }
    /// A successor started with probability `p` (1: always).
    pub fn next(mut self, stage: impl Into<String>, p: f64) -> Self {
        self.next.push(EdgeSpec { stage: stage.into(), p });
        self
    }
    /// One of the `choose` successors, picked by `p`.
    pub fn choose(mut self, stage: impl Into<String>, p: f64) -> Self {
        self.choose.push(EdgeSpec { stage: stage.into(), p });
        self
    }
}

impl ClassSpec {
    /// A class of weight 1 without an SLO.
    pub fn new(name: impl Into<String>) -> Self {
        ClassSpec { name: name.into(), weight: 1.0, slo_ms: None, percentile: 99.0 }
    }
    pub fn weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }
    /// The `percentile`-th percentile must be ≤ `slo_ms`.
    pub fn slo(mut self, slo_ms: f64, percentile: f64) -> Self {
        self.slo_ms = Some(slo_ms);
        self.percentile = percentile;
        self
    }
}

impl Default for SearchSpec {
    /// The file's defaults: utilization 0.02 to 0.99, tolerance 0.005, the scenario's own policies.
    fn default() -> Self {
        SearchSpec { policies: Vec::new(), min_utilization: 0.02, max_utilization: 0.99, tolerance: 0.005 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_built_scenario_equals_its_toml_twin() {
        let text = r#"
name = "twin"
seed = 5
requests = 3000
warmup = 300
[load]
utilization = 0.6
[[service]]
name = "front"
cores = 2
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1.0 }
[[service]]
name = "back"
instances = 4
policy = { kind = "edf" }
service_time = { kind = "fixed", value_ms = 0.5 }
[[stage]]
name = "a"
service = "front"
next = [{ stage = "b" }]
[[stage]]
name = "b"
service = "back"
fanout = 3
[[class]]
name = "gold"
weight = 2.0
slo_ms = 8.0
[[class]]
name = "bronze"
slo_ms = 20.0
percentile = 95.0
[deadlines]
mode = "slo"
"#;
        let from_toml = Scenario::from_toml(text, Path::new("twin.toml")).unwrap();
        let built = Scenario::builder("twin")
            .seed(5)
            .requests(3000)
            .warmup(300)
            .load(LoadSpec::utilization(0.6))
            .service(ServiceSpec::new("front", PolicySpec::Fifo, DistSpec::Exp { mean_ms: 1.0 }).cores(2))
            .service(ServiceSpec::new("back", PolicySpec::Edf, DistSpec::Fixed { value_ms: 0.5 }).instances(4))
            .stage(StageSpec::new("a", "front").next("b", 1.0))
            .stage(StageSpec::new("b", "back").fanout(FanoutSpec::Fixed(3)))
            .class(ClassSpec::new("gold").weight(2.0).slo(8.0, 99.0))
            .class(ClassSpec::new("bronze").slo(20.0, 95.0))
            .deadlines(DeadlineMode::Slo)
            .build()
            .unwrap();
        let run = |l: &LoadedScenario| {
            serde_json::to_string(&crate::sweep::run_one(l, &Default::default()).unwrap().summary).unwrap()
        };
        assert_eq!(run(&from_toml), run(&built));
        // Written out, it reads back into the same scenario.
        let text = built.scenario.to_toml().unwrap();
        let back = Scenario::from_toml(&text, Path::new("back.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(run(&back), run(&built));
    }

    #[test]
    fn a_bad_built_scenario_lists_its_problems() {
        let e = Scenario::builder("bad")
            .load(LoadSpec::rps(-1.0))
            .service(ServiceSpec::on_host("x", "nowhere", DistSpec::Exp { mean_ms: 1.0 }))
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("<bad (built in code)>") && e.contains("rps = -1") && e.contains("nowhere"), "{e}");
    }
}

/// The "In code" example of `docs/scenarios.md`, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../docs/scenarios.md")]
pub struct ScenariosDocExample;
