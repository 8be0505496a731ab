//! Oldest Request First: global FCFS by GAT plus limited processor sharing
//! among the `c` oldest jobs (TailClipper §3.2, §4, Algorithm 1).
//!
//! Two structures, as in the paper: a min-heap by `(gat, seq)` of the jobs
//! outside the sharing pool (here a sorted run for in-order arrivals plus a
//! binary heap for the rest, see `Outside`), and a round-robin queue `Q_rr` of
//! the pool members that are waiting for a CPU. The pool is `Q_rr` plus the pool
//! members that are running; its members share the CPUs in slices, everybody
//! else waits in GAT order.
//!
//! - **Pool capacity** is `cap = max(c, cpus)`. With `c` below the core count
//!   the remaining cores would sit idle while jobs wait in the heap; with
//!   `cap = cpus`, `c = 1` is pure global FCFS on `n` cores, which is what the
//!   paper says `c = 1` degenerates to.
//! - **Arrival or wakeup.** If the pool is full and the job is younger than
//!   the youngest pool member it goes to the heap. Otherwise it joins `Q_rr`
//!   ahead of every waiting member that is younger and has not had a slice
//!   yet (Figure 3: a late-arriving old request goes to the head), else at the
//!   back; if the pool overflows, its youngest member leaves it: into the heap
//!   if it was waiting, and if it is running it is *marked* and goes to the
//!   heap at its next preemption (§4: the `c` constraint is "temporarily
//!   violated").
//! - **Completion or block.** The pool is refilled oldest first and idle CPUs
//!   take the front of `Q_rr`. A running marked job is logically already in
//!   the heap: when the pool has room and it is older than the heap's oldest,
//!   it is simply unmarked rather than preempted for a younger job.
//! - **Tick** (Algorithm 1, lines 3-10): a running job whose slice has expired
//!   goes to the back of `Q_rr` (a marked one to the heap) and the front of
//!   `Q_rr` takes its CPU, if anyone waits in `Q_rr`; otherwise it keeps its CPU
//!   with a fresh slice. When more slices expire at once than members wait,
//!   marked jobs yield first, then those that have held a CPU longest, and no
//!   job preempted in a tick is put back on another CPU in the same tick.
//!   Lines 11-20 (pool back to `cap`) hold after every event, not only after
//!   ticks.
//!
//! Invariant after every event: the unmarked pool members are exactly the
//! `min(cap, runnable)` oldest runnable jobs by `(gat, seq)`; marked jobs are
//! running and younger than all of them; no CPU is idle while `Q_rr` is
//! non-empty. Slices follow the grid of [`super::rr`]: the outcome does not
//! depend on how often the driver ticks, and there are no ticks while `Q_rr` is
//! empty.

use std::collections::{BinaryHeap, VecDeque};

use super::adaptive::AdaptiveC;
use super::rr::{slice_end_after, slice_end_at_or_after};
use super::{Job, JobId, Policy};
use crate::time::Nanos;

/// Age order: `(gat, seq, id)`, smallest is oldest; `seq` breaks GAT ties by
/// insertion order, `id` only rides along.
type Key = (Nanos, u64, JobId);

/// A job outside the pool. `(gat, seq)` is packed into one `u128`, so each
/// of the heap's comparisons is a single wide compare.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    age: u128,
    id: JobId,
}

impl Waiter {
    #[inline]
    fn new(key: Key) -> Self {
        Waiter { age: (key.0 as u128) << 64 | key.1 as u128, id: key.2 }
    }

    #[inline]
    fn key(self) -> Key {
        ((self.age >> 64) as Nanos, self.age as u64, self.id)
    }
}

// Ordered by age alone (`seq` makes it unique), reversed: `BinaryHeap` is a
// max-heap and the oldest must come out first.
impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.age == other.age
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.age.cmp(&self.age)
    }
}

/// The jobs outside the pool, oldest out first: the paper's min-heap. Most
/// jobs reach a node in GAT order, so a job younger than every job already
/// here joins a sorted run (a `VecDeque`, O(1) in and out) and only the
/// out-of-order rest goes to a binary heap; the oldest is at the front of one
/// or the other. Same order as one heap, a fraction of the cost when
/// thousands wait.
#[derive(Clone, Default)]
struct Outside {
    /// Sorted, oldest at the front.
    run: VecDeque<Waiter>,
    heap: BinaryHeap<Waiter>,
}

impl Outside {
    #[inline]
    fn len(&self) -> usize {
        self.run.len() + self.heap.len()
    }

    #[inline]
    fn push(&mut self, w: Waiter) {
        if !matches!(self.run.back(), Some(b) if b.age > w.age) {
            self.run.push_back(w);
        } else {
            self.heap.push(w);
        }
    }

    /// `Some(true)` if the oldest is at the front of the run, `Some(false)` if on top of the heap.
    #[inline]
    fn oldest_in_run(&self) -> Option<bool> {
        match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(h)) => Some(r.age < h.age),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    #[inline]
    fn peek(&self) -> Option<Waiter> {
        match self.oldest_in_run()? {
            true => self.run.front().copied(),
            false => self.heap.peek().copied(),
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<Waiter> {
        match self.oldest_in_run()? {
            true => self.run.pop_front(),
            false => self.heap.pop(),
        }
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.run.iter().chain(self.heap.iter())
    }
}

/// A waiting pool member in `Q_rr`.
#[derive(Clone, Copy, Debug)]
struct Member {
    key: Key,
    /// Has had a slice since it joined the pool. An older newcomer queues
    /// ahead of younger members only while they have not started, so gFCFS
    /// holds among the not-yet-started and round-robin among the rest.
    sliced: bool,
}

/// What ORF knows about the job on a CPU (its slice end is kept apart, in
/// `Orf::slice_end`, so that `next_tick` scans a dense array).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: Key,
    /// Dispatch number: among expired slices, the job that has held its CPU
    /// longest yields first.
    dispatch: u64,
    /// Evicted from the pool while running: goes to the heap at its next preemption.
    marked: bool,
    /// When it was dispatched: the CPU time it gets is what the adaptive controller observes.
    since: Nanos,
}

/// Oldest Request First; see the module docs.
#[derive(Clone)]
pub struct Orf {
    cap: usize,
    slice: Nanos,
    running: Vec<Option<JobId>>,
    slots: Vec<Slot>,
    /// When each CPU's current slice ends (meaningless on an idle CPU).
    slice_end: Vec<Nanos>,
    idle: usize,
    /// `Q_rr`: pool members waiting for a CPU, in round-robin order.
    rr: VecDeque<Member>,
    /// Jobs outside the pool (the paper's min-heap).
    heap: Outside,
    /// Keys of the unmarked pool members (in `Q_rr` or running), oldest first:
    /// gives the youngest member in O(1); entries enter and leave in O(cap),
    /// a handful of moves.
    pool: Vec<Key>,
    /// Running jobs marked for eviction.
    marked: usize,
    seq: u64,
    dispatches: u64,
    /// Scratch for `tick`: `(not marked, dispatch, cpu)` of expired slices.
    expired: Vec<(bool, u64, usize)>,
    /// Adaptive `c`: the controller that moves `cap` (`None`: `c` is fixed).
    adapt: Option<Box<AdaptiveC>>,
}

impl Orf {
    /// ORF on `cpus` CPUs where the `c` oldest jobs share the CPUs in `slice`s.
    pub fn new(cpus: usize, c: usize, slice: Nanos) -> Self {
        assert!(cpus > 0, "a policy needs at least one CPU");
        assert!(c > 0, "orf needs c >= 1");
        assert!(slice > 0, "a slice must be positive");
        let cap = c.max(cpus);
        Orf {
            cap,
            slice,
            running: vec![None; cpus],
            slots: vec![Slot::default(); cpus],
            slice_end: vec![0; cpus],
            idle: cpus,
            rr: VecDeque::with_capacity(cap),
            heap: Outside::default(),
            pool: Vec::with_capacity(cap + 1),
            marked: 0,
            seq: 0,
            dispatches: 0,
            expired: Vec::with_capacity(cpus),
            adapt: None,
        }
    }

    /// ORF whose `c` an online controller tunes within `[1, c_max]`, re-deciding every
    /// `window` completed jobs (see [`AdaptiveC`]). It starts as global FCFS.
    pub fn adaptive(cpus: usize, c_max: usize, slice: Nanos, window: usize) -> Self {
        // The controller starts at its smallest candidate, c = 1: global FCFS.
        let mut p = Orf::new(cpus, 1, slice);
        p.adapt = Some(Box::new(AdaptiveC::new(cpus, c_max, slice, window)));
        p
    }

    /// The adaptive controller, if `c` is adaptive.
    pub fn controller(&self) -> Option<&AdaptiveC> {
        self.adapt.as_deref()
    }

    /// The adaptive controller, if `c` is adaptive: to detach its decider and take its
    /// windows (see [`AdaptiveC::detach_decider`]).
    pub fn controller_mut(&mut self) -> Option<&mut AdaptiveC> {
        self.adapt.as_deref_mut()
    }

    /// Sets `c` at `now` (a detached decider's choice, see [`AdaptiveC`]): pool capacity
    /// `max(c, cpus)`, at least 1.
    pub fn set_c(&mut self, now: Nanos, c: usize) {
        self.set_cap(now, c.max(1));
    }

    /// A copy without the adaptive controller: for asking "what would happen if …" of a
    /// copy on every scheduling pass (the runtime's hand-off successor), where copying the
    /// controller's records, or a window closing in the copy, would cost the caller time
    /// and change nothing the question needs.
    pub fn clone_without_controller(&self) -> Orf {
        Orf {
            cap: self.cap,
            slice: self.slice,
            running: self.running.clone(),
            slots: self.slots.clone(),
            slice_end: self.slice_end.clone(),
            idle: self.idle,
            rr: self.rr.clone(),
            heap: self.heap.clone(),
            pool: self.pool.clone(),
            marked: self.marked,
            seq: self.seq,
            dispatches: self.dispatches,
            expired: self.expired.clone(),
            adapt: None,
        }
    }

    /// Moves the pool capacity (the adaptive controller's decision): a smaller pool evicts
    /// its youngest members as an older arrival would, a larger one is refilled oldest first.
    fn set_cap(&mut self, now: Nanos, cap: usize) {
        let was_busy = !self.rr.is_empty();
        self.resize_pool(cap);
        self.refill();
        self.fill_idle(now);
        self.settle_slices(now, was_busy);
    }

    /// Sets the capacity and evicts the youngest members a smaller pool has no room for;
    /// the caller refills and dispatches.
    fn resize_pool(&mut self, cap: usize) {
        self.cap = cap.max(self.running.len());
        while self.pool.len() > self.cap {
            self.evict_youngest();
        }
    }

    /// Pool capacity, `max(c, cpus)`.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Jobs sharing the CPUs: `Q_rr` plus every running job. At most
    /// `cap + marked_len()`.
    pub fn pool_len(&self) -> usize {
        self.pool.len() + self.marked
    }

    /// Pool members waiting for a CPU (`Q_rr`).
    pub fn queue_len(&self) -> usize {
        self.rr.len()
    }

    /// Jobs waiting outside the pool (the min-heap).
    pub fn heap_len(&self) -> usize {
        self.heap.len()
    }

    /// Running jobs evicted from the pool, bound for the heap at their next preemption.
    pub fn marked_len(&self) -> usize {
        self.marked
    }

    /// An arriving or woken job: into the pool or the heap (§4, "notified of
    /// the creation of a new thread").
    #[inline]
    fn admit(&mut self, now: Nanos, job: Job) {
        if let Some(a) = &mut self.adapt {
            a.arrived(now, &job);
        }
        self.seq += 1;
        let key = (job.gat, self.seq, job.id);
        if self.pool.len() >= self.cap && key > *self.pool.last().expect("cap >= 1") {
            // Younger than every pool member: it waits its turn in GAT order.
            // (A full pool keeps every CPU busy, so nothing else changes.)
            self.heap.push(Waiter::new(key));
            return;
        }
        let was_busy = !self.rr.is_empty();
        self.pool_insert(key);
        self.enter_rr(Member { key, sliced: false });
        if self.pool.len() > self.cap {
            self.evict_youngest();
        }
        self.fill_idle(now);
        self.settle_slices(now, was_busy);
    }

    /// A running job leaves the policy (completion or block).
    #[inline]
    fn leave(&mut self, now: Nanos, id: JobId) {
        let cpu =
            self.running.iter().position(|r| *r == Some(id)).unwrap_or_else(|| panic!("orf: job {id} is not running"));
        let was_busy = !self.rr.is_empty();
        self.running[cpu] = None;
        self.idle += 1;
        let slot = self.slots[cpu];
        if slot.marked {
            self.marked -= 1;
        } else {
            self.pool_remove(slot.key);
        }
        // The controller decides before the freed CPU is given away: deciding after
        // would dispatch a job at the old capacity and mark it an evictee at once.
        if let Some(cap) = self.adapt.as_mut().and_then(|a| a.left(id, now, now - slot.since)) {
            self.resize_pool(cap);
        }
        self.refill();
        if self.idle == 1 {
            // The usual case: only the CPU just freed is idle.
            if let Some(m) = self.rr.pop_front() {
                self.dispatch(now, cpu, m.key);
            }
        } else {
            self.fill_idle(now);
        }
        self.settle_slices(now, was_busy);
    }

    /// Inserts a key into the sorted pool index.
    #[inline]
    fn pool_insert(&mut self, key: Key) {
        // Usually the youngest (arrivals in GAT order, readmitted evictees): a push.
        if !matches!(self.pool.last(), Some(last) if *last > key) {
            self.pool.push(key);
        } else {
            let at = self.pool.partition_point(|k| *k < key);
            self.pool.insert(at, key);
        }
    }

    #[inline]
    fn pool_remove(&mut self, key: Key) {
        // `seq` alone identifies an entry. Pools are usually a handful of jobs,
        // where a scan beats a binary search's unpredictable branches.
        let at = if self.pool.len() <= 32 {
            self.pool.iter().position(|k| k.1 == key.1)
        } else {
            self.pool.binary_search(&key).ok()
        };
        self.pool.remove(at.expect("an unmarked running job is a pool member"));
    }

    /// Puts a new pool member (already in `pool`) into `Q_rr`: ahead of the
    /// first waiting member that is younger and has not had a slice, else at
    /// the back. Members that have not had a slice stay in GAT order among
    /// themselves, so this is "ahead of every such member".
    #[inline]
    fn enter_rr(&mut self, m: Member) {
        if *self.pool.last().expect("m is in the pool") == m.key {
            // The youngest member: nobody in Q_rr is younger.
            self.rr.push_back(m);
        } else if let Some(at) = self.rr.iter().position(|w| !w.sliced && w.key > m.key) {
            self.rr.insert(at, m);
        } else {
            self.rr.push_back(m);
        }
    }

    /// The pool has `cap + 1` unmarked members: its youngest leaves.
    fn evict_youngest(&mut self) {
        let key = self.pool.pop().expect("pool overflows");
        if let Some(at) = self.rr.iter().rposition(|m| m.key == key) {
            self.rr.remove(at);
            self.heap.push(Waiter::new(key));
        } else {
            // Running: it keeps its CPU until its slice ends (§4).
            let cpu = self.running.iter().position(|r| *r == Some(key.2)).expect("a pool member waits or runs");
            self.slots[cpu].marked = true;
            self.marked += 1;
        }
    }

    /// Algorithm 1, lines 11-15: while the pool has room, admit the oldest job
    /// outside it. A marked running job counts as outside: if it is the
    /// oldest, it is unmarked and keeps its CPU.
    #[inline]
    fn refill(&mut self) {
        while self.pool.len() < self.cap {
            let from_heap = self.heap.peek().map(|w| w.key());
            let oldest_marked = if self.marked > 0 {
                (0..self.running.len())
                    .filter(|&cpu| self.running[cpu].is_some() && self.slots[cpu].marked)
                    .min_by_key(|&cpu| self.slots[cpu].key)
                    .filter(|&cpu| !matches!(from_heap, Some(h) if h < self.slots[cpu].key))
            } else {
                None
            };
            if let Some(cpu) = oldest_marked {
                self.slots[cpu].marked = false;
                self.marked -= 1;
                self.pool_insert(self.slots[cpu].key);
                continue;
            }
            let Some(key) = from_heap else { break };
            self.heap.pop();
            // Younger than every member (the invariant): the back of the pool
            // index and of Q_rr, no search needed.
            debug_assert!(!matches!(self.pool.last(), Some(last) if *last > key));
            self.pool.push(key);
            self.rr.push_back(Member { key, sliced: false });
        }
    }

    /// Algorithm 1, lines 1-2: idle CPUs take the front of `Q_rr`, lowest CPU first.
    #[inline]
    fn fill_idle(&mut self, now: Nanos) {
        let mut cpu = 0;
        while self.idle > 0 && !self.rr.is_empty() {
            while self.running[cpu].is_some() {
                cpu += 1;
            }
            let m = self.rr.pop_front().expect("checked non-empty");
            self.dispatch(now, cpu, m.key);
        }
    }

    #[inline]
    fn dispatch(&mut self, now: Nanos, cpu: usize, key: Key) {
        debug_assert!(self.running[cpu].is_none());
        self.dispatches += 1;
        self.running[cpu] = Some(key.2);
        self.slots[cpu] = Slot { key, dispatch: self.dispatches, marked: false, since: now };
        self.slice_end[cpu] = now + self.slice;
        self.idle -= 1;
    }

    /// When `Q_rr` stops being empty, running slices that ended while nobody
    /// waited were renewed at their grid points (see [`super::rr`]).
    #[inline]
    fn settle_slices(&mut self, now: Nanos, was_busy: bool) {
        if !was_busy && !self.rr.is_empty() {
            for end in &mut self.slice_end {
                *end = slice_end_at_or_after(*end, now, self.slice);
            }
        }
    }

    /// Checks the invariants in the module docs; O(n log n), for tests.
    #[cfg(test)]
    fn check(&self) {
        let running: Vec<Slot> =
            (0..self.running.len()).filter(|&c| self.running[c].is_some()).map(|c| self.slots[c]).collect();
        let mut members: Vec<Key> = self.rr.iter().map(|m| m.key).collect();
        members.extend(running.iter().filter(|s| !s.marked).map(|s| s.key));
        members.sort();
        assert_eq!(members, self.pool, "pool index = Q_rr + unmarked running");
        assert_eq!(self.marked, running.iter().filter(|s| s.marked).count());
        assert!(self.pool.len() <= self.cap);
        if self.pool.len() < self.cap {
            assert!(self.heap.len() == 0 && self.marked == 0, "a pool with room is refilled");
        }
        let youngest = self.pool.last().copied();
        let outside = self.heap.iter().map(|w| w.key()).chain(running.iter().filter(|s| s.marked).map(|s| s.key));
        for k in outside {
            assert!(Some(k) > youngest, "{k:?} outside the pool is older than a member");
        }
        if !self.rr.is_empty() {
            assert_eq!(self.idle, 0, "no CPU idle while Q_rr waits");
        }
        assert_eq!(self.idle, self.running.iter().filter(|r| r.is_none()).count());
    }
}

impl Policy for Orf {
    fn name(&self) -> &'static str {
        "orf"
    }

    #[inline]
    fn arrive(&mut self, now: Nanos, job: Job) {
        self.admit(now, job);
    }

    fn block(&mut self, now: Nanos, id: JobId) {
        self.leave(now, id);
    }

    fn wake(&mut self, now: Nanos, job: Job) {
        self.admit(now, job);
    }

    #[inline]
    fn complete(&mut self, now: Nanos, id: JobId) {
        self.leave(now, id);
    }

    fn tick(&mut self, now: Nanos) {
        let waiting = self.rr.len();
        if waiting == 0 {
            // Nobody to share with: expired slices are renewed lazily (`settle_slices`).
            return;
        }
        self.expired.clear();
        for cpu in 0..self.running.len() {
            if self.running[cpu].is_some() && self.slice_end[cpu] <= now {
                let s = &self.slots[cpu];
                self.expired.push((!s.marked, s.dispatch, cpu));
            }
        }
        // Marked jobs yield first (they owe the pool their CPU), then the jobs
        // that have held a CPU longest; at most one per waiting member, so a
        // just-preempted job never moves to another expired CPU, and the rest
        // keep their CPUs with a fresh slice (Algorithm 1 with `Q_rr` empty).
        self.expired.sort_unstable();
        if self.expired.len() > waiting {
            for &(_, _, cpu) in &self.expired[waiting..] {
                self.slice_end[cpu] = slice_end_after(self.slice_end[cpu], now, self.slice);
            }
            self.expired.truncate(waiting);
        }
        for i in 0..self.expired.len() {
            let cpu = self.expired[i].2;
            self.running[cpu] = None;
            self.idle += 1;
            let slot = self.slots[cpu];
            if let Some(a) = &mut self.adapt {
                a.ran(slot.key.2, now - slot.since);
            }
            if slot.marked {
                self.marked -= 1;
                self.heap.push(Waiter::new(slot.key));
            } else {
                // Lines 8-9: slice reset, back of the queue.
                self.rr.push_back(Member { key: slot.key, sliced: true });
            }
            // Line 10. The front is a job that waited before this tick.
            let next = self.rr.pop_front().expect("one waiting member per preemption");
            self.dispatch(now, cpu, next.key);
        }
        // Lines 11-20. A marked job leaving does not change the unmarked pool,
        // so this is a no-op today; it keeps the invariant local to this spot.
        self.refill();
        self.fill_idle(now);
    }

    #[inline]
    fn running(&self) -> &[Option<JobId>] {
        &self.running
    }

    #[inline]
    fn next_tick(&self) -> Option<Nanos> {
        if self.rr.is_empty() {
            // Only pool members rotate; jobs in the heap wait for a pool seat,
            // not for a slice to end.
            return None;
        }
        // A non-empty Q_rr means every CPU is busy.
        self.slice_end.iter().copied().min()
    }

    #[inline]
    fn waiting(&self) -> usize {
        self.rr.len() + self.heap.len()
    }
}

#[cfg(test)]
mod tests;
