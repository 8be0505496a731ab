//! The prepared path: a second thread draws the requests ahead of the engine.
//!
//! Everything a one-stage request draws at its arrival comes from its own
//! stream (`CounterRng` at its index) or from the arrival process's stream:
//! its arrival time, class, fan-out, instances, deadline budget and each task's
//! demand. None of it depends on the engine's state, so a producer thread can
//! draw request after request, in arrival order, into fixed-size chunks that
//! the engine consumes through a bounded channel. The engine then does exactly
//! what the general path does with those values (same events, same sequence
//! numbers, same records); only where the draws happen moves.
//!
//! It applies ([`prepared_path_applies`]) when nothing a request draws later
//! depends on the run: one root stage with no continuation (`next`, `choose`),
//! no network (no per-hop draws), no admission controller, no `reject_late`
//! and no in-flight cap (a request's deadline is taken at its arrival).

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};

use tailor_core::rng::CounterRng;
use tailor_core::time::NEVER;
use tailor_core::Nanos;

use super::arrivals::Arrivals;
use super::node::Task;
use super::placement::Placement;
use super::request::{draw_class, task_demand, Activation, Request};
use super::Engine;
use crate::model::Model;

/// Requests per chunk: large enough that the channel costs nothing per
/// request, small enough that the engine starts at once.
const CHUNK_REQUESTS: usize = 4096;
/// Chunks drawn ahead of the engine at most (the channel's bound).
const CHUNKS_AHEAD: usize = 4;
/// Runs shorter than this (warm-up included) stay on one thread: starting one
/// costs more than it saves.
pub const PREPARED_MIN_REQUESTS: u64 = 50_000;

/// The scenario's requests draw nothing after their arrival that depends on
/// the run (see the module documentation), so they can be prepared ahead.
pub fn prepared_path_applies(m: &Model) -> bool {
    let [stage] = m.roots[..] else { return false };
    let st = &m.stages[stage];
    st.next.is_empty()
        && st.choose.is_empty()
        && m.network.is_none()
        && m.admission.is_none()
        && !m.reject_late
        && m.in_flight_cap.is_none()
}

/// Requests `first_index..first_index + len()`, as struct of arrays.
#[derive(Default)]
pub(super) struct Chunk {
    pub(super) first_index: u64,
    pub(super) gat: Vec<Nanos>,
    pub(super) class: Vec<u8>,
    pub(super) fanout: Vec<u32>,
    /// The deadline budget, `NEVER` for none (a deadline of `gat + NEVER`
    /// saturates to `NEVER`, as no budget gives).
    pub(super) budget: Vec<Nanos>,
    /// Request `j`'s tasks are `task_end[j - 1]..task_end[j]` (from 0 for `j = 0`).
    pub(super) task_end: Vec<u32>,
    pub(super) task_node: Vec<u32>,
    pub(super) task_demand: Vec<Nanos>,
}

impl Chunk {
    pub(super) fn clear(&mut self, first_index: u64) {
        self.first_index = first_index;
        self.gat.clear();
        self.class.clear();
        self.fanout.clear();
        self.budget.clear();
        self.task_end.clear();
        self.task_node.clear();
        self.task_demand.clear();
    }

    /// Room for `requests` more requests of `tasks` tasks in all.
    pub(super) fn reserve(&mut self, requests: usize, tasks: usize) {
        self.class.reserve(requests);
        self.fanout.reserve(requests);
        self.budget.reserve(requests);
        self.task_end.reserve(requests);
        self.task_node.reserve(tasks);
        self.task_demand.reserve(tasks);
    }

    pub(super) fn len(&self) -> usize {
        self.gat.len()
    }

    /// Request `j`'s tasks: their indices in `task_node` and `task_demand`.
    #[inline]
    pub(super) fn tasks(&self, j: usize) -> std::ops::Range<usize> {
        let first = if j == 0 { 0 } else { self.task_end[j - 1] as usize };
        first..self.task_end[j] as usize
    }
}

/// Draws the requests of a run in arrival order, as the engine's `on_arrival`,
/// `pick_activation` and `send_activation` would.
struct Producer<'m> {
    arrivals: Arrivals,
    draws: Draws<'m>,
    now: Nanos,
}

/// Draws what a one-stage request draws from its own stream at its arrival.
pub(super) struct Draws<'m> {
    m: &'m Model,
    stage: usize,
    request_key: u64,
    placement: Placement,
    chosen: Vec<u32>,
}

impl<'m> Draws<'m> {
    pub(super) fn new(m: &'m Model, request_key: u64) -> Self {
        Draws { m, stage: m.roots[0], request_key, placement: Placement::new(m), chosen: Vec::new() }
    }

    /// Appends request `index`'s class, fan-out, budget and tasks (node and
    /// demand) to `c`, as the engine's `on_arrival`, `pick_activation` and
    /// `send_activation` would draw them; not its arrival time.
    #[inline]
    pub(super) fn draw(&mut self, index: u64, c: &mut Chunk) {
        let svc = &self.m.services[self.m.stages[self.stage].service];
        let mut rng = CounterRng::stream(self.request_key, index);
        let class = draw_class(self.m, &mut rng);
        let (k, budget) = self.placement.pick(self.m, self.stage, class, &mut rng, &mut self.chosen);
        let instances: &[u32] = if svc.instances == 1 { &[0] } else { &self.chosen };
        for &inst in instances {
            c.task_node.push((svc.first_node + inst as usize) as u32);
            c.task_demand.push(task_demand(svc, inst, &mut rng));
        }
        c.class.push(class);
        c.fanout.push(k);
        c.budget.push(budget.unwrap_or(NEVER));
        c.task_end.push(c.task_node.len() as u32);
    }
}

impl Producer<'_> {
    fn fill(&mut self, c: &mut Chunk) {
        c.clear(self.arrivals.next_index);
        for _ in 0..CHUNK_REQUESTS {
            let index = self.arrivals.next_index;
            self.arrivals.next_index += 1;
            self.draws.draw(index, c);
            c.gat.push(self.now);
            self.now += self.arrivals.next_gap();
        }
    }

    /// Fills chunks until the engine hangs up (it stops taking them when its
    /// measured requests are done).
    fn run(mut self, to_engine: SyncSender<Chunk>, recycled: Receiver<Chunk>) {
        loop {
            let mut c = recycled.try_recv().unwrap_or_default();
            self.fill(&mut c);
            if to_engine.send(c).is_err() {
                return;
            }
        }
    }
}

/// The engine's end of the producer's channel: the chunk being consumed and
/// the next one once it is needed.
pub(super) struct Feed {
    from_producer: Receiver<Chunk>,
    recycle: Sender<Chunk>,
    chunk: Chunk,
    next: Option<Chunk>,
    /// Position of the next arrival in `chunk`.
    pos: usize,
}

impl Feed {
    fn receive(from: &Receiver<Chunk>) -> Chunk {
        from.recv().expect("the request producer stopped before the run ended")
    }

    /// The arrival time of the request after the one at `pos`.
    fn following_gat(&mut self) -> Nanos {
        if self.pos + 1 < self.chunk.len() {
            self.chunk.gat[self.pos + 1]
        } else {
            let from = &self.from_producer;
            self.next.get_or_insert_with(|| Self::receive(from)).gat[0]
        }
    }

    /// Moves past the request at `pos`.
    fn advance(&mut self) {
        self.pos += 1;
        if self.pos == self.chunk.len() {
            let next = self.next.take().unwrap_or_else(|| Self::receive(&self.from_producer));
            let done = std::mem::replace(&mut self.chunk, next);
            // The producer may have hung up already; the chunk is then just dropped.
            let _ = self.recycle.send(done);
            self.pos = 0;
        }
    }
}

/// Runs `engine` on the prepared path: a producer thread draws the requests.
pub(super) fn run_prepared(mut engine: Engine<'_>) -> (crate::metrics::Recorder, super::RunStats) {
    let m = engine.m;
    let producer = Producer { arrivals: Arrivals::new(m), draws: Draws::new(m, engine.request_key), now: 0 };
    let (to_engine, from_producer) = sync_channel(CHUNKS_AHEAD);
    let (recycle, recycled) = channel();
    std::thread::scope(|s| {
        s.spawn(move || producer.run(to_engine, recycled));
        let chunk = Feed::receive(&from_producer);
        engine.feed = Some(Box::new(Feed { from_producer, recycle, chunk, next: None, pos: 0 }));
        // `run` drops the engine and its feed when it returns, which stops the producer.
        engine.run::<true>()
    })
}

impl Engine<'_> {
    /// `on_arrival` for a prepared request: the same effects, the draws read
    /// from the producer's chunk.
    pub(super) fn on_prepared_arrival(&mut self) {
        let mut feed = self.feed.take().expect("prepared arrivals come with a feed");
        let index = self.arrivals.next_index;
        self.arrivals.next_index += 1;
        let c = &feed.chunk;
        let j = feed.pos;
        debug_assert_eq!(c.first_index + j as u64, index, "prepared requests out of step");
        debug_assert_eq!(c.gat[j], self.now, "a prepared request arrived at the wrong time");
        let following = feed.following_gat();
        self.schedule_arrival(following);

        let c = &feed.chunk;
        let (class, k) = (c.class[j], c.fanout[j]);
        let measured = self.measured.contains(&index);
        if measured {
            self.rec.admitted();
        }
        let deadline = self.now.saturating_add(c.budget[j]);
        let tasks = c.tasks(j);
        let (mut demand, mut longest) = (0, 0);
        for &d in &c.task_demand[tasks.clone()] {
            demand += d;
            longest = longest.max(d);
        }
        let gat = self.now;
        let stage = self.m.roots[0];
        self.in_flight += 1;
        let req = self.reqs.insert(Request {
            index,
            gat,
            class,
            fanout: k.max(1),
            outstanding: 1,
            ideal_end: gat,
            demand,
            rng: CounterRng::stream(self.request_key, index),
        });
        // No network: the activation's ideal end is its longest task's.
        let act = self.acts.insert(Activation { req, stage: stage as u32, pending: k, ideal_end: gat + longest });
        let gate = self.service_gate[self.m.stages[stage].service];
        let unsent = Task::unsent(act, gate, deadline, gat, class, measured);
        for t in tasks {
            self.send_task(Task { node: c.task_node[t], remaining: c.task_demand[t], ..unsent }, 0);
        }
        feed.advance();
        self.feed = Some(feed);
    }
}
