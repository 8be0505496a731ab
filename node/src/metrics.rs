//! The node agent's Prometheus families: tiers, processes and CPU pressure per tier, the undo journal, reconcile errors and safe mode.
//!
//! The agent loop publishes a snapshot once per reconcile (one short lock per
//! interval, never per process); PSI files are read when a scraper asks.
//! Served by the agent process (`tailor node run`, which `tailor node
//! supervise` runs as its child) on the config's `metrics_addr`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tailor_telemetry::prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tailor_telemetry::prometheus_client::registry::{Registry, Unit};
use tailor_telemetry::Scraped;

use crate::agent::{Agent, Stats};
use crate::attribution::read_psi;

/// The node-wide PSI file, exposed next to the tiers' for comparison.
const NODE_PSI: &str = "/proc/pressure/cpu";

#[derive(Clone, Debug, Default)]
struct Tier {
    name: String,
    /// The tier cgroup's `cpu.pressure`, where PSI is per cgroup.
    psi: Option<PathBuf>,
    members: usize,
    /// The tier's SCHED_RR band: `Some(true)` asked for and unavailable on this kernel,
    /// `Some(false)` in force, `None` not asked for.
    rt_band_unavailable: Option<bool>,
}

#[derive(Clone, Debug, Default)]
struct Snapshot {
    tiers: Vec<Tier>,
    stats: Stats,
    enforcing: bool,
    safe_mode: bool,
    journal_entries: usize,
    reconcile_errors: u64,
    /// The last reconcile succeeded (what `/readyz` reports).
    healthy: bool,
}

/// What the agent loop publishes and the admin endpoint reads.
#[derive(Debug)]
pub struct NodeMetrics {
    snapshot: Mutex<Snapshot>,
    reconcile_seconds: Histogram,
}

impl NodeMetrics {
    pub fn new() -> Arc<NodeMetrics> {
        Arc::new(NodeMetrics {
            snapshot: Mutex::new(Snapshot::default()),
            // 100 µs .. ~3 s: a reconcile reads /proc and a few cgroup files.
            reconcile_seconds: Histogram::new(exponential_buckets(1e-4, 3.0, 10)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After each pass of the loop: the agent's state, whether safe mode is on, whether the
    /// pass failed, and how long it took.
    pub fn publish(&self, agent: &Agent, safe_mode: bool, failed: bool, took: Duration) {
        self.reconcile_seconds.observe(took.as_secs_f64());
        let mut s = self.lock();
        s.tiers = (0..agent.tiers.len())
            .map(|i| Tier {
                name: agent.tiers[i].name.clone(),
                psi: agent.psi_dir(i).map(|d| d.join("cpu.pressure")),
                members: agent.stats.members.get(i).copied().unwrap_or(0),
                rt_band_unavailable: match &agent.tiers[i] {
                    t if t.rt_band_unavailable => Some(true),
                    t => t.rt_band_priority.map(|_| false),
                },
            })
            .collect();
        s.stats = agent.stats.clone();
        s.enforcing = agent.enforcing();
        s.safe_mode = safe_mode;
        s.journal_entries = agent.journal_entries();
        s.reconcile_errors += u64::from(failed);
        s.healthy = !failed;
    }

    /// Whether the last pass succeeded (false before the first).
    pub fn ready(&self) -> bool {
        self.lock().healthy
    }

    /// Registers every family in `registry`.
    pub fn register(self: &Arc<NodeMetrics>, registry: &mut Registry) {
        registry.register_with_unit(
            "tailor_node_reconcile_duration",
            "Time one pass of the reconcile loop took.",
            Unit::Seconds,
            self.reconcile_seconds.clone(),
        );
        registry.register_collector(Box::new(self.scraped()));
    }

    fn scraped(self: &Arc<NodeMetrics>) -> Scraped {
        let read = |f: fn(&Snapshot) -> f64| {
            let m = self.clone();
            move || f(&m.lock())
        };
        let count = |f: fn(&Stats) -> u64| {
            let m = self.clone();
            move || f(&m.lock().stats)
        };
        let per_tier = |f: fn(&Tier) -> Option<f64>| {
            let m = self.clone();
            move || m.lock().tiers.iter().filter_map(|t| Some((t.name.clone(), f(t)?))).collect::<Vec<_>>()
        };
        let repairs = self.clone();
        let errors = self.clone();
        Scraped::new()
            .gauge("tailor_node_tiers", "Tiers configured.", read(|s| s.tiers.len() as f64))
            .gauge_family(
                "tailor_node_tier_processes",
                "Processes placed in each tier at the last reconcile.",
                None,
                "tier",
                per_tier(|t| Some(t.members as f64)),
            )
            .counter_family(
                "tailor_node_tier_cpu_pressure_waiting",
                "PSI `cpu some` total of each tier's cgroup: time its tasks waited for a CPU.",
                Some(Unit::Seconds),
                "tier",
                per_tier(|t| t.psi.as_deref().and_then(read_psi).map(|p| p.total_us as f64 / 1e6)),
            )
            .gauge_family(
                "tailor_node_tier_cpu_pressure_avg10",
                "PSI `cpu some` avg10 of each tier's cgroup, as a ratio (0..1).",
                Some(Unit::Other("ratio".into())),
                "tier",
                per_tier(|t| t.psi.as_deref().and_then(read_psi).map(|p| p.avg10 / 100.0)),
            )
            .counter_in(
                "tailor_node_cpu_pressure_waiting",
                "PSI `cpu some` total of the whole node (/proc/pressure/cpu).",
                Unit::Seconds,
                || read_psi(Path::new(NODE_PSI)).map_or(f64::NAN, |p| p.total_us as f64 / 1e6),
            )
            .gauge_family(
                "tailor_node_tier_rt_band_unavailable",
                "1 for a tier whose rt_priority this kernel cannot give its pods (RT_GROUP_SCHED: no RT budget in the kubelet's cgroups; protected by weight and cpu.idle instead), 0 where the band is in force; absent for tiers without rt_priority.",
                None,
                "tier",
                per_tier(|t| t.rt_band_unavailable.map(|u| f64::from(u8::from(u)))),
            )
            .gauge("tailor_node_journal_entries", "Changes in the undo journal now.", read(|s| s.journal_entries as f64))
            .gauge(
                "tailor_node_enforcing",
                "1 while the tiers are applied, 0 in stock scheduling (safe mode, or not started).",
                read(|s| f64::from(u8::from(s.enforcing))),
            )
            .gauge(
                "tailor_node_safe_mode",
                "1 while the safe-mode flag file is present.",
                read(|s| f64::from(u8::from(s.safe_mode))),
            )
            .counter("tailor_node_reconciles", "Passes of the reconcile loop.", count(|s| s.ticks))
            .counter("tailor_node_reconcile_errors", "Passes that failed (the error is logged).", move || {
                errors.lock().reconcile_errors
            })
            .counter(
                "tailor_node_placement_errors",
                "Processes the agent failed to place in their tier.",
                count(|s| s.errors),
            )
            .counter("tailor_node_processes_placed", "Processes moved into a tier.", count(|s| s.processes_placed))
            .counter("tailor_node_threads_placed", "Threads moved into a tier.", count(|s| s.threads_placed))
            .counter("tailor_node_policies_set", "Thread scheduling policies set.", count(|s| s.policies_set))
            .counter("tailor_node_processes_departed", "Placed processes that exited.", count(|s| s.departed))
            .gauge(
                "tailor_node_pod_cgroups",
                "Pod or container cgroups the pod tiers selected at the last reconcile (tuned in place).",
                read(|s| s.stats.pod_cgroups as f64),
            )
            .counter(
                "tailor_node_pod_changes_released",
                "Settings and thread policies put back in pod cgroups no tier selects any more.",
                count(|s| s.pod_changes_released),
            )
            .counter(
                "tailor_node_kubelet_owned_not_moved",
                "Matched processes left in place (counted per cgroup hierarchy) because the kubelet owns their cgroup.",
                count(|s| s.kubelet_owned_not_moved),
            )
            .counter_family(
                "tailor_node_repairs",
                "Changes someone else undid, re-applied: control files (setting), cgroup membership (placement), SCHED_IDLE (policy).",
                None,
                "kind",
                move || {
                    let s = &repairs.lock().stats;
                    vec![
                        ("setting".into(), s.settings_repaired as f64),
                        ("placement".into(), s.placements_repaired as f64),
                        ("policy".into(), s.policies_repaired as f64),
                    ]
                },
            )
    }
}
