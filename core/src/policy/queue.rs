//! Non-preemptive single-queue disciplines: fifo, gfifo, edf, priq, lifo and random.
//!
//! All of them share one shape: a central queue feeding every CPU, and a job
//! that runs until it completes or blocks. Only the order of the queue
//! differs, so one type with a [`Discipline`] switch serves them all. This is
//! the simulator's hot path (M/M/c FIFO must reach tens of millions of events
//! per second), so each discipline gets the cheapest structure that gives its
//! order: a `VecDeque` for arrival order (fifo from the front, lifo from the
//! back), a binary heap keyed by `(key, seq)` for gfifo/edf/priq, and a plain
//! `Vec` with swap-remove for random. None of them allocates in steady state.
//!
//! A woken job re-enters the queue like a new arrival: fifo and lifo order it
//! by its wake time, the keyed disciplines by its own GAT, deadline or class.
//! Equal keys are served in insertion order (a sequence number), never in an
//! order that depends on hashing or memory layout.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{Job, JobId, Policy};
use crate::rng::Rng;
use crate::time::Nanos;

/// Which waiting job a free CPU takes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// Local arrival order (first come, first served at this node).
    Fifo,
    /// Global arrival time order: oldest GAT first.
    Gfifo,
    /// Earliest deadline first.
    Edf,
    /// Lowest class first (0 is served first), arrival order within a class.
    Priq,
    /// Newest arrival first.
    Lifo,
    /// Uniformly random among the waiting jobs, from a generator seeded with `seed`.
    Random { seed: u64 },
}

/// The waiting jobs, in the structure that makes the discipline's pick cheap.
#[derive(Clone)]
enum Waiting {
    /// Fifo pops the front, lifo the back; both push at the back.
    Arrival { lifo: bool, queue: VecDeque<JobId> },
    /// Min-heap by `(key, seq)`; `key` is the GAT, deadline or class.
    Keyed { key: fn(&Job) -> u64, heap: BinaryHeap<Reverse<(u64, u64, JobId)>> },
    /// Any order; the pick is `rng.below(len)` and a swap-remove.
    Random { jobs: Vec<JobId>, rng: Rng },
}

impl Waiting {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Waiting::Arrival { queue, .. } => queue.len(),
            Waiting::Keyed { heap, .. } => heap.len(),
            Waiting::Random { jobs, .. } => jobs.len(),
        }
    }

    #[inline]
    fn push(&mut self, job: &Job, seq: u64) {
        match self {
            Waiting::Arrival { queue, .. } => queue.push_back(job.id),
            Waiting::Keyed { key, heap } => heap.push(Reverse((key(job), seq, job.id))),
            Waiting::Random { jobs, .. } => jobs.push(job.id),
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<JobId> {
        match self {
            Waiting::Arrival { lifo: false, queue } => queue.pop_front(),
            Waiting::Arrival { lifo: true, queue } => queue.pop_back(),
            Waiting::Keyed { heap, .. } => heap.pop().map(|Reverse((_, _, id))| id),
            Waiting::Random { jobs, rng } => {
                if jobs.is_empty() {
                    None
                } else {
                    let i = rng.below(jobs.len() as u64) as usize;
                    Some(jobs.swap_remove(i))
                }
            }
        }
    }
}

/// A central queue in one of the [`Discipline`] orders; jobs run to completion
/// (or until they block) once dispatched.
///
/// Each call changes at most one entry of `running()`: `arrive` and `wake`
/// fill the lowest idle CPU (if any, else the job waits), `complete` and
/// `block` refill only the CPU the job left. The simulator relies on this to
/// sync one CPU instead of diffing them all; keep it true.
#[derive(Clone)]
pub struct NonPreemptive {
    name: &'static str,
    running: Vec<Option<JobId>>,
    /// Number of `None` entries in `running`, so a busy node skips the scan for one.
    idle: usize,
    waiting: Waiting,
    /// Insertion counter: the tie-break among equal keys.
    seq: u64,
}

impl NonPreemptive {
    pub fn new(cpus: usize, discipline: Discipline) -> Self {
        assert!(cpus > 0, "a policy needs at least one CPU");
        fn gat(j: &Job) -> u64 {
            j.gat
        }
        fn deadline(j: &Job) -> u64 {
            j.deadline
        }
        fn class(j: &Job) -> u64 {
            j.class as u64
        }
        let keyed = |key: fn(&Job) -> u64| Waiting::Keyed { key, heap: BinaryHeap::new() };
        let (name, waiting) = match discipline {
            Discipline::Fifo => ("fifo", Waiting::Arrival { lifo: false, queue: VecDeque::new() }),
            Discipline::Lifo => ("lifo", Waiting::Arrival { lifo: true, queue: VecDeque::new() }),
            Discipline::Gfifo => ("gfifo", keyed(gat)),
            Discipline::Edf => ("edf", keyed(deadline)),
            Discipline::Priq => ("priq", keyed(class)),
            Discipline::Random { seed } => ("random", Waiting::Random { jobs: Vec::new(), rng: Rng::new(seed) }),
        };
        NonPreemptive { name, running: vec![None; cpus], idle: cpus, waiting, seq: 0 }
    }

    #[inline]
    fn enqueue(&mut self, job: Job) {
        if self.idle > 0 {
            // Work-conserving: with a CPU idle the queue is empty, so the
            // newcomer is the discipline's pick whatever its key.
            debug_assert_eq!(self.waiting.len(), 0);
            let cpu = self.running.iter().position(Option::is_none).expect("idle count says a CPU is free");
            self.running[cpu] = Some(job.id);
            self.idle -= 1;
        } else {
            self.seq += 1;
            self.waiting.push(&job, self.seq);
        }
    }

    #[inline]
    fn leave(&mut self, id: JobId) {
        let cpu = self
            .running
            .iter()
            .position(|r| *r == Some(id))
            .unwrap_or_else(|| panic!("{}: job {id} is not running", self.name));
        // Only the freed CPU can need a job: every other CPU is busy or the queue is empty.
        self.running[cpu] = self.waiting.pop();
        if self.running[cpu].is_none() {
            self.idle += 1;
        }
    }
}

impl Policy for NonPreemptive {
    fn name(&self) -> &'static str {
        self.name
    }

    #[inline]
    fn arrive(&mut self, _now: Nanos, job: Job) {
        self.enqueue(job);
    }

    fn block(&mut self, _now: Nanos, id: JobId) {
        self.leave(id);
    }

    fn wake(&mut self, _now: Nanos, job: Job) {
        self.enqueue(job);
    }

    #[inline]
    fn complete(&mut self, _now: Nanos, id: JobId) {
        self.leave(id);
    }

    fn tick(&mut self, _now: Nanos) {}

    #[inline]
    fn running(&self) -> &[Option<JobId>] {
        &self.running
    }

    #[inline]
    fn next_tick(&self) -> Option<Nanos> {
        None
    }

    #[inline]
    fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NEVER;

    fn job(id: JobId, gat: Nanos, deadline: Nanos, class: u8) -> Job {
        Job { id, gat, deadline, class }
    }

    /// One CPU kept busy by job 0; jobs 1.. arrive, then job 0 completes and
    /// each dispatched job completes in turn: returns the dispatch order.
    fn order(d: Discipline, jobs: &[Job]) -> Vec<JobId> {
        let mut p = NonPreemptive::new(1, d);
        p.arrive(0, job(0, 0, NEVER, 0));
        for j in jobs {
            p.arrive(1, *j);
        }
        assert_eq!(p.waiting(), jobs.len());
        let mut out = Vec::new();
        let mut cur = 0;
        while let Some(next) = {
            p.complete(2, cur);
            p.running()[0]
        } {
            out.push(next);
            cur = next;
        }
        assert_eq!(p.waiting(), 0);
        out
    }

    fn sample() -> Vec<Job> {
        vec![job(1, 30, 300, 2), job(2, 10, 500, 1), job(3, 20, 100, 1), job(4, 10, 100, 0), job(5, 5, 400, 2)]
    }

    #[test]
    fn each_discipline_serves_in_its_order_with_insertion_tie_break() {
        assert_eq!(order(Discipline::Fifo, &sample()), [1, 2, 3, 4, 5]);
        assert_eq!(order(Discipline::Lifo, &sample()), [5, 4, 3, 2, 1]);
        // gat 10 twice: job 2 arrived before job 4.
        assert_eq!(order(Discipline::Gfifo, &sample()), [5, 2, 4, 3, 1]);
        // deadline 100 twice: job 3 before job 4.
        assert_eq!(order(Discipline::Edf, &sample()), [3, 4, 1, 5, 2]);
        assert_eq!(order(Discipline::Priq, &sample()), [4, 2, 3, 1, 5]);
    }

    #[test]
    fn random_is_a_seeded_permutation() {
        let a = order(Discipline::Random { seed: 7 }, &sample());
        let b = order(Discipline::Random { seed: 7 }, &sample());
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, [1, 2, 3, 4, 5]);
        let distinct: std::collections::BTreeSet<Vec<JobId>> =
            (0..20).map(|s| order(Discipline::Random { seed: s }, &sample())).collect();
        assert!(distinct.len() > 5, "20 seeds gave only {} orders", distinct.len());
    }

    #[test]
    fn fills_the_lowest_idle_cpu_and_never_preempts() {
        let mut p = NonPreemptive::new(3, Discipline::Gfifo);
        p.arrive(0, job(1, 50, NEVER, 0));
        p.arrive(0, job(2, 40, NEVER, 0));
        p.arrive(0, job(3, 30, NEVER, 0));
        assert_eq!(p.running(), [Some(1), Some(2), Some(3)]);
        p.complete(1, 2);
        assert_eq!(p.running(), [Some(1), None, Some(3)]);
        p.arrive(2, job(4, 1, NEVER, 0)); // older than everyone running: still waits for nobody, takes CPU 1
        assert_eq!(p.running(), [Some(1), Some(4), Some(3)]);
        p.arrive(3, job(5, 0, NEVER, 0)); // oldest of all, but the policy never preempts
        assert_eq!(p.running(), [Some(1), Some(4), Some(3)]);
        assert_eq!((p.waiting(), p.next_tick()), (1, None));
        p.tick(1_000_000);
        assert_eq!(p.running(), [Some(1), Some(4), Some(3)]);
        p.complete(4, 3);
        assert_eq!(p.running(), [Some(1), Some(4), Some(5)]);
    }

    #[test]
    fn a_woken_job_reenters_by_wake_time_in_fifo_and_by_its_key_in_gfifo() {
        let mut f = NonPreemptive::new(1, Discipline::Fifo);
        let mut g = NonPreemptive::new(1, Discipline::Gfifo);
        for p in [&mut f, &mut g] {
            p.arrive(0, job(1, 0, NEVER, 0));
            p.block(1, 1); // job 1 waits for a downstream call
            p.arrive(2, job(2, 5, NEVER, 0));
            p.arrive(3, job(3, 6, NEVER, 0));
            p.wake(4, job(1, 0, NEVER, 0));
            assert_eq!(p.running(), [Some(2)]);
            p.complete(5, 2);
        }
        assert_eq!(f.running(), [Some(3)]); // fifo: job 1 queued behind job 3 at wake time
        assert_eq!(g.running(), [Some(1)]); // gfifo: job 1 keeps its old GAT
        assert_eq!((f.name(), g.name()), ("fifo", "gfifo"));
    }
}
