//! The agent under key ordering (`tailor agent --enforce priority`; see `table`, "key
//! ordering"): jobs set their own SCHED_FIFO level from their key and the kernel orders
//! them, so the agent has three jobs left: move `base` forward when new keys run out of
//! levels, free the slots of threads that died, and restore every live thread at exit.
//!
//! Why this exists: under the band, almost every arrival or wake-up on a full node costs an
//! agent wake-up and a remote `sched_setscheduler` (an IPI and a context switch, 13–22 µs
//! each on this project's VMs: docs/demo.md, "Why the kernel path costs what it does
//! here"). Under key ordering a job's only scheduling syscalls are its own two (take its
//! level, restore), on its own CPU, and the preemption of a younger job by an older one is
//! the kernel's ordinary RT wake-up path.
//!
//! The rule itself (levels, when and where the base moves, which policies it can express)
//! is core's `tailor_core::policy::keyed`, the same code the simulator's `keyed` policy
//! runs; this agent only applies it to the table's live jobs.

use std::sync::atomic::{AtomicBool, Ordering};

use tailor_core::policy::keyed;

use super::agent::{AgentReport, Pace, HEARTBEAT};
use super::agent_stats::AgentStats;
use super::identity::Processes;
use super::nspid::Resolver;
use super::sys::ThreadPolicy;
use super::table::{self, Table};
use crate::cpu::{monotonic_ns, realtime_ns};

/// A live job as the agent reads it from its slot: `pid` and `tid` as the job wrote them,
/// in PID namespace `pid_ns` (`None`: the agent's own); see `nspid`.
#[derive(Clone, Copy)]
struct Live {
    slot: usize,
    generation: u64,
    pid: i32,
    tid: i32,
    /// The thread's start time (`Slot::start`): see `identity`.
    start: u64,
    pid_ns: Option<u64>,
    key: u64,
}

pub(super) struct KeyAgent<'t> {
    table: &'t Table,
    key: u32,
    bucket_ns: u64,
    /// Host ids of the threads of jobs registered from other PID namespaces, resolved
    /// when the agent first writes or checks them, per job (slot and generation).
    resolver: Resolver,
    host_ids: std::collections::HashMap<(usize, u64), Option<(i32, i32)>>,
    pub(super) report: AgentReport,
    processes: Processes,
}

impl<'t> KeyAgent<'t> {
    pub(super) fn new(table: &'t Table, key: u32, bucket_ns: u64, resolver: Resolver) -> Self {
        let h = table.header();
        h.ordering.store(table::ORDER_BY_KEY, Ordering::SeqCst);
        h.key.store(key, Ordering::SeqCst);
        h.bucket_ns.store(bucket_ns, Ordering::SeqCst);
        h.base.store(0, Ordering::SeqCst);
        KeyAgent {
            table,
            key,
            bucket_ns,
            resolver,
            host_ids: Default::default(),
            report: AgentReport::default(),
            processes: Processes::default(),
        }
    }

    /// The jobs now registered (RUNNABLE slots).
    fn live(&self) -> Vec<Live> {
        let mut live = Vec::new();
        for i in 0..self.table.slots() {
            let s = self.table.slot(i);
            let (generation, state) = table::unpack(s.word.load(Ordering::SeqCst));
            if state != table::RUNNABLE {
                continue;
            }
            let key = if self.key == table::KEY_DEADLINE { &s.deadline } else { &s.gat };
            live.push(Live {
                slot: i,
                generation,
                pid: s.pid.load(Ordering::Relaxed) as i32,
                tid: s.tid.load(Ordering::Relaxed) as i32,
                start: s.start.load(Ordering::Relaxed),
                pid_ns: table::unpack_pid_ns(generation, s.pid_ns.load(Ordering::Relaxed)),
                key: key.load(Ordering::Relaxed),
            });
        }
        live
    }

    pub(super) fn run(&mut self, stop: &AtomicBool, verbose: bool, stats: &AgentStats) {
        let h = self.table.header();
        let mut pace = Pace::start();
        while !stop.load(Ordering::Relaxed) && !self.table.truncated() {
            h.heartbeat.fetch_add(1, Ordering::Release);
            let bell = h.doorbell.load(Ordering::SeqCst);
            let live = self.live();
            let base = h.base.load(Ordering::SeqCst);
            // A job that rang may have ended before this scan: its key still says how far
            // keys have come. Keys far past the clock (a distant deadline) never move the
            // base: they stay at the bottom level, and the base only moves forward.
            let now_wall = realtime_ns();
            let rung = Some(h.newest.swap(0, Ordering::SeqCst)).filter(|&k| k > 0);
            let keys = || live.iter().map(|j| j.key).filter(|&k| keyed::in_horizon(k, now_wall));
            if let Some(newest) = keys().max().max(rung.filter(|&k| keyed::in_horizon(k, now_wall))) {
                let oldest = keys().min().unwrap_or(newest);
                if let Some(new_base) = keyed::base_after_pass(base, oldest, newest, self.bucket_ns) {
                    self.shift(&live, base, new_base);
                }
            }
            let now = monotonic_ns();
            if pace.reap_due(now) {
                // Jobs that ended take their resolved ids with them.
                let current: std::collections::HashSet<(usize, u64)> =
                    live.iter().map(|j| (j.slot, j.generation)).collect();
                self.host_ids.retain(|job, _| current.contains(job));
                self.reap(&live);
                stats.publish_cpu(pace.cpu_ns());
            }
            // The kernel orders the jobs here: none waits on the agent.
            stats.publish(&self.report, live.len(), 0, now);
            if verbose && pace.log_due(now) {
                tracing::info!(
                    report = ?self.report,
                    live = live.len(),
                    base = h.base.load(Ordering::Relaxed),
                    "agent counters"
                );
            }
            let rung = self.table.sleep_on_doorbell(bell, HEARTBEAT);
            self.report.wakeups += 1;
            self.report.rung += u64::from(rung);
        }
        pace.finish(&mut self.report);
    }

    /// Moves `base` forward to `new_base` and rewrites the level of every live job it
    /// changes. Every level rises (or stays), so no two live jobs swap order, and jobs that
    /// start meanwhile read the new base (they published RUNNABLE before reading it; the
    /// base is stored before this scan), so each job ends at its level under `new_base`.
    fn shift(&mut self, live: &[Live], base: u64, new_base: u64) {
        self.table.header().base.store(new_base, Ordering::SeqCst);
        self.report.shifts += 1;
        for j in live {
            let level = table::level(j.key, new_base, self.bucket_ns);
            if level == table::level(j.key, base, self.bucket_ns) {
                continue;
            }
            match self.write(j, ThreadPolicy::fifo(level)) {
                Ok(true) => self.report.rewrites += 1,
                Ok(false) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => self.free_dead(j),
                Err(e) => self.report.error(format!("pid {} tid {}: cannot set SCHED_FIFO/{level}: {e}", j.pid, j.tid)),
            }
        }
    }

    /// Host `(pid, tid)` of job `j`'s thread, resolved once per job; `None`: no live thread
    /// is that job's (it died, or its ids now name another thread), never to be written.
    fn host(&mut self, j: &Live) -> Option<(i32, i32)> {
        let (resolver, ids) = (&mut self.resolver, &mut self.host_ids);
        *ids.entry((j.slot, j.generation)).or_insert_with(|| resolver.resolve(j.pid_ns, j.pid, j.tid, j.start))
    }

    /// Sets job `j`'s thread to `p` under the write fence (see `table`): only if the slot
    /// still holds that job, RUNNABLE. `Ok(false)`: it left meanwhile (or its thread cannot
    /// be found), nothing written.
    fn write(&mut self, j: &Live, p: ThreadPolicy) -> std::io::Result<bool> {
        let Some((pid, tid)) = self.host(j) else {
            self.report.unresolved += 1;
            return Ok(false);
        };
        if !self.processes.same_thread(pid, tid, j.start) {
            // Its process died (and the id may be another thread's now): never write it.
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        self.table.set_policy_fenced(j.slot, j.generation, tid, p, |state| state == table::RUNNABLE)
    }

    fn reap(&mut self, live: &[Live]) {
        for j in live {
            let alive = match self.host(j) {
                Some((pid, tid)) => self.processes.same_thread(pid, tid, j.start),
                // Not found: gone if the agent can see its namespace, else left alone (an
                // agent without the host's PID namespace must not free live jobs' slots).
                None => !self.resolver.sees(j.pid_ns),
            };
            if !alive {
                self.free_dead(j);
            }
        }
        self.processes.forget_exited();
    }

    fn free_dead(&mut self, j: &Live) {
        let word = &self.table.slot(j.slot).word;
        if word
            .compare_exchange(
                table::pack(j.generation, table::RUNNABLE),
                table::pack(j.generation, table::FREE),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.report.reaped += 1;
        }
    }

    /// At exit: every thread still in a job back to its pre-job policy, under the write
    /// fence, so a thread finishing right now keeps its own restore.
    pub(super) fn restore_all(&mut self) {
        for j in self.live() {
            let s = self.table.slot(j.slot);
            let orig = ThreadPolicy {
                policy: s.orig_policy.load(Ordering::Relaxed),
                priority: s.orig_priority.load(Ordering::Relaxed),
            };
            if let Ok(true) = self.write(&j, orig) {
                self.report.restored += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::agent::{Enforce, EnforceError};
    use super::table;
    use tailor_core::PolicySpec;

    /// Which policies key ordering expresses is core's decision (`keyed::key_field_of`);
    /// the agent adds the flags that fix a refusal.
    #[test]
    fn a_policy_key_ordering_cannot_express_is_refused_with_the_fix() {
        assert_eq!(Enforce::key_of(&PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2), Ok(table::KEY_GAT));
        assert_eq!(Enforce::key_of(&PolicySpec::Edf, 2), Ok(table::KEY_DEADLINE));
        let e = Enforce::key_of(&PolicySpec::Orf { c: 6, slice_us: 500.0 }, 2).unwrap_err();
        assert!(matches!(e, EnforceError::OrfCNotCpus { cpus: 2, .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("--c 2") && e.contains("--enforce band"), "{e}");
        let e = Enforce::key_of(&PolicySpec::Rr { slice_us: 500.0 }, 2).unwrap_err();
        assert!(matches!(e, EnforceError::NotKeyed { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("rr does not order") && e.contains("--enforce band"), "{e}");
    }
}
