//! The discrete-event engine: virtual time, an event heap, nodes whose CPUs
//! are assigned by the very `Policy` objects the runtime uses.
//!
//! Determinism: every random draw comes from a stream derived from the
//! scenario seed; per-request draws (class, fanout, instances, demands,
//! branches, network delays) come from a counter-based stream
//! (`CounterRng`) opened at the request's index, so two policies see exactly the same requests (common random
//! numbers) and differences between them are the policies', not noise. Equal
//! event times are broken by insertion order.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use tailor_core::pick::DistinctPicker;
use tailor_core::rng::{CounterRng, RandomSource};
use tailor_core::tailguard::{queue_wait_quantile, AdmissionController};
use tailor_core::time::NEVER;
use tailor_core::{AnyPolicy, Job, JobId, Nanos, Policy, PolicySpec, Rng};

use crate::metrics::Recorder;
use crate::model::{ArrivalModel, Fanout, Model};
use crate::scenario::Returns;
use crate::timers::NodeTimers;

// Stream ids for Rng::derive, so adding a stream never shifts another.
const STREAM_ARRIVALS: u64 = 1;
const STREAM_NOISE: u64 = 2;
const STREAM_POLICY: u64 = 3;
const STREAM_REQUEST: u64 = 1 << 32;

#[derive(Clone, Copy, Debug)]
enum EvKind {
    /// A task reaches its node after the network delay.
    Deliver { task: u32 },
    /// An interrupt steals the CPU.
    Noise { node: u32, cpu: u32 },
    /// The response reaches the edge.
    Respond { req: u32 },
    /// A task's answer reaches its caller (`[network] returns = "per-task"`).
    Return { act: u32 },
}

/// Where the next event comes from.
#[derive(Clone, Copy)]
enum Source {
    Arrival,
    Heap,
    Timer,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    time: Nanos,
    seq: u64,
    kind: EvKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // BinaryHeap is a max-heap: reverse so the earliest (then first-inserted) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.time.cmp(&self.time).then(other.seq.cmp(&self.seq))
    }
}

struct Cpu {
    /// The task as last applied from `policy.running()`.
    task: Option<JobId>,
    since: Nanos,
    /// When the running task completes if nothing intervenes (`NEVER` when idle).
    done_at: Nanos,
}

struct Node {
    policy: AnyPolicy,
    cpus: Vec<Cpu>,
    context_switch: Nanos,
    /// When the policy wants `tick` (`NEVER`: not needed).
    tick_at: Nanos,
}

/// A cooperative admission gate in front of a node (the runtime's
/// cooperative backend): a non-preemptive policy with `c` "CPUs" whose running
/// set is the set of tasks admitted to the node.
struct Gate {
    policy: AnyPolicy,
    /// `policy.running()` as last applied.
    admitted: Vec<Option<JobId>>,
}

/// `Task::gate` of a task whose service has no gate.
const NO_GATE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Task {
    act: u32,
    node: u32,
    /// Index into `Engine::gates`, or `NO_GATE`.
    gate: u32,
    remaining: Nanos,
    /// The hop its answer takes back (0 unless answers return per task).
    ret: Nanos,
    deadline: Nanos,
    /// The request's GAT and class, copied here so that building the task's
    /// `Job` and its first dispatch need no lookup of the activation and request.
    gat: Nanos,
    class: u8,
    /// The task belongs to a measured request.
    measured: bool,
    started: bool,
    preempted: bool,
}

/// One activation of a stage: its tasks join here.
#[derive(Clone, Copy)]
struct Activation {
    req: u32,
    stage: u32,
    pending: u32,
    ideal_end: Nanos,
}

struct Request {
    index: u64,
    gat: Nanos,
    class: u8,
    fanout: u32,
    outstanding: u32,
    ideal_end: Nanos,
    demand: Nanos,
    rng: CounterRng,
}

/// A vector with a free list: stable small indices, no allocation in steady state.
/// A freed slot keeps its stale value until reused (no `Option` to test on
/// every access); debug builds check that only live slots are touched.
struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
    #[cfg(debug_assertions)]
    live: Vec<bool>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
            #[cfg(debug_assertions)]
            live: Vec::new(),
        }
    }
    #[inline]
    fn insert(&mut self, v: T) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = v;
                i
            }
            None => {
                self.items.push(v);
                #[cfg(debug_assertions)]
                self.live.push(false);
                (self.items.len() - 1) as u32
            }
        };
        #[cfg(debug_assertions)]
        {
            self.live[i as usize] = true;
        }
        i
    }
    /// Frees slot `i`; read what you need from it first.
    #[inline]
    fn free(&mut self, i: u32) {
        #[cfg(debug_assertions)]
        {
            assert!(self.live[i as usize], "slab slot {i} freed twice");
            self.live[i as usize] = false;
        }
        self.free.push(i);
    }
    #[inline]
    fn get(&self, i: u32) -> &T {
        #[cfg(debug_assertions)]
        assert!(self.live[i as usize], "slab slot {i} not in use");
        &self.items[i as usize]
    }
    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut T {
        #[cfg(debug_assertions)]
        assert!(self.live[i as usize], "slab slot {i} not in use");
        &mut self.items[i as usize]
    }
}

impl<T: Copy> Slab<T> {
    #[inline]
    fn remove(&mut self, i: u32) -> T {
        let v = *self.get(i);
        self.free(i);
        v
    }
}

struct Arrivals {
    model: ArrivalModel,
    /// The mean gap if `model` is Poisson, else 0.
    poisson_mean: f64,
    /// One long SplitMix64 stream (`CounterRng` is one): a draw is an add and a mix.
    rng: CounterRng,
    next_index: u64,
    trace_pos: usize,
    carry: f64,
}

impl Arrivals {
    #[inline(always)]
    fn next_gap(&mut self) -> Nanos {
        // Keep the fractional nanoseconds so long runs hold the exact rate.
        // Poisson, the common case, is tested first without a `match`.
        let gap =
            if self.poisson_mean > 0.0 { self.poisson_mean * self.rng.exp1() } else { self.other_gap() } + self.carry;
        // `floor` is a libm call on baseline x86-64. For the non-negative gaps
        // below 2^53, truncating through i64 (one instruction each way) gives
        // the same value; anything else takes the old path.
        if (0.0..9.0e15).contains(&gap) {
            // SAFETY: `gap` is finite and in [0, 9e15), so it truncates to an i64.
            let whole = unsafe { gap.to_int_unchecked::<i64>() };
            self.carry = gap - whole as f64;
            whole as Nanos
        } else {
            let whole = gap.floor();
            self.carry = gap - whole;
            whole as Nanos
        }
    }

    /// The next gap of any arrival model, in fractional ns.
    fn other_gap(&mut self) -> f64 {
        match &self.model {
            ArrivalModel::Poisson { mean_gap } => mean_gap * self.rng.exp1(),
            ArrivalModel::Deterministic { gap } => *gap,
            ArrivalModel::Pareto { xm, alpha } => xm / self.rng.next_f64_open0().powf(1.0 / alpha),
            ArrivalModel::Gaps { dist, scale } => dist.sample_ns(&mut self.rng) as f64 * scale,
            ArrivalModel::Trace { gaps, scale } => {
                let g = gaps[self.trace_pos % gaps.len()] as f64 * scale;
                self.trace_pos += 1;
                g
            }
        }
    }
}

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
    /// The lone-request path when [`lone_path_applies`], else the general one.
    Auto,
    /// Always the general path (chains, fork-join, DAGs, gates, network, noise).
    General,
}

/// Like [`run`], choosing the code path. Both paths give identical results on
/// every scenario the lone-request path accepts (`sim/tests/lone_path.rs`).
pub fn run_with(model: &Model, path: Path) -> (Recorder, RunStats) {
    let engine = Engine::new(model);
    if path == Path::Auto && lone_path_applies(model) {
        engine.run_lone()
    } else {
        engine.run()
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
    let queue = m.nodes.len() == 1
        && matches!(
            m.nodes[0].policy,
            PolicySpec::Fifo
                | PolicySpec::Gfifo
                | PolicySpec::Edf
                | PolicySpec::Priq
                | PolicySpec::Lifo
                | PolicySpec::Random { .. }
        );
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

/// Most instance sets whose budget the engine remembers ([`Model::placement_budget`]).
const PLACEMENT_MEMO: usize = 1 << 16;

/// A request of the lone-request path: its own (only) task.
#[derive(Clone, Copy)]
struct Lone {
    gat: Nanos,
    /// CPU demand; a non-preemptive task runs it in one go.
    demand: Nanos,
    deadline: Nanos,
    class: u8,
    measured: bool,
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
    /// Per service, how a fan-out picks its instances.
    pickers: Vec<DistinctPicker>,
    /// Per stage and class, a class's own placement (`weights_by_class`), if it has one.
    class_pickers: Vec<Vec<Option<DistinctPicker>>>,
    /// Budgets of the placements seen so far, keyed [class, service, sorted instances...].
    placement_budgets: std::collections::HashMap<Vec<u32>, Option<Nanos>>,
}

/// The query handler's `reject_late` in the model: per node, the tasks sent to it and
/// not yet completed, keyed by what its queue orders by, as the handler keeps them.
struct LateCheck {
    /// Per node: queue key → tasks.
    outstanding: Vec<BTreeMap<Nanos, u32>>,
    /// Per node: how its policy orders (what counts as ahead of a new task).
    order: Vec<QueueOrder>,
    /// Per service: mean and variance of its service time, ns and ns².
    moments: Vec<(f64, f64)>,
}

/// What a node's queue orders by, for counting the tasks ahead of a new one.
#[derive(Clone, Copy)]
enum QueueOrder {
    Deadline,
    Class,
    /// Any other policy: every task sent there counts as ahead.
    Arrival,
}

impl LateCheck {
    fn new(m: &Model) -> Self {
        LateCheck {
            outstanding: vec![BTreeMap::new(); m.nodes.len()],
            order: m
                .nodes
                .iter()
                .map(|n| match n.policy {
                    PolicySpec::Edf => QueueOrder::Deadline,
                    PolicySpec::Priq => QueueOrder::Class,
                    _ => QueueOrder::Arrival,
                })
                .collect(),
            moments: m
                .services
                .iter()
                .map(|s| {
                    let mean = s.service_time.mean_ns();
                    // An infinite variance (a Pareto with α ≤ 2) is taken as an exponential's.
                    (mean, s.service_time.variance_ns2().filter(|v| v.is_finite()).unwrap_or(mean * mean))
                })
                .collect(),
        }
    }

    fn key(&self, node: usize, deadline: Nanos, class: u8) -> Nanos {
        match self.order[node] {
            QueueOrder::Deadline => deadline,
            QueueOrder::Class => class as Nanos,
            QueueOrder::Arrival => 0,
        }
    }

    fn sent(&mut self, node: usize, key: Nanos) {
        *self.outstanding[node].entry(key).or_default() += 1;
    }

    fn done(&mut self, node: usize, key: Nanos) {
        let out = &mut self.outstanding[node];
        if let Some(c) = out.get_mut(&key) {
            *c -= 1;
            if *c == 0 {
                out.remove(&key);
            }
        }
    }

    /// The p-quantile of the wait of a task keyed `key` at `node` (`cores` CPUs, service
    /// time moments `(mean, var)` × `scale`): core's `queue_wait_quantile`, as the query
    /// handler computes it.
    fn wait(&self, node: usize, key: Nanos, cores: usize, (mean, var): (f64, f64), scale: f64, p: f64) -> Nanos {
        let ahead: u32 = self.outstanding[node].range(..=key).map(|(_, &c)| c).sum();
        queue_wait_quantile(ahead, cores, mean * scale, var * scale * scale, p)
    }
}

/// A stage's activation, picked but not yet sent: its fan-out, instances and deadline.
struct Picked {
    k: u32,
    /// The instances (empty for a single-instance service).
    chosen: Vec<u32>,
    deadline: Nanos,
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
                Some((order, c)) => {
                    gates.push(Gate {
                        policy: order.build_any(*c, 0).expect("gate order validated when the scenario loaded"),
                        admitted: vec![None; *c],
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
            timers: NodeTimers::new(nodes.len()),
            nodes,
            gates,
            service_gate,
            tasks: Slab::new(),
            acts: Slab::new(),
            reqs: Slab::new(),
            arrivals: Arrivals {
                model: m.arrival.clone(),
                poisson_mean: match m.arrival {
                    ArrivalModel::Poisson { mean_gap } => mean_gap,
                    _ => 0.0,
                },
                rng: CounterRng::stream(Rng::derive(m.seed, STREAM_ARRIVALS).next_u64(), 0),
                next_index: 0,
                trace_pos: 0,
                carry: 0.0,
            },
            edge_queue: VecDeque::new(),
            in_flight: 0,
            admission: m.admission.map(|(r_th, window)| {
                AdmissionController::with_window(r_th, window)
                    .expect("admission parameters validated when the scenario loaded")
            }),
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
            pickers: m
                .services
                .iter()
                .map(|s| {
                    if s.instance_weight.is_empty() {
                        DistinctPicker::uniform(s.instances)
                    } else {
                        DistinctPicker::weighted(s.instance_weight.clone())
                    }
                })
                .collect(),
            class_pickers: m
                .stages
                .iter()
                .map(|st| {
                    st.class_weights
                        .iter()
                        .map(|w| (!w.is_empty()).then(|| DistinctPicker::weighted(w.clone())))
                        .collect()
                })
                .collect(),
            placement_budgets: std::collections::HashMap::new(),
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

    fn run(mut self) -> (Recorder, RunStats) {
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
            let (t, s, node) = self.timers.peek_raw();
            let mut from = if self.next_arrival < (t, s) { Source::Arrival } else { Source::Timer };
            if let Some(e) = self.heap.peek() {
                let best = if let Source::Arrival = from { self.next_arrival } else { (t, s) };
                if (e.time, e.seq) < best {
                    from = Source::Heap;
                }
            }
            match from {
                Source::Arrival => {
                    debug_assert!(self.next_arrival.0 >= self.now, "time went backwards");
                    self.now = self.next_arrival.0;
                    self.on_arrival();
                }
                Source::Timer => {
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
        (self.rec, self.stats)
    }

    /// The lone-request path (see [`lone_path_applies`]): the general loop
    /// specialised to one node whose only events are arrivals and the node's
    /// timer. Every step mirrors the general path's (same draws in the same
    /// order, same sequence numbers, so the same tie-breaks); only the
    /// request / activation / task records and the event heap are gone. Debug
    /// builds check after every event that the node is as the general path's
    /// full diff would leave it.
    fn run_lone(mut self) -> (Recorder, RunStats) {
        let m = self.m;
        let stage = m.roots[0];
        let svc = &m.services[m.stages[stage].service];
        debug_assert_eq!(svc.first_node, 0);
        let service_time = &svc.service_time;
        let single_class = m.classes.len() == 1;
        let request_key = self.request_key;
        let measured_range = self.measured.clone();
        let mut measured_left = self.measured_left;
        // Sequence numbers as the general path hands them out (its tie-break).
        let mut seq = self.seq + 1;
        // The loop's state lives in locals (registers), not in `self`.
        let Engine { nodes, arrivals, admission, refused_tasks, rec, stats, .. } = &mut self;
        let Node { policy, cpus, .. } = &mut nodes[0];
        // The same policy object, called through the same `Policy` trait; only
        // the `AnyPolicy` dispatch is taken once here instead of on every call.
        let AnyPolicy::Queue(policy) = policy else { unreachable!("lone_path_applies checked the policy") };
        let mut lone: Slab<Lone> = Slab::new();
        let mut events = 0u64;
        let mut now: Nanos = 0;
        // Counted here, added to `rec` at the end: measured requests admitted,
        // measured tasks (dispatched, deadline missed).
        let mut admitted = 0u64;
        let mut dequeued = (0u64, 0u64);
        let mut next_arrival: (Nanos, u64) = (0, seq);
        // The node's timer (time, seq), as `NodeTimers` keeps it, and the
        // lowest CPU whose completion it is.
        let mut timer: (Nanos, u64) = (NEVER, 0);
        let mut timer_cpu = 0usize;
        // CPUs with no task: the arrival scan for the idle CPU is skipped when 0.
        let mut idle = cpus.len();
        while measured_left > 0 {
            if next_arrival < timer {
                debug_assert!(next_arrival.0 >= now, "time went backwards");
                now = next_arrival.0;
                events += 1;
                // As `on_arrival`, `start` and `activate` for a fanout of one on
                // a single instance with no network delay.
                let index = arrivals.next_index;
                arrivals.next_index += 1;
                let gap = arrivals.next_gap();
                seq += 1;
                next_arrival = (now + gap, seq);
                let mut rng = CounterRng::stream(request_key, index);
                let class = if single_class {
                    0
                } else {
                    let u = rng.next_f64();
                    m.classes.iter().position(|c| u < c.cumulative_weight).unwrap_or(m.classes.len() - 1) as u8
                };
                let measured = measured_range.contains(&index);
                if let Some(ac) = admission {
                    if !ac.admit_query(now, refused_tasks[class as usize]) {
                        if measured {
                            rec.rejected(class);
                            measured_left -= 1;
                        }
                        continue;
                    }
                }
                admitted += measured as u64;
                let deadline = match m.budgets.get(class, stage, 1) {
                    Some(b) => now.saturating_add(b),
                    None => NEVER,
                };
                let demand = service_time.sample_ns(&mut rng);
                let id = lone.insert(Lone { gat: now, demand, deadline, class, measured });
                let job = Job { id: id as JobId, gat: now, deadline, class };
                if idle == 0 {
                    policy.arrive(now, job);
                } else {
                    // A queue fills the lowest idle CPU (`NonPreemptive` documents it).
                    let cpu = cpus.iter().position(|c| c.task.is_none()).expect("an idle CPU");
                    policy.arrive(now, job);
                    debug_assert_eq!(policy.running()[cpu], Some(id as JobId), "the queue did not fill the idle CPU");
                    idle -= 1;
                    let done = lone_dispatch(&lone, id, now, &mut dequeued, admission);
                    let c = &mut cpus[cpu];
                    c.task = Some(id as JobId);
                    c.since = now;
                    c.done_at = done;
                    if done < timer.0 {
                        seq += 1;
                        timer = (done, seq);
                        timer_cpu = cpu;
                    }
                }
            } else {
                if timer.0 == NEVER {
                    break; // nothing pending anywhere
                }
                debug_assert!(timer.0 >= now, "time went backwards");
                now = timer.0;
                events += 1;
                // As `on_node_timer`, `on_complete`, `sync_cpu`, `finish_activation`
                // and `on_respond`: the lowest CPU due completes.
                // The timer is the earliest completion, so the CPUs due now are
                // those at the timer's time, and `timer_cpu` is the lowest of them.
                let cpu = timer_cpu;
                debug_assert_eq!(Some(cpu), cpus.iter().position(|c| c.done_at <= now), "timer_cpu");
                let id = cpus[cpu].task.take().expect("completion on a busy CPU");
                cpus[cpu].done_at = NEVER;
                policy.complete(now, id);
                // A non-preemptive queue refills only the CPU the job left.
                match policy.running()[cpu] {
                    Some(next) => {
                        let done = lone_dispatch(&lone, next as u32, now, &mut dequeued, admission);
                        let c = &mut cpus[cpu];
                        c.task = Some(next);
                        c.since = now;
                        c.done_at = done;
                    }
                    None => idle += 1,
                }
                // The earliest completion and the lowest CPU with it.
                let (mut next, mut next_cpu) = (NEVER, 0);
                for (i, c) in cpus.iter().enumerate() {
                    if c.done_at < next {
                        (next, next_cpu) = (c.done_at, i);
                    }
                }
                timer_cpu = next_cpu;
                if next != timer.0 {
                    seq += 1;
                    timer = (next, seq);
                }
                let r = lone.remove(id as u32);
                if r.measured {
                    // Ideal latency = demand, fanout 1: filled in by `finish_lone`.
                    rec.record_lone(r.gat, now, r.class, r.demand);
                    measured_left -= 1;
                }
            }
            #[cfg(debug_assertions)]
            {
                let applied: Vec<Option<JobId>> = cpus.iter().map(|c| c.task).collect();
                assert_eq!(applied.as_slice(), policy.running(), "lone path: a CPU change was missed");
                assert_eq!(policy.next_tick(), None, "lone path: a queue policy asked for a tick");
                assert_eq!(idle, applied.iter().filter(|t| t.is_none()).count(), "lone path: idle count");
                let next = cpus.iter().fold(NEVER, |t, c| t.min(c.done_at));
                assert_eq!(timer.0, next, "lone path: timer out of date");
            }
        }
        rec.admitted += admitted;
        rec.tasks_dequeued += dequeued.0;
        rec.tasks_missed += dequeued.1;
        rec.finish_lone();
        stats.events = events;
        stats.end_time = now;
        stats.arrivals = arrivals.next_index;
        self.now = now;
        self.seq = seq;
        self.measured_left = measured_left;
        (self.rec, self.stats)
    }

    fn on_arrival(&mut self) {
        let index = self.arrivals.next_index;
        self.arrivals.next_index += 1;
        let gap = self.arrivals.next_gap();
        self.schedule_arrival(self.now + gap);

        let mut rng = CounterRng::stream(self.request_key, index);
        let class = if self.m.classes.len() == 1 {
            0
        } else {
            let u = rng.next_f64();
            self.m.classes.iter().position(|c| u < c.cumulative_weight).unwrap_or(self.m.classes.len() - 1) as u8
        };
        let measured = self.measured.contains(&index);
        if let Some(ac) = &mut self.admission {
            if !ac.admit_query(self.now, self.refused_tasks[class as usize]) {
                if measured {
                    self.rec.rejected(class);
                    self.measured_left -= 1;
                }
                return;
            }
        }
        let req = self.reqs.insert(Request {
            index,
            gat: self.now,
            class,
            fanout: 1,
            outstanding: 0,
            ideal_end: self.now,
            demand: 0,
            rng,
        });
        if self.late.is_some() {
            // One root stage and no in-flight cap (checked when the model was built): pick
            // the root activation now, and send it only if no task of it would be late.
            let stage = self.m.roots[0];
            let picked = self.pick_activation(req, stage);
            if self.would_be_late(stage, class, &picked) {
                self.scratch = picked.chosen;
                self.reqs.free(req);
                self.stats.rejected_late += 1;
                if measured {
                    self.rec.rejected(class);
                    self.measured_left -= 1;
                }
                return;
            }
            if measured {
                self.rec.admitted();
            }
            self.in_flight += 1;
            let gat = self.now;
            self.send_activation(req, stage, gat, picked);
            return;
        }
        if measured {
            self.rec.admitted();
        }
        match self.m.in_flight_cap {
            Some(cap) if self.in_flight >= cap => self.edge_queue.push_back(req),
            _ => self.start(req),
        }
    }

    fn start(&mut self, req: u32) {
        self.in_flight += 1;
        let gat = self.reqs.get(req).gat;
        for i in 0..self.m.roots.len() {
            let stage = self.m.roots[i];
            self.activate(req, stage, gat);
        }
    }

    /// Starts one activation of `stage` for `req`: picks the fanout and the
    /// instances, samples each task's demand and sends the tasks.
    fn activate(&mut self, req: u32, stage: usize, ideal_start: Nanos) {
        let picked = self.pick_activation(req, stage);
        self.send_activation(req, stage, ideal_start, picked);
    }

    /// Whether a task of `picked` would, at its class's SLO percentile, wait past its
    /// deadline behind what its instance has been sent ([`LateCheck::wait`]).
    fn would_be_late(&self, stage: usize, class: u8, picked: &Picked) -> bool {
        let (Some(late), m) = (&self.late, self.m) else { return false };
        let svc = &m.services[m.stages[stage].service];
        let p = m.classes[class as usize].percentile / 100.0;
        let slack = picked.deadline.saturating_sub(self.now);
        let instances: &[u32] = if picked.chosen.is_empty() { &[0] } else { &picked.chosen };
        instances.iter().any(|&inst| {
            let node = svc.first_node + inst as usize;
            let scale = svc.instance_scale.get(inst as usize).copied().unwrap_or(1.0);
            let key = late.key(node, picked.deadline, class);
            late.wait(node, key, m.nodes[node].cores, late.moments[m.stages[stage].service], scale, p) > slack
        })
    }

    /// The fan-out, instances and deadline of `req`'s activation of `stage`.
    fn pick_activation(&mut self, req: u32, stage: usize) -> Picked {
        let m = self.m;
        let st = &m.stages[stage];
        let svc = &m.services[st.service];
        let r = self.reqs.get_mut(req);
        let k = match st.fanout_of(r.class) {
            Fanout::Fixed(k) => *k,
            Fanout::Table { values, cumulative } => {
                let u = r.rng.next_f64();
                values[cumulative.iter().position(|&c| u < c).unwrap_or(values.len() - 1)]
            }
        };
        let class = r.class;
        // k distinct instances out of `instances`, as the fan-out handler picks
        // them; a single-instance service needs no list (the common case).
        let single = svc.instances == 1;
        let mut chosen = Vec::new();
        if !single {
            chosen = std::mem::take(&mut self.scratch);
            chosen.clear();
            let picker = match self.class_pickers[stage].get_mut(class as usize) {
                Some(Some(p)) => p,
                _ => &mut self.pickers[st.service],
            };
            chosen.extend_from_slice(picker.pick(&mut r.rng, k as usize));
        }
        let heterogeneous = m.instance_cdfs.get(st.service).is_some_and(|c| !c.is_empty());
        let budget = if single || !heterogeneous {
            m.budgets.get(class, stage, k)
        } else {
            // Eq. 1 over the instances this query picked. The same sets recur
            // (every instance at k = 1, all of them at k = N), so memoise them;
            // random k of many instances rarely repeat, hence the bound.
            // Key: [class, service, the instances sorted].
            let mut key = Vec::with_capacity(chosen.len() + 2);
            key.extend([class as u32, st.service as u32]);
            key.extend_from_slice(&chosen);
            key[2..].sort_unstable();
            match self.placement_budgets.get(key.as_slice()) {
                Some(&b) => b,
                None => {
                    let b = m.placement_budget(class, st.service, &key[2..]).or(m.budgets.get(class, stage, k));
                    if self.placement_budgets.len() >= PLACEMENT_MEMO {
                        self.placement_budgets.clear();
                    }
                    self.placement_budgets.insert(key, b);
                    b
                }
            }
        };
        let deadline = match budget {
            Some(b) => self.now.saturating_add(b),
            None => NEVER,
        };
        Picked { k, chosen, deadline }
    }

    /// Samples each task's demand and sends the tasks of an activation picked by
    /// [`Engine::pick_activation`].
    fn send_activation(&mut self, req: u32, stage: usize, ideal_start: Nanos, picked: Picked) {
        let m = self.m;
        let st = &m.stages[stage];
        let svc = &m.services[st.service];
        let Picked { k, chosen, deadline } = picked;
        let single = svc.instances == 1;
        let r = self.reqs.get_mut(req);
        r.fanout = r.fanout.max(k);
        r.outstanding += 1;
        let (gat, class, measured) = (r.gat, r.class, self.measured.contains(&r.index));
        let act = self.acts.insert(Activation { req, stage: stage as u32, pending: k, ideal_end: ideal_start });
        let gate = self.service_gate[st.service];
        let instances: &[u32] = if single { &[0] } else { &chosen };
        for &inst in instances {
            let r = self.reqs.get_mut(req);
            let mut demand = svc.service_time.sample_ns(&mut r.rng);
            if let Some(&f) = svc.instance_scale.get(inst as usize) {
                demand = (demand as f64 * f).round() as Nanos;
            }
            let delay = m.network.as_ref().map_or(0, |d| d.sample_ns(&mut r.rng));
            let ret = match (&m.network, m.returns) {
                (Some(d), Returns::PerTask) => d.sample_ns(&mut r.rng),
                _ => 0,
            };
            r.demand += demand;
            let a = self.acts.get_mut(act);
            a.ideal_end = a.ideal_end.max(ideal_start + delay + demand + ret);
            let node = (svc.first_node + inst as usize) as u32;
            if let Some(late) = &mut self.late {
                late.sent(node as usize, late.key(node as usize, deadline, class));
            }
            let task = self.tasks.insert(Task {
                act,
                node,
                gate,
                remaining: demand,
                ret,
                deadline,
                gat,
                class,
                measured,
                started: false,
                preempted: false,
            });
            if delay == 0 {
                self.on_deliver(task);
            } else {
                self.push(self.now + delay, EvKind::Deliver { task });
            }
        }
        if !single {
            self.scratch = chosen;
        }
    }

    fn on_deliver(&mut self, task: u32) {
        let t = self.tasks.get(task);
        let gate = t.gate;
        let job = self.job(task);
        if gate == NO_GATE {
            self.enter_node(job);
        } else {
            self.gates[gate as usize].policy.arrive(self.now, job);
            self.admit_from_gate(gate as usize);
        }
    }

    #[inline]
    fn job(&self, task: u32) -> Job {
        let t = self.tasks.get(task);
        Job { id: task as u64, gat: t.gat, deadline: t.deadline, class: t.class }
    }

    /// The task is runnable on its node's CPUs.
    fn enter_node(&mut self, job: Job) {
        let node = self.tasks.get(job.id as u32).node as usize;
        let n = &mut self.nodes[node];
        if let AnyPolicy::Queue(_) = n.policy {
            // A non-preemptive queue changes at most one CPU on `arrive`: the
            // lowest idle one, if any (`NonPreemptive` documents this). With
            // every CPU busy the job waits and nothing changes; otherwise
            // only that CPU needs syncing.
            let idle = n.cpus.iter().position(|c| c.task.is_none());
            n.policy.arrive(self.now, job);
            if let Some(cpu) = idle {
                self.sync_cpu(node, cpu, false);
            }
            self.debug_check_synced(node);
        } else {
            n.policy.arrive(self.now, job);
            self.sync(node, false);
        }
    }

    /// Sends the tasks the gate newly admitted to their node. A gate policy is
    /// non-preemptive: an admitted task stays admitted until it completes.
    fn admit_from_gate(&mut self, gate: usize) {
        let g = &mut self.gates[gate];
        let mut newly = std::mem::take(&mut self.scratch);
        newly.clear();
        for (slot, &want) in g.admitted.iter_mut().zip(g.policy.running()) {
            if *slot != want {
                if let Some(id) = want {
                    newly.push(id as u32);
                }
                *slot = want;
            }
        }
        for &task in &newly {
            let job = self.job(task);
            self.enter_node(job);
        }
        self.scratch = newly;
    }

    /// The node's timer fired: one completion (lowest CPU first) or, if no
    /// task completes now, the policy's tick. One event each.
    fn on_node_timer(&mut self, node: usize) {
        let now = self.now;
        let n = &mut self.nodes[node];
        if let Some(cpu) = n.cpus.iter().position(|c| c.done_at <= now) {
            self.on_complete(node, cpu);
        } else {
            debug_assert!(n.tick_at <= now, "a node timer fired with nothing due");
            n.tick_at = NEVER;
            n.policy.tick(now);
            self.sync(node, true);
        }
    }

    fn on_complete(&mut self, node: usize, cpu: usize) {
        let n = &mut self.nodes[node];
        let task = n.cpus[cpu].task.take().expect("completion on a busy CPU") as u32;
        n.cpus[cpu].done_at = NEVER;
        n.policy.complete(self.now, task as u64);
        if let AnyPolicy::Queue(_) = n.policy {
            // A non-preemptive queue refills only the CPU the job left.
            self.sync_cpu(node, cpu, true);
            self.debug_check_synced(node);
        } else {
            self.sync(node, true);
        }
        let t = self.tasks.remove(task);
        if let Some(late) = &mut self.late {
            late.done(node, late.key(node, t.deadline, t.class));
        }
        if t.gate != NO_GATE {
            let g = &mut self.gates[t.gate as usize];
            g.policy.complete(self.now, task as u64);
            if let Some(slot) = g.admitted.iter_mut().find(|s| **s == Some(task as u64)) {
                *slot = None;
            }
            self.admit_from_gate(t.gate as usize);
        }
        if t.ret == 0 {
            self.on_return(t.act);
        } else {
            self.push(self.now + t.ret, EvKind::Return { act: t.act });
        }
    }

    /// A task's answer is back: the activation joins when the last one is.
    fn on_return(&mut self, act: u32) {
        let a = self.acts.get_mut(act);
        a.pending -= 1;
        if a.pending == 0 {
            self.finish_activation(act);
        }
    }

    fn finish_activation(&mut self, act: u32) {
        let a = self.acts.remove(act);
        let m = self.m;
        let st = &m.stages[a.stage as usize];
        let req = a.req;
        let mut spawned = false;
        for &(next, p) in &st.next {
            if p >= 1.0 || self.reqs.get_mut(req).rng.next_f64() < p {
                self.activate(req, next, a.ideal_end);
                spawned = true;
            }
        }
        if !st.choose.is_empty() {
            let u = self.reqs.get_mut(req).rng.next_f64();
            let next = st.choose.iter().find(|&&(_, c)| u < c).unwrap_or(st.choose.last().unwrap()).0;
            self.activate(req, next, a.ideal_end);
            spawned = true;
        }
        let r = self.reqs.get_mut(req);
        if !spawned {
            r.ideal_end = r.ideal_end.max(a.ideal_end);
        }
        r.outstanding -= 1;
        if r.outstanding == 0 {
            // Per-task answers are at the edge already.
            let delay = match m.returns {
                Returns::PerRequest => m.network.as_ref().map_or(0, |d| d.sample_ns(&mut r.rng)),
                Returns::PerTask => 0,
            };
            r.ideal_end += delay;
            if delay == 0 {
                self.on_respond(req);
            } else {
                self.push(self.now + delay, EvKind::Respond { req });
            }
        }
    }

    fn on_respond(&mut self, req: u32) {
        let r = self.reqs.get(req);
        if self.measured.contains(&r.index) {
            self.rec.record(r.gat, self.now, r.ideal_end, r.class, r.fanout, r.demand);
            self.measured_left -= 1;
        }
        self.reqs.free(req);
        self.in_flight -= 1;
        if let Some(next) = self.edge_queue.pop_front() {
            self.start(next);
        }
    }

    fn on_noise(&mut self, node: usize, cpu: usize) {
        let (rate, dur) = self.m.noise.as_ref().expect("noise events only when noise is on");
        let d = dur.sample_ns(&mut self.noise_rng);
        let next = self.now + (self.noise_rng.exp1() / rate) as Nanos + 1;
        self.push(next, EvKind::Noise { node: node as u32, cpu: cpu as u32 });
        let now = self.now;
        let n = &mut self.nodes[node];
        let c = &mut n.cpus[cpu];
        if let Some(task) = c.task.map(|id| id as u32) {
            // The interrupt steals `d` from the running task: charge what it ran,
            // then push its completion back.
            let t = self.tasks.get_mut(task);
            t.remaining = t.remaining.saturating_sub(now - c.since) + d;
            c.since = now;
            c.done_at = now + t.remaining;
            self.stats.noise_stolen += d;
            self.update_timer(node);
        }
    }

    /// Applies the policy's current assignment of `node`: charges CPU time to
    /// tasks that leave a CPU, starts tasks that get one, schedules completions
    /// and the next policy tick.
    /// `force_timer`: the caller changed a CPU's completion time itself.
    fn sync(&mut self, node: usize, force_timer: bool) {
        let now = self.now;
        let n = &mut self.nodes[node];
        let running = n.policy.running();
        // Pass 1: tasks leaving a CPU (preempted or migrated) are charged first,
        // so a task that moves between CPUs is charged before it restarts.
        let mut changed = false;
        for (c, &want) in n.cpus.iter_mut().zip(running) {
            if c.task != want {
                changed = true;
                if let Some(old) = c.task.take() {
                    let t = self.tasks.get_mut(old as u32);
                    t.remaining = t.remaining.saturating_sub(now - c.since);
                    t.preempted = true;
                    self.stats.preemptions += 1;
                }
                c.done_at = NEVER;
            }
        }
        if changed {
            // Pass 2: start what the policy assigned to each CPU that is now empty.
            for (c, &want) in n.cpus.iter_mut().zip(running) {
                let Some(id) = want else { continue };
                if c.task.is_some() {
                    continue;
                }
                let t = self.tasks.get_mut(id as u32);
                c.done_at = dispatch(t, now, n.context_switch, &mut self.rec, &mut self.admission);
                c.task = Some(id);
                c.since = now;
            }
        }
        // A policy must move its next tick past `now` after a tick; clamping
        // keeps a policy bug from spinning the simulator at one instant.
        let tick_at = n.policy.next_tick().map_or(NEVER, |t| t.max(now + 1));
        if changed || force_timer || tick_at != n.tick_at {
            n.tick_at = tick_at;
            self.update_timer(node);
        }
    }

    /// `sync` for a policy that can only have changed `cpu`'s assignment
    /// (a non-preemptive queue): the same effects, without visiting the
    /// other CPUs. A queue never preempts and never ticks.
    fn sync_cpu(&mut self, node: usize, cpu: usize, force_timer: bool) {
        let now = self.now;
        let timer = self.timers.get(node);
        let n = &mut self.nodes[node];
        let want = n.policy.running()[cpu];
        let c = &mut n.cpus[cpu];
        if c.task == want {
            if force_timer {
                self.update_timer(node);
            }
            return;
        }
        debug_assert!(c.task.is_none(), "a non-preemptive policy took a CPU from a running task");
        debug_assert!(n.policy.next_tick().is_none(), "a non-preemptive policy asked for a tick");
        let Some(id) = want else {
            // Unreachable for a queue (an empty CPU stays empty unless given
            // a job); handled like `sync` would.
            c.task = None;
            c.done_at = NEVER;
            self.update_timer(node);
            return;
        };
        let t = self.tasks.get_mut(id as u32);
        let done = dispatch(t, now, n.context_switch, &mut self.rec, &mut self.admission);
        let c = &mut n.cpus[cpu];
        c.task = Some(id);
        c.since = now;
        c.done_at = done;
        if force_timer {
            self.update_timer(node);
        } else if done < timer {
            self.seq += 1;
            self.timers.set(node, done, self.seq);
        }
    }

    /// Debug builds: the fast path left the node exactly as `sync` would.
    #[inline]
    fn debug_check_synced(&self, node: usize) {
        #[cfg(debug_assertions)]
        {
            let n = &self.nodes[node];
            let applied: Vec<Option<JobId>> = n.cpus.iter().map(|c| c.task).collect();
            assert_eq!(applied.as_slice(), n.policy.running(), "node {node}: fast sync missed a CPU change");
            let next = n.cpus.iter().fold(n.tick_at, |t, c| t.min(c.done_at));
            assert_eq!(self.timers.get(node), next, "node {node}: timer out of date");
        }
        let _ = node;
    }

    /// Points the node's timer at its earliest completion or tick.
    #[inline]
    fn update_timer(&mut self, node: usize) {
        let n = &self.nodes[node];
        let next = n.cpus.iter().fold(n.tick_at, |t, c| t.min(c.done_at));
        if next != self.timers.get(node) {
            self.seq += 1;
            self.timers.set(node, next, self.seq);
        }
    }
}

/// `dispatch` for the lone-request path: a task that was never preempted
/// gets a CPU for the first time; `dequeued` counts the measured ones
/// (dispatched, deadline missed) for `Recorder::task_dequeued`. Returns when
/// the task completes.
#[inline(always)]
fn lone_dispatch(
    lone: &Slab<Lone>,
    id: u32,
    now: Nanos,
    dequeued: &mut (u64, u64),
    admission: &mut Option<AdmissionController>,
) -> Nanos {
    let r = lone.get(id);
    let missed = now > r.deadline;
    if r.measured {
        dequeued.0 += 1;
        dequeued.1 += missed as u64;
    }
    if let Some(ac) = admission {
        ac.record_task(now, missed);
    }
    now + r.demand
}

/// A task gets a CPU: pays the context switch if it was preempted, counts its
/// first dispatch (deadline met or missed). Returns when it would complete.
#[inline]
fn dispatch(
    t: &mut Task,
    now: Nanos,
    context_switch: Nanos,
    rec: &mut Recorder,
    admission: &mut Option<AdmissionController>,
) -> Nanos {
    if t.preempted {
        t.remaining += context_switch;
        t.preempted = false;
    }
    if !t.started {
        t.started = true;
        let missed = now > t.deadline;
        if t.measured {
            rec.task_dequeued(missed);
        }
        if let Some(ac) = admission {
            ac.record_task(now, missed);
        }
    }
    now + t.remaining
}
