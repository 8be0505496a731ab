//! TailGuard query admission control: reject new queries while the task deadline-miss ratio is too high (§III.C).
//!
//! The paper found the SLOs still hold when a small share of tasks (< 2% in
//! its tests) miss their queuing deadlines, so the query handler tracks the
//! ratio of tasks that missed over a moving window and rejects new queries
//! while it exceeds R_th. §IV.D measures it over "a moving window with size of
//! 1000 queries (or 100000 tasks)": a window over the last N task *outcomes*.
//! §III.C instead speaks of a "moving time window", the period over which the
//! SLO must hold. Both are offered, alone or together (below). Both bounds are
//! exact (one entry per outcome, no buckets), so the ratio is exactly misses /
//! outcomes in the window.
//!
//! When is a task's outcome known? A task that leaves its queue by its deadline
//! is on time, known at dequeue ([`AdmissionController::task_dequeued`]). A
//! task still queued when its deadline passes has missed, and that is known
//! *at the deadline*, not when it is finally dequeued: under overload the
//! queue may hold it for a long time, and counting it only then delays the
//! signal by the queue wait, exactly when the controller must act. Callers
//! that announce queued tasks ([`AdmissionController::task_queued`]) get a
//! miss counted at the deadline; callers that do not can keep calling
//! [`AdmissionController::record_task`] at dequeue (the first version's API,
//! which the simulator uses).
//!
//! Which window ([`AdmissionWindow`], given to [`AdmissionController::with_window`]):
//! - `Time(ns)`: the outcomes of the last `ns` (§III.C; [`AdmissionController::new`]).
//! - `Outcomes(n)`: the last `n` task outcomes, no clock (§IV.D's rule, e.g.
//!   [`PAPER_WINDOW_TASKS`]). To keep it from locking out, the window moves with the
//!   *offered* load: a query refused by [`AdmissionController::admit_query`] slides it by
//!   the tasks it would have sent, as slots with no outcome, so after `n` refused tasks
//!   the misses that caused the refusal have left (our reading: the paper's "1,000
//!   queries" are the last 1,000 arriving, admitted or not). Callers that pass no task
//!   count ([`AdmissionController::admit`]) slide it by nothing: outcomes alone move it.
//!   What those slots are is a reading of its own ([`RefusedTasks`], default `NoOutcome`):
//!   slots with no outcome (the ratio stays over admitted tasks; a rejection then lasts
//!   until every outcome has left, one whole window, since the refused slots push out the
//!   oldest outcomes first and the misses that caused it are the newest), on-time outcomes
//!   (the ratio over offered tasks), or nothing (only outcomes move the window; with the
//!   all-or-nothing rule that can lock out for good once the queues drain).
//! - `OutcomesWithin(n, ns)`: both bounds, whichever holds fewer.
//!
//! Time is passed in; nothing reads a clock. Memory is bounded by the window
//! (one 16-byte entry per outcome in it) plus one counter per distinct
//! deadline of the tasks announced and not yet dequeued.

use std::collections::{BTreeMap, VecDeque};

use crate::time::Nanos;

/// The paper's window (§IV.D): 1,000 queries of fanout 100.
pub const PAPER_WINDOW_TASKS: u64 = 100_000;

/// Which task outcomes the miss ratio is measured over (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionWindow {
    /// Outcomes known in the last `ns` nanoseconds (§III.C's moving time window).
    Time(Nanos),
    /// The last `n` task slots: outcomes, and the tasks of refused queries (§IV.D).
    Outcomes(u64),
    /// The last `n` task slots, of which only those of the last `ns` nanoseconds.
    OutcomesWithin(u64, Nanos),
}

/// What the tasks of a refused query are in a count window (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RefusedTasks {
    /// Slots with no outcome: they move the window, the ratio is over the outcomes left
    /// (misses among admitted tasks).
    #[default]
    NoOutcome,
    /// On-time outcomes: the ratio is over the offered tasks (a refused task missed nothing).
    OnTime,
    /// Nothing: only outcomes move the window.
    Ignored,
}

/// A run of equal decisions, for instrumentation ([`AdmissionController::with_phase_log`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionPhase {
    /// When its first query arrived.
    pub start: Nanos,
    /// Admitting (true) or rejecting.
    pub admitting: bool,
    /// Queries decided in it.
    pub queries: u64,
    /// The miss ratio when it began.
    pub ratio_at_start: f64,
    /// Task outcomes in the window when it began.
    pub outcomes_at_start: u64,
}

/// Invalid admission parameters.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// R_th must be a ratio.
    #[error("r_th = {0}: must be a ratio in [0, 1], e.g. 0.02 to reject queries while more than 2% of tasks miss their deadlines")]
    BadThreshold(f64),
    /// The window must be positive.
    #[error("window = {0} ns: must be positive; the paper suggests the period over which the SLO must hold")]
    BadWindow(Nanos),
    /// A count window must hold at least one outcome.
    #[error("window_tasks = 0: must be at least 1; the paper uses 100000 (1,000 queries of fanout 100)")]
    BadWindowTasks,
}

/// Admission control on the task deadline-miss ratio over a moving window.
#[derive(Clone, Debug)]
pub struct AdmissionController {
    r_th: f64,
    min_tasks: u64,
    window_ns: Nanos,
    window_tasks: u64,
    /// (when the slot entered, what it holds), oldest first.
    outcomes: VecDeque<(Nanos, Slot)>,
    /// Misses among `outcomes`.
    missed: u64,
    /// Refused-task slots among `outcomes` (count windows only).
    refused: u64,
    /// Announced tasks still queued and not yet late: deadline → count.
    pending: BTreeMap<Nanos, u64>,
    /// Announced tasks counted as missed at their deadline, still queued.
    late: BTreeMap<Nanos, u64>,
    /// Latest time seen; outcomes are stamped no earlier, so the queue stays sorted.
    now: Nanos,
    admitted: u64,
    rejected: u64,
    /// Admit a share of queries instead of none (see [`Self::with_proportional`]).
    proportional: bool,
    /// Admission credit of the proportional mode, in [0, 1].
    credit: f64,
    /// What a refused query's tasks are in a count window.
    refused_tasks: RefusedTasks,
    /// The last `phase_cap` phases, oldest first (off at 0).
    phases: VecDeque<AdmissionPhase>,
    phase_cap: usize,
}

impl AdmissionController {
    /// Rejects while the miss ratio over the outcomes of the last `window_ns`
    /// exceeds `r_th`. Add a bound in tasks with [`Self::with_window_tasks`].
    pub fn new(r_th: f64, window_ns: Nanos) -> Result<Self, AdmissionError> {
        if !(0.0..=1.0).contains(&r_th) {
            return Err(AdmissionError::BadThreshold(r_th));
        }
        if window_ns == 0 {
            return Err(AdmissionError::BadWindow(window_ns));
        }
        Ok(AdmissionController {
            r_th,
            min_tasks: 0,
            window_ns,
            window_tasks: u64::MAX,
            outcomes: VecDeque::new(),
            missed: 0,
            refused: 0,
            pending: BTreeMap::new(),
            late: BTreeMap::new(),
            now: 0,
            admitted: 0,
            rejected: 0,
            proportional: false,
            credit: 0.0,
            refused_tasks: RefusedTasks::NoOutcome,
            phases: VecDeque::new(),
            phase_cap: 0,
        })
    }

    /// Rejects while the miss ratio over `window` exceeds `r_th`.
    pub fn with_window(r_th: f64, window: AdmissionWindow) -> Result<Self, AdmissionError> {
        let (tasks, ns) = match window {
            AdmissionWindow::Time(ns) => (None, ns),
            AdmissionWindow::Outcomes(n) => (Some(n), Nanos::MAX),
            AdmissionWindow::OutcomesWithin(n, ns) => (Some(n), ns),
        };
        let c = Self::new(r_th, ns)?;
        match tasks {
            Some(0) => Err(AdmissionError::BadWindowTasks),
            Some(n) => Ok(c.with_window_tasks(n)),
            None => Ok(c),
        }
    }

    /// Keeps at most the last `n` task outcomes (the paper's window, e.g.
    /// [`PAPER_WINDOW_TASKS`]); `n` = 0 is taken as 1.
    pub fn with_window_tasks(mut self, n: u64) -> Self {
        self.window_tasks = n.max(1);
        self
    }

    /// Never reject on fewer than `n` outcomes in the window (default 0, the
    /// paper's rule): one early miss out of one task is a 100% ratio.
    pub fn with_min_tasks(mut self, n: u64) -> Self {
        self.min_tasks = n;
        self
    }

    /// Proportional admission: while the miss ratio r exceeds R_th, admit the
    /// share R_th / r of the arriving queries (evenly spread: a credit of that
    /// share per arrival, a query admitted per whole credit) instead of none.
    /// The paper's all-or-nothing rule swings between admitting the whole
    /// overload and rejecting everything, and the queries admitted in each swing
    /// meet a queue that the last swing built; a share that shrinks as the ratio
    /// grows settles where the ratio stays near R_th. Below R_th both rules
    /// admit everything. Deterministic: no randomness, time is passed in.
    pub fn with_proportional(mut self) -> Self {
        self.proportional = true;
        self
    }

    /// What a refused query's tasks are in a count window (default
    /// [`RefusedTasks::NoOutcome`]). No effect on a time window.
    pub fn with_refused_tasks(mut self, refused: RefusedTasks) -> Self {
        self.refused_tasks = refused;
        self
    }

    /// Keeps the last `cap` admit/reject phases for [`Self::phases`] (instrumentation; off at 0).
    pub fn with_phase_log(mut self, cap: usize) -> Self {
        self.phase_cap = cap;
        self
    }

    /// The phases logged, oldest first (empty unless [`Self::with_phase_log`]).
    pub fn phases(&self) -> impl ExactSizeIterator<Item = &AdmissionPhase> {
        self.phases.iter()
    }

    fn push(&mut self, at: Nanos, missed: bool) {
        self.push_slot(at, if missed { Slot::Missed } else { Slot::OnTime });
    }

    fn push_slot(&mut self, at: Nanos, slot: Slot) {
        self.outcomes.push_back((at, slot));
        self.missed += u64::from(slot == Slot::Missed);
        self.refused += u64::from(slot == Slot::Refused);
        while self.outcomes.len() as u64 > self.window_tasks {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, slot)) = self.outcomes.pop_front() {
            self.missed -= u64::from(slot == Slot::Missed);
            self.refused -= u64::from(slot == Slot::Refused);
        }
    }

    /// Task outcomes (not refused slots) in the window.
    fn known(&self) -> u64 {
        self.outcomes.len() as u64 - self.refused
    }

    /// Moves time to `now` (an earlier `now` counts as the latest seen): announced
    /// tasks whose deadline passed become misses, old outcomes leave the window.
    fn advance(&mut self, now: Nanos) {
        self.now = self.now.max(now);
        let now = self.now;
        while let Some((&deadline, &n)) = self.pending.first_key_value() {
            if deadline >= now {
                break;
            }
            self.pending.remove(&deadline);
            *self.late.entry(deadline).or_default() += n;
            for _ in 0..n {
                // Stamped `now`, not `deadline`: that is when we learn it, and it keeps `outcomes` sorted.
                self.push(now, true);
            }
        }
        let horizon = now.saturating_sub(self.window_ns);
        while self.outcomes.front().is_some_and(|&(at, _)| at < horizon) {
            self.pop_oldest();
        }
    }

    /// `n` tasks with queuing deadline `deadline` entered a queue at `now`. If
    /// they are still queued when it passes, they count as missed then.
    /// Announced tasks must be reported with [`Self::task_dequeued`].
    pub fn task_queued(&mut self, now: Nanos, deadline: Nanos, n: u64) {
        self.advance(now);
        if n == 0 {
            return;
        }
        if deadline < self.now {
            // Already late on arrival: a miss, known now.
            *self.late.entry(deadline).or_default() += n;
            for _ in 0..n {
                self.push(self.now, true);
            }
        } else {
            *self.pending.entry(deadline).or_default() += n;
        }
    }

    /// A task with queuing deadline `deadline` left its queue at `now`. An
    /// announced task already counted as missed is not counted again; any other
    /// (announced in time, or never announced) counts now, missed if `now > deadline`.
    pub fn task_dequeued(&mut self, now: Nanos, deadline: Nanos) {
        self.advance(now);
        if take_one(&mut self.late, deadline) {
            return;
        }
        take_one(&mut self.pending, deadline);
        self.push(self.now, now > deadline);
    }

    /// An announced task with queuing deadline `deadline` stops being announced at `now`
    /// without an outcome of its own: it was dropped from its queue (its query had failed), or
    /// its outcome is reported later with [`Self::record_task`] (once it is known to have run).
    /// Returns whether its deadline had already passed, so that it was counted as missed then.
    pub fn task_withdrawn(&mut self, now: Nanos, deadline: Nanos) -> bool {
        self.advance(now);
        if take_one(&mut self.late, deadline) {
            return true;
        }
        take_one(&mut self.pending, deadline);
        false
    }

    /// A task was dequeued at `now`; `missed` if that was after its deadline.
    /// For callers that do not announce queued tasks: the miss counts at dequeue.
    pub fn record_task(&mut self, now: Nanos, missed: bool) {
        self.advance(now);
        self.push(self.now, missed);
    }

    /// Whether to admit a query arriving at `now`: false while the miss ratio
    /// over the window exceeds R_th. Counts the decision. A refused query does
    /// not move a count window; see [`Self::admit_query`].
    pub fn admit(&mut self, now: Nanos) -> bool {
        self.admit_query(now, 0)
    }

    /// [`Self::admit`] for a query of `tasks` tasks: if it is refused and the window
    /// counts outcomes, its tasks enter the window as slots with no outcome, so the
    /// window moves with the offered load and a refusal ends once the misses that
    /// caused it are `window_tasks` slots back (at most `window_tasks` slots are added).
    pub fn admit_query(&mut self, now: Nanos, tasks: u64) -> bool {
        let ok = self.decide(now);
        if !ok && self.window_tasks != u64::MAX {
            let slot = match self.refused_tasks {
                RefusedTasks::NoOutcome => Slot::Refused,
                RefusedTasks::OnTime => Slot::OnTime,
                RefusedTasks::Ignored => return ok,
            };
            for _ in 0..tasks.min(self.window_tasks) {
                self.push_slot(self.now, slot);
            }
        }
        ok
    }

    fn decide(&mut self, now: Nanos) -> bool {
        self.advance(now);
        let n = self.known();
        let ratio = self.ratio();
        let ok = if n == 0 || n < self.min_tasks || ratio <= self.r_th {
            self.credit = 1.0;
            true
        } else if self.proportional {
            self.credit = (self.credit + self.r_th / ratio).min(1.0);
            if self.credit >= 1.0 - 1e-9 {
                self.credit = 0.0;
                true
            } else {
                false
            }
        } else {
            false
        };
        if ok {
            self.admitted += 1;
        } else {
            self.rejected += 1;
        }
        if self.phase_cap > 0 {
            self.log_phase(ok, n, ratio);
        }
        ok
    }

    fn log_phase(&mut self, admitting: bool, outcomes: u64, ratio: f64) {
        match self.phases.back_mut() {
            Some(p) if p.admitting == admitting => p.queries += 1,
            _ => {
                if self.phases.len() == self.phase_cap {
                    self.phases.pop_front();
                }
                let start = self.now;
                self.phases.push_back(AdmissionPhase {
                    start,
                    admitting,
                    queries: 1,
                    ratio_at_start: ratio,
                    outcomes_at_start: outcomes,
                });
            }
        }
    }

    fn ratio(&self) -> f64 {
        match self.known() {
            0 => 0.0,
            n => self.missed as f64 / n as f64,
        }
    }

    /// The miss ratio over the window at `now` (0 with no outcomes).
    pub fn miss_ratio(&mut self, now: Nanos) -> f64 {
        self.advance(now);
        self.ratio()
    }

    /// Task outcomes in the window at `now` (refused slots not included).
    pub fn window_len(&mut self, now: Nanos) -> u64 {
        self.advance(now);
        self.known()
    }

    /// Slots the window holds (outcomes and refused tasks): at most `window_tasks`.
    pub fn window_slots(&self) -> u64 {
        self.outcomes.len() as u64
    }

    /// Announced tasks not yet dequeued (on time so far, or already counted late).
    pub fn queued(&self) -> u64 {
        self.pending.values().sum::<u64>() + self.late.values().sum::<u64>()
    }

    /// Queries admitted so far.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Queries rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    pub fn threshold(&self) -> f64 {
        self.r_th
    }
}

/// The p-quantile of the queuing wait of a task with `ahead` tasks before it (those in
/// service included) at a server with `cores` CPUs whose service time has mean `mean_ns`
/// and variance `var_ns2`: the `ahead − cores + 1` tasks beyond the CPUs leave one per
/// mean / cores, the one in service half done, and their sum is taken as a gamma of that
/// mean and variance ([`crate::dist::special::gamma_quantile`]). 0 while a CPU is free.
/// Later tasks that go ahead (an earlier deadline under EDF) are not foreseen, so it errs
/// low. What `reject_late` compares with a task's time to its deadline, in the query
/// handler and in the simulator alike.
pub fn queue_wait_quantile(ahead: u32, cores: usize, mean_ns: f64, var_ns2: f64, p: f64) -> Nanos {
    let cores = cores.max(1);
    if (ahead as usize) < cores {
        return 0;
    }
    let n = (ahead as usize - cores + 1) as f64;
    let c = cores as f64;
    crate::dist::special::gamma_quantile((n - 0.5) * mean_ns / c, n * var_ns2 / (c * c), p) as Nanos
}

/// One entry of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    OnTime,
    Missed,
    /// A task of a refused query: moves a count window, no outcome.
    Refused,
}

/// Removes one task with `deadline` from `map`; false if there was none.
fn take_one(map: &mut BTreeMap<Nanos, u64>, deadline: Nanos) -> bool {
    match map.get_mut(&deadline) {
        Some(c) => {
            *c -= 1;
            if *c == 0 {
                map.remove(&deadline);
            }
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests;
