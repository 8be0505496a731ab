//! The per-node path: every node's queue run on its own, one node after another.
//!
//! When a request is one activation whose tasks all reach their nodes at its
//! arrival (the prepared path's scenarios: no network, no continuation, no
//! admission, no in-flight cap) and every node is one core under a
//! non-preemptive queue with no gate and no OS noise, what a node does depends
//! only on the tasks sent to it: no node's schedule feeds back into another's.
//! TailGuard's fan-out case is one. This path then draws the requests first
//! (two threads, half of the requests each), sorts their tasks by node, runs each
//! node's queue over its tasks in arrival order (two threads, half of the
//! nodes each) and only then joins the tasks into requests. No event heap, no
//! node timers, no task slab: a task is an index into columns.
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

use tailor_core::time::NEVER;
use tailor_core::{AnyPolicy, Job, Nanos, Policy, PolicySpec};

use super::arrivals::Arrivals;
use super::node::Node;
use super::prepare::{prepared_path_applies, Chunk, Draws};
use super::{Engine, RunStats};
use crate::key_order;
use crate::metrics::Recorder;
use crate::model::Model;

/// `prev` of a task that started at its own arrival (its node was idle).
const AT_ARRIVAL: u32 = u32::MAX;

/// See the module documentation; `requests > 0` as well (a run with nothing
/// to measure stops before its first event).
pub fn per_node_path_applies(m: &Model) -> bool {
    prepared_path_applies(m)
        && m.requests > 0
        && m.noise.is_none()
        && m.services.iter().all(|s| s.admit.is_none())
        && m.nodes.iter().all(|n| {
            n.cores == 1
                && matches!(
                    n.policy,
                    PolicySpec::Fifo
                        | PolicySpec::Gfifo
                        | PolicySpec::Edf
                        | PolicySpec::Priq
                        | PolicySpec::Lifo
                        | PolicySpec::Random { .. }
                )
        })
}

/// Runs `m` ([`per_node_path_applies`] must hold) on the per-node path, with
/// two threads if `parallel`. `None` when a drawn request is outside what the
/// path reproduces (a fan-out of 0, tasks not matching the fan-out, a task of
/// no demand): the caller then runs another path.
pub(super) fn run(m: &Model, parallel: bool) -> Option<(Recorder, RunStats)> {
    let measured_end = (m.warmup + m.requests) as usize;
    // Requests arriving after the last measured one still delay it (an earlier
    // deadline jumps the queue), so draw some beyond it; if the run's last
    // event comes after the first request not drawn, draw twice as many.
    let mut extra = (measured_end / 50).max(256);
    loop {
        let count = measured_end + extra;
        if count >= AT_ARRIVAL as usize {
            return None;
        }
        match attempt(m, count, parallel)? {
            Some(result) => return Some(result),
            None => extra *= 2,
        }
    }
}

/// One run over the first `count` requests: `Some(None)` if they were too few.
fn attempt(m: &Model, count: usize, parallel: bool) -> Option<Option<(Recorder, RunStats)>> {
    let mut engine = Engine::new(m);
    if !engine.nodes.iter().all(|n| n.cpus.len() == 1 && matches!(n.policy, AnyPolicy::Queue(_))) {
        return None;
    }
    let c = draw_requests(m, engine.request_key, count, parallel);
    let tasks = c.task_node.len();
    if tasks >= AT_ARRIVAL as usize {
        return None;
    }
    // The tasks by node, in arrival order within each node (a counting sort),
    // each with what its node needs, so that a node reads its tasks in a row.
    let node_count = engine.nodes.len();
    let mut node_start = vec![0u32; node_count + 1];
    for &n in &c.task_node {
        node_start[n as usize + 1] += 1;
    }
    for n in 0..node_count {
        node_start[n + 1] += node_start[n];
    }
    let mut next_slot = node_start.clone();
    let mut pos_of = vec![0u32; tasks];
    let mut slots = vec![Slot::default(); tasks];
    let mut first = 0;
    for i in 0..count {
        let end = c.task_end[i] as usize;
        if c.fanout[i] == 0 || end - first != c.fanout[i] as usize {
            return None;
        }
        let (arrival, deadline) = (c.gat[i], deadline(&c, i));
        for t in first..end {
            let demand = c.task_demand[t];
            if demand == 0 || demand > u32::MAX as Nanos {
                return None;
            }
            let n = c.task_node[t] as usize;
            let p = next_slot[n];
            next_slot[n] += 1;
            pos_of[t] = p;
            slots[p as usize] = Slot {
                arrival,
                deadline,
                demand: demand as u32,
                req: i as u32,
                sub: (t - first) as u32,
                class: c.class[i],
            };
        }
        first = end;
    }
    drop(next_slot);

    // Each node's queue over its tasks; `done` and `prev` by position.
    let mut done = vec![0 as Nanos; tasks];
    let mut prev = vec![0u32; tasks];
    let split = if parallel { node_start.partition_point(|&s| (s as usize) < tasks / 2).min(node_count) } else { 0 };
    let cols = Columns { gat: &c.gat, slots: &slots, node_start: &node_start };
    {
        let at = node_start[split] as usize;
        let (nodes_a, nodes_b) = engine.nodes.split_at_mut(split);
        let (done_a, done_b) = done.split_at_mut(at);
        let (prev_a, prev_b) = prev.split_at_mut(at);
        let a = NodeRange { nodes: nodes_a, first: 0, done: done_a, prev: prev_a };
        let b = NodeRange { nodes: nodes_b, first: split, done: done_b, prev: prev_b };
        if parallel {
            std::thread::scope(|s| {
                let other = s.spawn(|| cols.run_nodes(b));
                cols.run_nodes(a);
                other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            });
        } else {
            cols.run_nodes(a);
            cols.run_nodes(b);
        }
    }
    let chains = Chains { cols: &cols, done: &done, prev: &prev, base: 0 };

    // Each measured request responds at its last task's completion.
    let measured = m.warmup as usize..(m.warmup + m.requests) as usize;
    let tasks_of = |i: usize| if i == 0 { 0 } else { c.task_end[i - 1] as usize }..c.task_end[i] as usize;
    let resp: Vec<u32> = measured
        .clone()
        .map(|i| {
            let mut r = AT_ARRIVAL;
            for t in tasks_of(i) {
                let p = pos_of[t];
                if r == AT_ARRIVAL || done[p as usize] > done[r as usize] {
                    r = p;
                } else if done[p as usize] == done[r as usize]
                    && chains.cmp(Ev::Done(p), Ev::Done(r)) == Ordering::Greater
                {
                    r = p;
                }
            }
            r
        })
        .collect();
    let last = resp
        .iter()
        .map(|&r| Ev::Done(r))
        .max_by(|&a, &b| chains.cmp(a, b))
        .expect("a run measures at least one request");
    let end = chains.time(last);
    if c.gat[count] <= end {
        return Some(None); // the first request not drawn may come before the end
    }
    // The general path stops after the event `last`: what it had processed by then.
    let not_after = |e: Ev| {
        let t = chains.time(e);
        t < end || (t == end && chains.cmp(e, last) != Ordering::Greater)
    };

    let mut rec = std::mem::take(&mut engine.rec);
    // Records in response order: by time, then as the general path took them.
    let mut order = key_order::sorted_indices(resp.len(), |j| done[resp[j] as usize]);
    let mut from = 0;
    while from < order.len() {
        let time = done[resp[order[from] as usize] as usize];
        let mut to = from + 1;
        while to < order.len() && done[resp[order[to] as usize] as usize] == time {
            to += 1;
        }
        if to - from > 1 {
            order[from..to].sort_by(|&a, &b| chains.cmp(Ev::Done(resp[a as usize]), Ev::Done(resp[b as usize])));
        }
        from = to;
    }
    for &j in &order {
        let i = measured.start + j as usize;
        let (demand, longest) =
            c.task_demand[tasks_of(i)].iter().fold((0, 0), |(sum, max): (Nanos, Nanos), &d| (sum + d, max.max(d)));
        let gat = c.gat[i];
        rec.record(gat, done[resp[j as usize] as usize], gat + longest, c.class[i], c.fanout[i], demand);
    }
    rec.admitted = m.requests;
    for i in measured.clone() {
        for t in tasks_of(i) {
            let p = pos_of[t] as usize;
            let start = done[p] - c.task_demand[t];
            let started = start < end || (start == end && not_after(chains.started_by(p)));
            if started {
                rec.task_dequeued(start > slots[p].deadline);
            }
        }
    }

    let mut arrivals = c.gat.partition_point(|&g| g < end);
    while arrivals < count && not_after(Ev::Arrival(arrivals as u32)) {
        arrivals += 1;
    }
    let mut completions = 0u64;
    for (p, &d) in done.iter().enumerate() {
        completions += (d < end || (d == end && not_after(Ev::Done(p as u32)))) as u64;
    }
    let stats = RunStats {
        events: arrivals as u64 + completions,
        arrivals: arrivals as u64,
        end_time: end,
        ..RunStats::default()
    };
    Some(Some((rec, stats)))
}

/// Request `i`'s deadline, as the general path takes it at its arrival.
#[inline]
fn deadline(c: &Chunk, i: usize) -> Nanos {
    match c.budget[i] {
        Some(b) => c.gat[i].saturating_add(b),
        None => NEVER,
    }
}

/// A task as its node sees it (32 bytes, so that a node reads its tasks in a row).
#[derive(Clone, Copy, Default)]
struct Slot {
    arrival: Nanos,
    deadline: Nanos,
    demand: u32,
    /// Its request.
    req: u32,
    /// Its place among its request's tasks.
    sub: u32,
    class: u8,
}

/// Requests `0..count` as the prepared path's producer draws them, in one
/// chunk whose `gat` holds `count + 1` arrival times (one past the last
/// request, to tell whether it arrives before the run's end).
fn draw_requests(m: &Model, request_key: u64, count: usize, parallel: bool) -> Chunk {
    let draw = |from: usize, to: usize| {
        let mut draws = Draws::new(m, request_key);
        let mut c = Chunk::default();
        c.clear(from as u64);
        for i in from..to {
            draws.draw(i as u64, &mut c);
        }
        c
    };
    let arrival_times = || {
        let mut arrivals = Arrivals::new(m);
        let mut now = 0;
        let mut gat = Vec::with_capacity(count + 1);
        for _ in 0..=count {
            gat.push(now);
            now += arrivals.next_gap();
        }
        gat
    };
    let half = if parallel { count / 2 } else { count };
    let (mut c, rest) = if parallel {
        std::thread::scope(|s| {
            let rest = s.spawn(|| draw(half, count));
            let gat = arrival_times();
            let mut c = draw(0, half);
            c.gat = gat;
            (c, rest.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        })
    } else {
        let mut c = draw(0, count);
        c.gat = arrival_times();
        (c, Chunk::default())
    };
    let offset = c.task_node.len() as u32;
    c.class.extend_from_slice(&rest.class);
    c.fanout.extend_from_slice(&rest.fanout);
    c.budget.extend_from_slice(&rest.budget);
    c.task_end.extend(rest.task_end.iter().map(|&e| e + offset));
    c.task_node.extend_from_slice(&rest.task_node);
    c.task_demand.extend_from_slice(&rest.task_demand);
    c
}

/// The drawn requests' arrival times and the tasks by node, read by every node.
struct Columns<'a> {
    /// Arrival time of each request (one past the last drawn).
    gat: &'a [Nanos],
    /// The tasks by node, in arrival order within each node; a task's
    /// position here is its index in `done` and `prev`.
    slots: &'a [Slot],
    /// Node `n`'s tasks are at positions `node_start[n]..node_start[n + 1]`.
    node_start: &'a [u32],
}

/// Some consecutive nodes and the columns of their tasks' positions.
struct NodeRange<'a> {
    nodes: &'a mut [Node],
    /// Index of `nodes[0]`.
    first: usize,
    /// When the task at each position completes.
    done: &'a mut [Nanos],
    /// The position of the task whose completion started it, or `AT_ARRIVAL`.
    prev: &'a mut [u32],
}

impl Columns<'_> {
    /// Runs each node of `r` over its tasks: the calls the general path makes
    /// to the node's queue, in the same order.
    fn run_nodes(&self, r: NodeRange<'_>) {
        let base = self.node_start[r.first] as usize;
        for (k, node) in r.nodes.iter_mut().enumerate() {
            let AnyPolicy::Queue(queue) = &mut node.policy else { unreachable!("checked before the run") };
            let positions = self.node_start[r.first + k] as usize..self.node_start[r.first + k + 1] as usize;
            // The running task's position (one core).
            let mut running: Option<usize> = None;
            for p in positions {
                let s = self.slots[p];
                // Completions before this arrival, each starting the queue's next task.
                while let Some(q) = running {
                    let at = r.done[q - base];
                    if at > s.arrival {
                        break;
                    }
                    if at == s.arrival {
                        let chains = Chains { cols: self, done: &*r.done, prev: &*r.prev, base };
                        if chains.cmp(Ev::Done(q as u32), Ev::Arrival(s.req)) == Ordering::Greater {
                            break;
                        }
                    }
                    queue.complete(at, q as u64);
                    running = queue.running()[0].map(|next| {
                        let next = next as usize;
                        r.done[next - base] = at + self.slots[next].demand as Nanos;
                        r.prev[next - base] = q as u32;
                        next
                    });
                }
                queue.arrive(s.arrival, Job { id: p as u64, gat: s.arrival, deadline: s.deadline, class: s.class });
                if running.is_none() {
                    // The node was idle: the task starts at once.
                    debug_assert_eq!(queue.running()[0], Some(p as u64));
                    r.done[p - base] = s.arrival + s.demand as Nanos;
                    r.prev[p - base] = AT_ARRIVAL;
                    running = Some(p);
                }
            }
            // The rest of the queue, after the last arrival.
            while let Some(q) = running {
                let at = r.done[q - base];
                queue.complete(at, q as u64);
                running = queue.running()[0].map(|next| {
                    let next = next as usize;
                    r.done[next - base] = at + self.slots[next].demand as Nanos;
                    r.prev[next - base] = q as u32;
                    next
                });
            }
        }
    }
}

/// An event of the general path: the start of the run, request `i`'s arrival,
/// or the completion of the task at a position (`Columns::slots`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ev {
    Root,
    Arrival(u32),
    Done(u32),
}

/// The general path's event order, from the tasks' completions and the
/// events that started them (positions from `base` on).
struct Chains<'a> {
    cols: &'a Columns<'a>,
    done: &'a [Nanos],
    prev: &'a [u32],
    base: usize,
}

impl Chains<'_> {
    #[inline]
    fn time(&self, e: Ev) -> Nanos {
        match e {
            Ev::Root => 0,
            Ev::Arrival(i) => self.cols.gat[i as usize],
            Ev::Done(p) => self.done[p as usize - self.base],
        }
    }

    /// The event that started the task at position `p`.
    fn started_by(&self, p: usize) -> Ev {
        self.parent(Ev::Done(p as u32)).0
    }

    /// The event that scheduled `e`, and `e`'s place among what it scheduled.
    fn parent(&self, e: Ev) -> (Ev, u32) {
        match e {
            Ev::Root => (Ev::Root, 0),
            Ev::Arrival(0) => (Ev::Root, 0),
            // An arrival schedules the next one before it sends its tasks.
            Ev::Arrival(i) => (Ev::Arrival(i - 1), 0),
            Ev::Done(p) => match self.prev[p as usize - self.base] {
                AT_ARRIVAL => {
                    // Tasks are sent in order, each starting at once on an idle node.
                    let s = &self.cols.slots[p as usize];
                    (Ev::Arrival(s.req), 1 + s.sub)
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
