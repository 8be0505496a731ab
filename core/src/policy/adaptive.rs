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
//! - **Counterfactual replay.** Every `window` completed jobs (in arrival order, so long jobs
//!   are not left out), it replays those jobs, preceded by the previous window's last quarter
//!   as an unmeasured warm-up, through a plain [`Orf`] for each candidate `c` on the same CPUs,
//!   and takes the p99 of each job's age at completion. All candidates see the same jobs
//!   (common random numbers), so their difference is far less noisy than comparing windows.
//!   The replay's slice is coarser than the real one (a twentieth of the window's mean
//!   service time, at least the real slice): sharing among the pool is nearly insensitive to
//!   the slice when it is small next to the jobs, and it keeps the replay cheap.
//! - **Hysteresis.** Each candidate's log-p99 is smoothed over windows (EWMA), and `c` moves
//!   to the best candidate only when it beats the current one by more than `margin` (3%).
//!   On a stationary input the smoothed scores settle and `c` stops moving.
//!
//! Candidates are 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, … up to `c_max`, as pool capacities
//! `max(c, cpus)` (below the core count every `c` behaves the same, see `orf`), so on 3
//! CPUs they are 3, 4, 6, 8, …. The controller starts at the smallest: global FCFS.
//! It is deterministic: the same sequence of calls gives the same decisions. Memory is
//! bounded: at most `MAX_OPEN_FACTOR × window` jobs are tracked; beyond that the oldest
//! unfinished record is dropped (a job blocked for ever must not stall the controller).

use std::collections::{HashMap, VecDeque};

use super::orf::Orf;
use super::{Job, JobId, Policy};
use crate::time::{Nanos, NEVER};

/// Windows whose replayed tails are pooled into each candidate's p99.
const POOLED_WINDOWS: usize = 8;
/// Candidates whose pooled p99 is within this fraction of the lowest count as tied, and the
/// largest of them is the target.
const TIE: f64 = 0.02;
/// `c` moves only when the current candidate's pooled p99 is more than this fraction above
/// the lowest.
const MARGIN: f64 = 0.03;
/// The replay slice is at least the mean service time divided by this.
const REPLAY_SLICES_PER_MEAN: u64 = 20;
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

/// The controller; see the module docs. [`Orf`] owns one when built adaptive.
#[derive(Clone, Debug)]
pub struct AdaptiveC {
    cpus: usize,
    slice: Nanos,
    window: usize,
    /// Candidate pool capacities, ascending and distinct.
    ladder: Vec<usize>,
    /// Index of the current capacity in `ladder`.
    current: usize,
    /// Per candidate, the largest replayed ages of each of the last `POOLED_WINDOWS`
    /// windows, descending: enough to give the p99 of their union.
    tails: Vec<VecDeque<Vec<Nanos>>>,
    open: HashMap<JobId, Open>,
    /// Records in arrival order; `records[0]` has index `first`.
    records: VecDeque<Record>,
    first: u64,
    /// The previous window's last quarter: replayed first, not measured.
    warm: Vec<Record>,
    windows: u64,
    switches: u64,
}

impl AdaptiveC {
    /// A controller for `cpus` CPUs choosing `c` in `[1, c_max]`, re-deciding every `window`
    /// completed jobs; `slice` is the policy's own slice (the replay's finest).
    pub fn new(cpus: usize, c_max: usize, slice: Nanos, window: usize) -> Self {
        assert!(cpus > 0 && c_max > 0 && slice > 0 && window > 0);
        let mut ladder: Vec<usize> = candidates(c_max).map(|c| c.max(cpus)).collect();
        ladder.dedup();
        let n = ladder.len();
        AdaptiveC {
            cpus,
            slice,
            window,
            ladder,
            current: 0,
            tails: vec![VecDeque::new(); n],
            open: HashMap::new(),
            records: VecDeque::new(),
            first: 0,
            warm: Vec::new(),
            windows: 0,
            switches: 0,
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

    /// Times the capacity changed.
    pub fn switches(&self) -> u64 {
        self.switches
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
    /// the new pool capacity when this completes a window and the decision changes.
    pub fn left(&mut self, id: JobId, ran: Nanos) -> Option<usize> {
        let o = self.open.remove(&id)?;
        if let Some(at) = o.record.checked_sub(self.first) {
            if let Some(r) = self.records.get_mut(at as usize) {
                r.service = Some(o.attained + ran);
            }
        }
        let ready = self.records.iter().take(self.window).take_while(|r| r.service.is_some()).count();
        if ready < self.window {
            return None;
        }
        let batch: Vec<Record> = self.records.drain(..self.window).collect();
        self.first += self.window as u64;
        let before = self.current;
        self.decide(&batch);
        self.warm = batch[batch.len() - batch.len() / 4..].to_vec();
        (self.current != before).then(|| self.cap())
    }

    /// Replays a window under every candidate and updates the choice.
    fn decide(&mut self, batch: &[Record]) {
        self.windows += 1;
        let jobs: Vec<Record> = self.warm.iter().chain(batch).copied().collect();
        let total: u128 = batch.iter().map(|r| r.service.unwrap_or(0) as u128).sum();
        let mean = (total / batch.len() as u128) as Nanos;
        let slice = self.slice.max(mean / REPLAY_SLICES_PER_MEAN).max(1);
        // The union of k windows has k·W ages; its p99 is among the top k·W/100 + 1, so
        // each window keeps that many at most.
        let keep = POOLED_WINDOWS * self.window / 100 + 1;
        for (k, &cap) in self.ladder.iter().enumerate() {
            let tail = replay_tail(&jobs, self.warm.len(), self.cpus, cap, slice, keep);
            let pool = &mut self.tails[k];
            if pool.len() == POOLED_WINDOWS {
                pool.pop_front();
            }
            pool.push_back(tail);
        }
        let p99s: Vec<Nanos> = self.tails.iter().map(|t| pooled_p99(t, self.window)).collect();
        let lowest = *p99s.iter().min().expect("ladder non-empty") as f64;
        if p99s[self.current] as f64 > (1.0 + MARGIN) * lowest {
            // Among (nearly) equal tails, the most sharing: under heavy tails too little
            // sharing is what costs most (short jobs stuck behind long ones), and where
            // sharing hurts (light tails) the smallest c is clearly lowest, not tied.
            let target = (0..self.ladder.len()).rev().find(|&k| p99s[k] as f64 <= (1.0 + TIE) * lowest);
            self.current = target.expect("the lowest qualifies");
            self.switches += 1;
        }
    }
}

/// The p99 of the union of windows of `window` ages each, from each window's largest ages.
fn pooled_p99(tails: &VecDeque<Vec<Nanos>>, window: usize) -> Nanos {
    let n = tails.len() * window;
    let mut top: Vec<Nanos> = tails.iter().flatten().copied().collect();
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
/// `cap` on `cpus` CPUs and returns the `keep` largest ages at completion (descending) of the
/// jobs after the first `skip`, with the smallest upstream delay (arrival − GAT) taken as
/// zero so that a constant offset between the GAT clock and the local clock cancels.
fn replay_tail(jobs: &[Record], skip: usize, cpus: usize, cap: usize, slice: Nanos, keep: usize) -> Vec<Nanos> {
    let done = serve(&mut Orf::new(cpus, cap, slice), jobs);
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
            let id = on_cpu.iter().flatten().copied().find(|&j| remaining[j as usize] == 0).expect("a job completes now");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::Dist;
    use crate::rng::Rng;
    use crate::time::NANOS_PER_MILLI;
    use proptest::prelude::*;

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
        let mut sink = Recorder { inner: &mut p, caps: &mut caps, windows: &mut windows };
        serve(&mut sink, jobs);
        (caps, p)
    }

    /// Wraps a policy to note its capacity whenever the controller has finished a window.
    struct Recorder<'a> {
        inner: &'a mut Orf,
        caps: &'a mut Vec<usize>,
        windows: &'a mut u64,
    }

    impl Policy for Recorder<'_> {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn arrive(&mut self, now: Nanos, job: Job) {
            self.inner.arrive(now, job)
        }
        fn block(&mut self, now: Nanos, id: JobId) {
            self.inner.block(now, id)
        }
        fn wake(&mut self, now: Nanos, job: Job) {
            self.inner.wake(now, job)
        }
        fn complete(&mut self, now: Nanos, id: JobId) {
            self.inner.complete(now, id);
            let a = self.inner.controller().expect("adaptive");
            if a.windows() > *self.windows {
                *self.windows = a.windows();
                self.caps.push(self.inner.cap());
            }
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

    #[test]
    fn candidates_climb_in_steps_of_a_half_and_stop_at_c_max() {
        assert_eq!(candidates(32).collect::<Vec<_>>(), [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]);
        assert_eq!(candidates(10).collect::<Vec<_>>(), [1, 2, 3, 4, 6, 8, 10]);
        assert_eq!(candidates(1).collect::<Vec<_>>(), [1]);
        assert_eq!(AdaptiveC::new(3, 16, 30, 100).ladder(), [3, 4, 6, 8, 12, 16]);
        assert_eq!(AdaptiveC::new(4, 2, 30, 100).ladder(), [4]);
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
        let tail = replay_tail(&jobs, 0, 1, 1, 30, 3);
        assert_eq!(tail, [ages[199], ages[198], ages[197]]);
        assert_eq!(pooled_p99(&VecDeque::from([tail]), 200), ages[197]);
    }
}
