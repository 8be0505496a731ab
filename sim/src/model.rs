//! The simulator's compiled view of a scenario: distributions built, names
//! resolved to indices, load converted to an arrival rate, deadline budgets
//! precomputed. Building a model is where every file the scenario names is read.

use std::collections::HashMap;
use std::path::Path;

use tailor_core::dist::{Cdf, Dist, DistSpec, Scaled};
use tailor_core::tailguard::{AdmissionController, AdmissionWindow, Planner, RefusedTasks, WorstCaseMax};
use tailor_core::time::{from_micros_f64, from_millis_f64, NANOS_PER_SEC};
use tailor_core::{Nanos, PolicySpec};

use crate::scenario::{ArrivalSpec, DeadlineMode, FanoutSpec, LoadedScenario, Returns, Scenario};

/// A service with its nodes' parameters.
#[derive(Clone, Debug)]
pub struct ServiceModel {
    pub name: String,
    /// CPUs of each of its nodes (the host's, on a shared host).
    pub cores: usize,
    pub instances: usize,
    /// The policy that schedules its tasks (the host's, on a shared host).
    pub policy: PolicySpec,
    pub service_time: Dist,
    pub context_switch: Nanos,
    /// Index of this service's first node; its instances are consecutive.
    /// Services on one host share its node.
    pub first_node: usize,
    /// Cooperative admission gate: (order, at most this many admitted, delay from a
    /// waiting task's admission to its arrival on the CPUs).
    pub admit: Option<(PolicySpec, usize, Nanos)>,
    /// Per instance, the factor on `service_time` (empty: all 1).
    pub instance_scale: Vec<f64>,
    /// Per instance, the weight a fan-out picks it with (empty: uniform).
    pub instance_weight: Vec<f64>,
}

/// A set of CPUs scheduled by one policy instance: a service instance's own
/// node, or a host shared by several services.
#[derive(Clone, Debug)]
pub struct NodeModel {
    pub cores: usize,
    pub policy: PolicySpec,
    pub context_switch: Nanos,
}

/// How many tasks a stage sends.
#[derive(Clone, Debug)]
pub enum Fanout {
    Fixed(u32),
    /// Values with cumulative normalised weights.
    Table {
        values: Vec<u32>,
        cumulative: Vec<f64>,
    },
}

impl StageModel {
    /// The fan-out of a query of class `class` at this stage.
    #[inline]
    pub fn fanout_of(&self, class: u8) -> &Fanout {
        self.class_fanout.get(class as usize).unwrap_or(&self.fanout)
    }

    /// Mean tasks per activation over the classes (`class_share[c]`: probability of class c).
    pub fn mean_fanout(&self, class_share: &[f64]) -> f64 {
        if self.class_fanout.is_empty() {
            return self.fanout.mean();
        }
        self.class_fanout.iter().zip(class_share).map(|(f, p)| p * f.mean()).sum()
    }
}

impl Fanout {
    fn from_spec(spec: &FanoutSpec) -> Fanout {
        match spec {
            FanoutSpec::Fixed(k) => Fanout::Fixed(*k),
            FanoutSpec::Table(t) => Fanout::Table { values: t.values.clone(), cumulative: cumulative(&t.weights) },
        }
    }

    pub fn mean(&self) -> f64 {
        match self {
            Fanout::Fixed(k) => *k as f64,
            Fanout::Table { values, cumulative } => {
                let mut prev = 0.0;
                values
                    .iter()
                    .zip(cumulative)
                    .map(|(&v, &c)| {
                        let w = c - prev;
                        prev = c;
                        v as f64 * w
                    })
                    .sum()
            }
        }
    }

    pub fn values(&self) -> Vec<u32> {
        match self {
            Fanout::Fixed(k) => vec![*k],
            Fanout::Table { values, .. } => values.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct StageModel {
    pub name: String,
    pub service: usize,
    pub fanout: Fanout,
    /// Per class index, the fan-out of that class's queries (empty: every class uses `fanout`).
    pub class_fanout: Vec<Fanout>,
    /// Per class index, the instance weights that class's queries pick by
    /// (empty: none differ, every class picks by the service's weights; an
    /// empty entry: that class does).
    pub class_weights: Vec<Vec<f64>>,
    /// Independent successors: (stage, probability).
    pub next: Vec<(usize, f64)>,
    /// Exclusive successors: (stage, cumulative normalised probability).
    pub choose: Vec<(usize, f64)>,
}

#[derive(Clone, Debug)]
pub struct ClassModel {
    pub name: String,
    pub cumulative_weight: f64,
    pub slo: Option<Nanos>,
    pub percentile: f64,
}

/// Arrival process, with gaps in ns.
#[derive(Clone, Debug)]
pub enum ArrivalModel {
    Poisson {
        mean_gap: f64,
    },
    Deterministic {
        gap: f64,
    },
    /// Pareto gaps with scale `xm` and shape `alpha` (mean xm·α/(α−1)).
    Pareto {
        xm: f64,
        alpha: f64,
    },
    /// Replayed gaps, multiplied by `scale`.
    Trace {
        gaps: Vec<Nanos>,
        scale: f64,
    },
    /// Gaps from a distribution, multiplied by `scale`.
    Gaps {
        dist: Dist,
        scale: f64,
    },
}

#[derive(Clone, Debug)]
pub struct Model {
    pub name: String,
    pub seed: u64,
    pub requests: u64,
    pub warmup: u64,
    pub services: Vec<ServiceModel>,
    pub stages: Vec<StageModel>,
    /// Stages started when a request enters.
    pub roots: Vec<usize>,
    pub classes: Vec<ClassModel>,
    pub arrival: ArrivalModel,
    /// Offered request rate (per second) and the busiest service's utilization.
    pub rps: f64,
    pub utilization: f64,
    pub in_flight_cap: Option<u64>,
    pub network: Option<Dist>,
    /// Whether answers return per task or once per request (`[network] returns`).
    pub returns: Returns,
    /// (interrupts per ns per CPU, duration).
    pub noise: Option<(f64, Dist)>,
    pub deadline_mode: DeadlineMode,
    /// Queuing budgets: the deadline of a task is its stage's start + budget.
    pub budgets: Budgets,
    /// (class, stage, fanout) whose SLO is below the unloaded tail: infeasible.
    pub infeasible: Vec<(u8, usize, u32)>,
    /// Per service, its instances' own unloaded CDFs when they differ (`groups`
    /// scales) and deadlines are TailGuard's from the distribution: a task's
    /// budget is then Eq. 1 over the instances its query actually picked
    /// ([`Model::placement_budget`]), not the table's k slowest.
    pub instance_cdfs: Vec<Vec<Scaled>>,
    /// `[admission]`: TailGuard's query admission control.
    pub admission: Option<AdmissionModel>,
    /// `[admission] reject_late`: turn a request away when a root task would wait past its deadline.
    pub reject_late: bool,
    /// Every node: service instances with CPUs of their own, then hosts.
    pub nodes: Vec<NodeModel>,
}

/// `[admission]` compiled: the controller's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionModel {
    pub r_th: f64,
    pub window: AdmissionWindow,
    pub refused: RefusedTasks,
    pub proportional: bool,
    pub min_tasks: u64,
    /// Admit/reject phases the controller keeps for [`crate::engine::RunStats::admission_phases`]
    /// (instrumentation for tests; never set from a scenario, 0: none).
    pub phase_log: usize,
}

impl AdmissionModel {
    /// The controller these parameters describe.
    pub fn controller(&self) -> Result<AdmissionController, tailor_core::tailguard::AdmissionError> {
        let c = AdmissionController::with_window(self.r_th, self.window)?
            .with_refused_tasks(self.refused)
            .with_min_tasks(self.min_tasks)
            .with_phase_log(self.phase_log);
        Ok(if self.proportional { c.with_proportional() } else { c })
    }
}

/// Which load to run at, overriding the file's `[load]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadOverride {
    Rps(f64),
    Utilization(f64),
}

/// What to change in a scenario for one run of a sweep or search.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub load: Option<LoadOverride>,
    pub policy: Option<PolicySpec>,
    pub requests: Option<u64>,
    pub warmup: Option<u64>,
    pub seed: Option<u64>,
}

/// Why a scenario could not be compiled into a model (files it names, mostly).
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ModelError {
    pub file: String,
    pub message: String,
}

fn model_err(file: &Path, message: impl Into<String>) -> ModelError {
    ModelError { file: file.display().to_string(), message: message.into() }
}

impl Model {
    pub fn build(loaded: &LoadedScenario, ov: &Overrides) -> Result<Model, ModelError> {
        let sc: &Scenario = &loaded.scenario;
        let file = &loaded.path;
        let base = &loaded.base_dir;
        let build_dist = |what: &str, d: &DistSpec| -> Result<Dist, ModelError> {
            d.build(base).map_err(|e| model_err(file, format!("{what}: {e}")))
        };

        // Nodes: each instance of a service with CPUs of its own, then one per host.
        let mut nodes = Vec::new();
        let mut first_node = Vec::with_capacity(sc.services.len());
        for s in &sc.services {
            first_node.push(nodes.len());
            if s.host.is_none() {
                let policy = ov.policy.clone().or_else(|| s.policy.clone()).expect("validated: policy without host");
                let node = NodeModel {
                    cores: s.cores.unwrap_or(1),
                    policy,
                    context_switch: from_micros_f64(s.context_switch_us),
                };
                nodes.extend(std::iter::repeat_n(node, s.instances));
            }
        }
        let mut host_node = HashMap::new();
        for h in &sc.hosts {
            host_node.insert(h.name.as_str(), nodes.len());
            nodes.push(NodeModel {
                cores: h.cores,
                policy: ov.policy.clone().unwrap_or_else(|| h.policy.clone()),
                context_switch: from_micros_f64(h.context_switch_us),
            });
        }
        let mut services = Vec::with_capacity(sc.services.len());
        for (i, s) in sc.services.iter().enumerate() {
            let first = match &s.host {
                Some(h) => host_node[h.as_str()],
                None => first_node[i],
            };
            let node = &nodes[first];
            services.push(ServiceModel {
                name: s.name.clone(),
                cores: node.cores,
                instances: s.instances,
                policy: node.policy.clone(),
                service_time: build_dist(&format!("service {:?} service_time", s.name), &s.service_time)?,
                context_switch: node.context_switch,
                first_node: first,
                admit: s.admit.map(|a| (a.kind.policy(), a.c, from_micros_f64(a.handoff_us))),
                instance_scale: per_instance(s, |g| g.scale),
                instance_weight: per_instance(s, |g| g.weight),
            });
        }

        let service_idx: HashMap<&str, usize> =
            sc.services.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
        let (stages, roots) = if sc.stages.is_empty() {
            // The default call graph: a chain through the services in file order.
            let n = sc.services.len();
            let stages = (0..n)
                .map(|i| StageModel {
                    name: sc.services[i].name.clone(),
                    service: i,
                    fanout: Fanout::Fixed(1),
                    class_fanout: vec![],
                    class_weights: vec![],
                    next: if i + 1 < n { vec![(i + 1, 1.0)] } else { vec![] },
                    choose: vec![],
                })
                .collect();
            (stages, vec![0])
        } else {
            let stage_idx: HashMap<&str, usize> =
                sc.stages.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
            let mut has_parent = vec![false; sc.stages.len()];
            let stages: Vec<StageModel> = sc
                .stages
                .iter()
                .map(|st| {
                    let fanout = Fanout::from_spec(&st.fanout);
                    // Validated: every key names a declared class.
                    let class_fanout: Vec<Fanout> = if st.fanout_by_class.is_empty() {
                        vec![]
                    } else {
                        sc.classes
                            .iter()
                            .map(|c| st.fanout_by_class.get(&c.name).map_or_else(|| fanout.clone(), Fanout::from_spec))
                            .collect()
                    };
                    let instances = sc.services.iter().find(|s| s.name == st.service).map_or(0, |s| s.instances);
                    let class_weights: Vec<Vec<f64>> = if st.weights_by_class.is_empty() {
                        vec![]
                    } else {
                        sc.classes
                            .iter()
                            .map(|c| {
                                st.weights_by_class.get(&c.name).map_or_else(Vec::new, |w| {
                                    crate::scenario::per_instance(w, instances, |g| g.weight)
                                })
                            })
                            .collect()
                    };
                    let next: Vec<(usize, f64)> = st.next.iter().map(|e| (stage_idx[e.stage.as_str()], e.p)).collect();
                    let weights: Vec<f64> = st.choose.iter().map(|e| e.p).collect();
                    let choose: Vec<(usize, f64)> =
                        st.choose.iter().map(|e| stage_idx[e.stage.as_str()]).zip(cumulative(&weights)).collect();
                    for &(j, _) in next.iter().chain(&choose) {
                        has_parent[j] = true;
                    }
                    StageModel {
                        name: st.name.clone(),
                        service: service_idx[st.service.as_str()],
                        fanout,
                        class_fanout,
                        class_weights,
                        next,
                        choose,
                    }
                })
                .collect();
            let roots = (0..stages.len()).filter(|&i| !has_parent[i]).collect();
            (stages, roots)
        };

        let classes = if sc.classes.is_empty() {
            vec![ClassModel { name: "all".into(), cumulative_weight: 1.0, slo: None, percentile: 99.0 }]
        } else {
            let cum = cumulative(&sc.classes.iter().map(|c| c.weight).collect::<Vec<_>>());
            sc.classes
                .iter()
                .zip(cum)
                .map(|(c, w)| ClassModel {
                    name: c.name.clone(),
                    cumulative_weight: w,
                    slo: c.slo_ms.map(from_millis_f64),
                    percentile: c.percentile,
                })
                .collect()
        };

        // Load: λ from rps, or from the utilization of the busiest service.
        let visits = expected_visits(&stages, &roots, services.len(), &class_shares(&classes));
        // Work per request per CPU of each node group: a service's own nodes,
        // or a host with everything placed on it.
        let mut work_at_node = vec![0.0f64; nodes.len()];
        for (i, s) in services.iter().enumerate() {
            work_at_node[s.first_node] += visits[i] * s.service_time.mean_ns() / (s.instances * s.cores) as f64;
        }
        let work_per_request_per_core = work_at_node.iter().copied().fold(0.0f64, f64::max);
        let load = ov.load.or(match (sc.load.rps, sc.load.utilization) {
            (Some(r), _) => Some(LoadOverride::Rps(r)),
            (_, Some(u)) => Some(LoadOverride::Utilization(u)),
            _ => None,
        });
        let trace_gaps = match &sc.load.arrival {
            ArrivalSpec::Trace { file: f } => Some(read_trace(&base.join(f))?),
            _ => None,
        };
        let rps = match load {
            Some(LoadOverride::Rps(r)) => r,
            Some(LoadOverride::Utilization(u)) => u / work_per_request_per_core * NANOS_PER_SEC as f64,
            None => match &trace_gaps {
                Some(g) => NANOS_PER_SEC as f64 / (g.iter().sum::<Nanos>() as f64 / g.len() as f64).max(1.0),
                None => return Err(model_err(file, "[load]: give `rps` or `utilization`")),
            },
        };
        let utilization = rps / NANOS_PER_SEC as f64 * work_per_request_per_core;
        let mean_gap = NANOS_PER_SEC as f64 / rps;
        let arrival = match &sc.load.arrival {
            ArrivalSpec::Poisson => ArrivalModel::Poisson { mean_gap },
            ArrivalSpec::Deterministic => ArrivalModel::Deterministic { gap: mean_gap },
            ArrivalSpec::Pareto { alpha } => {
                ArrivalModel::Pareto { xm: mean_gap * (alpha - 1.0) / alpha, alpha: *alpha }
            }
            ArrivalSpec::Gaps { dist } => {
                let dist = build_dist("[load.arrival] dist", dist)?;
                let scale = mean_gap / dist.mean_ns().max(1e-9);
                ArrivalModel::Gaps { dist, scale }
            }
            ArrivalSpec::Trace { .. } => {
                let gaps = trace_gaps.unwrap();
                let native = gaps.iter().sum::<Nanos>() as f64 / gaps.len() as f64;
                ArrivalModel::Trace { gaps, scale: if native > 0.0 { mean_gap / native } else { 1.0 } }
            }
        };

        let network = sc.network.as_ref().map(|n| build_dist("[network] delay", &n.delay)).transpose()?;
        let noise = match &sc.noise {
            Some(n) if n.rate_per_sec > 0.0 => {
                Some((n.rate_per_sec / NANOS_PER_SEC as f64, build_dist("[noise] duration", &n.duration)?))
            }
            _ => None,
        };

        let mut model = Model {
            name: sc.name.clone(),
            seed: ov.seed.unwrap_or(sc.seed),
            requests: ov.requests.unwrap_or(sc.requests),
            warmup: ov.warmup.unwrap_or(sc.warmup),
            services,
            stages,
            roots,
            classes,
            arrival,
            rps,
            utilization,
            in_flight_cap: sc.load.in_flight_cap,
            network,
            returns: sc.network.as_ref().map_or(Returns::PerRequest, |n| n.returns),
            noise,
            deadline_mode: sc.deadlines.mode,
            budgets: Budgets::default(),
            infeasible: Vec::new(),
            instance_cdfs: Vec::new(),
            admission: sc.admission.as_ref().map(|a| {
                let window = match (a.window_tasks, a.window_ms) {
                    (Some(n), Some(ms)) => AdmissionWindow::OutcomesWithin(n, from_millis_f64(ms).max(1)),
                    (Some(n), None) => AdmissionWindow::Outcomes(n),
                    (None, ms) => AdmissionWindow::Time(from_millis_f64(ms.unwrap_or(0.0)).max(1)),
                };
                AdmissionModel {
                    r_th: a.r_th,
                    window,
                    refused: a.refused.tasks(),
                    proportional: a.proportional,
                    min_tasks: a.min_tasks,
                    phase_log: 0,
                }
            }),
            reject_late: sc.admission.as_ref().is_some_and(|a| a.reject_late),
            nodes,
        };
        if model.reject_late && (model.roots.len() != 1 || model.in_flight_cap.is_some()) {
            return Err(model_err(
                file,
                "[admission] reject_late checks a request's tasks when it arrives: it needs exactly one root stage and no [load] in_flight_cap",
            ));
        }
        model.plan_budgets(sc.deadlines.rut_file.as_ref().map(|f| base.join(f)).as_deref(), file)?;
        Ok(model)
    }

    /// Precomputes the queuing budget of every (class, stage, fanout).
    ///
    /// `slo` mode (T-EDFQ): budget = SLO. `tailguard` mode (TF-EDFQ): budget =
    /// SLO − x_p^u(k), x_p^u from the stage's service-time distribution by the
    /// product formula (Eq. 1–2) or from a RUT table. A request whose call graph
    /// has several stages splits the budget; today each stage gets the whole
    /// budget of the request (single-query requests, as in TailGuard §IV).
    fn plan_budgets(&mut self, rut: Option<&Path>, file: &Path) -> Result<(), ModelError> {
        if self.deadline_mode == DeadlineMode::None {
            return Ok(());
        }
        let rut_table = match rut {
            Some(p) => Some(tailor_core::tailguard::read_rut_table(p).map_err(|e| model_err(file, e.to_string()))?),
            None => None,
        };
        // Heterogeneous instances: one CDF each, the service's stretched by the
        // instance's scale, and x_p^u(k) for the k slowest-at-t of them, as the
        // fan-out handler's planner computes it from per-server offline CDFs.
        let per_instance: Vec<Vec<Scaled>> = self
            .services
            .iter()
            .map(|svc| {
                svc.instance_scale.iter().map(|&factor| Scaled { dist: svc.service_time.clone(), factor }).collect()
            })
            .collect();
        if self.deadline_mode == DeadlineMode::Tailguard && rut_table.is_none() {
            self.instance_cdfs = per_instance.clone();
        }
        for (ci, class) in self.classes.iter().enumerate() {
            let Some(slo) = class.slo else { continue };
            for (si, stage) in self.stages.iter().enumerate() {
                let dist = &self.services[stage.service].service_time;
                let instances = &per_instance[stage.service];
                for k in stage.fanout_of(ci as u8).values() {
                    let budget = match self.deadline_mode {
                        DeadlineMode::Slo => slo,
                        DeadlineMode::Tailguard => {
                            let unloaded = match &rut_table {
                                Some(t) => t.get(k as usize - 1).copied().ok_or_else(|| {
                                    model_err(
                                        file,
                                        format!(
                                            "[deadlines] rut_file has {} lines, fanout {k} needs line {k}",
                                            t.len()
                                        ),
                                    )
                                })?,
                                None if instances.is_empty() => {
                                    Planner::unloaded_quantile_homogeneous(dist, k, class.percentile / 100.0)
                                }
                                None => WorstCaseMax { servers: instances, k }.quantile(class.percentile / 100.0),
                            };
                            if unloaded >= slo {
                                self.infeasible.push((ci as u8, si, k));
                            }
                            slo.saturating_sub(unloaded)
                        }
                        DeadlineMode::None => unreachable!(),
                    };
                    self.budgets.insert(ci as u8, si, k, budget, self.stages.len());
                }
            }
        }
        Ok(())
    }
}

impl Model {
    /// The TF-EDFQ budget of a task of `class` whose query went to exactly
    /// `instances` of `service`: SLO − x_p^u over those instances' own CDFs
    /// (TailGuard Eq. 1–2 with the query's own n(k)), saturating at 0.
    /// `None` when the service's instances are alike or deadlines are not
    /// planned from the distribution: then [`Budgets::get`] is exact already.
    pub fn placement_budget(&self, class: u8, service: usize, instances: &[u32]) -> Option<Nanos> {
        let cdfs = self.instance_cdfs.get(service).filter(|c| !c.is_empty())?;
        let c = self.classes.get(class as usize)?;
        let slo = c.slo?;
        let chosen: Vec<&Scaled> = instances.iter().map(|&i| &cdfs[i as usize]).collect();
        Some(slo.saturating_sub(tailor_core::tailguard::unloaded_quantile(&chosen, c.percentile / 100.0)))
    }
}

/// Budget per (class, stage, fanout), looked up on every stage activation, so a
/// flat table indexed by class and stage with a short list of fanouts: no hashing.
#[derive(Clone, Debug, Default)]
pub struct Budgets {
    stages: usize,
    /// Index class · stages + stage → (fanout, budget) pairs.
    table: Vec<Vec<(u32, Nanos)>>,
}

impl Budgets {
    fn insert(&mut self, class: u8, stage: usize, fanout: u32, budget: Nanos, stages: usize) {
        self.stages = stages;
        let i = class as usize * stages + stage;
        if self.table.len() <= i {
            self.table.resize(i + 1, Vec::new());
        }
        self.table[i].push((fanout, budget));
    }

    /// The budget, or `None` without deadlines for this class.
    #[inline]
    pub fn get(&self, class: u8, stage: usize, fanout: u32) -> Option<Nanos> {
        if self.table.is_empty() {
            return None;
        }
        let row = self.table.get(class as usize * self.stages + stage)?;
        row.iter().find(|&&(k, _)| k == fanout).map(|&(_, b)| b)
    }
}

fn cumulative(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let mut out: Vec<f64> = weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect();
    if let Some(last) = out.last_mut() {
        *last = 1.0; // no rounding gap at the top
    }
    out
}

/// Each class's probability, from the cumulative weights.
pub fn class_shares(classes: &[ClassModel]) -> Vec<f64> {
    let mut prev = 0.0;
    classes
        .iter()
        .map(|c| {
            let p = c.cumulative_weight - prev;
            prev = c.cumulative_weight;
            p
        })
        .collect()
}

/// Expected tasks per request at each service (tree semantics: each activation
/// of a stage starts its successors independently), over the classes
/// (`class_share`, [`class_shares`]) where a stage's fan-out depends on the class.
pub fn expected_visits(stages: &[StageModel], roots: &[usize], services: usize, class_share: &[f64]) -> Vec<f64> {
    let mut activations = vec![0.0; stages.len()];
    for &r in roots {
        activations[r] += 1.0;
    }
    // Propagate in topological order (the graph is a validated DAG).
    for i in topological_order(stages) {
        let a = activations[i];
        let st = &stages[i];
        for &(j, p) in &st.next {
            activations[j] += a * p;
        }
        let mut prev = 0.0;
        for &(j, c) in &st.choose {
            activations[j] += a * (c - prev);
            prev = c;
        }
    }
    let mut visits = vec![0.0; services];
    for (i, st) in stages.iter().enumerate() {
        visits[st.service] += activations[i] * st.mean_fanout(class_share);
    }
    visits
}

/// One value per instance from the service's `groups`
/// ([`crate::scenario::per_instance`]); empty when every instance has 1, the common case.
fn per_instance(s: &crate::scenario::ServiceSpec, f: impl Fn(&crate::scenario::InstanceGroupSpec) -> f64) -> Vec<f64> {
    let v = crate::scenario::per_instance(&s.groups, s.instances, f);
    if v.iter().all(|&x| x == 1.0) {
        Vec::new()
    } else {
        v
    }
}

fn topological_order(stages: &[StageModel]) -> Vec<usize> {
    let mut indeg = vec![0usize; stages.len()];
    for st in stages {
        for &(j, _) in st.next.iter().chain(&st.choose) {
            indeg[j] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..stages.len()).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(stages.len());
    while let Some(i) = ready.pop() {
        order.push(i);
        for &(j, _) in stages[i].next.iter().chain(&stages[i].choose) {
            indeg[j] -= 1;
            if indeg[j] == 0 {
                ready.push(j);
            }
        }
    }
    order
}

/// Reads a trace CSV with an `arrival_ms` column of ascending times; returns the gaps.
fn read_trace(path: &Path) -> Result<Vec<Nanos>, ModelError> {
    let ms = crate::trace::read_arrival_ms(path).map_err(|e| model_err(path, e.to_string()))?;
    let times: Vec<Nanos> = ms.into_iter().map(from_millis_f64).collect();
    if times.len() < 2 {
        return Err(model_err(path, "a trace needs at least two arrivals"));
    }
    let gaps: Vec<Nanos> = times.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.iter().all(|&g| g == 0) {
        return Err(model_err(path, "all arrivals at the same instant; the trace has no rate"));
    }
    Ok(gaps)
}
