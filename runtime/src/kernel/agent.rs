//! The node agent: runs one policy instance for every job registered in the table and
//! turns its decisions into thread priorities.
//!
//! Jobs the policy runs go to the SCHED_FIFO band ([`BAND_PRIORITY`]); a job that has not
//! run yet, or is back from a blocking call, waits asleep for admission (or a hand-off,
//! see `table`), and a job the policy preempts mid-run sits at SCHED_IDLE, where it only
//! gets a CPU nobody else wants. The kernel
//! does the preemption: promoting an old job above a running young one takes effect at
//! once, and the agent demotes the young one on the same pass. The agent itself runs at
//! [`AGENT_PRIORITY`], above the band, so it is never starved by the jobs it schedules.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tailor_core::policy::{keyed, Job, JobId};
use tailor_core::{Nanos, PolicySpec};

use super::agent_stats::AgentStats;
use super::by_key::KeyAgent;
use super::decisions::{DecisionReport, DecisionThread};
use super::identity::Processes;
use super::nspid::{self, Resolver};
use super::sys::{self, ThreadPolicy};
use super::table::{self, Table};
use super::table_lock::TableLock;
use super::{AGENT_PRIORITY, BAND_PRIORITY};
use crate::cpu::{monotonic_ns, thread_cpu_ns};
use crate::driver::Driver;
use crate::RuntimeError;

mod apply;
mod scan;

/// The agent's longest sleep: the heartbeat the watchdogs watch advances at least this often.
pub const HEARTBEAT: Duration = Duration::from_millis(20);
/// How often registered threads are checked for death (ESRCH).
const REAP_EVERY: Nanos = 100_000_000;
/// How often a verbose agent logs its counters.
const LOG_EVERY: Nanos = 1_000_000_000;
/// How soon the agent looks again at a job whose hand-off is in flight (it does not
/// write that thread meanwhile): a woken thread needs a few µs to take the band.
const HANDOFF_RECHECK: Duration = Duration::from_micros(100);

/// What the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The table file, e.g. `/dev/shm/tailor-sched`.
    pub table: PathBuf,
    /// The policy, e.g. `orf` with `c = 6` and `slice_us = 500`.
    pub policy: PolicySpec,
    /// CPUs the policy schedules (jobs in the band at once).
    pub cpus: usize,
    /// Slots in the table (concurrent jobs on the node).
    pub slots: u32,
    /// Print one line per second with the agent's counters.
    pub verbose: bool,
    /// How the policy's order reaches the kernel.
    pub enforce: Enforce,
}

/// Why an enforcement cannot be used; each message names the flag and the fix.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EnforceError {
    /// The key-ordering level width must be a positive number of µs.
    #[error("{bucket_us}: give a positive number of µs (at least 0.001), e.g. 1000")]
    BadBucket { bucket_us: f64 },
    /// orf's key is the GAT only when it runs as many jobs as there are CPUs.
    #[error(
        "{source} (--enforce priority). Fix: --c {cpus}, or --enforce band for processor sharing among more \
         jobs than CPUs"
    )]
    OrfCNotCpus { source: keyed::KeyOrderError, cpus: usize },
    /// The policy orders by something other than a fixed key.
    #[error("{source} (--enforce priority). Fix: --enforce band")]
    NotKeyed { source: keyed::KeyOrderError },
}

/// How the agent's policy reaches the kernel (`tailor agent --enforce`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforce {
    /// The agent runs the policy; the jobs it runs are the SCHED_FIFO band, the others wait.
    Band,
    /// Key ordering (see `table`): each job's thread takes a SCHED_FIFO level from its
    /// key, one level per `bucket_ns`, and the kernel orders them. For orf with `c` =
    /// CPUs, gfifo (key: GAT) and edf (key: deadline).
    Priority { bucket_ns: u64 },
}

impl Enforce {
    /// Key ordering with `bucket_us` µs of key per level (`--bucket-us`, `[gat_domain]
    /// bucket_us`), or why that width is not one.
    pub fn priority_us(bucket_us: f64) -> Result<Enforce, EnforceError> {
        if bucket_us >= 0.001 && bucket_us.is_finite() {
            Ok(Enforce::Priority { bucket_ns: (bucket_us * 1e3).round() as u64 })
        } else {
            Err(EnforceError::BadBucket { bucket_us })
        }
    }

    /// The slot field that orders `policy` under key ordering (core's
    /// [`keyed::key_field_of`], in the table's encoding), or why it cannot and the fix.
    pub fn key_of(policy: &PolicySpec, cpus: usize) -> Result<u32, EnforceError> {
        keyed::key_field_of(policy, cpus).map(|key| key as u32).map_err(|source| match source {
            keyed::KeyOrderError::OrfCNotCpus { .. } => EnforceError::OrfCNotCpus { source, cpus },
            keyed::KeyOrderError::NotKeyed { .. } => EnforceError::NotKeyed { source },
        })
    }
}

/// What the agent did, returned when it stops.
///
/// `tailor agent` logs it as one JSON line ([`AgentReport::log_line`]) that harnesses read
/// back with [`AgentReport::from_log`]: the format and its parser live here together, and
/// fields added later read as zero from an older log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AgentReport {
    pub arrivals: u64,
    pub completions: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// Decisions that changed the running set (each costs one or two syscalls per thread).
    pub rotations: u64,
    pub wakeups: u64,
    /// Of those, wake-ups that found the doorbell rung (the rest were the policy's tick,
    /// a hand-off recheck or the heartbeat).
    pub rung: u64,
    /// Jobs the agent saw in the band by the fast path (no ring, no agent syscall); a
    /// job that ends before the agent's next pass is not seen, so this errs low.
    pub self_admitted: u64,
    /// Waiting jobs started by a leaving job's hand-off (no agent wake-up on the way),
    /// counted by the jobs in the table header.
    pub handoffs: u64,
    pub reaped: u64,
    pub errors: u64,
    /// CPU time the agent thread used, ns.
    pub cpu_ns: u64,
    pub wall_ns: u64,
    /// Threads restored to their original policy at exit.
    pub restored: u64,
    /// Key ordering: moves of the base, and the level rewrites they cost.
    pub shifts: u64,
    pub rewrites: u64,
    /// Jobs whose thread the agent could not find in the host's numbering (see `nspid`):
    /// never written, they ran at their own policy.
    pub unresolved: u64,
    /// `orf-adaptive`: the decisions on the helper thread (see `decisions`); zeros otherwise.
    pub adaptive: DecisionReport,
}

impl AgentReport {
    /// What starts the report's line in the agent's log.
    pub const LOG_PREFIX: &'static str = "tailor agent: stopped; report ";

    /// The report as the agent logs it when it stops: [`Self::LOG_PREFIX`], then JSON.
    pub fn log_line(&self) -> String {
        format!("{}{}", Self::LOG_PREFIX, serde_json::to_string(self).expect("a report of numbers serializes"))
    }

    /// The last report in an agent's log, if it wrote one (an agent that was killed did not).
    pub fn from_log(log_text: &str) -> Option<AgentReport> {
        let (_, json) = log_text.lines().rev().find_map(|l| l.split_once(Self::LOG_PREFIX))?;
        serde_json::from_str(json).ok()
    }

    /// Counts an error and logs the first 20: a misconfigured node would otherwise flood
    /// stderr.
    pub(super) fn error(&mut self, msg: String) {
        self.errors += 1;
        if self.errors <= 20 {
            tracing::warn!(errors = self.errors, "{msg}");
        }
    }
}

#[derive(Clone, Copy)]
struct Registered {
    generation: u64,
    state: u64,
    /// The slot's `wakes` when the agent last looked.
    wakes: u32,
    pid: i32,
    tid: i32,
    /// The thread's start time (`Slot::start`): see `identity`.
    start: u64,
    orig: ThreadPolicy,
}

/// Where the agent put a job's thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Band,
    Idle,
    /// Not admitted yet: the thread sleeps in its admission wait, at its pre-job policy.
    Waiting,
}

fn job_id(slot: usize, generation: u64) -> JobId {
    ((slot as u64) << 32) | (generation & 0xffff_ffff)
}

fn slot_of(id: JobId) -> usize {
    (id >> 32) as usize
}

/// Checks that this machine and process can run the agent; returns the RT throttling
/// `(runtime_us, period_us)` in force.
pub fn preflight() -> Result<(i64, i64), RuntimeError> {
    if !sys::has_cap_sys_nice() {
        return Err(RuntimeError::Unsupported(
            "the agent needs CAP_SYS_NICE to set SCHED_FIFO priorities. Fix: run it as root or \
             `setcap cap_sys_nice+ep $(which tailor)`; without privileges use the cooperative backend"
                .into(),
        ));
    }
    let throttling = sys::check_rt_throttling()?;
    if let Some(problem) = sys::rt_group_problem(0, 0) {
        return Err(RuntimeError::Unsupported(problem));
    }
    Ok(throttling)
}

/// Runs the agent on the calling thread until `stop` is set; restores every registered
/// thread before returning.
pub fn run_agent(cfg: &AgentConfig, stop: &AtomicBool) -> Result<AgentReport, RuntimeError> {
    run_agent_with_stats(cfg, stop, &AgentStats::default())
}

/// [`run_agent`], publishing its counters to `stats` as it runs (what `/metrics` reads).
pub fn run_agent_with_stats(
    cfg: &AgentConfig,
    stop: &AtomicBool,
    stats: &AgentStats,
) -> Result<AgentReport, RuntimeError> {
    preflight()?;
    if cfg.cpus == 0 {
        return Err(RuntimeError::Config("agent: `cpus` must be at least 1".into()));
    }
    let policy = cfg.policy.build_any(cfg.cpus, 0).map_err(|e| RuntimeError::Config(format!("agent policy: {e}")))?;
    let key = match cfg.enforce {
        Enforce::Band => None,
        Enforce::Priority { bucket_ns: 0 } => {
            return Err(RuntimeError::Config("agent: --bucket-us must be more than 0".into()))
        }
        Enforce::Priority { bucket_ns } => Some((Enforce::key_of(&cfg.policy, cfg.cpus)?, bucket_ns)),
    };
    // One agent per table: the lock is the kernel's, so it is free again the moment its
    // holder dies, however it dies (two agents started at once both pass the check below).
    let _lock = TableLock::take(&cfg.table)?;
    // Refuse to take over a table another live agent serves.
    if let Ok(existing) = Table::open(&cfg.table) {
        let h = existing.header();
        let pid = h.agent_pid.load(Ordering::Acquire) as i32;
        if existing.agent_serving() {
            return Err(RuntimeError::Unsupported(format!(
                "{}: agent pid {pid} is already running on this table. Fix: stop it, or use another --table",
                cfg.table.display()
            )));
        }
    }
    let own_pid_ns =
        nspid::own_pid_ns().map_err(|e| RuntimeError::Io { what: "/proc/self/ns/pid".into(), source: e })?;
    let original = sys::get_policy(0).map_err(|e| RuntimeError::Io { what: "sched_getscheduler".into(), source: e })?;
    sys::set_policy(0, ThreadPolicy::fifo(AGENT_PRIORITY)).map_err(|e| {
        RuntimeError::Unsupported(format!(
            "agent: cannot become SCHED_FIFO/{AGENT_PRIORITY}: {e}{}",
            sys::rt_group_problem(0, 0).map(|p| format!(" ({p})")).unwrap_or_default()
        ))
    })?;
    let result = Table::create(&cfg.table, cfg.slots).and_then(|table| {
        let h = table.header();
        h.agent_pid_ns.store(own_pid_ns, Ordering::Relaxed);
        if let Some((key, bucket_ns)) = key {
            let mut agent = KeyAgent::new(&table, key, bucket_ns, Resolver::new(own_pid_ns));
            h.agent_pid.store(std::process::id(), Ordering::Relaxed);
            h.agent_state.store(table::AGENT_RUNNING, Ordering::Release);
            stats.started(table.slots());
            agent.run(stop, cfg.verbose, stats);
            h.agent_state.store(table::AGENT_STOPPED, Ordering::Release);
            stats.stopped();
            agent.restore_all();
            return truncated_or(&table, agent.report);
        }
        let mut agent = Agent::new(&table, Driver::new(policy), Resolver::new(own_pid_ns));
        agent.start_decisions()?;
        h.agent_pid.store(std::process::id(), Ordering::Relaxed);
        h.fast_limit.store(fast_limit(&cfg.policy, cfg.cpus), Ordering::SeqCst);
        h.agent_state.store(table::AGENT_RUNNING, Ordering::Release);
        stats.started(table.slots());
        agent.run(stop, cfg.verbose, stats);
        h.fast_limit.store(0, Ordering::SeqCst);
        h.agent_state.store(table::AGENT_STOPPED, Ordering::Release);
        stats.stopped();
        agent.restore_all();
        agent.stop_decisions();
        truncated_or(&table, agent.report)
    });
    let _ = sys::set_policy(0, original);
    result
}

/// The agent's result: `report`, or an error if someone cut its table file short (it
/// stopped serving it: see `table`, truncation; a supervisor starts a fresh one).
fn truncated_or(table: &Table, report: AgentReport) -> Result<AgentReport, RuntimeError> {
    if table.truncated() {
        return Err(RuntimeError::Unsupported(format!(
            "{}: the table file was cut short under the agent (truncated by another process); stopped serving \
             it. Services fell back to cooperative; a new agent makes a fresh table they re-attach to",
            table.path().display()
        )));
    }
    Ok(report)
}

/// While at most this many jobs are runnable, `policy` on `cpus` CPUs runs them all, so a
/// job may admit itself (the table's fast path): core's
/// [`PolicySpec::runs_every_job_up_to`], `cpus` for every policy (orf's pool holds
/// `max(c, cpus)` jobs, so orf too runs up to `cpus` at once whatever its `c`).
fn fast_limit(policy: &PolicySpec, cpus: usize) -> u32 {
    policy.runs_every_job_up_to(cpus) as u32
}

struct Agent<'t> {
    table: &'t Table,
    driver: Driver,
    /// What the agent last saw in each slot, for registered jobs.
    registered: Vec<Option<Registered>>,
    /// Indices of the `Some` entries of `registered`: what `apply` walks (O(live jobs)).
    live: BTreeSet<usize>,
    /// The level the agent last set for each runnable job. A job that blocks raises
    /// itself above the band (so it can ring when it wakes) and leaves this map.
    applied: HashMap<JobId, Level>,
    /// Slots whose `successor` the agent last set non-zero (see `table`, "the hand-off").
    published: HashMap<usize, u64>,
    /// A hand-off was in flight at the last `apply`: look again soon.
    handoff_in_flight: bool,
    report: AgentReport,
    /// `TAILOR_AGENT_TRACE` set: print every arrival and tick (debugging only).
    trace: bool,
    processes: Processes,
    /// Host ids of threads registered from other PID namespaces.
    resolver: Resolver,
    /// Slot → generation of a job whose thread could not be resolved (tried once).
    unresolved: HashMap<usize, u64>,
    /// `orf-adaptive`: the helper thread its decisions run on.
    decisions: Option<DecisionThread>,
}

impl<'t> Agent<'t> {
    fn new(table: &'t Table, driver: Driver, resolver: Resolver) -> Self {
        Agent {
            registered: vec![None; table.slots()],
            live: BTreeSet::new(),
            table,
            driver,
            applied: HashMap::new(),
            published: HashMap::new(),
            handoff_in_flight: false,
            report: AgentReport::default(),
            trace: std::env::var_os("TAILOR_AGENT_TRACE").is_some(),
            processes: Processes::default(),
            resolver,
            unresolved: HashMap::new(),
            decisions: None,
        }
    }

    /// `orf-adaptive`: moves the controller's decisions to a helper thread at normal
    /// priority (see `decisions`); the loop keeps only the cheap observation.
    fn start_decisions(&mut self) -> Result<(), RuntimeError> {
        if let Some(decider) = self.driver.detach_decider() {
            let thread = DecisionThread::with_decider(decider)
                .map_err(|e| RuntimeError::Io { what: "starting the adaptive-c helper thread".into(), source: e })?;
            self.decisions = Some(thread);
        }
        Ok(())
    }

    /// Stops the helper thread (after a decision in progress) and reports what it did.
    fn stop_decisions(&mut self) {
        if let Some(d) = self.decisions.take() {
            self.report.adaptive = d.stop();
        }
    }

    fn run(&mut self, stop: &AtomicBool, verbose: bool, stats: &AgentStats) {
        let h = self.table.header();
        let mut pace = Pace::start();
        while !stop.load(Ordering::Relaxed) && !self.table.truncated() {
            h.heartbeat.fetch_add(1, Ordering::Release);
            let bell = h.doorbell.load(Ordering::SeqCst);
            // orf-adaptive: this pass's CPU, for what a rotation costs (`RotationCost`).
            let pass_start = self.decisions.is_some().then(|| (thread_cpu_ns(), self.report.rotations));
            let now = monotonic_ns();
            self.scan(now);
            if self.driver.next_tick().is_some_and(|t| t <= now) {
                self.driver.tick(now);
                if self.trace {
                    tracing::trace!(t = now, running = ?self.driver.running(), "tick");
                }
            }
            if let Some(d) = &mut self.decisions {
                if let Some(cap) = d.exchange(&mut self.driver, now) {
                    tracing::debug!(cap, "adaptive c: new pool capacity");
                }
                stats.publish_adaptive(&d.report());
            }
            if pace.reap_due(now) {
                self.scan_all(now);
                self.reap();
                stats.publish_cpu(pace.cpu_ns());
            }
            self.apply();
            self.publish_successors(now);
            if let (Some((cpu, rotations)), Some(d)) = (pass_start, &mut self.decisions) {
                d.rotation_cost.record(self.report.rotations > rotations, thread_cpu_ns().saturating_sub(cpu));
            }
            self.report.handoffs = h.handoffs.load(Ordering::Relaxed);
            stats.publish(&self.report, self.live.len(), self.driver.waiting(), now);
            if verbose && pace.log_due(now) {
                tracing::info!(report = ?self.report, waiting = self.driver.waiting(), "agent counters");
            }
            // Sleep until the doorbell rings, the policy's next tick, or the heartbeat.
            let now = monotonic_ns();
            let until_tick = self.driver.next_tick().map(|t| t.saturating_sub(now));
            let mut timeout = until_tick.map_or(HEARTBEAT, |t| HEARTBEAT.min(Duration::from_nanos(t)));
            if self.handoff_in_flight {
                timeout = timeout.min(HANDOFF_RECHECK);
            }
            if timeout.is_zero() {
                continue;
            }
            let rung = self.table.sleep_on_doorbell(bell, timeout);
            self.report.wakeups += 1;
            self.report.rung += u64::from(rung);
        }
        self.report.handoffs = h.handoffs.load(Ordering::Relaxed);
        pace.finish(&mut self.report);
    }

    /// Frees the slots of threads that no longer exist.
    fn reap(&mut self) {
        for i in 0..self.registered.len() {
            if let Some(r) = self.registered[i] {
                if !self.processes.same_thread(r.pid, r.tid, r.start) {
                    self.free_dead(i, r);
                }
            }
        }
        self.processes.forget_exited();
    }

    fn free_dead(&mut self, i: usize, r: Registered) {
        let slot = self.table.slot(i);
        // Only if it is still that job: a CAS, since a live claimer may race us.
        let current = slot.word.load(Ordering::Acquire);
        if table::unpack(current).0 == r.generation && table::unpack(current).1 != table::FREE {
            let freed = slot.word.compare_exchange(
                current,
                table::pack(r.generation, table::FREE),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if freed.is_ok() && table::unpack(current).1 == table::RUNNABLE {
                // Its thread never left RUNNABLE: take it out of the node's count for it.
                self.table.header().runnable.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.applied.remove(&job_id(i, r.generation));
        self.report.reaped += 1;
        self.table.changed(i);
        // The next scan sees FREE and completes the job in the policy.
    }

    /// At exit: every thread still in a job back to the policy it had before its job,
    /// under the write fence, so a thread finishing right now keeps its own restore.
    fn restore_all(&mut self) {
        for &i in &self.live {
            let Some(r) = self.registered[i] else { continue };
            if !self.processes.same_thread(r.pid, r.tid, r.start) {
                continue;
            }
            if let Ok(true) = self.table.set_policy_fenced(i, r.generation, r.tid, r.orig, |state| state != table::FREE)
            {
                self.report.restored += 1;
            }
            // Nobody orders them any more: jobs still waiting to be admitted may run.
            self.admit(i);
        }
    }
}

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// The flag `tailor scheduler` stops on: set by SIGINT, SIGTERM, SIGHUP, and by EOF on
/// stdin when stdin is a pipe (a parent that closes the pipe asks the agent to restore
/// and exit; a terminal or /dev/null never does). The agent notices within one heartbeat.
pub fn stop_on_signals() -> &'static AtomicBool {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        // Registering can only fail for signals that must not be caught (SIGKILL, SIGSTOP).
        signal_hook::flag::register(sig, STOP.clone()).expect("SIGINT/SIGTERM/SIGHUP can be caught");
    }
    // SAFETY: fstat on fd 0 with a valid out-pointer.
    let stdin_is_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(0, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if stdin_is_pipe {
        let _ = std::thread::Builder::new().name("tailor-agent-stdin".into()).spawn(|| {
            use std::io::Read;
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            STOP.store(true, Ordering::Relaxed);
        });
    }
    &STOP
}

/// The cadence both agent loops keep (by policy and by key): when the loop started
/// (wall and CPU clocks), when it next reaps dead threads and logs its counters.
pub(super) struct Pace {
    start_wall: Nanos,
    start_cpu: Nanos,
    next_reap: Nanos,
    next_log: Nanos,
}

impl Pace {
    pub(super) fn start() -> Pace {
        let start_wall = monotonic_ns();
        Pace {
            start_wall,
            start_cpu: thread_cpu_ns(),
            next_reap: start_wall + REAP_EVERY,
            next_log: start_wall + LOG_EVERY,
        }
    }

    /// Whether the loop reaps dead threads on this pass (then not again for `REAP_EVERY`).
    pub(super) fn reap_due(&mut self, now: Nanos) -> bool {
        let due = now >= self.next_reap;
        if due {
            self.next_reap = now + REAP_EVERY;
        }
        due
    }

    /// Whether a verbose loop logs its counters on this pass (then not again for a second).
    pub(super) fn log_due(&mut self, now: Nanos) -> bool {
        let due = now >= self.next_log;
        if due {
            self.next_log = now + LOG_EVERY;
        }
        due
    }

    /// CPU time the loop's thread has used so far.
    pub(super) fn cpu_ns(&self) -> Nanos {
        thread_cpu_ns() - self.start_cpu
    }

    /// Writes the loop's wall and CPU time into its report.
    pub(super) fn finish(&self, report: &mut AgentReport) {
        report.wall_ns = monotonic_ns() - self.start_wall;
        report.cpu_ns = self.cpu_ns();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logged_report_reads_back() {
        let report = AgentReport {
            arrivals: 7360,
            rotations: 15404,
            cpu_ns: 986_273_654,
            adaptive: DecisionReport { windows: 3, cap: 2, ..Default::default() },
            ..Default::default()
        };
        let log = format!("tailor agent: pid 1, policy orf\n{}\n", report.log_line());
        assert_eq!(AgentReport::from_log(&log), Some(report));
        // A field this build does not write (an older agent's log) reads as zero.
        let older = r#"tailor agent: stopped; report {"rotations":5,"cpu_ns":10}"#;
        assert_eq!(AgentReport::from_log(older), Some(AgentReport { rotations: 5, cpu_ns: 10, ..Default::default() }));
        // An agent that was killed wrote no report.
        assert_eq!(AgentReport::from_log("tailor agent: pid 1, policy orf\n"), None);
    }
}
