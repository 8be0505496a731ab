//! Placement: which tier a process belongs to (its `TAILOR_TIER` label, pid, name, binary or
//! cgroup), moving it into the tier's cgroups, and the tier's policy on each of its threads —
//! every change journaled first.

use std::collections::HashSet;
use std::path::PathBuf;

use super::{Agent, Cached};
use crate::cgfs;
use crate::error::NodeError;
use crate::journal::Entry;
use crate::kubepods;
use crate::probe::{Hierarchy, Role};
use crate::procs;

impl Agent {
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

    pub(super) fn place_processes(&mut self) {
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
    pub(super) fn set_thread_policies(&mut self, pid: u32, tier: usize) -> Result<(), NodeError> {
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
}
