//! A CFS-like fair scheduler: the waiting job with the least CPU time
//! received (vruntime) runs next, and a running job is preempted once it has
//! had its slice and is ahead of someone waiting.
//!
//! This is the baseline TailClipper calls CFS-gh (ghOSt's CFS, 1 ms minimum
//! granularity, 10 ms latency target), reduced to what decides latency:
//!
//! - every job has weight 1, so its vruntime is the nanoseconds of CPU it has
//!   received;
//! - a new or woken job starts at `max(own vruntime, min_vruntime)`, where
//!   `min_vruntime` is the non-decreasing minimum over runnable jobs (CFS
//!   `place_entity`, without its sleeper credit or start debit): a newcomer
//!   cannot claim CPU time it was not there to use;
//! - a running job's slice is `max(min_granularity, latency / nr_runnable)`;
//!   at a tick, a job that has run for at least its slice since dispatch is
//!   preempted if the least-vruntime waiting job has a strictly smaller
//!   vruntime than its own, updated to now.
//!
//! One run queue serves all CPUs. ghOSt's CFS, like Linux's, keeps a queue per
//! CPU and balances them now and then; the global queue here is the idealised
//! CFS, free of per-core queue imbalance, so that comparisons measure the
//! discipline rather than the load balancer.
//!
//! `next_tick` is exact: the earliest instant at which some running job both
//! has had its slice and has overtaken the head of the queue. A tick there
//! preempts at least one job, so the driver never spins and extra ticks
//! change nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::{Job, JobId, Policy};
use crate::time::Nanos;

/// The job on a CPU: its vruntime when dispatched, and when that was.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    vruntime: Nanos,
    since: Nanos,
}

impl Slot {
    #[inline]
    fn vruntime_at(&self, now: Nanos) -> Nanos {
        self.vruntime + now.saturating_sub(self.since)
    }
}

/// CFS-like vruntime scheduling over one global queue; see the module docs.
#[derive(Clone)]
pub struct Fair {
    min_granularity: Nanos,
    latency: Nanos,
    running: Vec<Option<JobId>>,
    slots: Vec<Slot>,
    idle: usize,
    /// Waiting jobs by `(vruntime, seq)`: a waiting job's vruntime does not
    /// change, so a heap keeps them in order.
    queue: BinaryHeap<Reverse<(Nanos, u64, JobId)>>,
    /// vruntime of each blocked job, for when it wakes. (Looked up, never
    /// iterated: hash order cannot leak into decisions.)
    blocked: HashMap<JobId, Nanos>,
    min_vruntime: Nanos,
    seq: u64,
    /// Scratch for `tick`: `(vruntime now, cpu)` of jobs that have had their slice.
    candidates: Vec<(Nanos, usize)>,
}

impl Fair {
    pub fn new(cpus: usize, min_granularity: Nanos, latency: Nanos) -> Self {
        assert!(cpus > 0, "a policy needs at least one CPU");
        assert!(min_granularity > 0 && latency > 0, "granularity and latency must be positive");
        Fair {
            min_granularity,
            latency,
            running: vec![None; cpus],
            slots: vec![Slot::default(); cpus],
            idle: cpus,
            queue: BinaryHeap::new(),
            blocked: HashMap::new(),
            min_vruntime: 0,
            seq: 0,
            candidates: Vec::with_capacity(cpus),
        }
    }

    /// The current slice: the latency target shared among the runnable jobs,
    /// but never below the minimum granularity.
    pub fn slice(&self) -> Nanos {
        let runnable = (self.running.len() - self.idle + self.queue.len()).max(1) as Nanos;
        (self.latency / runnable).max(self.min_granularity)
    }

    /// The floor for newcomers' vruntime (CFS `min_vruntime`).
    pub fn min_vruntime(&self) -> Nanos {
        self.min_vruntime
    }

    /// Raises `min_vruntime` to the least vruntime among runnable jobs at `now`.
    fn update_min_vruntime(&mut self, now: Nanos) {
        let waiting = self.queue.peek().map(|Reverse((v, _, _))| *v);
        let running = (0..self.running.len())
            .filter(|&cpu| self.running[cpu].is_some())
            .map(|cpu| self.slots[cpu].vruntime_at(now))
            .min();
        let least = match (waiting, running) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(v) => v,
                None => return, // nothing runnable: keep the floor where it is
            },
        };
        self.min_vruntime = self.min_vruntime.max(least);
    }

    fn enqueue(&mut self, now: Nanos, id: JobId, own: Nanos) {
        self.update_min_vruntime(now);
        let vruntime = own.max(self.min_vruntime);
        if self.idle > 0 {
            // Work-conserving: an idle CPU means nobody waits, so it runs now.
            debug_assert!(self.queue.is_empty());
            let cpu = self.running.iter().position(Option::is_none).expect("idle count says a CPU is free");
            self.dispatch(now, cpu, id, vruntime);
        } else {
            self.seq += 1;
            self.queue.push(Reverse((vruntime, self.seq, id)));
        }
    }

    fn dispatch(&mut self, now: Nanos, cpu: usize, id: JobId, vruntime: Nanos) {
        debug_assert!(self.running[cpu].is_none());
        self.running[cpu] = Some(id);
        self.slots[cpu] = Slot { vruntime, since: now };
        self.idle -= 1;
    }

    /// A running job leaves its CPU; returns its vruntime.
    fn leave(&mut self, now: Nanos, id: JobId) -> Nanos {
        let cpu =
            self.running.iter().position(|r| *r == Some(id)).unwrap_or_else(|| panic!("fair: job {id} is not running"));
        let vruntime = self.slots[cpu].vruntime_at(now);
        self.running[cpu] = None;
        self.idle += 1;
        // Every other CPU is busy or the queue is empty: only this one needs filling.
        if let Some(Reverse((v, _, next))) = self.queue.pop() {
            self.dispatch(now, cpu, next, v);
        }
        vruntime
    }
}

impl Policy for Fair {
    fn name(&self) -> &'static str {
        "fair"
    }

    fn arrive(&mut self, now: Nanos, job: Job) {
        self.enqueue(now, job.id, 0);
    }

    fn block(&mut self, now: Nanos, id: JobId) {
        let vruntime = self.leave(now, id);
        self.blocked.insert(id, vruntime);
    }

    fn wake(&mut self, now: Nanos, job: Job) {
        let own = self.blocked.remove(&job.id).unwrap_or(0);
        self.enqueue(now, job.id, own);
    }

    fn complete(&mut self, now: Nanos, id: JobId) {
        self.leave(now, id);
    }

    fn tick(&mut self, now: Nanos) {
        if self.queue.is_empty() {
            return;
        }
        let slice = self.slice();
        self.candidates.clear();
        for cpu in 0..self.running.len() {
            if self.running[cpu].is_some() && now.saturating_sub(self.slots[cpu].since) >= slice {
                self.candidates.push((self.slots[cpu].vruntime_at(now), cpu));
            }
        }
        // The furthest-ahead job yields first. In this order a preempted job
        // is never the least-vruntime waiter for a later candidate, so it is
        // not put straight back on another CPU.
        self.candidates.sort_unstable_by_key(|&(v, cpu)| (Reverse(v), cpu));
        for i in 0..self.candidates.len() {
            let (vruntime, cpu) = self.candidates[i];
            let Some(&Reverse((head, _, _))) = self.queue.peek() else { break };
            if head >= vruntime {
                break; // nobody waiting is behind this job, nor the ones after it
            }
            let Reverse((v, _, next)) = self.queue.pop().expect("peeked");
            let id = self.running[cpu].take().expect("candidates run");
            self.idle += 1;
            self.seq += 1;
            self.queue.push(Reverse((vruntime, self.seq, id)));
            self.dispatch(now, cpu, next, v);
        }
    }

    fn running(&self) -> &[Option<JobId>] {
        &self.running
    }

    fn next_tick(&self) -> Option<Nanos> {
        let &Reverse((head, _, _)) = self.queue.peek()?;
        let slice = self.slice();
        (0..self.running.len())
            .filter(|&cpu| self.running[cpu].is_some())
            .map(|cpu| {
                let s = &self.slots[cpu];
                // Has had its slice, and its vruntime exceeds the head's.
                let overtakes = s.since + (head + 1).saturating_sub(s.vruntime);
                (s.since + slice).max(overtakes)
            })
            .min()
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::job_at_zero as job;

    /// Ticks at `next_tick` until it passes `until`.
    fn run_until(p: &mut Fair, until: Nanos) {
        while let Some(t) = p.next_tick().filter(|&t| t <= until) {
            p.tick(t);
            assert!(!matches!(p.next_tick(), Some(n) if n <= t), "no progress at {t}");
        }
    }

    #[test]
    fn the_least_vruntime_runs_and_a_woken_job_keeps_its_own() {
        // Slice is always the 10 ns granularity.
        let mut p = Fair::new(1, 10, 10);
        p.arrive(0, job(1));
        p.arrive(0, job(2));
        assert_eq!((p.next_tick(), p.waiting()), (Some(10), 1));
        p.tick(10); // 1 at vruntime 10 is ahead of 2 at 0
        assert_eq!(p.running(), [Some(2)]);
        // 2 must have run its slice and exceed 1's vruntime (10): 10 + 11.
        assert_eq!(p.next_tick(), Some(21));
        p.tick(21);
        assert_eq!(p.running(), [Some(1)]);
        p.block(51, 1); // 1 has vruntime 40; 2 (11) takes the CPU
        assert_eq!(p.running(), [Some(2)]);
        p.arrive(51, job(3)); // placed at min_vruntime = 11, not 0
        assert_eq!(p.min_vruntime(), 11);
        p.tick(61);
        assert_eq!(p.running(), [Some(3)]);
        p.wake(61, job(1)); // keeps its 40, above min_vruntime: waits for 2 and 3 to catch up
        assert_eq!(p.waiting(), 2);
        // 2 and 3 alternate until they catch up with 1.
        let mut seen = Vec::new();
        for _ in 0..6 {
            let t = p.next_tick().unwrap();
            p.tick(t);
            seen.push(p.running()[0].unwrap());
        }
        assert_eq!(seen, [2, 3, 2, 3, 1, 2]);
    }

    #[test]
    fn a_newcomer_starts_at_min_vruntime_and_cannot_monopolise_the_cpu() {
        let mut p = Fair::new(1, 10, 10);
        p.arrive(0, job(1));
        assert_eq!(p.next_tick(), None); // alone: nothing to decide
        p.arrive(1000, job(2)); // vruntime 1000, not 0
                                // 1 has had its slice; it is ahead of 2 one nanosecond later.
        assert_eq!(p.next_tick(), Some(1001));
        p.tick(1001);
        assert_eq!(p.running(), [Some(2)]);
        assert_eq!(p.next_tick(), Some(1011));
        p.tick(1011);
        assert_eq!(p.running(), [Some(1)]);
    }

    #[test]
    fn the_slice_is_the_latency_shared_but_at_least_the_granularity() {
        let mut p = Fair::new(2, 100, 1200);
        p.arrive(0, job(1));
        assert_eq!(p.slice(), 1200);
        for id in 2..=4 {
            p.arrive(0, job(id));
        }
        assert_eq!(p.slice(), 300);
        assert_eq!(p.next_tick(), Some(300));
        for id in 5..=20 {
            p.arrive(0, job(id));
        }
        assert_eq!(p.slice(), 100);
    }

    #[test]
    fn many_cpus_share_fairly_without_migrations() {
        let mut p = Fair::new(3, 10, 30);
        for id in 1..=7 {
            p.arrive(0, job(id));
        }
        let mut runs = [0u32; 8];
        let mut t = 0;
        while t < 10_000 {
            let before = p.running().to_vec();
            t = p.next_tick().unwrap();
            p.tick(t);
            for (cpu, r) in p.running().iter().enumerate() {
                let id = r.unwrap();
                if let Some(was) = before.iter().position(|b| *b == Some(id)) {
                    assert_eq!(was, cpu, "job {id} migrated at {t}");
                } else {
                    runs[id as usize] += 1;
                }
            }
        }
        // Everyone got about 3/7 of a CPU: dispatch counts within one of each other.
        let (lo, hi) = (runs[1..].iter().min().unwrap(), runs[1..].iter().max().unwrap());
        assert!(hi - lo <= 1, "{runs:?}");
        run_until(&mut p, 20_000);
    }
}
