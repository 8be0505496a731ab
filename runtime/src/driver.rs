//! Drives a core [`Policy`] from real threads, whose behaviour the policy does not control.
//!
//! The policy contract says `block` and `complete` name a *running* job. Real
//! threads break that: under the kernel backend a thread outside the band
//! still runs when a CPU is otherwise idle (SCHED_IDLE is work-conserving) and
//! may block or finish while the policy thinks it is waiting; under the
//! cooperative backend a job admitted earlier may have left `running()`.
//! The driver keeps such events pending and applies them the moment the
//! policy dispatches the job, so the policy only ever sees legal events.

use std::collections::HashMap;

use tailor_core::policy::adaptive::{Decider, Window};
use tailor_core::policy::{AnyPolicy, Job, JobId, Policy};
use tailor_core::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Actual {
    Runnable,
    Blocked,
    Done,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct Tracked {
    job: Job,
    /// What the thread is really doing.
    actual: Actual,
    /// Whether the policy holds the job as runnable (running or waiting).
    in_policy: bool,
}

/// A policy plus the real state of every job it was told about.
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Driver {
    policy: AnyPolicy,
    jobs: HashMap<JobId, Tracked>,
    /// Jobs the policy holds as waiting whose thread blocked or finished meanwhile (an
    /// async request cancelled while it waited, say): the policy counts them, but
    /// nobody waits for them to be admitted.
    departed_waiting: usize,
}

impl Driver {
    pub fn new(policy: AnyPolicy) -> Self {
        Driver { policy, jobs: HashMap::new(), departed_waiting: 0 }
    }

    fn is_running(&self, id: JobId) -> bool {
        self.policy.running().contains(&Some(id))
    }

    /// A new job is runnable.
    pub fn arrive(&mut self, now: Nanos, job: Job) {
        self.policy.arrive(now, job);
        self.jobs.insert(job.id, Tracked { job, actual: Actual::Runnable, in_policy: true });
        self.settle(now);
    }

    /// The job's thread waits (a downstream call, I/O).
    pub fn block(&mut self, now: Nanos, id: JobId) {
        let running = self.is_running(id);
        let Some(t) = self.jobs.get_mut(&id) else { return };
        if t.actual != Actual::Runnable {
            return;
        }
        t.actual = Actual::Blocked;
        if running {
            t.in_policy = false;
            self.policy.block(now, id);
            self.settle(now);
        } else {
            // It stays queued in the policy and is blocked when dispatched.
            self.departed_waiting += 1;
        }
    }

    /// The job's thread is runnable again.
    pub fn wake(&mut self, now: Nanos, id: JobId) {
        let Some(t) = self.jobs.get_mut(&id) else { return };
        if t.actual != Actual::Blocked {
            return;
        }
        t.actual = Actual::Runnable;
        if t.in_policy {
            self.departed_waiting -= 1; // still queued: waiting again, for real
        } else {
            t.in_policy = true;
            let job = t.job;
            self.policy.wake(now, job);
            self.settle(now);
        }
    }

    /// The job finished (or its thread died): it leaves the policy now or when dispatched.
    pub fn complete(&mut self, now: Nanos, id: JobId) {
        let running = self.is_running(id);
        let Some(t) = self.jobs.get_mut(&id) else { return };
        if running {
            self.policy.complete(now, id);
            self.jobs.remove(&id);
            self.settle(now);
        } else if t.in_policy {
            if t.actual == Actual::Runnable {
                self.departed_waiting += 1;
            }
            t.actual = Actual::Done;
        } else {
            self.jobs.remove(&id);
        }
    }

    pub fn tick(&mut self, now: Nanos) {
        self.policy.tick(now);
        self.settle(now);
    }

    /// `orf-adaptive`: takes the controller's decider out, so that a completed window waits
    /// for [`take_window`](Self::take_window) instead of being decided inside the policy
    /// call (core's `AdaptiveC::detach_decider`). `None` for any other policy.
    pub fn detach_decider(&mut self) -> Option<Decider> {
        match &mut self.policy {
            AnyPolicy::Orf(orf) => orf.controller_mut()?.detach_decider(),
            _ => None,
        }
    }

    /// `orf-adaptive` with its decider detached: the window cut since the last call.
    pub fn take_window(&mut self) -> Option<Window> {
        match &mut self.policy {
            AnyPolicy::Orf(orf) => orf.controller_mut()?.take_window(),
            _ => None,
        }
    }

    /// `orf`: a new `c` (a detached decider's choice) from `now` on.
    pub fn set_c(&mut self, now: Nanos, c: usize) {
        if let AnyPolicy::Orf(orf) = &mut self.policy {
            orf.set_c(now, c);
            self.settle(now);
        }
    }

    pub fn next_tick(&self) -> Option<Nanos> {
        self.policy.next_tick()
    }

    pub fn running(&self) -> &[Option<JobId>] {
        self.policy.running()
    }

    /// Jobs waiting to run: those the policy holds as waiting, less those whose thread
    /// blocked or finished while they waited.
    pub fn waiting(&self) -> usize {
        // Saturating: a miscount must not read as billions waiting (the property test
        // `waiting_matches_a_recount_under_random_events` checks there is none).
        self.policy.waiting().saturating_sub(self.departed_waiting)
    }

    /// The job the policy would start if running job `id` completed now, when that is
    /// the only change to the running set (asked of a copy; `None` otherwise). Blocking
    /// frees the CPU the same way in every policy here (a test checks it), so the
    /// answer holds for a block too.
    pub fn successor(&self, now: Nanos, id: JobId) -> Option<JobId> {
        let before = self.policy.running();
        if !before.contains(&Some(id)) {
            return None;
        }
        // A copy of the policy alone (the agent asks on every pass while jobs wait): the
        // driver's own bookkeeping would only matter if the started job were blocked or
        // done already, and such a job is no successor anyway.
        // An adaptive controller stays out of the copy: copying its records on every pass,
        // and deciding a window the copy's completion would close, cost the agent time
        // above the band for an answer that does not depend on them.
        let mut copy = match &self.policy {
            AnyPolicy::Orf(orf) => AnyPolicy::Orf(orf.clone_without_controller()),
            other => other.clone(),
        };
        copy.complete(now, id);
        let after = copy.running();
        let stayed = before.iter().flatten().filter(|&&j| j != id).all(|j| after.contains(&Some(*j)));
        let mut started = after.iter().flatten().filter(|j| !before.contains(&Some(**j)));
        match (stayed, started.next(), started.next()) {
            (true, Some(&s), None) if self.jobs.get(&s).is_some_and(|t| t.actual == Actual::Runnable) => Some(s),
            _ => None,
        }
    }

    /// Applies pending blocks and completions of jobs the policy has just dispatched.
    fn settle(&mut self, now: Nanos) {
        loop {
            let pending = self.policy.running().iter().flatten().copied().find_map(|id| {
                let t = self.jobs.get(&id)?;
                (t.actual != Actual::Runnable).then_some((id, t.actual))
            });
            if pending.is_some() {
                self.departed_waiting -= 1; // dispatched: no longer waiting
            }
            match pending {
                None => return,
                Some((id, Actual::Blocked)) => {
                    self.jobs.get_mut(&id).expect("tracked").in_policy = false;
                    self.policy.block(now, id);
                }
                Some((id, _)) => {
                    self.jobs.remove(&id);
                    self.policy.complete(now, id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::PolicySpec;

    fn job(id: JobId, gat: Nanos) -> Job {
        Job::with_gat(id, gat)
    }

    /// The kernel backend rests on this: the successor named for a completion is the job
    /// that really starts when the job completes, and also when it blocks instead (the
    /// hand-off); and on a full node no arrival or wake-up changes the running set at once
    /// (a job that finds the node full waits asleep for the agent or a hand-off).
    #[test]
    fn the_successor_starts_whether_the_running_job_completes_or_blocks() {
        let specs = [
            PolicySpec::Orf { c: 1, slice_us: 500.0 },
            PolicySpec::Orf { c: 2, slice_us: 500.0 },
            PolicySpec::Orf { c: 3, slice_us: 500.0 },
            PolicySpec::Fifo,
            PolicySpec::Gfifo,
            PolicySpec::Edf,
            PolicySpec::Priq,
            PolicySpec::Lifo,
            PolicySpec::Random { seed: 3 },
            PolicySpec::Rr { slice_us: 100.0 },
            PolicySpec::Fair { min_granularity_ms: 0.75, latency_ms: 1.5 },
        ];
        for spec in specs {
            let (mut named, mut seed) = (0, 7u64);
            let mut draw = |n: u64| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33) % n
            };
            let mut d = Driver::new(spec.build_any(2, 1).unwrap());
            let (mut next_id, mut now, mut blocked) = (1u64, 0u64, Vec::new());
            for _ in 0..3_000 {
                now += 1 + draw(200_000);
                let full = d.running().iter().all(Option::is_some);
                let running_before = d.running().to_vec();
                match draw(10) {
                    0..=3 => {
                        let job =
                            Job { id: next_id, gat: draw(1_000_000), deadline: draw(1_000_000), class: draw(3) as u8 };
                        d.arrive(now, job);
                        next_id += 1;
                        // The kernel backend lets a job that finds the node full wait asleep.
                        assert!(
                            !full || d.running() == running_before,
                            "{}: an arrival preempted at once",
                            spec.name()
                        );
                    }
                    4 | 5 => {
                        if let Some(&id) = d.running().iter().flatten().next() {
                            d.block(now, id);
                            blocked.push(id);
                        }
                    }
                    6 if !blocked.is_empty() => {
                        let id = blocked.swap_remove(draw(blocked.len() as u64) as usize);
                        d.wake(now, id);
                        assert!(!full || d.running() == running_before, "{}: a wake-up preempted at once", spec.name());
                    }
                    7 => d.tick(now),
                    _ => {
                        if let Some(&id) = d.running().iter().flatten().last() {
                            d.complete(now, id);
                        }
                    }
                }
                if d.next_tick().is_some_and(|t| t <= now) {
                    d.tick(now);
                }
                for &id in d.running().iter().flatten() {
                    let Some(s) = d.successor(now, id) else { continue };
                    named += 1;
                    for leave in ["complete", "block"] {
                        let mut copy = d.clone();
                        if leave == "complete" {
                            copy.complete(now, id);
                        } else {
                            copy.block(now, id);
                        }
                        let before: Vec<_> = d.running().iter().flatten().filter(|&&j| j != id).copied().collect();
                        let mut after: Vec<_> = copy.running().iter().flatten().copied().collect();
                        after.sort();
                        let mut expected = before.clone();
                        expected.push(s);
                        expected.sort();
                        assert_eq!(after, expected, "{}: job {id} {leave}s, named successor {s}", spec.name());
                    }
                }
            }
            assert!(named > 100, "{}: the test named few successors ({named})", spec.name());
        }
    }

    #[test]
    fn completion_of_a_waiting_job_is_applied_when_it_is_dispatched() {
        let mut d = Driver::new(PolicySpec::Gfifo.build_any(1, 0).unwrap());
        d.arrive(0, job(1, 10));
        d.arrive(1, job(2, 20));
        assert_eq!(d.running(), &[Some(1)]);
        d.complete(2, 2); // job 2 ran while idle CPU time was around, and finished
        assert_eq!(d.running(), &[Some(1)]);
        d.complete(3, 1);
        // Job 2 was dispatched and immediately completed: nothing left.
        assert_eq!(d.running(), &[None]);
        assert!(d.jobs.is_empty());
    }

    /// Only jobs whose thread really waits count: one that finished (an async request
    /// cancelled while it waited) or blocked while queued does not, until it wakes.
    #[test]
    fn waiting_counts_only_jobs_that_still_wait() {
        let mut d = Driver::new(PolicySpec::Gfifo.build_any(1, 0).unwrap());
        for id in 1..=4 {
            d.arrive(0, job(id, id * 10));
        }
        assert_eq!(d.waiting(), 3);
        d.complete(1, 2); // cancelled while it waited
        d.complete(1, 2); // reported twice: still one departure
        assert_eq!(d.waiting(), 2);
        d.block(2, 3);
        assert_eq!(d.waiting(), 1);
        d.wake(3, 3);
        assert_eq!(d.waiting(), 2);
        d.block(4, 3);
        d.complete(5, 3); // blocked, then finished, while queued
        assert_eq!(d.waiting(), 1);
        d.complete(6, 1); // 2 and 3 are dispatched and leave at once; 4 runs
        assert_eq!(d.running(), &[Some(4)]);
        assert_eq!(d.waiting(), 0);
        d.complete(7, 4);
        assert!(d.jobs.is_empty());
    }

    /// `waiting()` against a recount, under random events on running and waiting jobs
    /// alike (real threads block and finish whatever the policy thinks).
    #[test]
    fn waiting_matches_a_recount_under_random_events() {
        for spec in [
            PolicySpec::Orf { c: 2, slice_us: 500.0 },
            PolicySpec::Orf { c: 6, slice_us: 500.0 },
            PolicySpec::Fifo,
            PolicySpec::Edf,
            PolicySpec::Rr { slice_us: 100.0 },
            PolicySpec::Fair { min_granularity_ms: 0.75, latency_ms: 1.5 },
        ] {
            let mut d = Driver::new(spec.build_any(2, 1).unwrap());
            let mut seed = 11u64;
            let mut draw = |n: u64| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33) % n
            };
            let (mut next_id, mut now, mut max_waiting) = (1u64, 0u64, 0);
            for _ in 0..20_000 {
                now += 1 + draw(100_000);
                let known: Vec<JobId> = {
                    let mut ids: Vec<JobId> = d.jobs.keys().copied().collect();
                    ids.sort();
                    ids
                };
                let any = (!known.is_empty()).then(|| known[draw(known.len() as u64) as usize]);
                match (draw(10), any) {
                    (0..=3, _) | (_, None) => {
                        d.arrive(
                            now,
                            Job { id: next_id, gat: now - draw(now.min(1_000_000)), deadline: now, class: 0 },
                        );
                        next_id += 1;
                    }
                    (4 | 5, Some(id)) => d.block(now, id),
                    (6 | 7, Some(id)) => d.wake(now, id),
                    (8, _) => d.tick(now),
                    (_, Some(id)) => d.complete(now, id),
                }
                let running = d.running().to_vec();
                let recount = d
                    .jobs
                    .iter()
                    .filter(|(id, t)| t.in_policy && t.actual == Actual::Runnable && !running.contains(&Some(**id)))
                    .count();
                assert_eq!(d.waiting(), recount, "{}", spec.name());
                max_waiting = max_waiting.max(recount);
            }
            assert!(max_waiting > 3, "{}: jobs never queued ({max_waiting})", spec.name());
        }
    }

    #[test]
    fn block_and_wake_of_a_waiting_job_never_reach_the_policy_out_of_contract() {
        let mut d = Driver::new(PolicySpec::Gfifo.build_any(1, 0).unwrap());
        d.arrive(0, job(1, 10));
        d.arrive(0, job(2, 20));
        d.block(1, 2);
        d.complete(2, 1);
        // Job 2 was dispatched while blocked: blocked in the policy, CPU free.
        assert_eq!(d.running(), &[None]);
        d.wake(3, 2);
        assert_eq!(d.running(), &[Some(2)]);
        d.complete(4, 2);
        assert!(d.jobs.is_empty());
    }
}
