//! The scheduler agent's live counters: published by the agent loop as relaxed atomic stores, read by the admin endpoint when scraped.
//!
//! The agent keeps its counts in a plain [`AgentReport`] (no atomics on the
//! per-job path); once per pass of its loop it copies them here, a handful of
//! uncontended relaxed stores next to the syscalls the pass makes anyway.
//! [`AgentStats::scraped`] turns them into Prometheus families read only when
//! a scraper asks (docs/observability.md lists them).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tailor_core::Nanos;
use tailor_telemetry::prometheus_client::registry::{Registry, Unit};
use tailor_telemetry::{AdminHandle, AdminServer, Readiness, Scraped};

use super::agent::AgentReport;
use super::decisions::DecisionReport;
use crate::cpu::monotonic_ns;

/// What the agent has done, readable from another thread while it runs.
#[derive(Debug, Default)]
pub struct AgentStats {
    arrivals: AtomicU64,
    completions: AtomicU64,
    promotions: AtomicU64,
    demotions: AtomicU64,
    rotations: AtomicU64,
    wakeups: AtomicU64,
    rung: AtomicU64,
    self_admitted: AtomicU64,
    handoffs: AtomicU64,
    reaped: AtomicU64,
    errors: AtomicU64,
    shifts: AtomicU64,
    rewrites: AtomicU64,
    cpu_ns: AtomicU64,
    /// Jobs registered in the table now (slots in use).
    live: AtomicU64,
    /// Runnable jobs the policy holds back.
    waiting: AtomicU64,
    /// The table's size, set when the agent creates it.
    slots: AtomicU64,
    /// CLOCK_MONOTONIC of the last pass (0: no pass yet).
    last_pass_ns: AtomicU64,
    /// 1 while the agent serves its table.
    running: AtomicU64,
    /// Jobs whose thread could not be found in the host's numbering (see `nspid`).
    unresolved: AtomicU64,
    /// `orf-adaptive`: the decision helper's counters (see `decisions`).
    adaptive_windows: AtomicU64,
    adaptive_dropped: AtomicU64,
    adaptive_decided: AtomicU64,
    adaptive_changes: AtomicU64,
    adaptive_cpu_ns: AtomicU64,
    /// The pool capacity in force, `max(c, cpus)`; 0: no adaptive policy (the gauge is absent).
    adaptive_cap: AtomicU64,
}

impl AgentStats {
    pub fn new() -> Arc<AgentStats> {
        Arc::new(AgentStats::default())
    }

    pub(super) fn started(&self, slots: usize) {
        self.slots.store(slots as u64, Relaxed);
        self.running.store(1, Relaxed);
    }

    pub(super) fn stopped(&self) {
        self.running.store(0, Relaxed);
    }

    /// One pass of the agent loop: the report so far, the table's occupancy, and `now`.
    pub(super) fn publish(&self, report: &AgentReport, live: usize, waiting: usize, now: Nanos) {
        self.arrivals.store(report.arrivals, Relaxed);
        self.completions.store(report.completions, Relaxed);
        self.promotions.store(report.promotions, Relaxed);
        self.demotions.store(report.demotions, Relaxed);
        self.rotations.store(report.rotations, Relaxed);
        self.wakeups.store(report.wakeups, Relaxed);
        self.rung.store(report.rung, Relaxed);
        self.self_admitted.store(report.self_admitted, Relaxed);
        self.handoffs.store(report.handoffs, Relaxed);
        self.reaped.store(report.reaped, Relaxed);
        self.errors.store(report.errors, Relaxed);
        self.shifts.store(report.shifts, Relaxed);
        self.rewrites.store(report.rewrites, Relaxed);
        self.unresolved.store(report.unresolved, Relaxed);
        self.live.store(live as u64, Relaxed);
        self.waiting.store(waiting as u64, Relaxed);
        self.last_pass_ns.store(now, Relaxed);
    }

    /// `orf-adaptive`: what the decision helper has done so far (once per pass, like
    /// [`Self::publish`]).
    pub(super) fn publish_adaptive(&self, report: &DecisionReport) {
        self.adaptive_windows.store(report.windows, Relaxed);
        self.adaptive_dropped.store(report.dropped, Relaxed);
        self.adaptive_decided.store(report.decided, Relaxed);
        self.adaptive_changes.store(report.changes, Relaxed);
        self.adaptive_cpu_ns.store(report.cpu_ns, Relaxed);
        self.adaptive_cap.store(report.cap as u64, Relaxed);
    }

    /// The agent thread's CPU time so far (published less often: reading it is a syscall).
    pub(super) fn publish_cpu(&self, cpu_ns: Nanos) {
        self.cpu_ns.store(cpu_ns, Relaxed);
    }

    /// Whether the agent serves its table now (what `/readyz` reports).
    pub fn is_running(&self) -> bool {
        self.running.load(Relaxed) == 1
    }

    /// Jobs the agent has registered (band enforcement).
    pub fn jobs_admitted(&self) -> u64 {
        self.arrivals.load(Relaxed)
    }

    /// Time since the agent's last pass, or None before the first one. The
    /// watchdogs in services fall back to cooperative scheduling when the
    /// table's heartbeat stops for their `watchdog_ms`; this is the same age
    /// seen from the agent's side.
    pub fn heartbeat_age_ns(&self) -> Option<Nanos> {
        let last = self.last_pass_ns.load(Relaxed);
        (last != 0).then(|| monotonic_ns().saturating_sub(last))
    }

    /// The Prometheus families, read at scrape time (register with
    /// `Registry::register_collector`).
    pub fn scraped(self: &Arc<AgentStats>) -> Scraped {
        let s = self.clone();
        let counter = move |field: fn(&AgentStats) -> &AtomicU64| {
            let s = s.clone();
            move || field(&s).load(Relaxed)
        };
        let s = self.clone();
        let gauge = move |field: fn(&AgentStats) -> &AtomicU64| {
            let s = s.clone();
            move || field(&s).load(Relaxed) as f64
        };
        let (for_wakeups, for_cpu, for_age) = (self.clone(), self.clone(), self.clone());
        let (for_helper_cpu, for_cap) = (self.clone(), self.clone());
        Scraped::new()
            .counter(
                "tailor_agent_jobs_admitted",
                "Jobs the agent registered from the table and handed to its policy (band enforcement).",
                counter(|s| &s.arrivals),
            )
            .counter("tailor_agent_jobs_completed", "Jobs that left the table.", counter(|s| &s.completions))
            .counter(
                "tailor_agent_promotions",
                "Moves of a job's thread into the SCHED_FIFO band.",
                counter(|s| &s.promotions),
            )
            .counter(
                "tailor_agent_preemptions",
                "Moves of a running job's thread out of the band to SCHED_IDLE (the policy preempted it).",
                counter(|s| &s.demotions),
            )
            .counter(
                "tailor_agent_rotations",
                "Passes that changed the running set.",
                counter(|s| &s.rotations),
            )
            .counter(
                "tailor_agent_self_admitted",
                "Jobs seen in the band by the fast path (admitted themselves without the agent).",
                counter(|s| &s.self_admitted),
            )
            .counter(
                "tailor_agent_handoffs",
                "Waiting jobs started by a leaving job's hand-off.",
                counter(|s| &s.handoffs),
            )
            .counter(
                "tailor_agent_level_shifts",
                "Key ordering: moves of the priority window's base.",
                counter(|s| &s.shifts),
            )
            .counter(
                "tailor_agent_level_rewrites",
                "Key ordering: thread priority rewrites the shifts cost.",
                counter(|s| &s.rewrites),
            )
            .counter_family("tailor_agent_wakeups", "Agent wake-ups, by cause.", None, "cause", move || {
                let (all, rung) = (for_wakeups.wakeups.load(Relaxed), for_wakeups.rung.load(Relaxed));
                vec![("doorbell".into(), rung as f64), ("timer".into(), all.saturating_sub(rung) as f64)]
            })
            .counter(
                "tailor_agent_threads_reaped",
                "Slots freed because their thread died.",
                counter(|s| &s.reaped),
            )
            .counter(
                "tailor_agent_errors",
                "Failed system calls (each of the first 20 is logged).",
                counter(|s| &s.errors),
            )
            .counter(
                "tailor_agent_jobs_unresolved",
                "Jobs registered from another PID namespace whose thread the agent could not find by its host id (never written; they ran unordered).",
                counter(|s| &s.unresolved),
            )
            .counter_in("tailor_agent_cpu", "CPU time of the agent thread.", Unit::Seconds, move || {
                for_cpu.cpu_ns.load(Relaxed) as f64 / 1e9
            })
            .counter(
                "tailor_agent_adaptive_windows",
                "orf-adaptive: windows of jobs handed to the decision helper thread.",
                counter(|s| &s.adaptive_windows),
            )
            .counter(
                "tailor_agent_adaptive_windows_dropped",
                "orf-adaptive: windows replaced before the helper took them (it lagged; decided without them).",
                counter(|s| &s.adaptive_dropped),
            )
            .counter(
                "tailor_agent_adaptive_decisions",
                "orf-adaptive: windows the helper decided on.",
                counter(|s| &s.adaptive_decided),
            )
            .counter(
                "tailor_agent_adaptive_c_changes",
                "orf-adaptive: decisions that changed c, applied by the agent.",
                counter(|s| &s.adaptive_changes),
            )
            .counter_in(
                "tailor_agent_adaptive_helper_cpu",
                "orf-adaptive: CPU time of the decision helper thread.",
                Unit::Seconds,
                move || for_helper_cpu.adaptive_cpu_ns.load(Relaxed) as f64 / 1e9,
            )
            .gauge_if(
                "tailor_agent_adaptive_pool_capacity",
                "orf-adaptive: the pool capacity in force, max(c, CPUs): jobs that share the CPUs (absent under other policies).",
                move || Some(for_cap.adaptive_cap.load(Relaxed)).filter(|&c| c > 0).map(|c| c as f64),
            )
            .gauge("tailor_agent_table_slots_used", "Table slots holding a job now.", gauge(|s| &s.live))
            .gauge("tailor_agent_table_slots", "Table slots in all.", gauge(|s| &s.slots))
            .gauge(
                "tailor_agent_jobs_waiting",
                "Runnable jobs the policy is holding back.",
                gauge(|s| &s.waiting),
            )
            .gauge(
                "tailor_agent_running",
                "1 while the agent serves its table, 0 before it starts and after it stops.",
                gauge(|s| &s.running),
            )
            .gauge_in(
                "tailor_agent_heartbeat_age",
                "Time since the agent's last pass (services fall back to cooperative when it exceeds their watchdog_ms).",
                Unit::Seconds,
                move || for_age.heartbeat_age_ns().map_or(f64::NAN, |ns| ns as f64 / 1e9),
            )
    }
}

/// The agent's admin endpoint could not listen.
#[derive(Debug, thiserror::Error)]
#[error("--admin-addr {addr}: cannot listen: {source}")]
pub struct ServeError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Serves the agent's `/metrics`, `/healthz` and `/readyz` (ready while it
/// serves its table) on `addr`, from a thread of its own.
pub fn serve(addr: SocketAddr, stats: &Arc<AgentStats>) -> Result<AdminHandle, ServeError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(stats.scraped()));
    let ready = stats.clone();
    AdminServer::new(Arc::new(registry))
        .readiness(Readiness::from_fn(move || ready.is_running()))
        .spawn(addr)
        .map_err(|source| ServeError { addr, source })
}
