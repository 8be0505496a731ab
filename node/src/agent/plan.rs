//! Building the agent: each tier of the config resolved against the probed capabilities into
//! cgroup directories and the settings to write there (the plan), and the mechanisms each tier
//! gets. Nothing is changed yet; `start_enforcing` applies the plan.

use std::collections::{HashMap, HashSet};

use super::{Agent, Stats, Step, TierPlan};
use crate::config::{parse_cpu_list, NodeConfig, TierConfig, TierKind};
use crate::error::NodeError;
use crate::probe::{Capabilities, Role};

impl Agent {
    /// Resolves the config against the probed capabilities. Does not change anything yet.
    pub fn new(config: NodeConfig, caps: Capabilities) -> Result<Agent, NodeError> {
        let mut warnings = config.warnings(caps.online_cpus.len());
        if caps.hierarchies.iter().all(|h| h.role == Role::PsiOnly) {
            warnings.push("no cgroup cpu controller: tiers fall back to SCHED_IDLE only".into());
        }
        let mut plan = Vec::new();
        let mut tiers = Vec::new();
        let all_cpus = caps.online_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        let rt_of = |t: &TierConfig| -> u64 {
            // Pod tiers are tuned in the kubelet's cgroups, which have no RT budget: they
            // reserve none in ours.
            if !caps.rt_group || t.is_pod_tier() {
                return 0;
            }
            t.rt_runtime_us.unwrap_or(if t.kind == TierKind::Critical { 500_000 } else { 0 })
        };
        let rt_total: u64 = config.tiers.iter().map(rt_of).sum();
        let root_rt = caps
            .hierarchy(Role::V1Cpu)
            .and_then(|h| std::fs::read_to_string(h.root.join("cpu.rt_runtime_us")).ok())
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0);
        if rt_total > 0 && (root_rt >= 0 && rt_total as i64 > root_rt) {
            return Err(NodeError::Config(format!(
                "tiers ask for rt_runtime_us {rt_total} in total but the root cpu cgroup has {root_rt}; \
                 lower the tiers' rt_runtime_us"
            )));
        }
        let own_tiers = config.tiers.iter().any(|t| !t.is_pod_tier());
        for h in caps.hierarchies.iter().filter(|_| own_tiers) {
            let parent = h.root.join(&config.cgroup_name);
            plan.push(Step::CreateDir { path: parent.clone(), fallback_dir: h.root.clone(), rt_band_priority: None });
            match h.role {
                Role::V1Cpu if rt_total > 0 => {
                    plan.push(Step::Write { path: parent.join("cpu.rt_runtime_us"), value: rt_total.to_string() })
                }
                Role::V1Cpuset => {
                    let mems = std::fs::read_to_string(h.root.join("cpuset.mems")).unwrap_or_else(|_| "0".into());
                    plan.push(Step::Write { path: parent.join("cpuset.cpus"), value: all_cpus.clone() });
                    plan.push(Step::Write { path: parent.join("cpuset.mems"), value: mems.trim().to_string() });
                }
                Role::Unified => {
                    let mut controllers = vec!["cpu"];
                    if caps.cpuset {
                        controllers.push("cpuset");
                    }
                    let enable = controllers.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(" ");
                    plan.push(Step::Write { path: h.root.join("cgroup.subtree_control"), value: enable.clone() });
                    plan.push(Step::Write { path: parent.join("cgroup.subtree_control"), value: enable });
                }
                _ => {}
            }
        }
        for t in &config.tiers {
            let mut mechanisms = Vec::new();
            let mut dirs = Vec::new();
            let idle_wanted = t.idle.unwrap_or(t.kind == TierKind::BestEffort);
            let idle = idle_wanted && caps.cpu_idle;
            let sched_idle = t.sched_idle.unwrap_or(idle_wanted && !caps.cpu_idle);
            if idle_wanted && !caps.cpu_idle && !sched_idle {
                warnings.push(format!("tier {:?}: cpu.idle unavailable and sched_idle = false: no idle", t.name));
            }
            let weight = if idle {
                None
            } else {
                t.cpu_weight.or(match t.kind {
                    TierKind::Critical => Some(10_000),
                    TierKind::Normal => Some(100),
                    TierKind::BestEffort => None,
                })
            };
            let rt = rt_of(t);
            let mut rt_band_priority = t.rt_priority;
            let rt_band_unavailable = t.is_pod_tier() && caps.rt_group && rt_band_priority.is_some();
            if rt_band_unavailable {
                // The kubelet's pod cgroups have no RT budget to give, and this kernel gives
                // SCHED_RR only within one: protect with the weight alone, as `plan --pods`
                // sizes such nodes, rather than refuse the config every node gets.
                rt_band_priority = None;
                warnings.push(format!(
                    "tier {:?}: rt_priority {} not applied: this kernel schedules RT per cgroup (RT_GROUP_SCHED) and \
                     the kubelet's pod cgroups have no RT budget, so SCHED_RR would be refused; the tier keeps its \
                     weight{} (tailor_node_tier_rt_band_unavailable = 1). Fix, to silence this: leave rt_priority out \
                     on such nodes (`tailor node plan --pods` does)",
                    t.name,
                    t.rt_priority.unwrap_or_default(),
                    weight.map(|w| format!(" {w}")).unwrap_or_default(),
                ));
            }
            if rt_band_priority.is_some() && caps.rt_group && rt == 0 {
                return Err(NodeError::Config(format!(
                    "tier {:?}: rt_priority needs rt_runtime_us > 0 on this kernel (RT group scheduling)",
                    t.name
                )));
            }
            if rt_band_priority.is_some() && !caps.rt_group {
                let v2 = if caps.hierarchy(Role::Unified).is_some() {
                    " (cgroup v2 has no RT budget: a kernel built with RT_GROUP_SCHED refuses SCHED_RR in a \
                     non-root v2 cpu cgroup)"
                } else {
                    ""
                };
                warnings.push(format!(
                    "tier {:?}: no RT group scheduling: the SCHED_RR band is capped only by sched_rt_runtime_us{v2}",
                    t.name
                ));
            }
            if t.cpus.is_some() && !caps.cpuset {
                warnings.push(format!("tier {:?}: cpus requested but no cpuset controller: no fence", t.name));
            }
            let cpus = t
                .cpus
                .as_deref()
                .map(|c| parse_cpu_list(c).unwrap_or_default())
                .map(|l| l.into_iter().filter(|c| caps.online_cpus.contains(c)).collect::<Vec<_>>());
            if let Some(list) = &cpus {
                if list.is_empty() {
                    return Err(NodeError::Config(format!(
                        "tier {:?}: cpus {:?} names no online CPU (online: {:?}); a tier must keep at least one",
                        t.name, t.cpus, caps.online_cpus
                    )));
                }
            }
            let cpus_text = cpus.as_ref().map(|l| l.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","));
            let mut pod_settings = Vec::new();
            if t.is_pod_tier() {
                // In place, in the kubelet's pod cgroups: weight or idle (no RT budget: the
                // kubelet's parents have none to give, so its SCHED_RR band needs the root).
                for h in &caps.hierarchies {
                    let file = match (h.role, idle) {
                        (Role::V1Cpu | Role::Unified, true) => "cpu.idle",
                        (Role::V1Cpu, false) => "cpu.shares",
                        (Role::Unified, false) => "cpu.weight",
                        _ => continue,
                    };
                    let value = match (file, weight) {
                        ("cpu.idle", _) => "1".to_string(),
                        ("cpu.shares", Some(w)) => (w * 1024 / 100).clamp(2, 262_144).to_string(),
                        ("cpu.weight", Some(w)) => w.to_string(),
                        _ => continue,
                    };
                    pod_settings.push((h.clone(), file, value));
                }
                mechanisms.push("in place in the kubelet's pod cgroups".into());
            }
            for h in caps.hierarchies.iter().filter(|_| !t.is_pod_tier()) {
                let dir = h.root.join(&config.cgroup_name).join(&t.name);
                plan.push(Step::CreateDir { path: dir.clone(), fallback_dir: h.root.clone(), rt_band_priority });
                let mut write = |file: &str, value: String| plan.push(Step::Write { path: dir.join(file), value });
                match h.role {
                    Role::V1Cpu => {
                        if rt > 0 {
                            write("cpu.rt_runtime_us", rt.to_string());
                        }
                        if idle {
                            write("cpu.idle", "1".into());
                        } else if let Some(w) = weight {
                            write("cpu.shares", (w * 1024 / 100).clamp(2, 262_144).to_string());
                        }
                    }
                    Role::V1Cpuset => {
                        let mems = std::fs::read_to_string(h.root.join("cpuset.mems")).unwrap_or_else(|_| "0".into());
                        write("cpuset.cpus", cpus_text.clone().unwrap_or_else(|| all_cpus.clone()));
                        write("cpuset.mems", mems.trim().to_string());
                    }
                    Role::Unified => {
                        if idle {
                            write("cpu.idle", "1".into());
                        } else if let Some(w) = weight {
                            write("cpu.weight", w.to_string());
                        }
                        if let (Some(c), true) = (&cpus_text, caps.cpuset) {
                            write("cpuset.cpus", c.clone());
                        }
                    }
                    Role::PsiOnly => {}
                }
                dirs.push((h.clone(), dir));
            }
            if let (Some(c), true) = (&cpus_text, caps.cpuset) {
                mechanisms.push(format!("cpuset {c}"));
            }
            if idle {
                mechanisms.push("cpu.idle".into());
            }
            if sched_idle {
                mechanisms.push("SCHED_IDLE".into());
            }
            if let (Some(w), true) = (weight, caps.cpu_weight) {
                mechanisms.push(format!("weight {w}"));
            }
            if rt > 0 && !t.is_pod_tier() {
                mechanisms.push(format!("rt_runtime_us {rt}"));
            }
            if let Some(p) = rt_band_priority {
                mechanisms.push(format!("SCHED_RR {p}"));
            } else if rt_band_unavailable {
                mechanisms.push("no SCHED_RR band (RT_GROUP_SCHED: pod cgroups have no RT budget)".into());
            }
            if caps.psi_per_cgroup {
                mechanisms.push("PSI".into());
            }
            tiers.push(TierPlan {
                name: t.name.clone(),
                kind: t.kind,
                dirs,
                sched_idle,
                rt_band_priority,
                rt_band_unavailable,
                mechanisms,
                pods: t.pods.clone(),
                pod_settings,
            });
        }
        // SAFETY: getpid/getppid have no preconditions.
        let exclude = unsafe { [libc::getpid() as u32, libc::getppid() as u32] }.into_iter().collect();
        Ok(Agent {
            config,
            caps,
            tiers,
            plan,
            journal: None,
            cache: HashMap::new(),
            reported: HashSet::new(),
            exclude,
            pod_files: HashMap::new(),
            pod_processes: HashMap::new(),
            labels: HashMap::new(),
            stats: Stats::default(),
            warnings,
        })
    }
}
