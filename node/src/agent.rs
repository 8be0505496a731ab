//! The agent: turns tiers into cgroups and scheduling policies, places processes, and keeps
//! reconciling (new processes and threads, processes that leave, settings someone rewrote).

mod pods;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cgfs;
use crate::config::{parse_cpu_list, NodeConfig, TierConfig, TierKind};
use crate::error::NodeError;
use crate::journal::{self, Entry, Journal, RestoreReport};
use crate::kubepods::{self, PodSelector};
use crate::probe::{Capabilities, Hierarchy, Role};
use crate::procs;
use pods::CachedLabel;

/// One step of the plan, applied in order (parents before children, budgets before members).
#[derive(Clone, Debug)]
enum Step {
    CreateDir { path: PathBuf, fallback_dir: PathBuf, rt_band_priority: Option<i32> },
    Write { path: PathBuf, value: String },
}

/// What a tier resolves to on this machine.
#[derive(Clone, Debug)]
pub struct TierPlan {
    pub name: String,
    pub kind: TierKind,
    /// (hierarchy, the tier's cgroup dir in it).
    pub dirs: Vec<(Hierarchy, PathBuf)>,
    pub sched_idle: bool,
    /// SCHED_RR priority of the tier's band, if any.
    pub rt_band_priority: Option<i32>,
    /// The config asks for a band this kernel cannot give the tier's pods (RT_GROUP_SCHED:
    /// the kubelet's cgroups have no RT budget); the tier runs without it, with a warning.
    pub rt_band_unavailable: bool,
    /// Mechanisms in force, for the start-up report.
    pub mechanisms: Vec<String>,
    /// `[tier.pods]`: the kubelet's cgroups this tier selects, and the control files (per
    /// hierarchy) written in place in each of them.
    pub pods: Option<PodSelector>,
    pub pod_settings: Vec<(Hierarchy, &'static str, String)>,
}

/// Counters since start.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub ticks: u64,
    pub processes_placed: u64,
    pub threads_placed: u64,
    pub policies_set: u64,
    /// Control files someone else rewrote, read back and re-applied.
    pub settings_repaired: u64,
    /// Processes or threads someone moved out of their tier cgroup, moved back.
    pub placements_repaired: u64,
    /// Threads whose SCHED_IDLE someone reverted, re-applied.
    pub policies_repaired: u64,
    /// Matched processes that exited.
    pub departed: u64,
    /// Pod (or container) cgroups a `[tier.pods]` tier selected at the last reconcile.
    pub pod_cgroups: usize,
    /// Settings and thread policies put back in pod cgroups no tier selects any more (a
    /// labelled process left, or the label changed).
    pub pod_changes_released: u64,
    /// Matched processes left where they are because the kubelet owns their cgroup.
    pub kubelet_owned_not_moved: u64,
    /// Cgroups the agent made that someone else removed, re-created.
    pub dirs_recreated: u64,
    pub errors: u64,
    /// Members per tier at the last reconcile.
    pub members: Vec<usize>,
}

/// A control file's applied value as read back.
#[derive(Clone, Debug, Serialize)]
pub struct Readback {
    pub file: String,
    pub desired: String,
    pub actual: Option<String>,
    pub matches: bool,
}

#[derive(Clone)]
struct Cached {
    start_time: u64,
    comm: String,
    tier: Option<usize>,
}

/// The node agent.
pub struct Agent {
    pub config: NodeConfig,
    pub caps: Capabilities,
    pub tiers: Vec<TierPlan>,
    plan: Vec<Step>,
    journal: Option<Journal>,
    cache: HashMap<u32, Cached>,
    /// Processes we failed to place or give their thread policies, reported once each.
    reported: HashSet<(u32, u64)>,
    exclude: HashSet<u32>,
    /// `[tier.pods]`: control files written in place at the last reconcile, and the
    /// processes given a tier's thread policy (with the tier): what no tier selects any more
    /// is put back.
    pod_files: HashMap<PathBuf, usize>,
    pod_processes: HashMap<(u32, u64), usize>,
    labels: HashMap<u32, CachedLabel>,
    pub stats: Stats,
    pub warnings: Vec<String>,
}

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

    pub fn state_dir(&self) -> &Path {
        &self.config.state_dir
    }

    pub fn enforcing(&self) -> bool {
        self.journal.is_some()
    }

    /// Changes recorded in the undo journal (0 when not enforcing).
    pub fn journal_entries(&self) -> usize {
        self.journal.as_ref().map_or(0, Journal::entries)
    }

    /// Keeps a process (e.g. a benchmark orchestrator) out of every tier.
    pub fn exclude_pid(&mut self, pid: u32) {
        self.exclude.insert(pid);
    }

    /// Restores anything a previous instance left behind, then applies the tiers and places
    /// processes once.
    pub fn start_enforcing(&mut self) -> Result<Option<RestoreReport>, NodeError> {
        if self.journal.is_some() {
            return Ok(None);
        }
        let leftover = if Journal::path_in(self.state_dir()).exists() { Some(self.restore_node()?) } else { None };
        for p in leftover.iter().flat_map(RestoreReport::problems) {
            tracing::warn!("restore: {p}");
        }
        self.journal = Some(Journal::open(self.state_dir())?);
        self.cache.clear();
        self.pod_files.clear();
        self.pod_processes.clear();
        self.reconcile()?;
        Ok(leftover)
    }

    /// Safe mode: stop enforcing and undo every journaled change.
    pub fn safe_mode(&mut self) -> Result<RestoreReport, NodeError> {
        self.journal = None;
        self.cache.clear();
        self.pod_files.clear();
        self.pod_processes.clear();
        self.restore_node()
    }

    /// The journal's undo, then a sweep of this agent's own cgroups for what it missed.
    fn restore_node(&self) -> Result<RestoreReport, NodeError> {
        let roots: Vec<PathBuf> = self.caps.hierarchies.iter().map(|h| h.root.clone()).collect();
        journal::restore_and_sweep(self.state_dir(), &self.config.cgroup_name, &roots)
    }

    /// One reconcile pass: plan (creating and repairing settings), then processes.
    pub fn reconcile(&mut self) -> Result<(), NodeError> {
        if self.journal.is_none() {
            return Ok(());
        }
        self.stats.ticks += 1;
        self.apply_plan()?;
        self.apply_pod_tiers()?;
        self.place_processes();
        Ok(())
    }

    fn apply_plan(&mut self) -> Result<(), NodeError> {
        let journal = self.journal.as_mut().expect("enforcing");
        for step in &self.plan {
            match step {
                Step::CreateDir { path, fallback_dir, rt_band_priority } => {
                    if !path.exists() {
                        let entry = Entry::CreatedDir {
                            path: path.clone(),
                            fallback_dir: fallback_dir.clone(),
                            rt_band_priority: *rt_band_priority,
                        };
                        let again = journal.has(&entry);
                        journal.record(entry)?;
                        cgfs::create_dir(path).map_err(|e| NodeError::io(path, e))?;
                        if again {
                            // Someone removed a cgroup we made (its members went with it to the
                            // parent): made again here, refilled below and by the placement pass.
                            self.stats.dirs_recreated += 1;
                            tracing::warn!("{} was removed by someone else; re-created", path.display());
                        }
                    }
                }
                Step::Write { path, value } => {
                    write_journaled(journal, &mut self.stats, path, value)?;
                }
            }
        }
        Ok(())
    }

    /// Writes one control file through the journal (see [`write_journaled`]).
    fn write_setting(&mut self, path: &Path, value: &str) -> Result<(), NodeError> {
        let journal = self.journal.as_mut().expect("enforcing");
        write_journaled(journal, &mut self.stats, path, value)
    }

    fn classify(&self, pid: u32, comm: &str) -> Option<usize> {
        let label = procs::tier_label(pid);
        let exe = procs::exe_basename(pid);
        let cgroups = procs::cgroups(&format!("/proc/{pid}/cgroup"));
        let own = format!("/{}/", self.config.cgroup_name);
        self.config.tiers.iter().position(|t| {
            let m = &t.matcher;
            // Pod tiers select cgroups, not processes (see `apply_pod_tiers`).
            !t.is_pod_tier() && label.as_deref() == Some(t.name.as_str())
                || m.pid.contains(&pid)
                || m.comm.iter().any(|c| c == comm)
                || exe.as_ref().is_some_and(|e| m.exe.contains(e))
                || cgroups.iter().any(|(_, path)| {
                    !path.starts_with(&own)
                        && m.cgroup
                            .iter()
                            .any(|p| path == p || path.starts_with(&format!("{}/", p.trim_end_matches('/'))))
                })
        })
    }

    fn place_processes(&mut self) {
        let mut seen = HashSet::new();
        let mut members = vec![0; self.tiers.len()];
        for pid in procs::pids() {
            if self.exclude.contains(&pid) {
                continue;
            }
            let Some(info) = procs::proc_info(pid) else { continue };
            if info.kernel_thread {
                // Per-CPU kernel threads must keep running where they are (the seed's per-CPU
                // starvation guarantee); the agent never touches any kernel thread.
                continue;
            }
            seen.insert(pid);
            if info.exiting {
                // A process that has finished (a zombie its parent has not reaped yet) reads as
                // back in the root cgroup; moving it is a no-op that would count as a repair.
                continue;
            }
            let tier = match self.cache.get(&pid) {
                Some(c) if c.start_time == info.start_time && c.comm == info.comm => c.tier,
                _ => {
                    let tier = self.classify(pid, &info.comm);
                    self.cache.insert(pid, Cached { start_time: info.start_time, comm: info.comm.clone(), tier });
                    tier
                }
            };
            let Some(tier) = tier else { continue };
            members[tier] += 1;
            if let Err(e) = self.place(pid, info.start_time, tier) {
                self.stats.errors += 1;
                if self.reported.insert((pid, info.start_time)) {
                    tracing::warn!(tier = %self.tiers[tier].name, pid, comm = %info.comm, error = %e, "cannot place process");
                }
            }
        }
        // A process reported once stays quiet until it exits; its entry goes with it.
        self.reported.retain(|(pid, _)| seen.contains(pid));
        let before = self.cache.len();
        let departed: Vec<u32> = self.cache.keys().filter(|p| !seen.contains(p)).copied().collect();
        for pid in departed {
            if self.cache.remove(&pid).and_then(|c| c.tier).is_some() {
                self.stats.departed += 1;
            }
        }
        debug_assert!(self.cache.len() <= before);
        self.stats.members = members;
    }

    fn place(&mut self, pid: u32, start_time: u64, tier: usize) -> Result<(), NodeError> {
        let journal = self.journal.as_mut().expect("enforcing");
        let plan = &self.tiers[tier];
        let current = procs::cgroups(&format!("/proc/{pid}/cgroup"));
        let main_policy = procs::sched_state(pid);
        for (h, dir) in &plan.dirs {
            let want = format!("/{}", dir.strip_prefix(&h.root).unwrap_or(dir).display());
            let Some((_, now)) = current.iter().find(|(c, _)| h.owns_line(c)) else { continue };
            if *now != want && kubepods::is_kubelet_owned(now) {
                // The kubelet's cgroup: never pulled out of it (select it with [tier.pods]).
                self.stats.kubelet_owned_not_moved += 1;
                continue;
            }
            if *now != want {
                let entry = Entry::MovedProcess {
                    pid,
                    start_time,
                    hierarchy: h.root.clone(),
                    original_dir: h.root.join(now.trim_start_matches('/')),
                    original_policy: main_policy,
                };
                if journal.has(&entry) {
                    self.stats.placements_repaired += 1;
                } else {
                    self.stats.processes_placed += 1;
                }
                journal.record(entry)?;
                if let Err(e) = cgfs::write(&dir.join("cgroup.procs"), &pid.to_string()) {
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        return Ok(());
                    }
                    let rt = procs::tids(pid)
                        .into_iter()
                        .any(|t| procs::sched_state(t).is_some_and(|s| procs::is_rt(s.policy)));
                    if rt && e.raw_os_error() == Some(libc::EINVAL) {
                        return Err(NodeError::Unsupported(if h.role == Role::Unified {
                            format!(
                                "has SCHED_FIFO/RR threads and {} is a cgroup v2 cpu cgroup: with RT_GROUP_SCHED \
                                 v2 has no RT budget, so RT threads can only stay in the root cgroup",
                                dir.display()
                            )
                        } else {
                            format!(
                                "has SCHED_FIFO/RR threads and {} has no RT budget; set rt_runtime_us for this tier",
                                dir.display()
                            )
                        }));
                    }
                    return Err(NodeError::io(dir.join("cgroup.procs"), e));
                }
            }
        }
        // Threads: v1 lets single threads sit in other cgroups, and SCHED_IDLE is per thread.
        let v1_dirs: Vec<&(Hierarchy, PathBuf)> =
            plan.dirs.iter().filter(|(h, _)| matches!(h.role, Role::V1Cpu | Role::V1Cpuset)).collect();
        for tid in procs::tids(pid) {
            for (h, dir) in &v1_dirs {
                let want = format!("/{}", dir.strip_prefix(&h.root).unwrap_or(dir).display());
                let lines = procs::cgroups(&format!("/proc/{pid}/task/{tid}/cgroup"));
                if let Some((_, now)) = lines.iter().find(|(c, _)| h.owns_line(c)) {
                    if *now != want
                        && !kubepods::is_kubelet_owned(now)
                        && cgfs::write(&dir.join("tasks"), &tid.to_string()).is_ok()
                    {
                        self.stats.threads_placed += 1;
                    }
                }
            }
        }
        self.set_thread_policies(pid, tier)
    }

    /// The tier's per-thread policy (SCHED_IDLE, or its SCHED_RR band) on every thread of
    /// `pid`, journaled; threads with their own RT policy (the runtime's GAT band) are left.
    fn set_thread_policies(&mut self, pid: u32, tier: usize) -> Result<(), NodeError> {
        let journal = self.journal.as_mut().expect("enforcing");
        let plan = &self.tiers[tier];
        for tid in procs::tids(pid) {
            let target = if plan.sched_idle {
                Some(procs::SchedState { policy: libc::SCHED_IDLE, rt_priority: 0, nice: 0 })
            } else {
                plan.rt_band_priority.map(|p| procs::SchedState { policy: libc::SCHED_RR, rt_priority: p, nice: 0 })
            };
            let Some(target) = target else { continue };
            let Some(state) = procs::sched_state(tid) else { continue };
            // Already there, or a thread with its own RT policy (the runtime's GAT band): leave it.
            let done = state.policy == target.policy && state.rt_priority == target.rt_priority;
            if done || procs::is_rt(state.policy) {
                continue;
            }
            let Some(tstart) = procs::thread_start_time(pid, tid) else { continue };
            let entry = Entry::SetPolicy { tid, start_time: tstart, original: state };
            if journal.has(&entry) {
                self.stats.policies_repaired += 1;
            } else {
                self.stats.policies_set += 1;
            }
            journal.record(entry)?;
            if let Err(e) = procs::set_sched_state(tid, procs::SchedState { nice: state.nice, ..target }) {
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(NodeError::io(format!("/proc/{pid}/task/{tid}"), e));
                }
            }
        }
        Ok(())
    }

    /// Reads back every setting the plan applies (for attribution and `tailor node status`).
    pub fn readback(&self) -> Vec<Readback> {
        self.plan
            .iter()
            .filter_map(|s| match s {
                Step::Write { path, value } => {
                    let actual = std::fs::read_to_string(path).ok();
                    let matches = actual.as_deref().is_some_and(|a| same_setting(path, value, a));
                    Some(Readback {
                        file: path.display().to_string(),
                        desired: value.clone(),
                        actual: actual.map(|a| a.trim().to_string()),
                        matches,
                    })
                }
                Step::CreateDir { .. } => None,
            })
            .collect()
    }

    /// The tier's cgroup dir in the PSI-carrying hierarchy.
    pub fn psi_dir(&self, tier: usize) -> Option<&Path> {
        self.tiers[tier]
            .dirs
            .iter()
            .find(|(h, _)| matches!(h.role, Role::PsiOnly | Role::Unified))
            .map(|(_, d)| d.as_path())
    }

    /// Start-up report: what is available and what each tier gets ([`Self::warnings`] apart).
    pub fn describe(&self) -> String {
        let mut s = format!("{}\n", self.caps);
        for t in &self.tiers {
            s.push_str(&format!("tier {} ({:?}): {}\n", t.name, t.kind, t.mechanisms.join(", ")));
        }
        s
    }
}

/// Writes `value` to control file `path` unless it already holds it, journaling the original
/// first (a rewrite of something someone reverted counts as a repair).
fn write_journaled(journal: &mut Journal, stats: &mut Stats, path: &Path, value: &str) -> Result<(), NodeError> {
    let actual = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
    if same_setting(path, value, &actual) {
        return Ok(());
    }
    let entry = Entry::WroteFile { path: path.to_path_buf(), original: undo_value(path, value, &actual) };
    if journal.has(&entry) {
        stats.settings_repaired += 1;
    }
    journal.record(entry)?;
    cgfs::write(path, value).map_err(|e| {
        if path.ends_with("cpu.rt_runtime_us") && e.raw_os_error() == Some(libc::EINVAL) {
            NodeError::Unsupported(format!(
                "{}: cannot set {value}: the RT budget is exhausted (siblings' cpu.rt_runtime_us \
                 must sum to at most the parent's); lower rt_runtime_us or free budget elsewhere",
                path.display()
            ))
        } else if path.ends_with("cgroup.subtree_control") && e.raw_os_error() == Some(libc::EINVAL) {
            NodeError::Unsupported(format!(
                "{}: cannot write {value:?}: with RT_GROUP_SCHED, cgroup v2 enables the cpu \
                 controller only while every SCHED_FIFO/RR process is in the root cgroup",
                path.display()
            ))
        } else {
            NodeError::io(path, e)
        }
    })
}

/// Compares a control file's content with what we wrote, in the kernel's normal form.
fn same_setting(path: &Path, desired: &str, actual: &str) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match name {
        "cpuset.cpus" | "cpuset.mems" => parse_cpu_list(desired).ok() == parse_cpu_list(actual).ok(),
        "cgroup.subtree_control" => {
            let have: HashSet<&str> = actual.split_whitespace().collect();
            desired.split_whitespace().all(|c| have.contains(c.trim_start_matches('+')))
        }
        // v2 cpu.weight readback is exact; v1 shares too.
        _ => desired.trim() == actual.trim(),
    }
}

/// The value that undoes our write. For subtree_control that is "-ctrl" for what we enabled.
fn undo_value(path: &Path, desired: &str, actual: &str) -> String {
    if path.file_name().and_then(|n| n.to_str()) == Some("cgroup.subtree_control") {
        let have: HashSet<&str> = actual.split_whitespace().collect();
        return desired
            .split_whitespace()
            .map(|c| c.trim_start_matches('+'))
            .filter(|c| !have.contains(c))
            .map(|c| format!("-{c}"))
            .collect::<Vec<_>>()
            .join(" ");
    }
    actual.trim().to_string()
}
