//! The agent: turns tiers into cgroups and scheduling policies, places processes, and keeps
//! reconciling (new processes and threads, processes that leave, settings someone rewrote).

mod placement;
mod plan;
mod pods;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cgfs;
use crate::config::{parse_cpu_list, NodeConfig, TierKind};
use crate::error::NodeError;
use crate::journal::{self, Entry, Journal, RestoreReport};
use crate::kubepods::PodSelector;
use crate::probe::{Capabilities, Hierarchy, Role};
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
