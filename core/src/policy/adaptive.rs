//! Adaptive `c` for ORF: an online controller that replays the node's recent jobs under each
//! candidate `c` and keeps the one with the lowest p99, with hysteresis.
//!
//! TailClipper leaves `c` to the operator: `c = 1` (global FCFS) is tail-optimal for
//! light-tailed service, while high-variance service needs sharing so that short jobs are
//! not stuck behind long ones. Which `c` is best depends on the service-time distribution,
//! the load and the core count together, so the controller does not guess from a statistic:
//! it measures.
//!
//! - **Observation.** For every job the node served it records the local arrival time, the GAT
//!   and the CPU time the policy gave it (dispatch to preemption or completion, as decided by
//!   the policy itself; nothing here is a job's demand known in advance).
//! - **Counterfactual replay.** Every window of completed jobs (in arrival order, so long
//!   jobs are not left out) it replays those jobs, preceded by the previous window's last
//!   quarter as an unmeasured warm-up, through ORF for each candidate `c` on the same CPUs,
//!   and takes the p99 over requests (the visits with one GAT) of their replayed time in the
//!   node: successive visits add up, parallel ones overlap (see `replay_tail`). All candidates see the same jobs
//!   (common random numbers), so their difference is far less noisy than comparing windows.
//!   The replay is ORF in the limit of a vanishing slice (the `c` oldest jobs share the CPUs
//!   equally): the real slice is tens of µs against jobs of ms, the limit needs no event per
//!   slice, and it has no slice of its own to bias the ranking (a coarse replay slice favoured
//!   small `c` where most jobs are shorter than the slice).
//! - **Rotation cost.** Sharing is not free on a real node: every slice each CPU rotates to
//!   another job, and a rotation costs CPU (on the runtime's kernel agent, two
//!   `sched_setscheduler` calls and the context switch; tens of µs against a 500 µs slice).
//!   The replay above has none, so it ranked sharing capacities by 10–20% on a real
//!   Lognormal chain at ρ 0.7 where a fixed `c` = 16 measured 1.7× and 64 1.2× the p99 of
//!   `c` = 2, and it could not notice: replayed under the capacity that ran, it reproduces the
//!   window's measured p99 within a few percent (the [`Fidelity`] in the agent's log), because
//!   the services it replays already carry the cost. So each [`Window`] carries the CPU one
//!   rotation cost while it ran, measured by whoever ran it ([`Window::set_switch_cost`]; 0
//!   in the simulator, whose slices are free): the replay serves each job without the cost
//!   of its own preemptions and, wherever a candidate has more jobs sharing than CPUs, runs
//!   the CPUs at `slice / (slice + cost)`.
//! - **Pooling and hysteresis.** Each candidate's p99 is pooled over the last windows (the
//!   p99 of their union). `c` moves to the largest candidate within 2% of the lowest only
//!   when the current one is more than 3% above it. Where FCFS is more than 10% above the
//!   lowest (sharing pays), the tie is 10% and `c` moves up to the largest candidate within
//!   it at once, and down one candidate per window: between rare bursts of long jobs a moderate `c` leads by a few percent, and
//!   the next burst costs it 2× or more, while too much sharing costs a few percent at most.
//! - **Start.** The first window is a quarter of `window`, each next one twice as long up to
//!   `window`: a first decision after a few hundred jobs. Until a full `window` of jobs has
//!   been decided, `c` moves only where sharing pays (FCFS more than `SHARING` above the
//!   lowest): on a few hundred light-tailed jobs the candidates differ by a few percent of
//!   noise (the real Exp chain at ρ 0.5 ranked 64 7% below FCFS and then paid 1.3× for it).
//! - **Fidelity.** Each decision also replays the windows under the capacities that ran in
//!   them and compares with what the node measured ([`Fidelity`]). Where the two differ by
//!   more than `FIDELITY_LIMIT`, the replay's ranking is about a node that is not this one,
//!   and `c` holds.
//!
//! - **Where it runs.** The observation is a few map and deque operations per event. The
//!   decision (one replay per candidate) is milliseconds of CPU per window. By default it runs
//!   inside the policy call that completes a window, so the simulator stays deterministic. A
//!   scheduler that must not stall (the runtime's kernel agent, above its band) detaches the
//!   [`Decider`], decides each [`Window`] on another thread and applies the choice with
//!   [`Orf::set_c`](super::Orf::set_c): same code, same decisions, a little later.
//!
//! Candidates are 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, … up to `c_max`, as pool capacities
//! `max(c, cpus)` (below the core count every `c` behaves the same, see `orf`), so on 3
//! CPUs they are 3, 4, 6, 8, …. The controller starts at the smallest: global FCFS.
//! It is deterministic: the same sequence of calls gives the same decisions. Memory is
//! bounded: at most `MAX_OPEN_FACTOR × window` jobs are tracked; beyond that the oldest
//! unfinished record is dropped (a job blocked for ever must not stall the controller).

use std::collections::{HashMap, VecDeque};

use super::{Job, JobId};
use crate::time::{Nanos, NEVER};

/// Windows whose replayed tails are pooled into each candidate's p99.
const POOLED_WINDOWS: usize = 8;
/// Candidates whose pooled p99 is within this fraction of the lowest count as tied, and the
/// largest of them is the target.
const TIE: f64 = 0.02;
/// `c` moves only when the current candidate's pooled p99 is more than this fraction above
/// the lowest.
const MARGIN: f64 = 0.03;
/// Sharing regime: global FCFS (the smallest candidate) is more than this fraction above the
/// lowest. There the tie widens to this fraction, `c` moves up to the largest candidate
/// within it whenever that is above the current one, and down (one candidate per window)
/// only when the current one is more than this fraction above the lowest. Under heavy tails the windows between rare
/// bursts of long jobs rank a moderate `c` a few percent ahead, and the next burst costs
/// that `c` 2× or more; too much sharing costs a few percent at most.
const SHARING: f64 = 0.10;
/// The first window is this fraction of `window`, the second twice that, and so on up to
/// `window`: a first decision long before a full window, refined as the pool fills.
const FIRST_WINDOW_DIVISOR: usize = 4;
/// Records kept, as a multiple of the window, before the oldest unfinished one is dropped.
const MAX_OPEN_FACTOR: usize = 8;
/// The replay's ranking is acted on only while it reproduces what ran: where its pooled p99
/// under the capacities that ran is more than this fraction off the measured one, `c` holds.
/// On the real chain the two agree within 1% at the median and 3–23% at the 90th percentile;
/// one Lognormal ρ 0.7 run replayed FCFS at 82 ms where the node measured 194 ms, ranked
/// sharing 1.4× ahead on that replay, moved to 64 and paid 1.2× the default's p99.
const FIDELITY_LIMIT: f64 = 0.25;

/// One job's visit to the node.
#[derive(Clone, Copy, Debug)]
struct Record {
    arrive: Nanos,
    gat: Nanos,
    /// CPU time received; `None` while the job is still in the policy.
    service: Option<Nanos>,
    /// When it left the policy (completion or block): what the real schedule gave it.
    left: Nanos,
    /// Times it was preempted: where rotations cost CPU, each added that cost to `service`.
    preempted: u32,
}

/// A job currently in the policy: where its record is and the CPU time it has had so far.
#[derive(Clone, Copy, Debug)]
struct Open {
    record: u64,
    attained: Nanos,
    preempted: u32,
}

/// The controller; see the module docs. [`Orf`](super::Orf) owns one when built adaptive.
///
/// Two halves: the observer (cheap, on every policy event) cuts completed windows; the
/// [`Decider`] replays them (expensive). Attached, the decider runs inside the event that
/// completes a window, so a simulation is deterministic. A scheduler whose policy calls must
/// stay short (the runtime's kernel agent) detaches it ([`AdaptiveC::detach_decider`]), takes
/// each window with [`AdaptiveC::take_window`], decides elsewhere and applies the result with
/// [`Orf::set_c`](super::Orf::set_c).
#[derive(Clone, Debug)]
pub struct AdaptiveC {
    window: usize,
    open: HashMap<JobId, Open>,
    /// Records in arrival order; `records[0]` has index `first`.
    records: VecDeque<Record>,
    first: u64,
    /// Windows cut so far (decided inline or handed out).
    cut: u64,
    /// `None` once detached: windows wait in `pending` for `take_window`.
    decider: Option<Decider>,
    /// The last window cut while detached and not yet taken.
    pending: Option<Window>,
    /// Windows cut while detached that were replaced by a newer one before being taken.
    overwritten: u64,
}

/// A window of completed job visits in arrival order, ready for a [`Decider`].
#[derive(Clone, Debug)]
pub struct Window {
    /// Its number among the windows of one observer, from 0.
    seq: u64,
    jobs: Vec<Record>,
    /// CPU one rotation (a preemption at the end of a slice) cost while this window ran, as
    /// measured by the scheduler that ran it; 0 where rotations are free (the simulator).
    switch_cost: Nanos,
}

impl Window {
    /// Its number among the windows of one controller, from 0: a gap means windows were
    /// dropped, and the decider does not use the previous one as this one's warm-up.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Job visits in the window.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Sets the CPU one rotation cost while this window ran (see [`Decider`]): the runtime's
    /// kernel agent measures it, the simulator's slices are free.
    pub fn set_switch_cost(&mut self, cost: Nanos) {
        self.switch_cost = cost;
    }

    /// The CPU one rotation cost while this window ran (0 unless set).
    pub fn switch_cost(&self) -> Nanos {
        self.switch_cost
    }

    /// The CPU time each job visit received, in arrival order: what the replay serves.
    pub fn services(&self) -> impl Iterator<Item = Nanos> + '_ {
        self.jobs.iter().map(|r| r.service.unwrap_or(0))
    }
}

/// The decision half of the controller: replays each window under every candidate
/// capacity and keeps the choice (see the module docs). Deterministic: the same windows
/// give the same decisions.
#[derive(Clone, Debug)]
pub struct Decider {
    cpus: usize,
    /// The policy's slice: while jobs share the CPUs, each CPU rotates once per slice.
    slice: Nanos,
    window: usize,
    /// Candidate pool capacities, ascending and distinct.
    ladder: Vec<usize>,
    /// Index of the current capacity in `ladder`.
    current: usize,
    /// Per candidate, the largest replayed ages of each of the last `POOLED_WINDOWS`
    /// windows, descending, with the window's job count: enough to give the p99 of their union.
    tails: Vec<VecDeque<Tail>>,
    /// The previous window's last quarter: replayed first, not measured.
    warm: Vec<Record>,
    /// The number of the last window decided.
    last_seq: Option<u64>,
    windows: u64,
    /// Job visits in the windows decided so far.
    jobs_decided: usize,
    switches: u64,
    /// Each candidate's pooled p99 at the last decision (what the choice was made on).
    pooled: Vec<Nanos>,
    /// Per pooled window, its replay under the capacity that was running in it.
    ran: VecDeque<Tail>,
    /// Per pooled window, the times in the node the real schedule gave its requests.
    measured: VecDeque<Tail>,
    /// How well the replay reproduced the pooled windows at the last decision.
    fidelity: Fidelity,
}

/// The replay checked against what happened: over the pooled windows, the p99 of the replayed
/// times in the node under the capacity that was running in each window, and the p99 of the
/// measured ones. Where they differ, the replay's ranking is no better than that difference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fidelity {
    /// The capacity that ran in the last window.
    pub cap: usize,
    /// Pooled p99 of the windows replayed under the capacities that ran in them.
    pub replayed: Nanos,
    /// Pooled p99 of the times in the node measured in the same windows.
    pub measured: Nanos,
    /// The last window alone: its replayed p99 under the capacity that ran, and its measured one.
    pub window_replayed: Nanos,
    pub window_measured: Nanos,
}

impl Fidelity {
    /// The replay's relative error, `|replayed − measured| / measured` (0 before any window
    /// or where nothing was measured).
    pub fn error(&self) -> f64 {
        if self.measured == 0 {
            return 0.0;
        }
        (self.replayed as f64 - self.measured as f64).abs() / self.measured as f64
    }

    /// Whether the replay reproduces what ran closely enough for its ranking to move `c`
    /// (within `FIDELITY_LIMIT`); where it does not, the decider holds `c`.
    pub fn faithful(&self) -> bool {
        self.error() <= FIDELITY_LIMIT
    }
}

impl AdaptiveC {
    /// A controller for `cpus` CPUs choosing `c` in `[1, c_max]`, re-deciding every `window`
    /// completed jobs (the first windows shorter, see `FIRST_WINDOW_DIVISOR`), for a policy
    /// that rotates sharing jobs every `slice`.
    pub fn new(cpus: usize, c_max: usize, slice: Nanos, window: usize) -> Self {
        assert!(cpus > 0 && c_max > 0 && window > 0);
        AdaptiveC {
            window,
            open: HashMap::new(),
            records: VecDeque::new(),
            first: 0,
            cut: 0,
            decider: Some(Decider::new(cpus, c_max, slice, window)),
            pending: None,
            overwritten: 0,
        }
    }

    /// The decider while attached (`None` once detached).
    pub fn decider(&self) -> Option<&Decider> {
        self.decider.as_ref()
    }

    /// Takes the decider out: from now on a completed window waits for
    /// [`take_window`](Self::take_window) instead of being decided inside the policy call.
    /// `None` if it was detached already.
    pub fn detach_decider(&mut self) -> Option<Decider> {
        self.decider.take()
    }

    /// The window cut since the last call, if any (detached only).
    pub fn take_window(&mut self) -> Option<Window> {
        self.pending.take()
    }

    /// Windows cut while detached and replaced by a newer one before anyone took them.
    pub fn overwritten(&self) -> u64 {
        self.overwritten
    }

    /// The pool capacity the decider chose (attached), `max(c, cpus)`.
    pub fn cap(&self) -> Option<usize> {
        self.decider.as_ref().map(Decider::cap)
    }

    /// Windows evaluated so far (attached; 0 once detached).
    pub fn windows(&self) -> u64 {
        self.decider.as_ref().map_or(0, Decider::windows)
    }

    /// Each candidate's pooled p99 at the last decision (attached; empty once detached).
    pub fn pooled_p99s(&self) -> &[Nanos] {
        self.decider.as_ref().map_or(&[], Decider::pooled_p99s)
    }

    /// Times the capacity changed (attached; 0 once detached).
    pub fn switches(&self) -> u64 {
        self.decider.as_ref().map_or(0, Decider::switches)
    }

    /// The candidate capacities, ascending (attached; empty once detached).
    pub fn ladder(&self) -> &[usize] {
        self.decider.as_ref().map_or(&[], Decider::ladder)
    }

    /// A job entered the policy (arrival or wake-up) at `now`.
    pub fn arrived(&mut self, now: Nanos, job: &Job) {
        let record = self.first + self.records.len() as u64;
        self.records.push_back(Record { arrive: now, gat: job.gat, service: None, left: NEVER, preempted: 0 });
        self.open.insert(job.id, Open { record, attained: 0, preempted: 0 });
        if self.records.len() > MAX_OPEN_FACTOR * self.window {
            // Something never finishes: forget the oldest record so memory stays bounded.
            if let Some(r) = self.records.pop_front() {
                if r.service.is_none() {
                    self.open.retain(|_, o| o.record != self.first);
                }
            }
            self.first += 1;
        }
    }

    /// A job was on a CPU for `ran` and was preempted.
    pub fn ran(&mut self, id: JobId, ran: Nanos) {
        if let Some(o) = self.open.get_mut(&id) {
            o.attained += ran;
            o.preempted += 1;
        }
    }

    /// A job left the policy (completion or block) at `now` after its last `ran` on a CPU.
    /// Returns the new pool capacity when this completes a window and the (attached)
    /// decider's choice changes.
    pub fn left(&mut self, id: JobId, now: Nanos, ran: Nanos) -> Option<usize> {
        let o = self.open.remove(&id)?;
        if let Some(at) = o.record.checked_sub(self.first) {
            if let Some(r) = self.records.get_mut(at as usize) {
                r.service = Some(o.attained + ran);
                r.left = now;
                r.preempted = o.preempted;
            }
        }
        let size = next_window(self.window, self.cut);
        let ready = self.records.iter().take(size).take_while(|r| r.service.is_some()).count();
        if ready < size {
            return None;
        }
        let window = Window { seq: self.cut, jobs: self.records.drain(..size).collect(), switch_cost: 0 };
        self.first += size as u64;
        self.cut += 1;
        match &mut self.decider {
            Some(d) => d.decide(&window),
            None => {
                self.overwritten += u64::from(self.pending.replace(window).is_some());
                None
            }
        }
    }
}

/// Jobs in window number `cut`: `window / FIRST_WINDOW_DIVISOR`, doubling up to `window`.
fn next_window(window: usize, cut: u64) -> usize {
    let mut size = (window / FIRST_WINDOW_DIVISOR).max(1);
    for _ in 0..cut {
        if size >= window {
            break;
        }
        size *= 2;
    }
    size.min(window)
}

impl Decider {
    /// A decider for `cpus` CPUs choosing `c` in `[1, c_max]` on windows of up to `window`
    /// jobs, for a policy that rotates sharing jobs every `slice`. It starts at the smallest
    /// candidate: global FCFS.
    pub fn new(cpus: usize, c_max: usize, slice: Nanos, window: usize) -> Self {
        assert!(cpus > 0 && c_max > 0 && window > 0);
        let mut ladder: Vec<usize> = candidates(c_max).map(|c| c.max(cpus)).collect();
        ladder.dedup();
        let n = ladder.len();
        Decider {
            cpus,
            slice: slice.max(1),
            window,
            ladder,
            current: 0,
            tails: vec![VecDeque::new(); n],
            warm: Vec::new(),
            last_seq: None,
            windows: 0,
            jobs_decided: 0,
            switches: 0,
            pooled: vec![0; n],
            ran: VecDeque::new(),
            measured: VecDeque::new(),
            fidelity: Fidelity::default(),
        }
    }

    /// The pool capacity the policy should use now, `max(c, cpus)`.
    pub fn cap(&self) -> usize {
        self.ladder[self.current]
    }

    /// The candidate capacities, ascending.
    pub fn ladder(&self) -> &[usize] {
        &self.ladder
    }

    /// Windows evaluated so far.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Each candidate's pooled p99 of replayed age at the last decision, in ladder order
    /// (zeros before the first): what the choice was made on.
    pub fn pooled_p99s(&self) -> &[Nanos] {
        &self.pooled
    }

    /// Times the capacity changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// How well the replay reproduced the running capacity at the last decision.
    pub fn fidelity(&self) -> Fidelity {
        self.fidelity
    }

    /// Replays `window` under every candidate and updates the choice; returns the new pool
    /// capacity when it changes. A window that does not follow the last one decided (some
    /// were dropped) is replayed without a warm-up.
    pub fn decide(&mut self, window: &Window) -> Option<usize> {
        if self.last_seq.is_some_and(|s| window.seq != s + 1) {
            self.warm.clear();
        }
        self.last_seq = Some(window.seq);
        let batch = &window.jobs;
        if batch.is_empty() {
            return None;
        }
        let before = self.current;
        self.windows += 1;
        // A preempted job's measured CPU includes what its rotations cost: the replay serves
        // it without (and charges rotations where a candidate shares, below).
        let jobs: Vec<Record> = self
            .warm
            .iter()
            .chain(batch)
            .map(|r| {
                let cost = window.switch_cost.saturating_mul(Nanos::from(r.preempted));
                Record { service: r.service.map(|s| s.saturating_sub(cost).max(1)), ..*r }
            })
            .collect();
        // The union of k windows has at most k·W requests; its p99 is among the top
        // k·W/100 + 1, so each window keeps that many at most.
        let keep = POOLED_WINDOWS * self.window / 100 + 1;
        let sharing_rate = self.slice as f64 / (self.slice + window.switch_cost) as f64;
        for (k, &cap) in self.ladder.iter().enumerate() {
            let tail = replay_tail(&jobs, self.warm.len(), self.cpus, cap, sharing_rate, keep);
            if k == before {
                push_pooled(&mut self.ran, tail.clone());
            }
            push_pooled(&mut self.tails[k], tail);
        }
        push_pooled(&mut self.measured, measured_tail(batch, keep));
        self.fidelity = Fidelity {
            cap: self.ladder[before],
            replayed: pooled_p99(&self.ran),
            measured: pooled_p99(&self.measured),
            window_replayed: self.ran.back().map_or(0, |t| pooled_p99([t])),
            window_measured: self.measured.back().map_or(0, |t| pooled_p99([t])),
        };
        let p99s: Vec<Nanos> = self.tails.iter().map(pooled_p99).collect();
        self.pooled.clone_from(&p99s);
        self.jobs_decided += batch.len();
        // A replay that does not reproduce the capacity that ran ranks the others on something
        // the node does not do: hold `c` (on the first windows, the default) until it does.
        let target = choose(&p99s, self.current, self.jobs_decided >= self.window);
        if let Some(target) = target.filter(|_| self.fidelity.faithful()) {
            self.current = target;
            self.switches += 1;
        }
        self.warm = batch[batch.len() - batch.len() / 4..].to_vec();
        (self.current != before).then(|| self.cap())
    }
}

/// The candidate to move to from `current` given each candidate's pooled p99 (ladder
/// order), or `None` to stay. Before a full window of jobs has been decided (`settled`
/// false) it moves only where sharing pays.
///
/// Among (nearly) equal tails, the most sharing: under heavy tails too little sharing is
/// what costs most (short jobs stuck behind long ones), and where sharing hurts (light
/// tails) the smallest `c` is clearly lowest, not tied. Where FCFS is clearly worse than
/// the lowest (the sharing regime) the tie is `SHARING` wide and `c` moves up freely.
fn choose(p99s: &[Nanos], current: usize, settled: bool) -> Option<usize> {
    let lowest = *p99s.iter().min()? as f64;
    let sharing = p99s[0] as f64 > (1.0 + SHARING) * lowest;
    // Where no candidate leads FCFS by more than `SHARING`, the candidates' differences on
    // the first short windows are a few percent and noise: on the real Exp chain at ρ 0.5 a
    // 500-job window ranked 64 7% below FCFS, `c` went to 64 and the run's p99 was 1.3×.
    if !sharing && !settled {
        return None;
    }
    let (tie, margin) = if sharing { (SHARING, SHARING) } else { (TIE, MARGIN) };
    let target = (0..p99s.len()).rev().find(|&k| p99s[k] as f64 <= (1.0 + tie) * lowest)?;
    let away = p99s[current] as f64 > (1.0 + margin) * lowest;
    let up = sharing && target > current;
    if target == current || !(away || up) {
        return None;
    }
    // Where sharing pays, down is one candidate per window: a window in the middle of a
    // burst of long jobs can rank a moderate `c` ahead of the large ones by more than the
    // tie, and the run's p99 is made in that burst, where too little sharing costs 2× (the
    // sweep's Lognormal ρ 0.8 went from 64 to 16 in one window and paid 1.5×). If the
    // window was not an outlier, the next ones keep stepping down.
    Some(if sharing && target < current { current - 1 } else { target })
}

/// One window's tail of times in the node (replayed under one candidate, or measured).
#[derive(Clone, Debug)]
struct Tail {
    /// Requests measured in the window.
    jobs: usize,
    /// Their largest times in the node, descending.
    ages: Vec<Nanos>,
}

impl Tail {
    /// The tail of `times`: their count and the `keep` largest.
    fn of(mut times: Vec<Nanos>, keep: usize) -> Tail {
        let jobs = times.len();
        if times.len() > keep {
            times.select_nth_unstable_by(keep - 1, |a, b| b.cmp(a));
            times.truncate(keep);
        }
        times.sort_unstable_by(|a, b| b.cmp(a));
        Tail { jobs, ages: times }
    }
}

/// The p99 of the union of windows' ages, from each window's largest ages.
fn pooled_p99<'a>(tails: impl IntoIterator<Item = &'a Tail> + Clone) -> Nanos {
    let n: usize = tails.clone().into_iter().map(|t| t.jobs).sum();
    let mut top: Vec<Nanos> = tails.into_iter().flat_map(|t| &t.ages).copied().collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    // Ascending rank ceil(0.99 n) - 1 is rank n - ceil(0.99 n) from the top.
    let from_top = n - (n * 99).div_ceil(100);
    top.get(from_top).copied().unwrap_or(0)
}

/// Appends `tail` to a pool of the last `POOLED_WINDOWS` windows.
fn push_pooled(pool: &mut VecDeque<Tail>, tail: Tail) {
    if pool.len() == POOLED_WINDOWS {
        pool.pop_front();
    }
    pool.push_back(tail);
}

/// 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, … up to `c_max` (and `c_max` itself).
fn candidates(c_max: usize) -> impl Iterator<Item = usize> {
    let mut v: Vec<usize> = vec![1, 2, 3];
    let mut p = 4;
    while p <= c_max {
        v.push(p);
        v.push(p + p / 2);
        p *= 2;
    }
    v.retain(|&c| c <= c_max);
    v.push(c_max);
    v.sort_unstable();
    v.dedup();
    v.into_iter()
}

/// Runs `jobs` (ascending arrival times, services known) through ORF with pool capacity
/// `cap` on `cpus` CPUs (`fluid_orf`, sharing CPUs at `sharing_rate`) and returns the tail of
/// the times in the node of the requests measured (those with a visit after the first
/// `skip`), `keep` largest kept.
fn replay_tail(jobs: &[Record], skip: usize, cpus: usize, cap: usize, sharing_rate: f64, keep: usize) -> Tail {
    let done = fluid_orf(jobs, cpus, cap, sharing_rate);
    Tail::of(request_times(&jobs[skip..], &done[skip..]), keep)
}

/// The tail of the times in the node the real schedule gave `jobs`' requests (each visit from
/// its arrival to when it left the policy), `keep` largest kept: what the replay at the
/// capacity that ran should reproduce. Visits without a recorded departure (a window built by
/// hand) are not measured.
fn measured_tail(jobs: &[Record], keep: usize) -> Tail {
    let measured: Vec<Record> = jobs.iter().filter(|r| r.left != NEVER).copied().collect();
    let left: Vec<Nanos> = measured.iter().map(|r| r.left).collect();
    Tail::of(request_times(&measured, &left), keep)
}

/// Each request's time in the node, given its visits `jobs` and when each left (`done`).
///
/// A request's time in the node is the length of the union of its visits'
/// `[arrival, completion]` intervals, its visits being the jobs with its GAT: the sum of the
/// sojourns of a chain's successive visits on this node (the tiers of one request), the span
/// of parallel ones (the tasks of one query). Not the age at completion (completion − GAT):
/// on a node that hosts several tiers of a chain, the last visits of the slowest requests
/// arrive with hundreds of milliseconds of upstream delay that the real policy caused and no
/// replay can change, so every candidate tied (a real Lognormal chain: 249.36 ms for
/// `c` = 2 and 249.51 for 64) while the same requests' time in the node fell from 70 to 53 ms.
fn request_times(jobs: &[Record], done: &[Nanos]) -> Vec<Nanos> {
    // Visits by request, each request's intervals in arrival order.
    let mut visits: Vec<(Nanos, Nanos, Nanos)> =
        jobs.iter().zip(done).map(|(r, &t)| (r.gat, r.arrive, t.max(r.arrive))).collect();
    visits.sort_unstable();
    let mut times: Vec<Nanos> = Vec::new();
    let mut k = 0;
    while k < visits.len() {
        let gat = visits[k].0;
        let (mut total, mut from, mut to) = (0, visits[k].1, visits[k].2);
        while k < visits.len() && visits[k].0 == gat {
            let (_, a, d) = visits[k];
            if a > to {
                total += to - from;
                from = a;
            }
            to = to.max(d);
            k += 1;
        }
        times.push(total + (to - from));
    }
    times
}

/// Completion times of `jobs` (ascending arrival times, services known) under ORF with pool
/// capacity `cap` on `cpus` CPUs in the limit of a vanishing slice: at every instant the
/// `min(cap, present)` oldest jobs present (by GAT, then arrival) share the CPUs equally,
/// each at rate `min(1, cpus / pool)`, times `sharing_rate` while they are more than the
/// CPUs (then every CPU rotates once a slice, and a rotation's cost is CPU the jobs lose:
/// `slice / (slice + switch cost)`; 1 where rotations are free). The real slice is tens of µs against jobs of ms, so
/// this is the policy the node runs, without the replay having to simulate every slice.
fn fluid_orf(jobs: &[Record], cpus: usize, cap: usize, sharing_rate: f64) -> Vec<Nanos> {
    let mut completed = vec![NEVER; jobs.len()];
    // Jobs present, oldest first: (gat, index); remaining CPU time in ns.
    let mut present: Vec<(Nanos, usize)> = Vec::new();
    let mut remaining: Vec<f64> = jobs.iter().map(|r| r.service.unwrap_or(0) as f64).collect();
    let mut next = 0;
    let mut now = jobs.first().map_or(0.0, |r| r.arrive as f64);
    while next < jobs.len() || !present.is_empty() {
        let pool = present.len().min(cap);
        let rate = match pool {
            0 => 0.0,
            p if p > cpus => cpus as f64 / p as f64 * sharing_rate,
            _ => 1.0,
        };
        let (first, least) = present[..pool]
            .iter()
            .enumerate()
            .map(|(k, &(_, j))| (k, remaining[j]))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::INFINITY));
        let completion = now + least / rate.max(f64::MIN_POSITIVE);
        let arrival = jobs.get(next).map_or(f64::INFINITY, |r| r.arrive as f64);
        let t = completion.min(arrival).max(now);
        for &(_, j) in &present[..pool] {
            remaining[j] -= rate * (t - now);
        }
        now = t;
        if completion <= arrival {
            let (_, j) = present.remove(first);
            completed[j] = now.round() as Nanos;
        } else {
            let key = (jobs[next].gat, next);
            let at = present.partition_point(|p| *p < key);
            present.insert(at, key);
            next += 1;
        }
    }
    completed
}

#[cfg(test)]
mod tests;
