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
//!   and takes the p99 of each job's age at completion. All candidates see the same jobs
//!   (common random numbers), so their difference is far less noisy than comparing windows.
//!   The replay is ORF in the limit of a vanishing slice (the `c` oldest jobs share the CPUs
//!   equally): the real slice is tens of µs against jobs of ms, the limit needs no event per
//!   slice, and it has no slice of its own to bias the ranking (a coarse replay slice favoured
//!   small `c` where most jobs are shorter than the slice).
//! - **Pooling and hysteresis.** Each candidate's p99 is pooled over the last windows (the
//!   p99 of their union). `c` moves to the largest candidate within 2% of the lowest only
//!   when the current one is more than 3% above it. Where FCFS is more than 10% above the
//!   lowest (sharing pays), the tie is 10% and `c` moves up to the largest candidate within
//!   it at once, and down one candidate per window: between rare bursts of long jobs a moderate `c` leads by a few percent, and
//!   the next burst costs it 2× or more, while too much sharing costs a few percent at most.
//! - **Start.** The first window is a quarter of `window`, each next one twice as long up to
//!   `window`: a first decision after a few hundred jobs.
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

/// One job's visit to the node.
#[derive(Clone, Copy, Debug)]
struct Record {
    arrive: Nanos,
    gat: Nanos,
    /// CPU time received; `None` while the job is still in the policy.
    service: Option<Nanos>,
}

/// A job currently in the policy: where its record is and the CPU time it has had so far.
#[derive(Clone, Copy, Debug)]
struct Open {
    record: u64,
    attained: Nanos,
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
}

/// The decision half of the controller: replays each window under every candidate
/// capacity and keeps the choice (see the module docs). Deterministic: the same windows
/// give the same decisions.
#[derive(Clone, Debug)]
pub struct Decider {
    cpus: usize,
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
    switches: u64,
    /// Each candidate's pooled p99 at the last decision (what the choice was made on).
    pooled: Vec<Nanos>,
}

impl AdaptiveC {
    /// A controller for `cpus` CPUs choosing `c` in `[1, c_max]`, re-deciding every `window`
    /// completed jobs (the first windows shorter, see `FIRST_WINDOW_DIVISOR`).
    pub fn new(cpus: usize, c_max: usize, window: usize) -> Self {
        assert!(cpus > 0 && c_max > 0 && window > 0);
        AdaptiveC {
            window,
            open: HashMap::new(),
            records: VecDeque::new(),
            first: 0,
            cut: 0,
            decider: Some(Decider::new(cpus, c_max, window)),
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
        self.records.push_back(Record { arrive: now, gat: job.gat, service: None });
        self.open.insert(job.id, Open { record, attained: 0 });
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
        }
    }

    /// A job left the policy (completion or block) after its last `ran` on a CPU. Returns
    /// the new pool capacity when this completes a window and the (attached) decider's
    /// choice changes.
    pub fn left(&mut self, id: JobId, ran: Nanos) -> Option<usize> {
        let o = self.open.remove(&id)?;
        if let Some(at) = o.record.checked_sub(self.first) {
            if let Some(r) = self.records.get_mut(at as usize) {
                r.service = Some(o.attained + ran);
            }
        }
        let size = next_window(self.window, self.cut);
        let ready = self.records.iter().take(size).take_while(|r| r.service.is_some()).count();
        if ready < size {
            return None;
        }
        let window = Window { seq: self.cut, jobs: self.records.drain(..size).collect() };
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
    /// jobs. It starts at the smallest candidate: global FCFS.
    pub fn new(cpus: usize, c_max: usize, window: usize) -> Self {
        assert!(cpus > 0 && c_max > 0 && window > 0);
        let mut ladder: Vec<usize> = candidates(c_max).map(|c| c.max(cpus)).collect();
        ladder.dedup();
        let n = ladder.len();
        Decider {
            cpus,
            window,
            ladder,
            current: 0,
            tails: vec![VecDeque::new(); n],
            warm: Vec::new(),
            last_seq: None,
            windows: 0,
            switches: 0,
            pooled: vec![0; n],
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
        let jobs: Vec<Record> = self.warm.iter().chain(batch).copied().collect();
        // The union of k windows has at most k·W ages; its p99 is among the top k·W/100 + 1,
        // so each window keeps that many at most.
        let keep = POOLED_WINDOWS * self.window / 100 + 1;
        for (k, &cap) in self.ladder.iter().enumerate() {
            let ages = replay_tail(&jobs, self.warm.len(), self.cpus, cap, keep);
            let pool = &mut self.tails[k];
            if pool.len() == POOLED_WINDOWS {
                pool.pop_front();
            }
            pool.push_back(Tail { jobs: batch.len(), ages });
        }
        let p99s: Vec<Nanos> = self.tails.iter().map(pooled_p99).collect();
        self.pooled.clone_from(&p99s);
        if let Some(target) = choose(&p99s, self.current) {
            self.current = target;
            self.switches += 1;
        }
        self.warm = batch[batch.len() - batch.len() / 4..].to_vec();
        (self.current != before).then(|| self.cap())
    }
}

/// The candidate to move to from `current` given each candidate's pooled p99 (ladder
/// order), or `None` to stay.
///
/// Among (nearly) equal tails, the most sharing: under heavy tails too little sharing is
/// what costs most (short jobs stuck behind long ones), and where sharing hurts (light
/// tails) the smallest `c` is clearly lowest, not tied. Where FCFS is clearly worse than
/// the lowest (the sharing regime) the tie is `SHARING` wide and `c` moves up freely.
fn choose(p99s: &[Nanos], current: usize) -> Option<usize> {
    let lowest = *p99s.iter().min()? as f64;
    let sharing = p99s[0] as f64 > (1.0 + SHARING) * lowest;
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

/// One window's replayed tail under one candidate.
#[derive(Clone, Debug)]
struct Tail {
    /// Jobs measured in the window.
    jobs: usize,
    /// Its largest ages, descending.
    ages: Vec<Nanos>,
}

/// The p99 of the union of windows' ages, from each window's largest ages.
fn pooled_p99(tails: &VecDeque<Tail>) -> Nanos {
    let n: usize = tails.iter().map(|t| t.jobs).sum();
    let mut top: Vec<Nanos> = tails.iter().flat_map(|t| &t.ages).copied().collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    // Ascending rank ceil(0.99 n) - 1 is rank n - ceil(0.99 n) from the top.
    let from_top = n - (n * 99).div_ceil(100);
    top.get(from_top).copied().unwrap_or(0)
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
/// `cap` on `cpus` CPUs (`fluid_orf`) and returns the `keep` largest ages at completion
/// (descending) of the jobs after the first `skip`, with the smallest upstream delay
/// (arrival − GAT) taken as zero so that a constant offset between the GAT clock and the
/// local clock cancels.
fn replay_tail(jobs: &[Record], skip: usize, cpus: usize, cap: usize, keep: usize) -> Vec<Nanos> {
    let done = fluid_orf(jobs, cpus, cap);
    let offset = jobs[skip..].iter().map(|r| r.arrive.wrapping_sub(r.gat)).min().unwrap_or(0);
    let mut ages: Vec<Nanos> =
        jobs.iter().zip(&done).skip(skip).map(|(r, &t)| t.wrapping_sub(r.gat).wrapping_sub(offset)).collect();
    if ages.len() > keep {
        ages.select_nth_unstable_by(keep - 1, |a, b| b.cmp(a));
        ages.truncate(keep);
    }
    ages.sort_unstable_by(|a, b| b.cmp(a));
    ages
}

/// Completion times of `jobs` (ascending arrival times, services known) under ORF with pool
/// capacity `cap` on `cpus` CPUs in the limit of a vanishing slice: at every instant the
/// `min(cap, present)` oldest jobs present (by GAT, then arrival) share the CPUs equally,
/// each at rate `min(1, cpus / pool)`. The real slice is tens of µs against jobs of ms, so
/// this is the policy the node runs, without the replay having to simulate every slice.
fn fluid_orf(jobs: &[Record], cpus: usize, cap: usize) -> Vec<Nanos> {
    let mut completed = vec![NEVER; jobs.len()];
    // Jobs present, oldest first: (gat, index); remaining CPU time in ns.
    let mut present: Vec<(Nanos, usize)> = Vec::new();
    let mut remaining: Vec<f64> = jobs.iter().map(|r| r.service.unwrap_or(0) as f64).collect();
    let mut next = 0;
    let mut now = jobs.first().map_or(0.0, |r| r.arrive as f64);
    while next < jobs.len() || !present.is_empty() {
        let pool = present.len().min(cap);
        let rate = if pool == 0 { 0.0 } else { (cpus as f64 / pool as f64).min(1.0) };
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
mod tests {
    use super::*;
    use crate::dist::Dist;
    use crate::policy::{Orf, Policy};
    use crate::rng::Rng;
    use crate::time::NANOS_PER_MILLI;
    use proptest::prelude::*;

    /// Serves `jobs` (ascending arrival times, job `i` has id `i`) with `policy` until all have
    /// completed, each needing its recorded service time on a CPU; returns each job's completion
    /// time. A minimal event loop: arrivals, completions and the policy's ticks.
    fn serve<P: Policy>(policy: &mut P, jobs: &[Record]) -> Vec<Nanos> {
        let mut remaining: Vec<Nanos> = jobs.iter().map(|r| r.service.unwrap_or(0)).collect();
        let mut completed = vec![NEVER; jobs.len()];
        let mut on_cpu: Vec<Option<JobId>> = policy.running().to_vec();
        let mut next = 0;
        let mut now = jobs.first().map_or(0, |r| r.arrive);
        let mut done = 0;
        while done < jobs.len() {
            let completion = on_cpu.iter().flatten().map(|&j| now + remaining[j as usize]).min().unwrap_or(NEVER);
            let arrival = jobs.get(next).map_or(NEVER, |r| r.arrive);
            let tick = policy.next_tick().unwrap_or(NEVER);
            let t = completion.min(arrival).min(tick).max(now);
            for j in on_cpu.iter().flatten() {
                remaining[*j as usize] -= t - now;
            }
            now = t;
            if completion <= arrival.min(tick) {
                let id = on_cpu
                    .iter()
                    .flatten()
                    .copied()
                    .find(|&j| remaining[j as usize] == 0)
                    .expect("a job completes now");
                policy.complete(now, id);
                completed[id as usize] = now;
                done += 1;
            } else if arrival <= tick {
                let r = jobs[next];
                policy.arrive(now, Job { id: next as JobId, gat: r.gat, deadline: NEVER, class: 0 });
                next += 1;
            } else {
                policy.tick(now);
            }
            on_cpu.copy_from_slice(policy.running());
        }
        completed
    }

    /// `n` Poisson arrivals at utilization `rho` of `cpus` CPUs, services drawn from `dist`.
    fn workload(dist: &Dist, rho: f64, cpus: usize, n: usize, seed: u64) -> Vec<Record> {
        let mut rng = Rng::new(seed);
        let gap = dist.mean_ns() / (rho * cpus as f64);
        let mut t = 0.0;
        (0..n)
            .map(|_| {
                t += rng.exp(gap);
                Record { arrive: t as Nanos, gat: t as Nanos, service: Some(dist.sample_ns(&mut rng).max(1)) }
            })
            .collect()
    }

    /// Serves `jobs` with adaptive ORF and returns the capacity after each window.
    fn caps_over_time(jobs: &[Record], cpus: usize, c_max: usize, window: usize) -> (Vec<usize>, Orf) {
        let mut p = Orf::adaptive(cpus, c_max, 30_000, window);
        let mut caps = Vec::new();
        let mut windows = 0;
        let mut sink =
            Recorder { inner: &mut p, caps: &mut caps, windows: &mut windows, pooled: &mut Vec::new(), detached: None };
        serve(&mut sink, jobs);
        (caps, p)
    }

    /// Wraps a policy to note its capacity whenever the controller has finished a window.
    struct Recorder<'a> {
        inner: &'a mut Orf,
        caps: &'a mut Vec<usize>,
        windows: &'a mut u64,
        /// Each window's pooled p99s.
        pooled: &'a mut Vec<Vec<Nanos>>,
        /// The decider detached from `inner`'s controller, run after every event that may
        /// cut a window, as the runtime's helper thread does (there a little later).
        detached: Option<Detached>,
    }

    struct Detached {
        decider: Decider,
        /// Leave this window in the controller (a lagging helper).
        skip: Option<u64>,
    }

    impl Recorder<'_> {
        fn after_leave(&mut self, now: Nanos) {
            if let Some(d) = &mut self.detached {
                let a = self.inner.controller_mut().expect("adaptive");
                if a.pending.as_ref().is_some_and(|w| Some(w.seq()) == d.skip) {
                    return;
                }
                if let Some(w) = a.take_window() {
                    if let Some(cap) = d.decider.decide(&w) {
                        self.inner.set_c(now, cap);
                    }
                    self.caps.push(self.inner.cap());
                }
                return;
            }
            let a = self.inner.controller().expect("adaptive");
            if a.windows() > *self.windows {
                *self.windows = a.windows();
                self.caps.push(self.inner.cap());
                self.pooled.push(a.pooled_p99s().to_vec());
            }
        }
    }

    impl Policy for Recorder<'_> {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn arrive(&mut self, now: Nanos, job: Job) {
            self.inner.arrive(now, job)
        }
        fn block(&mut self, now: Nanos, id: JobId) {
            self.inner.block(now, id);
            self.after_leave(now)
        }
        fn wake(&mut self, now: Nanos, job: Job) {
            self.inner.wake(now, job)
        }
        fn complete(&mut self, now: Nanos, id: JobId) {
            self.inner.complete(now, id);
            self.after_leave(now)
        }
        fn tick(&mut self, now: Nanos) {
            self.inner.tick(now)
        }
        fn running(&self) -> &[Option<JobId>] {
            self.inner.running()
        }
        fn next_tick(&self) -> Option<Nanos> {
            self.inner.next_tick()
        }
        fn waiting(&self) -> usize {
            self.inner.waiting()
        }
    }

    fn ms(x: f64) -> f64 {
        x * NANOS_PER_MILLI as f64
    }

    /// TailClipper's Bimodal (§2.3): 99% Exp(4 ms), 1% Exp(100 ms).
    fn bimodal() -> Dist {
        Dist::mixture(vec![(0.99, Dist::exp_ns(ms(4.0))), (0.01, Dist::exp_ns(ms(100.0)))])
    }

    #[test]
    fn deterministic_service_keeps_global_fcfs() {
        for rho in [0.5, 0.8, 0.9] {
            let jobs = workload(&Dist::fixed_ns(ms(10.0)), rho, 3, 20_000, 7);
            let (caps, p) = caps_over_time(&jobs, 3, 32, 1000);
            assert!(caps.len() >= 15, "{caps:?}");
            // c = 1 on 3 CPUs is a pool of 3: FCFS by GAT on every core.
            assert!(caps.iter().all(|&c| c == 3), "ρ {rho}: {caps:?}");
            assert_eq!(p.controller().unwrap().switches(), 0);
        }
    }

    #[test]
    fn a_heavy_tailed_mix_grows_c_and_then_holds_it() {
        let jobs = workload(&bimodal(), 0.8, 3, 60_000, 11);
        let (caps, p) = caps_over_time(&jobs, 3, 32, 2000);
        assert!(caps.len() >= 25, "{caps:?}");
        let last = &caps[caps.len() / 3..];
        assert!(last.iter().all(|&c| c >= 8), "c grows under the bimodal mix: {caps:?}");
        // Hysteresis: on a stationary input c settles; a few moves while the scores settle.
        let switches = p.controller().unwrap().switches();
        assert!(switches <= 5, "{switches} switches: {caps:?}");
        // No flip-flop: c never returns to a value it left one window before.
        let flips = caps.windows(3).filter(|w| w[0] != w[1] && w[2] == w[0]).count();
        assert_eq!(flips, 0, "c oscillates on a stationary input: {caps:?}");
    }

    /// Evidence for tuning: per window, the capacity and each candidate's pooled p99, against
    /// the true p99 of every fixed capacity (ORF with the real 30 µs slice) and a whole-run
    /// replay (coarse-slice ORF and fluid ORF). `cargo test --release -p tailor-core --lib
    /// adaptive::tests::trace -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn trace() {
        let settings: Vec<(&str, Dist, f64)> = vec![
            ("Lognormal", Dist::lognormal_ns(ms(10.0), ms(100.0)), 0.9),
            ("Lognormal", Dist::lognormal_ns(ms(10.0), ms(100.0)), 0.8),
            ("Bimodal", bimodal(), 0.8),
            ("Bimodal", bimodal(), 0.6),
            ("Exp", Dist::exp_ns(ms(10.0)), 0.8),
        ];
        let p99 = |jobs: &[Record], done: &[Nanos]| {
            let mut a: Vec<Nanos> = jobs.iter().zip(done).skip(3000).map(|(r, &t)| t - r.gat).collect();
            a.sort_unstable();
            a[(a.len() * 99).div_ceil(100) - 1] as f64 / 1e6
        };
        for (name, dist, rho) in settings {
            for seed in [1u64, 2] {
                let jobs = workload(&dist, rho, 3, 33_000, seed);
                let ladder = AdaptiveC::new(3, 64, 2000).ladder().to_vec();
                println!("== {name} rho {rho} seed {seed}");
                for &cap in &ladder {
                    let truth = p99(&jobs, &serve(&mut Orf::new(3, cap, 30_000), &jobs));
                    let fluid = p99(&jobs, &fluid_orf(&jobs, 3, cap));
                    let mean = dist.mean_ns() as Nanos;
                    let coarse = p99(&jobs, &serve(&mut Orf::new(3, cap, mean / 20), &jobs));
                    println!("cap {cap:>3}: true {truth:8.1} fluid {fluid:8.1} coarse {coarse:8.1}");
                }
                let mut p = Orf::adaptive(3, 64, 30_000, 2000);
                let mut caps = Vec::new();
                let mut windows = 0;
                let mut pooled = Vec::new();
                let mut rec = Recorder {
                    inner: &mut p,
                    caps: &mut caps,
                    windows: &mut windows,
                    pooled: &mut pooled,
                    detached: None,
                };
                let done = serve(&mut rec, &jobs);
                println!("adaptive true p99 {:.1}", p99(&jobs, &done));
                for (w, (cap, p99s)) in caps.iter().zip(&pooled).enumerate() {
                    let v: Vec<String> = p99s.iter().map(|x| format!("{:.0}", *x as f64 / 1e6)).collect();
                    println!("  window {w:>2}: cap {cap:>2} pooled {}", v.join(" "));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Whatever it sees, c stays within [1, c_max] (as a pool: [cpus, max(c_max, cpus)]),
        /// and the same input gives the same decisions.
        #[test]
        fn c_stays_in_range_and_decisions_are_deterministic(
            cpus in 1usize..=4,
            c_max in 1usize..=40,
            window in 20usize..200,
            rho in 0.2f64..1.2,
            heavy in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let dist = if heavy { bimodal() } else { Dist::exp_ns(ms(1.0)) };
            let jobs = workload(&dist, rho, cpus, 1500, seed);
            let (caps, p) = caps_over_time(&jobs, cpus, c_max, window);
            let (again, _) = caps_over_time(&jobs, cpus, c_max, window);
            prop_assert_eq!(&caps, &again);
            for c in caps {
                prop_assert!(c >= cpus && c <= c_max.max(cpus), "cap {} outside [{}, {}]", c, cpus, c_max.max(cpus));
            }
            // Records are bounded (a backlog drops the oldest), so in overload fewer windows close.
            prop_assert!(p.controller().unwrap().windows() >= 1);
        }
    }

    /// Detached, the decider run between policy calls on each window taken gives the same
    /// decisions and the same schedule as the controller deciding inline; a window not
    /// taken before the next one is cut is counted and the next is decided cold.
    #[test]
    fn a_detached_decider_fed_every_window_decides_as_the_attached_one() {
        let jobs = workload(&bimodal(), 0.8, 3, 12_000, 5);
        let (inline_caps, _) = caps_over_time(&jobs, 3, 32, 1000);
        let inline_done = serve(&mut Orf::adaptive(3, 32, 30_000, 1000), &jobs);
        let detached = |skip: Option<u64>| {
            let mut p = Orf::adaptive(3, 32, 30_000, 1000);
            let decider = p.controller_mut().unwrap().detach_decider().expect("attached at first");
            assert!(p.controller_mut().unwrap().detach_decider().is_none(), "detached once");
            let (mut caps, mut windows, mut pooled) = (Vec::new(), 0, Vec::new());
            let mut rec = Recorder {
                inner: &mut p,
                caps: &mut caps,
                windows: &mut windows,
                pooled: &mut pooled,
                detached: Some(Detached { decider, skip }),
            };
            let done = serve(&mut rec, &jobs);
            let decider = rec.detached.take().unwrap().decider;
            (done, caps, decider, p.controller().unwrap().overwritten())
        };
        let (done, caps, decider, overwritten) = detached(None);
        assert_eq!(caps, inline_caps);
        assert_eq!(done, inline_done);
        assert!(decider.switches() >= 1, "{caps:?}");
        assert_eq!(overwritten, 0);

        // Leave window 3 untaken: window 4 replaces it (counted), and is decided cold.
        let (_, _, decider, overwritten) = detached(Some(3));
        assert_eq!(overwritten, 1);
        assert_eq!(decider.windows() as usize, inline_caps.len() - 1);
    }

    #[test]
    fn candidates_climb_in_steps_of_a_half_and_stop_at_c_max() {
        assert_eq!(candidates(32).collect::<Vec<_>>(), [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]);
        assert_eq!(candidates(10).collect::<Vec<_>>(), [1, 2, 3, 4, 6, 8, 10]);
        assert_eq!(candidates(1).collect::<Vec<_>>(), [1]);
        assert_eq!(AdaptiveC::new(3, 16, 100).ladder(), [3, 4, 6, 8, 12, 16]);
        assert_eq!(AdaptiveC::new(4, 2, 100).ladder(), [4]);
    }

    #[test]
    fn the_first_windows_are_shorter_and_double_up_to_the_window() {
        let sizes: Vec<usize> = (0..5).map(|cut| next_window(2000, cut)).collect();
        assert_eq!(sizes, [500, 1000, 2000, 2000, 2000]);
        assert_eq!(next_window(3, 0), 1);
    }

    #[test]
    fn where_sharing_pays_c_moves_up_within_ten_percent_and_down_only_beyond_it() {
        // Pooled p99s (ms) of a calm stretch of lognormal service at ρ 0.8 (ladder 3, 4, 6,
        // 8, …, 64): FCFS is far behind, c = 6 leads the large c by 4.8%.
        let calm = [342, 289, 230, 240, 241, 241, 241, 241, 241, 241];
        assert_eq!(choose(&calm, 9), None, "within 10%: keep the most sharing");
        assert_eq!(choose(&calm, 2), Some(9), "move up to the most sharing within 10%");
        assert_eq!(choose(&calm, 0), Some(9));
        // The large c 15% behind: down one candidate per window, towards the largest within
        // 10%, and no further.
        let moderate = [400, 300, 200, 205, 215, 230, 230, 230, 230, 230];
        assert_eq!(choose(&moderate, 9), Some(8), "one step down");
        assert_eq!(choose(&moderate, 5), Some(4), "down to the largest within 10%");
        assert_eq!(choose(&moderate, 4), None, "within 10%: stay");
        assert_eq!(choose(&moderate, 3), Some(4), "up at once");
    }

    #[test]
    fn where_fcfs_is_near_the_lowest_the_tie_stays_narrow() {
        // Exponential service at ρ 0.8: FCFS lowest, c = 4 5% behind.
        let light = [80, 84, 95, 105, 121, 130, 133, 133, 133, 133];
        assert_eq!(choose(&light, 0), None);
        assert_eq!(choose(&light, 9), Some(0));
        // Trimodal at ρ 0.5: all within 4%; 2% tie and 3% hysteresis as before.
        let flat = [1017, 1036, 1041, 1055, 1055, 1055, 1055, 1055, 1055, 1055];
        assert_eq!(choose(&flat, 0), None);
        assert_eq!(choose(&flat, 9), Some(1), "the largest within 2%");
        assert_eq!(choose(&flat, 2), None, "within the 3% margin: stay");
    }

    /// Lognormal service (mean 10 ms, sd 100 ms) at ρ 0.8, seed 1: the first 8,000 jobs rank
    /// c = 6 ahead of c ≥ 24 by about 5%, then a burst of long jobs makes c = 6 2.6× worse
    /// than c ≥ 32 over the run (ORF with 30 µs slices: 1114 ms against 360 ms). The
    /// controller must not be caught at the moderate `c`.
    #[test]
    fn a_calm_stretch_before_a_burst_does_not_pull_c_down() {
        let jobs = workload(&Dist::lognormal_ns(ms(10.0), ms(100.0)), 0.8, 3, 20_000, 1);
        let (caps, _) = caps_over_time(&jobs, 3, 64, 2000);
        // The first two (short) windows may try a moderate c; from 1,500 jobs on, no.
        assert!(caps[2..].iter().all(|&c| c >= 24), "{caps:?}");
        let p99 = |done: &[Nanos]| {
            let mut a: Vec<Nanos> = jobs.iter().zip(done).skip(2000).map(|(r, &t)| t - r.gat).collect();
            a.sort_unstable();
            a[(a.len() * 99).div_ceil(100) - 1]
        };
        let best = [3, 6, 12, 24, 64].iter().map(|&cap| p99(&fluid_orf(&jobs, 3, cap))).min().unwrap();
        let adaptive = p99(&serve(&mut Orf::adaptive(3, 64, 30_000, 2000), &jobs));
        assert!((adaptive as f64) < 1.05 * best as f64, "adaptive {adaptive} vs best fixed {best}");
    }

    #[test]
    fn the_fluid_replay_is_orf_with_a_vanishing_slice() {
        let jobs = workload(&bimodal(), 0.8, 3, 5_000, 3);
        for cap in [3, 6, 16] {
            let ages = |done: Vec<Nanos>| {
                let mut a: Vec<f64> = jobs.iter().zip(done).map(|(r, t)| (t - r.gat) as f64).collect();
                a.sort_unstable_by(f64::total_cmp);
                (a.iter().sum::<f64>() / a.len() as f64, a[a.len() * 99 / 100], a[a.len() / 2])
            };
            let fluid = ages(fluid_orf(&jobs, 3, cap));
            let sliced = ages(serve(&mut Orf::new(3, cap, 1_000), &jobs));
            // A 1 µs slice against jobs of ms: mean, p99 and median agree to well under 1%.
            for (f, s) in [(fluid.0, sliced.0), (fluid.1, sliced.1), (fluid.2, sliced.2)] {
                assert!((f - s).abs() < 0.01 * s, "cap {cap}: fluid {fluid:?} vs 1 µs slices {sliced:?}");
            }
        }
    }

    #[test]
    fn a_replay_of_fcfs_on_one_cpu_matches_the_lindley_recursion() {
        // Arrivals every 10, services alternate 25 and 1: waits build up and drain.
        let jobs: Vec<Record> = (0..200)
            .map(|i| Record { arrive: 10 * i, gat: 10 * i, service: Some(if i % 2 == 0 { 25 } else { 1 }) })
            .collect();
        let mut ages = Vec::new();
        let mut free = 0;
        for r in &jobs {
            let start = free.max(r.arrive);
            free = start + r.service.unwrap();
            ages.push(free - r.gat);
        }
        ages.sort_unstable();
        let tail = replay_tail(&jobs, 0, 1, 1, 3);
        assert_eq!(tail, [ages[199], ages[198], ages[197]]);
        assert_eq!(pooled_p99(&VecDeque::from([Tail { jobs: 200, ages: tail }])), ages[197]);
    }
}
