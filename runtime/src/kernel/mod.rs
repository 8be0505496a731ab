//! The kernel-enforced backend: a node-wide agent turns the policy's decisions into
//! thread priorities, so the kernel preempts for us (no ghOSt, no sched_ext).
//!
//! - [`table`]: the shared-memory registration table (a file in /dev/shm);
//! - [`agent`]: the node agent (`tailor agent`), one policy instance for the node;
//! - [`nspid`]: host ids of threads registered from other PID namespaces (pods);
//! - this module: the service side. A job's thread claims a slot, writes its context,
//!   marks it runnable and rings the agent, which puts it in the SCHED_FIFO band when
//!   the policy runs it (until then it waits asleep; a job the policy preempts mid-run is
//!   parked at SCHED_IDLE). See `table` for the fast path and the hand-off, which let a
//!   job enter the band without the agent. A watchdog thread restores every
//!   thread of this process and falls back to the cooperative backend if the agent's
//!   heartbeat stops.
//!
//! Who may still run when the band saturates the CPUs matters: a thread that must
//! *tell* the agent something (a new job, a wake-up) needs a CPU to do it. So job
//! threads start their jobs from above the band (I/O and pool threads run at
//! [`IO_PRIORITY`]), and a job that blocks raises itself to [`IO_PRIORITY`] before it
//! sleeps, so it can ring when it wakes; it then re-enters the band itself if the node has
//! room, or waits asleep until the agent admits it or a leaving job hands it a CPU.
//!
//! Under key ordering (`tailor agent --enforce priority`, see `table`) none of the band's
//! machinery runs: a job's thread takes a SCHED_FIFO level from its key (GAT or deadline)
//! when it starts, keeps it while it blocks, and restores its own policy when it ends; the
//! kernel runs the highest levels.
//!
//! Priorities (SCHED_FIFO, all below kernel threads such as migration/N and threaded
//! IRQs at 50): band [`BAND_PRIORITY`], or key levels 1..=[`table::TOP_LEVEL`] < I/O
//! threads [`IO_PRIORITY`] < watchdogs [`WATCHDOG_PRIORITY`] < agent [`AGENT_PRIORITY`].

pub mod agent;
pub mod agent_stats;
mod by_key;
mod decisions;
mod identity;
mod io_threads;
pub mod nspid;
pub mod supervise;
pub mod sys;
pub mod table;
mod table_lock;
mod watchdog;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use tailor_core::Context;

pub use agent::{
    preflight, run_agent, run_agent_with_stats, stop_on_signals, AgentConfig, AgentReport, Enforce, EnforceError,
};
pub use agent_stats::{AgentStats, ServeError};
pub use decisions::DecisionReport;
pub use sys::SysError;
use sys::ThreadPolicy;
use table::Table;

use crate::config::{available_cpus, BackendSpec};
use crate::cooperative::Cooperative;
use crate::scheduler::{Inner, PermitJob};
use crate::stats::Counters;
use crate::RuntimeError;

/// SCHED_FIFO priority of the jobs the policy runs.
pub const BAND_PRIORITY: i32 = 10;
/// SCHED_FIFO priority of I/O threads ([`crate::Scheduler::io_thread_started`]): above
/// the band, so a newly arrived (possibly older) request is accepted and parsed while
/// the band is saturated.
pub const IO_PRIORITY: i32 = table::TOP_LEVEL + 1;
/// SCHED_FIFO priority of each process's watchdog: it must run while the band is saturated.
pub const WATCHDOG_PRIORITY: i32 = IO_PRIORITY + 1;
/// SCHED_FIFO priority of the agent: above everything it schedules.
pub const AGENT_PRIORITY: i32 = WATCHDOG_PRIORITY + 1;

/// A job registered in the table (or, after a fallback, nothing to undo but its slot).
pub(crate) struct Registration {
    /// The agent the job registered with (its table stays mapped while the job lives,
    /// also after this process re-attached to a new agent).
    att: Arc<Attachment>,
    slot: usize,
    generation: u64,
    tid: i32,
    orig: ThreadPolicy,
}

/// The agent this process is attached to: its table and the ordering it announced (set
/// by the agent before it runs and never changed, so read once here, not per job).
struct Attachment {
    table: Table,
    /// The agent orders jobs by key (`table::ORDER_BY_KEY`): jobs take their own levels.
    by_key: bool,
    /// Key ordering: the key is the deadline (else the GAT), and its span per level.
    key_is_deadline: bool,
    bucket_ns: u64,
    agent_pid: i32,
}

impl Attachment {
    /// Maps the table at `path` if a live agent serves it (waiting up to 2 s for one that
    /// is starting), else says why not.
    fn open(path: &std::path::Path) -> Result<Attachment, RuntimeError> {
        let t = Table::open(path)?;
        let h = t.header();
        // An agent creates its table a moment before it starts serving it.
        let starting = Instant::now();
        while h.agent_state.load(Ordering::Acquire) == table::AGENT_STARTING
            && starting.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = h.agent_pid.load(Ordering::Acquire) as i32;
        // Not by pid alone: in a pod the agent's pid is not in this PID namespace, so
        // `agent_serving` falls back on the heartbeat.
        if !t.agent_serving() {
            return Err(RuntimeError::Unsupported(format!(
                "{}: the agent (pid {pid}) is not running. Fix: start `tailor agent --table {}`",
                path.display(),
                path.display()
            )));
        }
        Ok(Attachment {
            by_key: h.ordering.load(Ordering::Acquire) == table::ORDER_BY_KEY,
            key_is_deadline: h.key.load(Ordering::Acquire) == table::KEY_DEADLINE,
            bucket_ns: h.bucket_ns.load(Ordering::Acquire),
            agent_pid: pid,
            table: t,
        })
    }
}

/// A thread's policy before we changed it, and the thread for good (`ThreadIdentity`): the
/// watchdog writes a thread id only while it still names that thread.
type Remembered = (ThreadPolicy, sys::ThreadIdentity);

pub(crate) struct KernelBackend {
    /// The agent jobs register with now; replaced when a new agent comes up (re-attach).
    attached: RwLock<Arc<Attachment>>,
    table_path: std::path::PathBuf,
    fallback: Cooperative,
    fell_back: AtomicBool,
    /// Threads of this process now in a job, with their policy before it: what the
    /// watchdog restores if the agent dies.
    job_threads: Mutex<HashMap<i32, Remembered>>,
    /// I/O and pool threads, with their natural policy (before any raise): raised above
    /// the band while attached, at their natural policy after a fallback, raised again
    /// on re-attach. A job's thread that is one of these goes back to this natural policy,
    /// not to the I/O level it had before the job, once the process has fallen back.
    io_threads: Mutex<HashMap<i32, Remembered>>,
    /// Pool threads raised by their spawner before they first ran, keyed by pthread
    /// handle, with the policy they would have started with.
    spawned: Mutex<HashMap<libc::pthread_t, ThreadPolicy>>,
    watchdog: Duration,
    /// `park = "idle"`: no admission wait (see `register`).
    park_idle: bool,
    next_slot: AtomicUsize,
    /// This process's PID namespace inode, written with every job: the ids in a slot are
    /// this namespace's, which in a pod are not the agent's (see `nspid`).
    pid_ns: u64,
    description: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl KernelBackend {
    pub fn new(spec: &BackendSpec) -> Result<Self, RuntimeError> {
        let BackendSpec::Kernel { table, watchdog_ms, fallback_policy, fallback_c, park } = spec else {
            unreachable!("KernelBackend::new with a non-kernel spec")
        };
        if !sys::has_cap_sys_nice() {
            return Err(RuntimeError::Unsupported(
                "kernel backend needs CAP_SYS_NICE (its watchdog and I/O threads run SCHED_FIFO). Fix: run as root \
                 or `setcap cap_sys_nice+ep <binary>`, or use {\"kind\": \"cooperative\"}"
                    .into(),
            ));
        }
        if let Some(problem) = sys::rt_group_problem(0, 0) {
            return Err(RuntimeError::Unsupported(problem));
        }
        if *watchdog_ms < 2 * agent::HEARTBEAT.as_millis() as u64 {
            return Err(RuntimeError::Config(format!(
                "kernel backend: `watchdog_ms` = {watchdog_ms} is shorter than two agent heartbeats ({} ms)",
                2 * agent::HEARTBEAT.as_millis()
            )));
        }
        let att = Attachment::open(table)?;
        let (pid, by_key, key_is_deadline, bucket_ns) = (att.agent_pid, att.by_key, att.key_is_deadline, att.bucket_ns);
        let pid_ns = nspid::own_pid_ns().map_err(|e| {
            RuntimeError::Unsupported(format!(
                "kernel backend: cannot read /proc/self/ns/pid ({e}): the agent needs this process's PID namespace \
                 to find its threads. Fix: mount /proc in the container (every runtime does by default)"
            ))
        })?;
        let c = if *fallback_c == 0 { available_cpus() } else { *fallback_c };
        let fallback = Cooperative::new(fallback_policy, c)?;
        let ordering = if by_key {
            let key = if key_is_deadline { "deadline" } else { "GAT" };
            format!("jobs at SCHED_FIFO 1..={} by {key}, one level per {} µs", table::TOP_LEVEL, bucket_ns as f64 / 1e3)
        } else {
            format!("band SCHED_FIFO/{BAND_PRIORITY}, waiting jobs asleep or SCHED_IDLE")
        };
        let description = format!(
            "backend kernel (agent pid {pid}, table {}, {} slots; {ordering}; watchdog {watchdog_ms} ms, then \
             cooperative {fallback_policy:?} c={c}, re-attached when an agent serves the table again)",
            table.display(),
            att.table.slots()
        );
        Ok(KernelBackend {
            attached: RwLock::new(Arc::new(att)),
            table_path: table.clone(),
            fallback,
            fell_back: AtomicBool::new(false),
            job_threads: Mutex::new(HashMap::new()),
            io_threads: Mutex::new(HashMap::new()),
            spawned: Mutex::new(HashMap::new()),
            park_idle: *park == crate::config::Park::Idle,
            watchdog: Duration::from_millis(*watchdog_ms),
            next_slot: AtomicUsize::new(0),
            pid_ns,
            description,
        })
    }

    pub fn describe(&self) -> String {
        self.description.clone()
    }

    pub fn fallback(&self) -> &Cooperative {
        &self.fallback
    }

    pub fn fell_back(&self) -> bool {
        // SeqCst: a thread that changed its own policy and then reads `false` here is
        // ordered before the watchdog's fallback, whose restore then lands after its change.
        self.fell_back.load(Ordering::SeqCst)
    }

    fn attachment(&self) -> Arc<Attachment> {
        self.attached.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What the calling thread goes back to once this process has fallen back: its natural
    /// policy if it is an I/O or pool thread, else `orig` (its policy before the job).
    fn natural(&self, tid: i32, orig: ThreadPolicy) -> ThreadPolicy {
        lock(&self.io_threads).get(&tid).map_or(orig, |(natural, _)| *natural)
    }

    /// Call after the calling thread changed its own policy: if the watchdog fell back
    /// meanwhile (its restore may have landed before our change), put the thread back
    /// to its natural policy ourselves. Either the watchdog's restore comes after our
    /// change, or this check sees the fallback: nothing stays raised.
    fn settle(&self, orig: ThreadPolicy) {
        if self.fell_back() {
            let _ = sys::set_policy(0, self.natural(sys::gettid(), orig));
        }
    }

    /// Registers a job of the calling thread.
    pub fn enter(&self, ctx: &Context, counters: &Counters) -> PermitJob {
        if !self.fell_back() {
            let att = self.attachment();
            if att.by_key {
                if let Some(reg) = self.register_by_key(&att, ctx, counters) {
                    return PermitJob::Kernel(reg);
                }
            } else if let Some(reg) = self.register(&att, ctx, counters) {
                let waited = self.wait_for_admission(&reg);
                Counters::add(&counters.waited_ns, waited);
                return PermitJob::Kernel(reg);
            }
        }
        let (id, waited) = self.fallback.enter(ctx.gat, ctx.deadline, ctx.class, counters);
        Counters::add(&counters.waited_ns, waited);
        PermitJob::Cooperative(id)
    }

    /// Key ordering: claim a slot, publish RUNNABLE, take the level of our key. No wait:
    /// the kernel runs us when we are among the highest levels.
    fn register_by_key(&self, att: &Arc<Attachment>, ctx: &Context, counters: &Counters) -> Option<Registration> {
        let reg = self.claim(att, ctx, counters)?;
        let s = att.table.slot(reg.slot);
        s.admitted.store(table::SELF_ADMITTED, Ordering::Relaxed);
        // RUNNABLE before we read the base: an agent shift that stores a new base after our
        // read finds us in its scan and rewrites our level (see `table`, "key ordering").
        s.word.store(table::pack(reg.generation, table::RUNNABLE), Ordering::SeqCst);
        let h = att.table.header();
        let key = if att.key_is_deadline { ctx.deadline } else { ctx.gat };
        loop {
            let base = h.base.load(Ordering::SeqCst);
            let level = table::level(key, base, att.bucket_ns);
            if let Err(e) = sys::set_policy(0, ThreadPolicy::fifo(level)) {
                Counters::add(&counters.errors, 1);
                // Once per process: every job would fail the same way (`stats().errors` counts them).
                static LOGGED: AtomicBool = AtomicBool::new(false);
                if !LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot take SCHED_FIFO/{level}; jobs run at their thread's policy");
                }
                break;
            }
            if h.base.load(Ordering::SeqCst) == base {
                // Out of levels: new keys would all share the bottom one until the agent
                // shifts. (A job with no deadline under edf belongs at the bottom anyway.)
                if level <= table::SHIFT_LEVEL && key != tailor_core::time::NEVER {
                    h.newest.fetch_max(key, Ordering::SeqCst);
                    att.table.ring();
                }
                break;
            }
        }
        self.settle(reg.orig);
        Some(reg)
    }

    /// Claims a free slot for a job of the calling thread and writes its context; the slot
    /// is CLAIMED (the agent ignores it) until the caller publishes RUNNABLE.
    fn claim(&self, att: &Arc<Attachment>, ctx: &Context, counters: &Counters) -> Option<Registration> {
        let me = sys::ThreadIdentity::current();
        let (tid, thread_start) = (me.tid, me.start);
        // Safe to read as "the policy before this job": the write fence (see `table`) means
        // no agent write for an earlier job of this thread can still be in flight.
        let orig = match sys::get_policy(0) {
            Ok(p) => p,
            Err(e) => {
                Counters::add(&counters.errors, 1);
                tracing::warn!(error = %e, "sched_getattr failed");
                return None;
            }
        };
        let n = att.table.slots();
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed) % n;
        let (slot, generation) = (0..n).find_map(|k| {
            let i = (start + k) % n;
            let word = att.table.slot(i).word.load(Ordering::Relaxed);
            let (generation, state) = table::unpack(word);
            let claimed = table::pack(generation + 1, table::CLAIMED);
            (state == table::FREE
                && att.table.slot(i).word.compare_exchange(word, claimed, Ordering::AcqRel, Ordering::Relaxed).is_ok())
            .then_some((i, generation + 1))
        })?;
        let s = att.table.slot(slot);
        s.pid.store(std::process::id(), Ordering::Relaxed);
        s.tid.store(tid as u32, Ordering::Relaxed);
        s.start.store(thread_start, Ordering::Relaxed);
        s.pid_ns.store(table::pack_pid_ns(generation, self.pid_ns), Ordering::Relaxed);
        s.gat.store(ctx.gat, Ordering::Relaxed);
        s.deadline.store(ctx.deadline, Ordering::Relaxed);
        s.class.store(ctx.class as u32, Ordering::Relaxed);
        s.orig_policy.store(orig.policy, Ordering::Relaxed);
        s.orig_priority.store(orig.priority, Ordering::Relaxed);
        s.successor.store(0, Ordering::Relaxed);
        lock(&self.job_threads).insert(tid, (orig, me));
        Some(Registration { att: att.clone(), slot, generation, tid, orig })
    }

    fn register(&self, att: &Arc<Attachment>, ctx: &Context, counters: &Counters) -> Option<Registration> {
        let reg = self.claim(att, ctx, counters)?;
        let (slot, generation) = (reg.slot, reg.generation);
        let s = att.table.slot(slot);
        // We may enter the band ourselves now, while CLAIMED, the only time before the job's
        // end that we may. After RUNNABLE the agent is the one writer of this thread's policy.
        let admitted = self.admit_self(&att.table, reg.orig);
        let fast = admitted == table::SELF_ADMITTED;
        s.admitted.store(admitted, Ordering::Relaxed);
        s.word.store(table::pack(generation, table::RUNNABLE), Ordering::SeqCst);
        if fast {
            att.table.mark(slot);
        } else {
            att.table.changed(slot);
        }
        Some(reg)
    }

    /// Counts the calling thread's job runnable and, on the fast path (see `table`: the
    /// node has room, so the policy runs it), enters the band by itself. Returns what the
    /// job's slot records: SELF_ADMITTED on the fast path; else ADMITTED under
    /// `park = "idle"` (the earlier design, kept for side-by-side measurement: run on above
    /// the band, the agent parks the job at SCHED_IDLE if it must wait); else WAITING.
    /// Never enters the band once this process fell back (there is no agent to leave it to).
    fn admit_self(&self, table: &Table, orig: ThreadPolicy) -> u32 {
        let h = table.header();
        let has_room = h.runnable.fetch_add(1, Ordering::SeqCst) < h.fast_limit.load(Ordering::SeqCst);
        let fast = !self.park_idle
            && has_room
            && !self.fell_back()
            && sys::set_policy(0, ThreadPolicy::fifo(BAND_PRIORITY)).is_ok();
        if fast {
            self.settle(orig);
        }
        match (fast, self.park_idle) {
            (true, _) => table::SELF_ADMITTED,
            (false, true) => table::ADMITTED,
            (false, false) => table::WAITING,
        }
    }

    /// Sleeps until the agent admits the new job (see `table`, "the admission wait"), a
    /// leaving job hands it its CPU ("the hand-off"), or this process falls back; returns
    /// the ns waited. The recheck bounds the wait on an agent that died without waking us
    /// to the watchdog's reaction time.
    fn wait_for_admission(&self, reg: &Registration) -> u64 {
        const RECHECK: Duration = Duration::from_millis(20);
        let table = &reg.att.table;
        let admitted = &table.slot(reg.slot).admitted;
        if admitted.load(Ordering::Acquire) != table::WAITING {
            return 0;
        }
        let start = Instant::now();
        while admitted.load(Ordering::Acquire) == table::WAITING && !self.fell_back() {
            sys::futex_wait(admitted, table::WAITING, RECHECK);
        }
        if admitted.load(Ordering::Acquire) == table::HANDED && !self.fell_back() {
            // The agent does not write us while HANDED: this write cannot overtake one of
            // its. If the band refuses us, we still run (above it, as the agent's fallback
            // would have us) and it corrects us at its next pass.
            let _ = sys::set_policy(0, ThreadPolicy::fifo(BAND_PRIORITY));
            self.settle(reg.orig);
            let _ = admitted.compare_exchange(table::HANDED, table::SELF_ADMITTED, Ordering::AcqRel, Ordering::Relaxed);
            table.mark(reg.slot);
        }
        start.elapsed().as_nanos() as u64
    }

    /// Job `reg` leaves RUNNABLE for `state` (BLOCKED or FREE); returns what the CPU it
    /// frees is owed: `None` if nobody waited, else the successor the agent published
    /// (read first: once FREE, the slot may be claimed and cleared). The dirty bit is set
    /// before the CPU is given away (by the hand-off, or as room a new job finds): an agent
    /// that finds a job started in this one's place also finds, by its next scan, that
    /// this one left.
    fn leave_band(&self, reg: &Registration, state: u64) -> Option<u64> {
        let table = &reg.att.table;
        let successor = table.slot(reg.slot).successor.load(Ordering::SeqCst);
        table.leave_runnable(reg.slot, reg.generation, state);
        table.mark(reg.slot);
        let h = table.header();
        let was_full = h.runnable.fetch_sub(1, Ordering::SeqCst) > h.fast_limit.load(Ordering::SeqCst);
        was_full.then_some(successor)
    }

    /// After [`Self::leave_band`]: if jobs waited, hand the CPU to the policy's successor
    /// ourselves, or ring the agent.
    fn cpu_freed(&self, table: &Table, waited: Option<u64>) {
        if waited.is_some_and(|successor| !self.hand_off(table, successor)) {
            table.ring();
        }
    }

    /// Claims the successor the agent published (see `table`, "the hand-off") and wakes it.
    fn hand_off(&self, table: &Table, successor: u64) -> bool {
        let Some((i, generation_bits)) = table::unpack_successor(successor) else { return false };
        if i >= table.slots() || self.fell_back() {
            return false;
        }
        let s = table.slot(i);
        if !table::is_runnable_successor(s.word.load(Ordering::SeqCst), generation_bits)
            || s.admitted.compare_exchange(table::WAITING, table::HANDED, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return false;
        }
        sys::futex_wake(&s.admitted);
        table.header().handoffs.fetch_add(1, Ordering::Relaxed);
        true
    }

    pub fn block(&self, reg: &Registration) {
        if reg.att.by_key {
            // Keep the level: when the call returns, the kernel runs us by it.
            return;
        }
        // Above the band while blocked: when the call returns we must get a CPU to
        // ring the agent even if the band is saturated (the agent then moves us).
        // BLOCKED first and wait out any agent write in flight, so the agent cannot
        // overwrite this with the band or SCHED_IDLE.
        let waited = self.leave_band(reg, table::BLOCKED);
        if !self.fell_back() {
            let _ = sys::set_policy(0, ThreadPolicy::fifo(IO_PRIORITY));
            self.settle(reg.orig);
        }
        self.cpu_freed(&reg.att.table, waited);
    }

    /// The job's blocking call returned; returns the ns it then waited to run again.
    pub fn wake(&self, reg: &Registration) -> u64 {
        if reg.att.by_key {
            return 0;
        }
        // As a new job: with room on the node, back into the band by ourselves (while
        // BLOCKED, when the agent never writes us); else ring and wait to be admitted
        // (or handed a CPU). On a full node no policy here runs a waking job at once
        // (orf preempts at slice ends, the others never), so waiting asleep costs it
        // nothing and spares the agent a demotion of a thread running above the band.
        let table = &reg.att.table;
        let admitted = self.admit_self(table, reg.orig);
        let fast = admitted == table::SELF_ADMITTED;
        let s = table.slot(reg.slot);
        s.admitted.store(admitted, Ordering::Relaxed);
        s.wakes.fetch_add(1, Ordering::SeqCst);
        s.word.store(table::pack(reg.generation, table::RUNNABLE), Ordering::SeqCst);
        if fast {
            table.mark(reg.slot);
            0
        } else {
            table.changed(reg.slot);
            self.wait_for_admission(reg)
        }
    }

    pub fn leave(&self, reg: &Registration, counters: &Counters) {
        // FREE, then wait out any agent write in flight for this job: after that the
        // agent never writes this thread for this job, so our restore is the last word.
        let waited = if reg.att.by_key {
            reg.att.table.leave_runnable(reg.slot, reg.generation, table::FREE);
            None
        } else {
            self.leave_band(reg, table::FREE)
        };
        // After a fallback, an I/O or pool thread's pre-job policy is the I/O level the
        // watchdog already took it off: it goes to its natural policy instead.
        let restore = if self.fell_back() { self.natural(reg.tid, reg.orig) } else { reg.orig };
        match sys::set_policy(0, restore) {
            Ok(()) => Counters::add(&counters.priority_changes, 1),
            Err(e) => {
                Counters::add(&counters.errors, 1);
                tracing::warn!(error = %e, "cannot restore {} after a job", restore.describe());
            }
        }
        self.settle(reg.orig);
        lock(&self.job_threads).remove(&reg.tid);
        self.cpu_freed(&reg.att.table, waited);
    }
}

/// What `orf-adaptive` needs beyond a name and a slice: the largest `c` it may choose and
/// the completed jobs per decision (`tailor agent --c-max M --window-jobs W`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveArgs {
    pub c_max: usize,
    pub window_jobs: usize,
}

impl Default for AdaptiveArgs {
    /// The policy's own defaults (docs/policies.md, "Adaptive c").
    fn default() -> Self {
        AdaptiveArgs { c_max: 64, window_jobs: 2000 }
    }
}

/// The policy a `tailor agent --policy NAME --c C --slice-us S` command line means
/// (`orf-adaptive`: with `adaptive`'s bounds; `c` is for `orf`).
pub fn policy_from_args(
    name: &str,
    c: usize,
    slice_us: f64,
    adaptive: AdaptiveArgs,
) -> Result<tailor_core::PolicySpec, RuntimeError> {
    use tailor_core::PolicySpec;
    let spec = match name {
        "orf" => PolicySpec::Orf { c, slice_us },
        "orf-adaptive" => {
            PolicySpec::OrfAdaptive { c_max: adaptive.c_max, slice_us, window_jobs: adaptive.window_jobs }
        }
        "rr" => PolicySpec::Rr { slice_us },
        "ps" => PolicySpec::Ps { slice_us },
        "edf" => PolicySpec::Edf,
        "fifo" => PolicySpec::Fifo,
        "gfifo" => PolicySpec::Gfifo,
        "priq" => PolicySpec::Priq,
        "lifo" => PolicySpec::Lifo,
        other => {
            return Err(RuntimeError::Config(format!(
                "--policy {other}: unknown; use one of orf, orf-adaptive, rr, ps, edf, fifo, gfifo, priq, lifo"
            )))
        }
    };
    spec.validate().map_err(|e| RuntimeError::Config(format!("--policy {name}: {e}")))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::PolicySpec;

    #[test]
    fn the_agent_command_line_takes_orf_adaptive_for_the_band_only() {
        let adaptive = AdaptiveArgs { c_max: 16, window_jobs: 300 };
        let spec = policy_from_args("orf-adaptive", 6, 500.0, adaptive).expect("orf-adaptive is a policy");
        assert_eq!(spec, PolicySpec::OrfAdaptive { c_max: 16, slice_us: 500.0, window_jobs: 300 });
        // The band runs the policy object, which owns the controller.
        assert!(spec.build_any(2, 0).is_ok());
        // Key ordering has no c to tune: it refuses and says which enforcement to use.
        let refused = Enforce::key_of(&spec, 2).expect_err("no static key").to_string();
        assert!(refused.contains("--enforce band"), "{refused}");
        // Bad bounds are named.
        let zero = policy_from_args("orf-adaptive", 6, 500.0, AdaptiveArgs { c_max: 0, window_jobs: 300 })
            .expect_err("c_max 0");
        assert!(zero.to_string().contains("c_max"), "{zero}");
        let unknown = policy_from_args("orf-adaptiv", 6, 500.0, AdaptiveArgs::default()).expect_err("unknown");
        assert!(unknown.to_string().contains("orf-adaptive"), "{unknown}");
    }
}
