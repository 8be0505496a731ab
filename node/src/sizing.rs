//! Defaults sized to the node: which mechanisms protect the critical tier, chosen from the
//! node's physical cores and the critical tier's CPU demand, with the reason.
//!
//! Temper's rule (seed 002): confinement helps only while critical demand fits within the
//! physical cores minus one. We fence (cpuset) only where that holds *and* the fence leaves the
//! critical tier at least [`MIN_FENCED_CORES`] cores: a one-core fence serialises every critical
//! thread (the server's, the kernel's softirq work for its sockets, the GAT agent) on one CPU,
//! so a burst queues behind itself. Measured on this project's 2-CPU VM with a real server
//! (redis-server under spinners): the one-CPU fence of the old `tailor node example` made p99 under 2 spinners
//! worse than stock Linux. Everywhere else the critical tier is protected without a fence: an
//! RT band (SCHED_RR, capped by its RT budget, so a wake-up preempts CFS work at once), the top
//! CPU weight, and `cpu.idle` (or SCHED_IDLE) for best-effort work, which then only gets CPU
//! the others leave idle.

use crate::probe::Capabilities;

/// The fewest cores a fence may leave the critical tier (see the module doc).
pub const MIN_FENCED_CORES: usize = 2;
/// SCHED_RR priority of the critical tier's band: the lowest RT level, above every CFS task.
/// Threads that already run an RT policy (the runtime's GAT levels) are left as they are.
pub const RT_BAND_PRIORITY: i32 = 1;
/// RT budget of the band per 1 s period where RT group scheduling exists: 80% of a CPU,
/// so a runaway critical thread can never starve the node.
pub const RT_BAND_RUNTIME_US: u64 = 800_000;

/// How the shipped defaults (`tailor node plan`) select the critical tier on a node: by
/// process name, besides `TAILOR_TIER=critical`. A name is needed because servers that set
/// their process title (redis-server, nginx, postgres: `setproctitle`) overwrite their own
/// environment, so `/proc/PID/environ` no longer shows the label they were started with.
pub const CRITICAL_MATCH: &str = "[tier.match]\ncomm = [\"nginx\", \"envoy\", \"redis-server\"]\n";
/// How the shipped defaults select the best-effort tier on a node (besides its label).
pub const BEST_EFFORT_MATCH: &str = "[tier.match]\ncomm = [\"stress-ng\", \"ffmpeg\"]\n";

/// The node as the rule sees it.
#[derive(Clone, Debug)]
pub struct NodeShape {
    /// Online CPUs (hardware threads).
    pub cpus: Vec<usize>,
    /// Physical cores: each core's hardware threads, in core order.
    pub cores: Vec<Vec<usize>>,
    pub rt_group: bool,
    pub cpu_idle: bool,
    /// A fence is possible: a cpuset controller, and tiers whose cpusets are ours to set.
    pub cpuset: bool,
    /// The tiers select pods (`[tier.pods]`): tuned in place in the kubelet's cgroups, whose
    /// cpusets the kubelet owns and which have no RT budget to give.
    pub pods: bool,
}

impl NodeShape {
    /// This node: online CPUs grouped by `topology/core_id` and `physical_package_id`.
    pub fn probe(caps: &Capabilities) -> NodeShape {
        let mut cores: Vec<((u32, u32), Vec<usize>)> = Vec::new();
        for &cpu in &caps.online_cpus {
            let read = |f: &str| {
                std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
            };
            // Without topology files every CPU counts as its own core.
            let key = match (read("physical_package_id"), read("core_id")) {
                (Some(p), Some(c)) => (p, c),
                _ => (u32::MAX, cpu as u32),
            };
            match cores.iter_mut().find(|(k, _)| *k == key) {
                Some((_, threads)) => threads.push(cpu),
                None => cores.push((key, vec![cpu])),
            }
        }
        NodeShape {
            cpus: caps.online_cpus.clone(),
            cores: cores.into_iter().map(|(_, t)| t).collect(),
            rt_group: caps.rt_group,
            cpu_idle: caps.cpu_idle,
            cpuset: caps.cpuset,
            pods: false,
        }
    }

    /// The same node, for tiers that select pods.
    pub fn for_pods(self) -> NodeShape {
        NodeShape { pods: true, ..self }
    }
}

/// What the rule chose, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    /// `(critical CPUs, best-effort CPUs)` when fencing, else `None`.
    pub fence: Option<(Vec<usize>, Vec<usize>)>,
    /// The critical tier runs in a SCHED_RR band.
    pub rt_band: bool,
    /// One sentence per decision, with the numbers.
    pub why: Vec<String>,
}

/// Chooses the mechanisms for a critical tier that needs `demand_cpus` CPUs on `node`.
pub fn decide(node: &NodeShape, demand_cpus: f64) -> Sizing {
    let cores = node.cores.len();
    let budget = cores.saturating_sub(1);
    let mut why = vec![format!(
        "node: {} CPUs on {cores} physical cores; critical demand {demand_cpus} CPUs; Temper's rule allows a fence \
         only while demand <= cores - 1 = {budget}",
        node.cpus.len()
    )];
    let fits = demand_cpus <= budget as f64;
    let fence = if node.pods {
        why.push("no fence: pod cpusets belong to the kubelet (its CPU manager)".into());
        None
    } else if !node.cpuset {
        why.push("no fence: no cpuset controller to fence with".into());
        None
    } else if !fits {
        why.push(format!(
            "no fence: demand {demand_cpus} > cores - 1 = {budget} (a fence would queue critical work behind itself)"
        ));
        None
    } else if budget < MIN_FENCED_CORES {
        why.push(format!(
            "no fence: it would leave critical work {budget} core(s); a fence needs at least {MIN_FENCED_CORES} \
             (one core serialises every critical thread: worse than stock Linux at 2 spinners, measured with \
             redis-server on a 2-CPU node)"
        ));
        None
    } else {
        // Critical gets every core but the first: the first keeps best-effort work (and
        // housekeeping, which Linux prefers to run on CPU 0).
        let critical: Vec<usize> = node.cores[1..].iter().flatten().copied().collect();
        let best_effort = node.cores[0].clone();
        why.push(format!(
            "fence: critical on CPUs {critical:?} ({budget} cores >= demand {demand_cpus}), best-effort on {best_effort:?}"
        ));
        Some((critical, best_effort))
    };
    // RT group scheduling gives a cgroup's threads SCHED_RR only within that cgroup's RT
    // budget, and the kubelet's pod cgroups have none (v1: 0 µs; v2: no RT budget at all).
    let pods_without_rt = node.pods && node.rt_group;
    let rt_band = fence.is_none() && !pods_without_rt;
    let best_effort = if node.cpu_idle { "in cpu.idle" } else { "at SCHED_IDLE" };
    if rt_band {
        why.push(format!(
            "protect without a fence: critical threads in a SCHED_RR {RT_BAND_PRIORITY} band (preempts CFS work at once{}), \
             CPU weight 10000, best-effort {best_effort}",
            if node.rt_group && !node.pods {
                format!(", capped at {RT_BAND_RUNTIME_US} µs/s by its RT budget")
            } else {
                ", capped by the kernel's sched_rt_runtime_us".to_string()
            },
        ));
    } else if pods_without_rt {
        why.push(format!(
            "protect without a fence or an RT band: this kernel schedules RT per cgroup (RT_GROUP_SCHED) and the \
             kubelet's pod cgroups have no RT budget; CPU weight 10000, best-effort {best_effort}"
        ));
    } else {
        why.push("inside the fence: CPU weight 10000; best-effort also in cpu.idle / SCHED_IDLE".into());
    }
    Sizing { fence, rt_band, why }
}

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// The `[[tier]]` tables for a critical tier (labelled/selected by `critical_match`, TOML
/// lines of `[tier.match]` or `[tier.pods]`) and a best-effort one, as the rule sizes them,
/// with the reasons as comments.
pub fn tiers_toml(node: &NodeShape, demand_cpus: f64, critical_select: &str, best_effort_select: &str) -> String {
    let sizing = decide(node, demand_cpus);
    let mut s = String::new();
    for line in &sizing.why {
        s.push_str(&format!("# {line}\n"));
    }
    s.push_str(&format!(
        "[[tier]]\nname = \"critical\"\nkind = \"critical\"\ndemand_cpus = {demand_cpus}\ncpu_weight = 10000\n"
    ));
    match &sizing.fence {
        Some((critical, _)) => s.push_str(&format!("cpus = \"{}\"\n", cpu_list(critical))),
        None if sizing.rt_band => {
            s.push_str(&format!("rt_priority = {RT_BAND_PRIORITY}\n"));
            // A pod tier stays in the kubelet's cgroups (`decide` gives it a band only where
            // RT is not scheduled per cgroup): only our own tier cgroup has a budget to set.
            if node.rt_group && !node.pods {
                s.push_str(&format!("rt_runtime_us = {RT_BAND_RUNTIME_US}\n"));
            }
        }
        None => {}
    }
    s.push_str(critical_select);
    s.push_str("\n[[tier]]\nname = \"best-effort\"\nkind = \"best-effort\"\nidle = true\n");
    if let Some((_, best_effort)) = &sizing.fence {
        s.push_str(&format!("cpus = \"{}\"\n", cpu_list(best_effort)));
    }
    s.push_str(best_effort_select);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cores: usize, threads: usize) -> NodeShape {
        let cores: Vec<Vec<usize>> = (0..cores).map(|c| (0..threads).map(|t| c * threads + t).collect()).collect();
        NodeShape {
            cpus: cores.iter().flatten().copied().collect(),
            cores,
            rt_group: true,
            cpu_idle: true,
            cpuset: true,
            pods: false,
        }
    }

    #[test]
    fn two_cpus_never_fence() {
        let s = decide(&node(2, 1), 0.5);
        assert_eq!(s.fence, None);
        assert!(s.rt_band);
        assert!(s.why.iter().any(|w| w.contains("at least 2")), "{:?}", s.why);
    }

    #[test]
    fn a_big_node_fences_while_demand_fits_in_cores_minus_one() {
        let s = decide(&node(8, 2), 3.0);
        let (critical, best_effort) = s.fence.clone().unwrap();
        assert_eq!(best_effort, vec![0, 1], "the first core's two threads");
        assert_eq!(critical.len(), 14);
        assert!(!s.rt_band);
        // Demand above cores - 1 = 7: no fence, the band instead.
        let s = decide(&node(8, 2), 7.5);
        assert_eq!(s.fence, None);
        assert!(s.why.iter().any(|w| w.contains("7.5 > cores - 1 = 7")), "{:?}", s.why);
    }

    #[test]
    fn hyperthreads_are_not_cores() {
        // 4 CPUs but 2 cores: the fence would leave one core.
        assert_eq!(decide(&node(2, 2), 0.5).fence, None);
        assert!(decide(&node(3, 1), 1.5).fence.is_some());
    }

    #[test]
    fn pod_tiers_get_no_fence_and_a_band_only_where_rt_is_not_per_cgroup() {
        let select = "[tier.pods]\ntier_label = \"critical\"\n";
        // RT group scheduling: the kubelet's cgroups have no RT budget, so no band.
        let text = tiers_toml(&node(8, 1).for_pods(), 2.0, select, "");
        assert!(!text.contains("\ncpus =") && !text.contains("rt_priority"), "{text}");
        assert!(text.contains("no RT budget"), "{text}");
        // Without it, the band (capped node-wide) and still no fence.
        let shape = NodeShape { rt_group: false, ..node(8, 1).for_pods() };
        let text = tiers_toml(&shape, 2.0, select, "");
        assert!(
            text.contains("rt_priority = 1") && !text.contains("\nrt_runtime_us") && !text.contains("\ncpus ="),
            "{text}"
        );
        assert!(text.contains("kubelet"), "{text}");
    }

    #[test]
    fn sized_tiers_parse_as_a_config() {
        for (cores, demand) in [(2, 0.5), (8, 2.0), (8, 9.0)] {
            let text = tiers_toml(&node(cores, 1), demand, "[tier.match]\ncomm = [\"redis-server\"]\n", "");
            crate::NodeConfig::parse(&text, "sized").unwrap_or_else(|e| panic!("{text}\n{e}"));
        }
    }
}
