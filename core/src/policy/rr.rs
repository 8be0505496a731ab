//! Round-robin over every runnable job: the Shinjuku-like baseline (`rr`) and,
//! with a tiny slice, processor sharing (`ps`).
//!
//! One central FIFO run queue feeds all CPUs, as in ghOSt's Shinjuku policy
//! that TailClipper compares against: new arrivals join at the back, woken jobs
//! at the front (Shinjuku favours a thread returning from a blocking call), and
//! a job whose slice has run out goes to the back when someone is waiting.
//! When more slices end at once than jobs wait, the jobs that have held their
//! CPU longest yield, which keeps the shares equal without moving a job that
//! was just preempted onto another CPU.
//!
//! Slices are measured from dispatch and laid on a grid: a job dispatched at
//! `d` may be preempted at `d + slice`, `d + 2·slice`, … — at the first of
//! those instants when the queue is non-empty. That is what a scheduler that
//! checks every slice end does (it renews the slice when nobody waits), but
//! we need no tick at all while the queue is empty: when the queue becomes
//! non-empty the running slices are rolled forward to the grid, so the result
//! does not depend on how often the driver ticks.

use std::collections::VecDeque;

use super::{Job, JobId, Policy};
use crate::time::Nanos;

/// The first point of the grid `end + k·slice` (k ≥ 0) at or after `now`:
/// where a slice that ended while nobody waited would end now.
#[inline]
pub(super) fn slice_end_at_or_after(end: Nanos, now: Nanos, slice: Nanos) -> Nanos {
    if end >= now {
        end
    } else {
        end + (now - end).div_ceil(slice) * slice
    }
}

/// The first point of the grid `end + k·slice` strictly after `now`: the
/// fresh slice of a job whose slice ended with nobody to yield to.
#[inline]
pub(super) fn slice_end_after(end: Nanos, now: Nanos, slice: Nanos) -> Nanos {
    if end > now {
        end
    } else {
        end + ((now - end) / slice + 1) * slice
    }
}

/// Round-robin with one central queue; see the module docs.
#[derive(Clone)]
pub struct RoundRobin {
    name: &'static str,
    slice: Nanos,
    running: Vec<Option<JobId>>,
    /// When each CPU's current slice ends (meaningless on an idle CPU).
    slice_end: Vec<Nanos>,
    idle: usize,
    queue: VecDeque<JobId>,
    /// Dispatch number of each CPU's current job: who has held a CPU longest.
    dispatch_seq: Vec<u64>,
    dispatches: u64,
    /// Scratch for `tick`: `(dispatch_seq, cpu)` of expired slices. Kept so
    /// ticks do not allocate.
    expired: Vec<(u64, usize)>,
}

impl RoundRobin {
    pub fn new(cpus: usize, slice: Nanos) -> Self {
        assert!(cpus > 0, "a policy needs at least one CPU");
        assert!(slice > 0, "a slice must be positive");
        RoundRobin {
            name: "rr",
            slice,
            running: vec![None; cpus],
            slice_end: vec![0; cpus],
            idle: cpus,
            queue: VecDeque::new(),
            dispatch_seq: vec![0; cpus],
            dispatches: 0,
            expired: Vec::with_capacity(cpus),
        }
    }

    /// The same policy under another name (`ps` is `rr` with a tiny slice).
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Queues a runnable job (front for a woken job) and settles the CPUs.
    #[inline]
    fn enqueue(&mut self, now: Nanos, id: JobId, front: bool) {
        if self.idle > 0 {
            // Work-conserving: an idle CPU means an empty queue, so the job runs now.
            debug_assert!(self.queue.is_empty());
            let cpu = self.running.iter().position(Option::is_none).expect("idle count says a CPU is free");
            self.dispatch(now, cpu, id);
            return;
        }
        if self.queue.is_empty() {
            // The queue stops being empty: slices that ended while nobody
            // waited were renewed at their grid points.
            for end in &mut self.slice_end {
                *end = slice_end_at_or_after(*end, now, self.slice);
            }
        }
        if front {
            self.queue.push_front(id);
        } else {
            self.queue.push_back(id);
        }
    }

    #[inline]
    fn dispatch(&mut self, now: Nanos, cpu: usize, id: JobId) {
        debug_assert!(self.running[cpu].is_none());
        self.running[cpu] = Some(id);
        self.slice_end[cpu] = now + self.slice;
        self.dispatches += 1;
        self.dispatch_seq[cpu] = self.dispatches;
        self.idle -= 1;
    }

    #[inline]
    fn leave(&mut self, now: Nanos, id: JobId) {
        let cpu = self
            .running
            .iter()
            .position(|r| *r == Some(id))
            .unwrap_or_else(|| panic!("{}: job {id} is not running", self.name));
        self.running[cpu] = None;
        self.idle += 1;
        // Every other CPU is busy or the queue is empty: only this one needs filling.
        if let Some(next) = self.queue.pop_front() {
            self.dispatch(now, cpu, next);
        }
    }
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        self.name
    }

    #[inline]
    fn arrive(&mut self, now: Nanos, job: Job) {
        self.enqueue(now, job.id, false);
    }

    fn block(&mut self, now: Nanos, id: JobId) {
        self.leave(now, id);
    }

    fn wake(&mut self, now: Nanos, job: Job) {
        self.enqueue(now, job.id, true);
    }

    #[inline]
    fn complete(&mut self, now: Nanos, id: JobId) {
        self.leave(now, id);
    }

    fn tick(&mut self, now: Nanos) {
        let waiting = self.queue.len();
        if waiting == 0 {
            // Nobody to yield to; expired slices are renewed lazily (see `enqueue`).
            return;
        }
        self.expired.clear();
        for cpu in 0..self.running.len() {
            if self.running[cpu].is_some() && self.slice_end[cpu] <= now {
                self.expired.push((self.dispatch_seq[cpu], cpu));
            }
        }
        if self.expired.len() > waiting {
            // More slices ended than jobs wait: the jobs that have held their
            // CPU the longest yield, as in one central round-robin order, and
            // the rest keep their CPU with a fresh slice. Preempting by CPU
            // index instead would let the same jobs yield every round; putting
            // a just-preempted job on another expired CPU (Algorithm 1 taken
            // literally) would be a migration for nothing.
            self.expired.sort_unstable();
            for &(_, cpu) in &self.expired[waiting..] {
                self.slice_end[cpu] = slice_end_after(self.slice_end[cpu], now, self.slice);
            }
            self.expired.truncate(waiting);
        } else if self.expired.len() > 1 {
            // Back of the queue in the order they got their CPUs.
            self.expired.sort_unstable();
        }
        // Algorithm 1, lines 8-10: the preempted job goes to the back and the
        // front takes its CPU. At most `waiting` preemptions, so the front is
        // always a job that was waiting before this tick.
        for i in 0..self.expired.len() {
            let cpu = self.expired[i].1;
            let id = self.running[cpu].take().expect("expired CPUs are busy");
            self.queue.push_back(id);
            let next = self.queue.pop_front().expect("one waiting job per preemption");
            self.idle += 1;
            self.dispatch(now, cpu, next);
        }
    }

    #[inline]
    fn running(&self) -> &[Option<JobId>] {
        &self.running
    }

    #[inline]
    fn next_tick(&self) -> Option<Nanos> {
        if self.queue.is_empty() {
            // Nobody to rotate in: no tick, so an idle-queue node costs the driver nothing.
            return None;
        }
        // A non-empty queue means every CPU is busy.
        self.slice_end.iter().copied().min()
    }

    #[inline]
    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::job_at_zero as job;

    #[test]
    fn slice_grid_helpers() {
        assert_eq!(slice_end_at_or_after(30, 10, 30), 30);
        assert_eq!(slice_end_at_or_after(30, 30, 30), 30);
        assert_eq!(slice_end_at_or_after(30, 31, 30), 60);
        assert_eq!(slice_end_at_or_after(30, 100, 30), 120);
        assert_eq!(slice_end_after(30, 29, 30), 30);
        assert_eq!(slice_end_after(30, 30, 30), 60);
        assert_eq!(slice_end_after(30, 95, 30), 120);
    }

    #[test]
    fn rotates_through_a_central_queue() {
        let mut p = RoundRobin::new(2, 30);
        for id in 1..=4 {
            p.arrive(0, job(id));
        }
        assert_eq!(p.running(), [Some(1), Some(2)]);
        assert_eq!((p.waiting(), p.next_tick()), (2, Some(30)));
        p.tick(30);
        assert_eq!(p.running(), [Some(3), Some(4)]);
        p.tick(60);
        assert_eq!(p.running(), [Some(1), Some(2)]);
        // Calling early is harmless.
        p.tick(70);
        assert_eq!(p.running(), [Some(1), Some(2)]);
        assert_eq!(p.next_tick(), Some(90));
    }

    #[test]
    fn woken_jobs_go_to_the_front_arrivals_to_the_back() {
        let mut p = RoundRobin::new(1, 30);
        p.arrive(0, job(1));
        p.arrive(1, job(2));
        p.arrive(2, job(3));
        p.tick(30); // 1 → back; 2 runs; queue [3, 1]
        assert_eq!(p.running(), [Some(2)]);
        p.block(35, 2);
        assert_eq!(p.running(), [Some(3)]);
        p.arrive(36, job(4)); // queue [1, 4]
        p.wake(37, job(2)); // queue [2, 1, 4]
        p.complete(38, 3);
        assert_eq!(p.running(), [Some(2)]);
        assert_eq!(p.waiting(), 2);
    }

    #[test]
    fn no_ticks_while_nobody_waits_and_expired_jobs_keep_running() {
        let mut p = RoundRobin::new(2, 30);
        p.arrive(0, job(1));
        p.arrive(10, job(2));
        assert_eq!(p.next_tick(), None);
        p.tick(1_000); // harmless: nobody waits
        assert_eq!(p.running(), [Some(1), Some(2)]);
        // At 105 job 1 (dispatched at 0) is in its fourth slice, 90..120, and
        // job 2 (dispatched at 10) in its fourth, 100..130: a checker at every
        // slice end would have renewed them while nobody waited.
        p.arrive(105, job(3));
        assert_eq!(p.next_tick(), Some(120));
        p.tick(120);
        assert_eq!(p.running(), [Some(3), Some(2)]);
        assert_eq!(p.next_tick(), Some(130));
    }

    #[test]
    fn a_tick_preempts_no_more_jobs_than_are_waiting() {
        let mut p = RoundRobin::new(3, 30);
        for id in 1..=4 {
            p.arrive(0, job(id));
        }
        p.tick(30); // all three expire, one job waits: only job 1 (dispatched first) yields
        assert_eq!(p.running(), [Some(4), Some(2), Some(3)]);
        assert_eq!(p.waiting(), 1);
        // The others got a fresh slice; job 4 has a full one from 30.
        assert_eq!(p.next_tick(), Some(60));
        // Then 2, 3 and 4 in turn: each job sits out one slice in four, and
        // nobody changes CPU.
        p.tick(60);
        assert_eq!(p.running(), [Some(4), Some(1), Some(3)]);
        p.tick(90);
        assert_eq!(p.running(), [Some(4), Some(1), Some(2)]);
        p.tick(120);
        assert_eq!(p.running(), [Some(3), Some(1), Some(2)]);
    }

    #[test]
    fn ps_is_rr_under_another_name() {
        let p = RoundRobin::new(1, 1).named("ps");
        assert_eq!(p.name(), "ps");
        assert_eq!(RoundRobin::new(1, 1).name(), "rr");
    }
}
