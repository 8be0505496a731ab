//! The discrete-event engine: virtual time, an event heap, nodes whose CPUs
//! are assigned by the very `Policy` objects the runtime uses.
//!
//! Determinism: every random draw comes from a stream derived from the
//! scenario seed; per-request draws (class, fanout, instances, demands,
//! branches, network delays) come from a counter-based stream
//! (`CounterRng`) opened at the request's index, so two policies see exactly the same requests (common random
//! numbers) and differences between them are the policies', not noise. Equal
//! event times are broken by insertion order.
//!
//! Layout: this file holds the engine's state, its construction and the main
//! loop; `event` the heap's entries, `slab` the record store, `arrivals` the
//! edge's arrival process, `request` a request's life from arrival to response
//! (activations, fan-out, joins), `node` tasks on nodes (delivery, gates, the
//! policy's CPU assignment, completions, noise), `late` the `reject_late`
//! admission check, `lone` the lone-request fast path, `prepare` the prepared
//! path (requests drawn on a second thread) and `per_node` the per-node path
//! (each one-core queue node run on its own).

mod arrivals;
mod event;
mod late;
mod lone;
mod node;
mod per_node;
mod placement;
mod prepare;
mod request;
mod slab;

use std::collections::{BinaryHeap, VecDeque};

use tailor_core::rng::RandomSource;
use tailor_core::tailguard::{AdmissionController, AdmissionPhase};
use tailor_core::time::NEVER;
use tailor_core::{AnyPolicy, Nanos, Rng};

use self::arrivals::Arrivals;
use self::event::{EvKind, Event, Source};
use self::late::LateCheck;
use self::node::{Cpu, Gate, Node, Task, NO_GATE};
pub use self::per_node::{per_node_path_applies, MAX_TASKS as PER_NODE_MAX_TASKS};
use self::placement::Placement;
use self::prepare::Feed;
pub use self::prepare::{prepared_path_applies, PREPARED_MIN_REQUESTS};
use self::request::{Activation, Request};
use self::slab::Slab;
use crate::metrics::Recorder;
use crate::model::{Fanout, Model};
use crate::timers::{order, NodeTimers};

// Stream ids for Rng::derive, so adding a stream never shifts another.
const STREAM_ARRIVALS: u64 = 1;
const STREAM_NOISE: u64 = 2;
const STREAM_POLICY: u64 = 3;
const STREAM_REQUEST: u64 = 1 << 32;

/// Counters of one run, besides the per-request records.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub events: u64,
    /// Requests that arrived at the edge (warm-up, measured and the tail after).
    pub arrivals: u64,
    pub end_time: Nanos,
    pub noise_stolen: Nanos,
    pub preemptions: u64,
    /// Requests turned away by `[admission] reject_late` (warm-up and measured alike).
    pub rejected_late: u64,
    /// The admission controller's last phases, when the model asks for them
    /// ([`crate::model::AdmissionModel::phase_log`]).
    pub admission_phases: Vec<AdmissionPhase>,
}

/// Runs one simulation of `model` to completion of its measured requests.
///
/// Scenarios where [`lone_path_applies`] take the lone-request path (same
/// events, same draws, same results; see [`run_with`]). Not inlined, so that
/// profilers can count the instructions inside it (`benches/sim_speed.sh --callgrind`).
#[inline(never)]
pub fn run(model: &Model) -> (Recorder, RunStats) {
    run_with(model, Path::Auto)
}

/// Which code path [`run_with`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The lone-request path when [`lone_path_applies`]; else the per-node
    /// path when [`per_node_path_applies`] (on two threads if the run has at
    /// least [`PREPARED_MIN_REQUESTS`] requests and the machine a second CPU);
    /// else the prepared path when [`prepared_path_applies`] and the run and
    /// machine are that large; else the general one.
    Auto,
    /// Always the general path on one thread (chains, fork-join, DAGs, gates,
    /// network, noise).
    General,
    /// The prepared path whenever [`prepared_path_applies`], whatever the
    /// run's size (else the general one).
    Prepared,
    /// The per-node path on two threads whenever [`per_node_path_applies`],
    /// whatever the run's size (else as `Prepared`).
    PerNode,
}

/// Like [`run`], choosing the code path. Every path gives identical results
/// on every scenario it accepts (`sim/tests/lone_path.rs`, `sim/tests/prepared_path.rs`,
/// `sim/tests/per_node_path.rs`).
pub fn run_with(model: &Model, path: Path) -> (Recorder, RunStats) {
    let large = model.warmup + model.requests >= PREPARED_MIN_REQUESTS
        && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let per_node = match path {
        Path::Auto => !lone_path_applies(model) && per_node_path_applies(model),
        Path::PerNode => per_node_path_applies(model),
        Path::General | Path::Prepared => false,
    };
    if per_node {
        // `None`: a drawn request the path does not cover; the others take it.
        if let Some(result) = per_node::run(model, large || path == Path::PerNode) {
            return result;
        }
    }
    let engine = Engine::new(model);
    let prepared = prepared_path_applies(model)
        && match path {
            Path::Auto => large,
            Path::General => false,
            Path::Prepared | Path::PerNode => true,
        };
    if path == Path::Auto && lone_path_applies(model) {
        engine.run_lone()
    } else if prepared {
        prepare::run_prepared(engine)
    } else {
        engine.run::<false>()
    }
}

/// The scenario is one stage on one single-instance service with one node, a
/// fanout of one, a non-preemptive queue policy (`fifo`, `gfifo`, `edf`,
/// `priq`, `lifo`, `random`), no gate, no network delay, no OS noise and no
/// in-flight cap: each request is exactly one task on one node (M/M/c, M/G/1,
/// Cobham's priority queue...). Such a run needs no activation or task record
/// and no event heap; [`run`] takes a path that keeps none, drives the same
/// policy object through the same `Policy` calls in the same order, and gives
/// the same results as the general path.
pub fn lone_path_applies(m: &Model) -> bool {
    let [stage] = m.roots[..] else { return false };
    let st = &m.stages[stage];
    let svc = &m.services[st.service];
    let queue = m.nodes.len() == 1 && m.nodes[0].policy.is_non_preemptive_queue();
    queue
        && st.next.is_empty()
        && st.choose.is_empty()
        && matches!(st.fanout, Fanout::Fixed(1))
        && st.class_fanout.is_empty()
        && st.class_weights.is_empty()
        && svc.instances == 1
        && svc.instance_scale.is_empty()
        && svc.admit.is_none()
        && m.network.is_none()
        && m.noise.is_none()
        && m.in_flight_cap.is_none()
        && !m.reject_late
}

struct Engine<'m> {
    m: &'m Model,
    now: Nanos,
    /// The next arrival's (time, seq): there is only ever one pending, so it
    /// lives here instead of in the heap (same order: time, then seq).
    next_arrival: (Nanos, u64),
    heap: BinaryHeap<Event>,
    seq: u64,
    nodes: Vec<Node>,
    /// Admission gates, one per service that has one.
    gates: Vec<Gate>,
    /// Gate of each service (`NO_GATE`: none).
    service_gate: Vec<u32>,
    timers: NodeTimers,
    tasks: Slab<Task>,
    acts: Slab<Activation>,
    reqs: Slab<Request>,
    arrivals: Arrivals,
    edge_queue: VecDeque<u32>,
    in_flight: u64,
    admission: Option<AdmissionController>,
    /// Per class, the tasks a rejected request would have sent to its root stages (their
    /// mean fan-out, not drawn: the request's stream stays as it was): they move a count window.
    refused_tasks: Vec<u64>,
    /// `[admission] reject_late`: what every node has been sent and not yet finished.
    late: Option<LateCheck>,
    noise_rng: Rng,
    /// The key of the per-request streams: request `i` draws from `CounterRng::stream(request_key, i)`.
    request_key: u64,
    rec: Recorder,
    /// Arrival indices that are measured: after the warm-up, `requests` of them.
    measured: std::ops::Range<u64>,
    stats: RunStats,
    measured_left: u64,
    scratch: Vec<u32>,
    /// Fan-outs, instances and budgets of the activations the engine picks itself.
    placement: Placement,
    /// Requests prepared on the producer thread (the prepared path), else `None`.
    /// Boxed: each arrival takes it out and puts it back, which moves only a pointer.
    feed: Option<Box<Feed>>,
}

impl<'m> Engine<'m> {
    fn new(m: &'m Model) -> Self {
        // A node's policy seed depends on (service, instance) as before hosts
        // existed, so adding hosts to the model changed no existing result.
        let mut node_seed = vec![0u64; m.nodes.len()];
        let mut seeded = vec![false; m.nodes.len()];
        for (si, s) in m.services.iter().enumerate() {
            for inst in 0..s.instances {
                let n = s.first_node + inst;
                if !seeded[n] {
                    seeded[n] = true;
                    node_seed[n] = Rng::derive(m.seed, STREAM_POLICY + ((si as u64) << 20) + inst as u64).next_u64();
                }
            }
        }
        let nodes: Vec<Node> = m
            .nodes
            .iter()
            .zip(&node_seed)
            .map(|(nm, &seed)| Node {
                policy: nm.policy.build_any(nm.cores, seed).expect("policy validated when the scenario loaded"),
                cpus: (0..nm.cores).map(|_| Cpu { task: None, since: 0, done_at: NEVER }).collect(),
                context_switch: nm.context_switch,
                tick_at: NEVER,
            })
            .collect();
        let mut gates = Vec::new();
        let service_gate = m
            .services
            .iter()
            .map(|s| match &s.admit {
                Some((order, c, handoff)) => {
                    gates.push(Gate {
                        policy: order.build_any(*c, 0).expect("gate order validated when the scenario loaded"),
                        admitted: vec![None; *c],
                        handoff: *handoff,
                    });
                    (gates.len() - 1) as u32
                }
                None => NO_GATE,
            })
            .collect();
        Engine {
            m,
            now: 0,
            next_arrival: (NEVER, 0),
            heap: BinaryHeap::with_capacity(1024),
            seq: 0,
            // One-core nodes under a queue policy without OS noise only ever set
            // their timer when it is unset or the earliest (`NodeTimers::top_only`).
            timers: if m.noise.is_none()
                && nodes.iter().all(|n| n.cpus.len() == 1 && matches!(n.policy, AnyPolicy::Queue(_)))
            {
                NodeTimers::top_only(nodes.len())
            } else {
                NodeTimers::new(nodes.len())
            },
            nodes,
            gates,
            service_gate,
            tasks: Slab::new(),
            acts: Slab::new(),
            reqs: Slab::new(),
            arrivals: Arrivals::new(m),
            edge_queue: VecDeque::new(),
            in_flight: 0,
            admission: m
                .admission
                .map(|a| a.controller().expect("admission parameters validated when the scenario loaded")),
            refused_tasks: (0..m.classes.len().max(1))
                .map(|c| m.roots.iter().map(|&s| m.stages[s].fanout_of(c as u8).mean()).sum::<f64>().round() as u64)
                .collect(),
            late: m.reject_late.then(|| LateCheck::new(m)),
            noise_rng: Rng::derive(m.seed, STREAM_NOISE),
            request_key: Rng::derive(m.seed, STREAM_REQUEST).next_u64(),
            rec: Recorder::new(m),
            measured: m.warmup..m.warmup + m.requests,
            stats: RunStats::default(),
            measured_left: m.requests,
            scratch: Vec::new(),
            placement: Placement::new(m),
            feed: None,
        }
    }

    #[inline]
    fn push(&mut self, time: Nanos, kind: EvKind) {
        self.seq += 1;
        self.heap.push(Event { time, seq: self.seq, kind });
    }

    #[inline]
    fn schedule_arrival(&mut self, time: Nanos) {
        self.seq += 1;
        self.next_arrival = (time, self.seq);
    }

    /// The main loop. `PREPARED`: arrivals come from the producer's chunks
    /// (`prepare`); a separate instance of the loop, so the general path pays
    /// no test for it.
    fn run<const PREPARED: bool>(mut self) -> (Recorder, RunStats) {
        self.schedule_arrival(0);
        if let Some((rate, _)) = &self.m.noise {
            for n in 0..self.nodes.len() {
                for c in 0..self.nodes[n].cpus.len() {
                    let t = (self.noise_rng.exp1() / rate) as Nanos;
                    self.push(t, EvKind::Noise { node: n as u32, cpu: c as u32 });
                }
            }
        }
        while self.measured_left > 0 {
            // The next event is the earliest, by (time, seq), of the pending
            // arrival, the node timers' top and the event heap's top.
            let (timer, node) = self.timers.peek_raw();
            let arrival = order(self.next_arrival.0, self.next_arrival.1);
            let mut from = if arrival < timer { Source::Arrival } else { Source::Timer };
            if let Some(e) = self.heap.peek() {
                if order(e.time, e.seq) < arrival.min(timer) {
                    from = Source::Heap;
                }
            }
            match from {
                Source::Arrival => {
                    debug_assert!(self.next_arrival.0 >= self.now, "time went backwards");
                    self.now = self.next_arrival.0;
                    if PREPARED {
                        self.on_prepared_arrival();
                    } else {
                        self.on_arrival();
                    }
                }
                Source::Timer => {
                    let t = (timer >> 64) as Nanos;
                    if t == NEVER {
                        break; // nothing pending anywhere
                    }
                    debug_assert!(t >= self.now, "time went backwards");
                    self.now = t;
                    self.on_node_timer(node);
                }
                Source::Heap => {
                    let ev = self.heap.pop().expect("peeked");
                    debug_assert!(ev.time >= self.now, "time went backwards");
                    self.now = ev.time;
                    match ev.kind {
                        EvKind::Deliver { task } => self.on_deliver(task),
                        EvKind::Enter { task } => {
                            let job = self.job(task);
                            self.enter_node(job);
                        }
                        EvKind::Noise { node, cpu } => self.on_noise(node as usize, cpu as usize),
                        EvKind::Respond { req } => self.on_respond(req),
                        EvKind::Return { act } => self.on_return(act),
                    }
                }
            }
            self.stats.events += 1;
        }
        self.stats.end_time = self.now;
        self.stats.arrivals = self.arrivals.next_index;
        self.stats.admission_phases = self.admission.as_ref().map_or(Vec::new(), |a| a.phases().copied().collect());
        (self.rec, self.stats)
    }
}
