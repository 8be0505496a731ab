//! `[tier.pods]` tiers at run time: which pod and container cgroups each tier claims (QoS
//! class, pod UID, container path, the pods' tier label), the settings and thread policies
//! applied there in place, and what is put back when a cgroup is no longer selected.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::Agent;
use crate::cgfs;
use crate::error::NodeError;
use crate::journal::Entry;
use crate::kubepods;
use crate::probe::{Hierarchy, Role};
use crate::procs;

/// A process's `TAILOR_TIER` as a pod tier's `tier_label` reads it, valid while the process
/// keeps its start time and name (an exec renames it and may change its environment).
pub(super) struct CachedLabel {
    start_time: u64,
    comm: String,
    label: Option<String>,
}

impl Agent {
    /// `[tier.pods]` tiers: finds the pods' cgroups the kubelet made (they come and go) and
    /// writes the tier's settings in place, journaled; sets the thread policies the tier
    /// asks for on the processes inside. Moves nothing. What a tier selected before and no
    /// tier selects now is put back (see [`Agent::release_pod_file`]).
    pub(super) fn apply_pod_tiers(&mut self) -> Result<(), NodeError> {
        if self.tiers.iter().all(|t| t.pods.is_none()) {
            return Ok(());
        }
        let claimed = self.claim_pod_cgroups();
        self.stats.pod_cgroups = claimed.len();
        let mut settings: Vec<(PathBuf, String, usize)> = Vec::new();
        for (tier, root, dir) in &claimed {
            for (h, file, value) in &self.tiers[*tier].pod_settings {
                if h.root == *root {
                    settings.push((dir.join(file), value.clone(), *tier));
                }
            }
        }
        // What no tier selects now, or another tier took over, is put back first, so the
        // new tier journals the kubelet's value as the original, not the old tier's.
        let wanted: HashMap<&PathBuf, usize> = settings.iter().map(|(path, _, tier)| (path, *tier)).collect();
        let released: Vec<PathBuf> = self
            .pod_files
            .iter()
            .filter(|(path, tier)| wanted.get(path) != Some(tier))
            .map(|(path, _)| path.clone())
            .collect();
        for path in released {
            self.release_pod_file(&path)?;
        }
        let mut files = HashMap::new();
        for (path, value, tier) in settings {
            match self.write_setting(&path, &value) {
                Ok(()) => {
                    files.insert(path, tier);
                }
                // The pod ended since it was found: nothing to tune, nothing to put back.
                Err(NodeError::Io { .. }) if path.parent().is_some_and(|d| !d.exists()) => {}
                Err(e) => return Err(e),
            }
        }
        self.pod_files = files;

        // Thread policies (SCHED_IDLE, an RT band): each process goes to the first tier that
        // selects a cgroup it is in.
        let mut members: HashMap<(u32, u64), usize> = HashMap::new();
        for (tier, _, dir) in &claimed {
            let plan = &self.tiers[*tier];
            if !(plan.sched_idle || plan.rt_band_priority.is_some()) {
                continue;
            }
            for pid in kubepods::procs_below(dir) {
                if let Some(info) = procs::proc_info(pid).filter(|i| !i.kernel_thread && !i.exiting) {
                    let t = members.entry((pid, info.start_time)).or_insert(*tier);
                    *t = (*t).min(*tier);
                }
            }
        }
        let released: Vec<((u32, u64), usize)> = self
            .pod_processes
            .iter()
            .filter(|(key, tier)| members.get(key) != Some(tier))
            .map(|(&key, &tier)| (key, tier))
            .collect();
        for ((pid, start_time), tier) in released {
            self.release_pod_policies(pid, start_time, tier)?;
        }
        let mut ordered: Vec<((u32, u64), usize)> = members.iter().map(|(&key, &tier)| (key, tier)).collect();
        ordered.sort_unstable();
        for ((pid, start_time), tier) in ordered {
            if let Err(e) = self.set_thread_policies(pid, tier) {
                self.stats.errors += 1;
                // Once per process: a refusal (an RT band the kernel will not grant a pod) repeats
                // on every pass, and `errors` in /metrics keeps counting it.
                if self.reported.insert((pid, start_time)) {
                    tracing::warn!("tier {:?}: pid {pid}: {e}", self.tiers[tier].name);
                }
            }
        }
        self.pod_processes = members;
        Ok(())
    }

    /// Every pod or container cgroup a pod tier selects now, as (tier, hierarchy root, dir).
    /// Each goes to the first tier (in config order) that selects it, as a process goes to
    /// the first tier that matches it, so two tiers never take turns rewriting one cgroup.
    fn claim_pod_cgroups(&mut self) -> Vec<(usize, PathBuf, PathBuf)> {
        let kubelet_root = self.config.kubelet_cgroup_root.trim_start_matches('/').to_string();
        let (tiers, labels) = (&self.tiers, &mut self.labels);
        let mut looked_up = HashSet::new();
        let mut label_of = |pid: u32| -> Option<String> {
            looked_up.insert(pid);
            pod_process_label(labels, pid)
        };
        let mut claimed = Vec::new();
        let mut taken = HashSet::new();
        // Where a process's CPU is: the hierarchies with the cpu controller (every one if
        // there is none; then only thread policies apply).
        let cpu = |h: &&Hierarchy| matches!(h.role, Role::V1Cpu | Role::Unified);
        let any_cpu = self.caps.hierarchies.iter().any(|h| cpu(&h));
        for h in self.caps.hierarchies.iter().filter(|h| cpu(h) || !any_cpu) {
            let pods = kubepods::discover(&h.root.join(&kubelet_root));
            for (tier, plan) in tiers.iter().enumerate() {
                let Some(selector) = &plan.pods else { continue };
                for dir in selector.targets(&h.root, &pods, &mut label_of) {
                    if taken.insert(dir.clone()) {
                        claimed.push((tier, h.root.clone(), dir));
                    }
                }
            }
        }
        labels.retain(|pid, _| looked_up.contains(pid));
        claimed
    }

    /// Puts back a control file in a pod cgroup no tier selects any more, from the journal's
    /// original, and marks it undone there (a later selection journals a fresh original: the
    /// kubelet may have changed it meanwhile). A cgroup that is gone needs nothing.
    fn release_pod_file(&mut self, path: &Path) -> Result<(), NodeError> {
        let journal = self.journal.as_mut().expect("enforcing");
        let probe = Entry::WroteFile { path: path.to_path_buf(), original: String::new() };
        let Some(Entry::WroteFile { original, .. }) = journal.original(&probe).cloned() else { return Ok(()) };
        if path.parent().is_some_and(Path::exists) {
            if let Err(e) = cgfs::write(path, &original) {
                if path.parent().is_some_and(Path::exists) {
                    // Kept in the journal: safe mode tries again.
                    self.stats.errors += 1;
                    tracing::warn!("{}: cannot put back {original:?}: {e}", path.display());
                    return Ok(());
                }
            }
            self.stats.pod_changes_released += 1;
        }
        journal.undone(&probe)
    }

    /// Puts back the thread policies a pod tier set on a process no tier selects any more (or
    /// another tier takes over): each journaled thread gets its original, and a thread born
    /// since at the tier's policy (never journaled) the process's original or SCHED_OTHER.
    fn release_pod_policies(&mut self, pid: u32, start_time: u64, tier: usize) -> Result<(), NodeError> {
        if !procs::alive(pid, start_time) {
            return Ok(());
        }
        let journal = self.journal.as_mut().expect("enforcing");
        let plan = &self.tiers[tier];
        let probe = |tid: u32, start_time: u64| Entry::SetPolicy {
            tid,
            start_time,
            original: procs::SchedState { policy: 0, rt_priority: 0, nice: 0 },
        };
        let main_original = match journal.original(&probe(pid, start_time)) {
            Some(Entry::SetPolicy { original, .. }) => Some(*original),
            _ => None,
        };
        for tid in procs::tids(pid) {
            let Some(tstart) = procs::thread_start_time(pid, tid) else { continue };
            let Some(now) = procs::sched_state(tid) else { continue };
            let journaled = match journal.original(&probe(tid, tstart)) {
                Some(Entry::SetPolicy { original, .. }) => Some(*original),
                _ => None,
            };
            let ours = (plan.sched_idle && now.policy == libc::SCHED_IDLE)
                || (now.policy == libc::SCHED_RR && Some(now.rt_priority) == plan.rt_band_priority);
            let back = match (journaled, main_original) {
                (Some(original), _) => original,
                (None, _) if !ours => continue,
                (None, Some(original)) if !procs::is_rt(original.policy) => original,
                (None, _) => procs::SchedState { policy: libc::SCHED_OTHER, rt_priority: 0, nice: now.nice },
            };
            match procs::set_sched_state(tid, back) {
                Ok(()) => self.stats.pod_changes_released += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    self.stats.errors += 1;
                    tracing::warn!("tier {:?}: pid {pid} tid {tid}: cannot put back its policy: {e}", plan.name);
                    continue;
                }
            }
            if journaled.is_some() {
                journal.undone(&probe(tid, tstart))?;
            }
        }
        Ok(())
    }
}

/// `TAILOR_TIER` of a process in a pod cgroup (none for kernel threads and exiting processes),
/// read from `/proc/PID/environ` once per process and cached.
fn pod_process_label(cache: &mut HashMap<u32, CachedLabel>, pid: u32) -> Option<String> {
    let info = procs::proc_info(pid).filter(|i| !i.kernel_thread && !i.exiting)?;
    match cache.get(&pid) {
        Some(c) if c.start_time == info.start_time && c.comm == info.comm => c.label.clone(),
        _ => {
            let label = procs::tier_label(pid);
            cache.insert(pid, CachedLabel { start_time: info.start_time, comm: info.comm, label: label.clone() });
            label
        }
    }
}
