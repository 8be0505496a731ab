//! The per-node path: each node's queue brought up to date only when a task
//! reaches it.
//!
//! When a request is one activation whose tasks all reach their nodes at its
//! arrival (the prepared path's scenarios: no network, no continuation, no
//! admission, no in-flight cap) and every node is one core under a
//! non-preemptive queue with no gate and no OS noise, what a node does depends
//! only on the tasks sent to it: no node's schedule feeds back into another's.
//! TailGuard's fan-out case is one. This path then draws the requests first
//! (two threads, half of the requests each) and hands their tasks to their
//! nodes in arrival order; a node runs its completions up to a task's arrival
//! (each starting the queue's next task) only when that task reaches it, and
//! the queues are run dry after the last arrival. Then each request's response
//! is its last task's completion. No event heap, no node timers, no task slab:
//! a task is an index into columns, and the columns are read in order. (A
//! first version ran each node over all of its tasks in turn, after sorting the
//! tasks by node: fewer instructions, but the sort and the gathers it needed
//! over a million tasks cost as much time as they saved.)
//!
//! Same results as the general path, to the event. The general path takes
//! events in (time, sequence number) order, where an event's sequence number is
//! taken while the event that schedules it is processed. Of two events at the
//! same nanosecond, the first is therefore the one whose scheduling event came
//! first: the same question one level up, until the times differ, both are
//! arrivals (they come in index order) or one event scheduled both (then in the
//! order it did: the next arrival first, then its tasks' completions in task
//! order). [`Chains::cmp`] follows that, from what each task keeps: the event
//! that started it. It decides an arrival meeting a completion on one node at
//! the same nanosecond, the order of responses at the same time (the records'
//! order) and the event at which the run stops (the last measured response),
//! which gives the run's counters.

use std::cmp::Ordering;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

use tailor_core::policy::NonPreemptive;
use tailor_core::{AnyPolicy, Job, Nanos, Policy};

use super::arrivals::Arrivals;
use super::prepare::{prepared_path_applies, Chunk, Draws};
use super::{Engine, RunStats};
use crate::key_order;
use crate::metrics::{self, both, Recorder};
use crate::model::{Fanout, Model};

/// `prev` of a task that started at its own arrival (its node was idle).
const AT_ARRIVAL: u32 = u32::MAX;

/// See the module documentation; `requests > 0` as well (a run with nothing
/// to measure stops before its first event).
pub fn per_node_path_applies(m: &Model) -> bool {
    prepared_path_applies(m)
        && m.requests > 0
        && tasks_to_draw(m) <= MAX_TASKS
        && m.noise.is_none()
        && m.services.iter().all(|s| s.admit.is_none())
        && m.nodes.iter().all(|n| n.cores == 1 && n.policy.is_non_preemptive_queue())
}

/// The most tasks the path draws up front (~30 bytes of columns each): a run
/// expected to need more streams through the event loop instead.
pub const MAX_TASKS: f64 = 16e6;

/// The tasks of the requests a run draws first (with [`run`]'s extra).
fn tasks_to_draw(m: &Model) -> f64 {
    let measured_end = (m.warmup + m.requests) as usize;
    (measured_end + extra_requests(measured_end)) as f64 * fanout_bound(m)
}

/// The root stage's largest mean fan-out over the classes.
fn fanout_bound(m: &Model) -> f64 {
    let stage = &m.stages[m.roots[0]];
    stage.class_fanout.iter().chain([&stage.fanout]).map(Fanout::mean).fold(1.0, f64::max)
}

/// Requests arriving after the last measured one still delay it (an earlier
/// deadline jumps the queue): how many the first attempt draws beyond it.
fn extra_requests(measured_end: usize) -> usize {
    (measured_end / 50).max(256)
}

/// Runs `m` ([`per_node_path_applies`] must hold) on the per-node path, with
/// two threads if `parallel`. `None` when a drawn request is outside what the
/// path reproduces (a fan-out of 0, tasks not matching the fan-out, a task of
/// no demand): the caller then runs another path.
pub(super) fn run(m: &Model, parallel: bool) -> Option<(Recorder, RunStats)> {
    let mut engine = Engine::new(m);
    let mut queues: Vec<&mut NonPreemptive> = Vec::with_capacity(engine.nodes.len());
    for node in engine.nodes.iter_mut() {
        match &mut node.policy {
            AnyPolicy::Queue(queue) if node.cpus.len() == 1 => queues.push(queue),
            _ => return None,
        }
    }
    let measured_end = (m.warmup + m.requests) as usize;
    let mut count = measured_end + extra_requests(measured_end);
    let mut c = Chunk::default();
    let mut done: Vec<AtomicU64> = Vec::new();
    let mut prev: Vec<AtomicU32> = Vec::new();
    let mut running = vec![AT_ARRIVAL; queues.len()];
    let mut fed = 0;
    let mut arrivals = ArrivalTimes::new(m);
    loop {
        if count >= AT_ARRIVAL as usize || count as f64 * fanout_bound(m) > 2.0 * MAX_TASKS {
            return None;
        }
        let covered = draw_more(&mut c, m, engine.request_key, &mut arrivals, fed, count, parallel);
        if !covered {
            return None;
        }
        let tasks = c.task_node.len();
        if tasks >= AT_ARRIVAL as usize {
            return None;
        }
        if done.is_empty() {
            (done, prev) = both(parallel, || zeroed_atomics(tasks), || zeroed_atomics(tasks));
        } else {
            done.resize_with(tasks, AtomicU64::default);
            prev.resize_with(tasks, AtomicU32::default);
        }
        let cols = Cols { done: &done, prev: &prev };
        if parallel {
            // Two threads, half of the nodes each: a node's queue depends
            // only on its own tasks, so the halves never meet.
            let half = queues.len() / 2;
            let (q0, q1) = queues.split_at_mut(half);
            let (r0, r1) = running.split_at_mut(half);
            both(true, || feed(&c, fed..count, 0, q0, r0, cols), || feed(&c, fed..count, half, q1, r1, cols));
        } else {
            feed(&c, fed..count, 0, &mut queues, &mut running, cols);
        }
        fed = count;
        // The rest of every queue after the last arrival, run on copies so
        // that more requests can follow if these were too few.
        let mut dry: Vec<NonPreemptive> = queues.iter().map(|q| (**q).clone()).collect();
        let mut dry_running = running.clone();
        for (n, queue) in dry.iter_mut().enumerate() {
            while dry_running[n] != AT_ARRIVAL {
                let q = dry_running[n];
                let at = cols.done(q as usize);
                queue.complete(at, q as u64);
                dry_running[n] = start_next(queue, at, q, &c.task_demand, cols);
            }
        }
        match finish(m, &mut engine.rec, &c, count, cols, parallel) {
            Ok(stats) => return Some((std::mem::take(&mut engine.rec), stats)),
            // Under long queues (a load near or above capacity) the run's last
            // event can come after the first request not drawn: then on with
            // the requests that arrive by then, by the drawn ones' rate, and a
            // quarter more. (A task the copies started starts again, later,
            // among the requests that follow; what was running stays.)
            Err(arrived_by_end) => count = arrived_by_end + arrived_by_end / 4 + extra_requests(measured_end),
        }
    }
}

/// Hands requests `range` to their nodes in arrival order, each task to its
/// node's queue; a node is brought up to a task's arrival (its completions
/// until then, each starting the queue's next task) only when the task reaches
/// it. What a node does depends only on the tasks it gets, in the order it gets
/// them, which is the general path's order: the same calls to each queue.
/// Only the nodes `first_node..first_node + queues.len()` (`queues` and
/// `running` are theirs): their tasks are the only ones whose columns it
/// reads or writes, so two calls over disjoint nodes can run side by side.
fn feed(
    c: &Chunk,
    range: std::ops::Range<usize>,
    first_node: usize,
    queues: &mut [&mut NonPreemptive],
    running: &mut [u32],
    cols: Cols,
) {
    // A block of requests at a time, its tasks for these nodes listed first
    // without a branch per task: the node a task goes to is random, so a test
    // that skips the other nodes' tasks as it goes would mispredict about
    // every other task.
    let mut own: Vec<(u32, u32)> = Vec::new();
    let mut block = range.start;
    while block < range.end {
        let block_end = (block + FEED_BLOCK).min(range.end);
        let block_tasks = c.tasks(block).start..c.tasks(block_end - 1).end;
        if own.len() < block_tasks.len() {
            own.resize(block_tasks.len(), (0, 0));
        }
        let mut listed = 0;
        for i in block..block_end {
            for t in c.tasks(i) {
                own[listed] = (t as u32, i as u32);
                // Wrapping: a node below `first_node` becomes a large index.
                listed += ((c.task_node[t] as usize).wrapping_sub(first_node) < queues.len()) as usize;
            }
        }
        for &(t, i) in &own[..listed] {
            let (t, i) = (t as usize, i as usize);
            let n = c.task_node[t] as usize - first_node;
            let (arrival, class) = (c.gat[i], c.class[i]);
            let queue = &mut *queues[n];
            loop {
                let q = running[n];
                if q == AT_ARRIVAL {
                    break;
                }
                let at = cols.done[q as usize].load(Relaxed);
                if at > arrival
                    || (at == arrival && {
                        let chains = Chains { c, cols };
                        chains.cmp(Ev::Done(q), Ev::Arrival(i as u32)) == Ordering::Greater
                    })
                {
                    break;
                }
                queue.complete(at, q as u64);
                running[n] = start_next(queue, at, q, &c.task_demand, cols);
            }
            queue.arrive(arrival, Job { id: t as u64, gat: arrival, deadline: deadline(c, i), class });
            if running[n] == AT_ARRIVAL {
                // The node was idle: the task starts at once.
                debug_assert_eq!(queue.running()[0], Some(t as u64));
                cols.done[t].store(arrival + c.task_demand[t], Relaxed);
                cols.prev[t].store(AT_ARRIVAL, Relaxed);
                running[n] = t as u32;
            }
        }
        block = block_end;
    }
}

/// Requests [`feed`] lists the tasks of at a time: their list stays in the
/// first levels of cache.
const FEED_BLOCK: usize = 512;

/// `len` atomics at 0, in memory the allocator asks zeroed: a large block
/// comes fresh from the kernel, already zero, so its pages are first touched
/// where a task's completion is stored (by the feeding threads, side by side)
/// rather than all written here on one thread.
fn zeroed_atomics<A: ZeroedAtomic>(len: usize) -> Vec<A> {
    let zeroed = std::mem::ManuallyDrop::new(vec![A::Plain::default(); len]);
    let (ptr, len, capacity) = (zeroed.as_ptr() as *mut A, zeroed.len(), zeroed.capacity());
    // SAFETY: `A` has the size, alignment and bit validity of `A::Plain` (the
    // standard library documents it of `AtomicU64` and `AtomicU32`; checked
    // at compile time below), so the block is a valid `Vec<A>` of the same
    // layout, and `zeroed` gives up its ownership.
    unsafe { Vec::from_raw_parts(ptr, len, capacity) }
}

/// An atomic integer and the plain integer of its representation.
trait ZeroedAtomic {
    type Plain: Clone + Default;
}

impl ZeroedAtomic for AtomicU64 {
    type Plain = u64;
}

impl ZeroedAtomic for AtomicU32 {
    type Plain = u32;
}

const _: () = assert!(
    std::mem::size_of::<AtomicU64>() == std::mem::size_of::<u64>()
        && std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>()
        && std::mem::size_of::<AtomicU32>() == std::mem::size_of::<u32>()
        && std::mem::align_of::<AtomicU32>() == std::mem::align_of::<u32>()
);

/// Every drawn task's completion time and the task whose completion started
/// it (`AT_ARRIVAL`: its own arrival). Atomics, loaded and stored relaxed
/// (plain moves on x86-64), so that two feeding threads can share them: each
/// touches only its own nodes' tasks.
#[derive(Clone, Copy)]
struct Cols<'a> {
    done: &'a [AtomicU64],
    prev: &'a [AtomicU32],
}

impl Cols<'_> {
    #[inline]
    fn done(&self, t: usize) -> Nanos {
        self.done[t].load(Relaxed)
    }

    #[inline]
    fn prev(&self, t: usize) -> u32 {
        self.prev[t].load(Relaxed)
    }
}

/// The run's records (into `rec`) and counters, from the first `count`
/// requests of `c` with every task's completion known; `Err` with about how
/// many requests arrive by the run's end when the first request not drawn may
/// come before it. With two threads if `parallel`.
fn finish(
    m: &Model,
    rec: &mut Recorder,
    c: &Chunk,
    count: usize,
    cols: Cols,
    parallel: bool,
) -> Result<RunStats, usize> {
    let chains = Chains { c, cols };

    // Each measured request responds at its last task's completion; the run
    // stops after the last of those responses.
    let measured = m.warmup as usize..(m.warmup + m.requests) as usize;
    // With them, each request's latency and ideal latency in arrival order,
    // for the reordering (32 bits each, if they fit).
    let ([first, second], [last_first, last_second]) = halves(parallel, measured.clone(), |part| {
        let mut last = Ev::Root;
        let mut responders = Vec::with_capacity(part.len());
        let mut latency_u32 = Vec::with_capacity(part.len());
        let mut ideal_u32 = Vec::with_capacity(part.len());
        let mut fits = true;
        for i in part {
            let tasks = c.tasks(i);
            let t = responding_task(&chains, tasks.clone());
            if chains.cmp(Ev::Done(t), last) == Ordering::Greater {
                last = Ev::Done(t);
            }
            let took = cols.done(t as usize) - c.gat[i];
            let longest = c.task_demand[tasks].iter().copied().max().unwrap_or(0);
            fits &= took <= u32::MAX as Nanos && longest <= u32::MAX as Nanos;
            responders.push(t);
            latency_u32.push(took as u32);
            ideal_u32.push(longest as u32);
        }
        ((responders, latency_u32, ideal_u32, fits), last)
    });
    let (mut responders, mut latency_u32, mut ideal_u32, mut fits) = first;
    responders.extend_from_slice(&second.0);
    latency_u32.extend_from_slice(&second.1);
    ideal_u32.extend_from_slice(&second.2);
    fits &= second.3;
    drop(second);
    let last = if chains.cmp(last_second, last_first) == Ordering::Greater { last_second } else { last_first };
    let end = chains.time(last);
    if c.gat[count] <= end {
        // The first request not drawn may come before the end.
        return Err((count as f64 * end as f64 / c.gat[count].max(1) as f64).ceil() as usize);
    }

    // The records on this thread; the counters and the reordering (or, when
    // its windows are long, the requests' order by ideal completion for the
    // summary's sweep) on another.
    let ((counted, reordering_pct, ideal_by_request), record_of) = both(
        parallel,
        || {
            let reordering_pct = if fits {
                metrics::reordering_in_arrival_order(&c.gat[measured.clone()], &latency_u32, &ideal_u32)
            } else {
                None
            };
            let ideal_end = |j: usize| {
                let i = measured.start + j;
                c.gat[i] + c.task_demand[c.tasks(i)].iter().copied().max().unwrap_or(0)
            };
            let by_ideal = reordering_pct.is_none().then(|| key_order::sorted_indices(measured.len(), ideal_end));
            (counters(c, measured.clone(), count, &chains, last), reordering_pct, by_ideal)
        },
        || {
            // Records in response order: by time, then as the general path took them.
            let at = |j: usize| cols.done(responders[j] as usize);
            let mut order = key_order::sorted_indices(responders.len(), at);
            key_order::sort_ties(
                &mut order,
                |j| at(j as usize),
                |&a, &b| chains.cmp(Ev::Done(responders[a as usize]), Ev::Done(responders[b as usize])),
            );
            for &j in &order {
                let i = measured.start + j as usize;
                let (mut demand, mut longest) = (0, 0);
                for &d in &c.task_demand[c.tasks(i)] {
                    demand += d;
                    longest = longest.max(d);
                }
                let gat = c.gat[i];
                rec.record(gat, at(j as usize), gat + longest, c.class[i], c.fanout[i], demand);
            }
            let mut record_of = vec![0u32; order.len()];
            for (record, &j) in order.iter().enumerate() {
                record_of[j as usize] = record as u32;
            }
            record_of
        },
    );
    // The records' arrival order and ideal-completion order, for the summary:
    // the requests' orders, equal keys in record order.
    if let Some(ideal_by_request) = ideal_by_request {
        let mut by_ideal: Vec<u32> = ideal_by_request.iter().map(|&j| record_of[j as usize]).collect();
        key_order::sort_ties(&mut by_ideal, |r| rec.gat[r as usize] + rec.ideal_latency[r as usize], u32::cmp);
        rec.known_ideal_order = Some(by_ideal);
    }
    let mut by_gat = record_of;
    key_order::sort_ties(&mut by_gat, |r| rec.gat[r as usize], u32::cmp);
    rec.known_arrival_order = Some(by_gat);
    rec.known_reordering_pct = reordering_pct;
    rec.admitted = m.requests;
    let (stats, dequeued, missed) = counted;
    rec.tasks_dequeued += dequeued;
    rec.tasks_missed += missed;
    Ok(stats)
}

/// The task whose completion is a request's response: of its `tasks`, the
/// one the general path completes last.
#[inline]
fn responding_task(chains: &Chains, tasks: std::ops::Range<usize>) -> u32 {
    let cols = chains.cols;
    let mut best = tasks.start;
    let mut best_at = cols.done(best);
    for t in tasks.start + 1..tasks.end {
        // Two of its tasks that both started at its arrival complete in
        // task order (common: the demands come from a table); else ask the
        // chains.
        let at = cols.done(t);
        if at > best_at
            || (at == best_at
                && ((cols.prev(t) == AT_ARRIVAL && cols.prev(best) == AT_ARRIVAL)
                    || chains.cmp(Ev::Done(t as u32), Ev::Done(best as u32)) == Ordering::Greater))
        {
            (best, best_at) = (t, at);
        }
    }
    best as u32
}

/// The run's counters, the measured tasks dequeued and those of them dequeued
/// after their deadline, for a run that stops after event `last`.
fn counters(
    c: &Chunk,
    measured: std::ops::Range<usize>,
    count: usize,
    chains: &Chains,
    last: Ev,
) -> (RunStats, u64, u64) {
    let end = chains.time(last);
    // The general path stops after the event `last`: what it had processed by then.
    let not_after = |e: Ev| {
        let t = chains.time(e);
        t < end || (t == end && chains.cmp(e, last) != Ordering::Greater)
    };
    let (mut dequeued, mut missed) = (0, 0);
    for i in measured {
        let deadline = deadline(c, i);
        for t in c.tasks(i) {
            let start = chains.cols.done(t) - c.task_demand[t];
            let started = start < end || (start == end && not_after(chains.started_by(t)));
            if started {
                dequeued += 1;
                missed += (start > deadline) as u64;
            }
        }
    }
    let mut arrivals = c.gat.partition_point(|&g| g < end);
    while arrivals < count && not_after(Ev::Arrival(arrivals as u32)) {
        arrivals += 1;
    }
    let mut completions = 0u64;
    for (t, d) in chains.cols.done.iter().enumerate() {
        let d = d.load(Relaxed);
        completions += (d < end || (d == end && not_after(Ev::Done(t as u32)))) as u64;
    }
    let stats = RunStats {
        events: arrivals as u64 + completions,
        arrivals: arrivals as u64,
        end_time: end,
        ..RunStats::default()
    };
    (stats, dequeued, missed)
}

/// `f` over the two halves of `range`, the first on a second thread if
/// `parallel`: the results, first half first, by element.
fn halves<A: Send, B: Send>(
    parallel: bool,
    range: std::ops::Range<usize>,
    f: impl Fn(std::ops::Range<usize>) -> (A, B) + Sync,
) -> ([A; 2], [B; 2]) {
    let mid = range.start + range.len() / 2;
    let ((a0, b0), (a1, b1)) = both(parallel, || f(range.start..mid), || f(mid..range.end));
    ([a0, a1], [b0, b1])
}

/// After task `q` completed at `at` on `queue`'s node: the task the queue
/// starts next (its completion and what started it noted), or `AT_ARRIVAL`.
#[inline]
fn start_next(queue: &NonPreemptive, at: Nanos, q: u32, demand: &[Nanos], cols: Cols) -> u32 {
    match queue.running()[0] {
        Some(next) => {
            let next = next as usize;
            cols.done[next].store(at + demand[next], Relaxed);
            cols.prev[next].store(q, Relaxed);
            next as u32
        }
        None => AT_ARRIVAL,
    }
}

/// Request `i`'s deadline, as the general path takes it at its arrival.
#[inline]
fn deadline(c: &Chunk, i: usize) -> Nanos {
    c.gat[i].saturating_add(c.budget[i])
}

/// Appends requests `from..to` to `c` as the prepared path's producer draws
/// them (two threads, half of them each, if `parallel`), all but their arrival
/// times, which `arrivals` extends to `to` (one past, see there) on this
/// thread meanwhile. Whether the path reproduces them all: a fan-out of at
/// least one, one task per fan-out, every task of some demand.
fn draw_more(
    c: &mut Chunk,
    m: &Model,
    request_key: u64,
    arrivals: &mut ArrivalTimes,
    from: usize,
    to: usize,
    parallel: bool,
) -> bool {
    let draw = |from: usize, to: usize, room_for: usize| {
        let mut draws = Draws::new(m, request_key);
        let mut part = Chunk::default();
        part.clear(from as u64);
        // Room for the requests it will hold (with the second part, for the
        // first one), so that no column is moved or copied as it grows.
        let tasks = (room_for as f64 * fanout_bound(m) * 1.1) as usize + 1024;
        part.reserve(room_for, tasks);
        let mut covered = true;
        for i in from..to {
            let first = part.task_node.len();
            draws.draw(i as u64, &mut part);
            let k = part.fanout[part.fanout.len() - 1];
            covered &= k != 0 && part.task_node.len() - first == k as usize && !part.task_demand[first..].contains(&0);
        }
        (part, covered)
    };
    let mut gat = std::mem::take(&mut c.gat);
    // This thread also draws the arrival times, ~1/16 of a request's draws.
    let half = if parallel { from + (to - from) * 15 / 32 } else { to };
    let parts = if parallel {
        let (second, first) = both(
            true,
            || draw(half, to, to - half),
            || {
                arrivals.extend_to(&mut gat, to);
                draw(from, half, to - from)
            },
        );
        [first, second]
    } else {
        arrivals.extend_to(&mut gat, to);
        [draw(from, to, to - from), (Chunk::default(), true)]
    };
    let covered = parts.iter().all(|(_, covered)| *covered);
    for (part, _) in parts {
        if c.task_node.is_empty() && c.task_end.is_empty() {
            *c = part; // the first part as it is: no copy
            continue;
        }
        // The copies touch fresh pages of the columns: the demands on one
        // thread, the rest (about as many bytes) on the other.
        let Chunk { class, fanout, budget, task_end, task_node, task_demand, .. } = c;
        let offset = task_node.len() as u32;
        both(
            parallel,
            || task_demand.extend_from_slice(&part.task_demand),
            || {
                class.extend_from_slice(&part.class);
                fanout.extend_from_slice(&part.fanout);
                budget.extend_from_slice(&part.budget);
                task_end.extend(part.task_end.iter().map(|&e| e + offset));
                task_node.extend_from_slice(&part.task_node);
            },
        );
    }
    c.gat = gat;
    covered
}

/// The run's arrival times, drawn once each: a continuation above capacity
/// extends them instead of drawing them all again from the first.
struct ArrivalTimes {
    arrivals: Arrivals,
    next: Nanos,
}

impl ArrivalTimes {
    fn new(m: &Model) -> ArrivalTimes {
        ArrivalTimes { arrivals: Arrivals::new(m), next: 0 }
    }

    /// Extends `gat` to the arrival times of requests `0..=count` (one past the
    /// last drawn, to tell whether it arrives before the run's end).
    fn extend_to(&mut self, gat: &mut Vec<Nanos>, count: usize) {
        gat.reserve((count + 1).saturating_sub(gat.len()));
        while gat.len() <= count {
            gat.push(self.next);
            self.next += self.arrivals.next_gap();
        }
    }
}

/// An event of the general path: the start of the run, request `i`'s arrival,
/// or task `t`'s completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ev {
    Root,
    Arrival(u32),
    Done(u32),
}

/// The general path's event order, from the tasks' completions and the
/// events that started them.
struct Chains<'a> {
    c: &'a Chunk,
    cols: Cols<'a>,
}

impl Chains<'_> {
    #[inline]
    fn time(&self, e: Ev) -> Nanos {
        match e {
            Ev::Root => 0,
            Ev::Arrival(i) => self.c.gat[i as usize],
            Ev::Done(t) => self.cols.done(t as usize),
        }
    }

    /// The event that started task `t`.
    fn started_by(&self, t: usize) -> Ev {
        self.parent(Ev::Done(t as u32)).0
    }

    /// The event that scheduled `e`, and `e`'s place among what it scheduled.
    fn parent(&self, e: Ev) -> (Ev, u32) {
        match e {
            Ev::Root => (Ev::Root, 0),
            Ev::Arrival(0) => (Ev::Root, 0),
            // An arrival schedules the next one before it sends its tasks.
            Ev::Arrival(i) => (Ev::Arrival(i - 1), 0),
            Ev::Done(t) => match self.cols.prev(t as usize) {
                AT_ARRIVAL => {
                    // Tasks are sent in order, each starting at once on an idle node.
                    let req = self.c.task_end.partition_point(|&e| e <= t);
                    (Ev::Arrival(req as u32), 1 + t - self.c.tasks(req).start as u32)
                }
                q => (Ev::Done(q), 1),
            },
        }
    }

    /// The order in which the general path processes `a` and `b`.
    fn cmp(&self, mut a: Ev, mut b: Ev) -> Ordering {
        loop {
            match (a, b) {
                _ if a == b => return Ordering::Equal,
                (Ev::Root, _) => return Ordering::Less,
                (_, Ev::Root) => return Ordering::Greater,
                (Ev::Arrival(i), Ev::Arrival(j)) => return i.cmp(&j),
                _ => {}
            }
            let (ta, tb) = (self.time(a), self.time(b));
            if ta != tb {
                return ta.cmp(&tb);
            }
            let ((pa, sa), (pb, sb)) = (self.parent(a), self.parent(b));
            if pa == pb {
                return sa.cmp(&sb);
            }
            (a, b) = (pa, pb);
        }
    }
}
