//! Tests of `admission`.

use super::*;
use crate::time::NANOS_PER_MILLI;
use proptest::prelude::*;

#[test]
fn queue_wait_quantile_is_the_work_beyond_the_cpus() {
    // A free CPU: no wait.
    assert_eq!(queue_wait_quantile(0, 1, 1e6, 1e12, 0.99), 0);
    assert_eq!(queue_wait_quantile(1, 2, 1e6, 1e12, 0.99), 0);
    // Fixed 1 ms service, 3 ahead on one CPU: 2.5 ms of work, whatever the percentile.
    assert_eq!(queue_wait_quantile(3, 1, 1e6, 0.0, 0.99), 2_500_000);
    // Two CPUs halve the work beyond them: 3 ahead on 2 CPUs leaves 2 departures of 0.5 ms.
    assert_eq!(queue_wait_quantile(3, 2, 1e6, 0.0, 0.5), 750_000);
    // Exponential 1 ms: the p99 lies above the mean and grows with the queue.
    let (a, b) = (queue_wait_quantile(4, 1, 1e6, 1e12, 0.99), queue_wait_quantile(8, 1, 1e6, 1e12, 0.99));
    assert!(a > 3_500_000 && b > a, "{a} {b}");
}

/// A withdrawn task adds no outcome: a miss if it was late already, nothing otherwise.
#[test]
fn a_withdrawn_task_counts_only_the_miss_its_deadline_already_made() {
    let ms = NANOS_PER_MILLI;
    let mut ac = AdmissionController::new(0.5, 1000 * ms).unwrap();
    ac.task_queued(0, 10 * ms, 2);
    assert!(!ac.task_withdrawn(5 * ms, 10 * ms), "on time so far");
    assert_eq!((ac.window_len(5 * ms), ac.queued()), (0, 1));
    assert!(ac.task_withdrawn(20 * ms, 10 * ms), "late at 10 ms, counted then");
    assert_eq!((ac.window_len(20 * ms), ac.queued()), (1, 0));
    assert_eq!(ac.miss_ratio(20 * ms), 1.0);
}

#[test]
fn rejects_while_ratio_exceeds_threshold_and_recovers_after_the_window() {
    let window = 1000 * NANOS_PER_MILLI;
    let mut ac = AdmissionController::new(0.02, window).unwrap();
    assert!(ac.admit(0));
    // 100 tasks, 2 missed: 2% is not above R_th.
    for i in 0..100u64 {
        ac.record_task(i * NANOS_PER_MILLI, i < 2);
    }
    assert!(ac.admit(100 * NANOS_PER_MILLI));
    // A third miss: 3/101 > 2%.
    ac.record_task(101 * NANOS_PER_MILLI, true);
    assert!(!ac.admit(102 * NANOS_PER_MILLI));
    // Enough good tasks dilute it back under the threshold: 3/150 = 2%.
    for i in 0..49u64 {
        ac.record_task((600 + i) * NANOS_PER_MILLI, false);
    }
    assert!((ac.miss_ratio(650 * NANOS_PER_MILLI) - 0.02).abs() < 1e-12);
    assert!(ac.admit(650 * NANOS_PER_MILLI));
    // A burst of misses, then nothing: rejected until the burst leaves the window.
    for _ in 0..10 {
        ac.record_task(700 * NANOS_PER_MILLI, true);
    }
    assert!(!ac.admit(701 * NANOS_PER_MILLI));
    // At 1.0015 s the outcomes of [0, 1.5 ms] (2 misses, 2 tasks) have left: 11/158.
    assert!((ac.miss_ratio(1001 * NANOS_PER_MILLI + NANOS_PER_MILLI / 2) - 11.0 / 158.0).abs() < 1e-12);
    // By 1.701 s everything up to 700 ms has gone.
    assert!(ac.admit(1701 * NANOS_PER_MILLI));
    assert_eq!(ac.miss_ratio(1701 * NANOS_PER_MILLI), 0.0);
    assert_eq!((ac.admitted(), ac.rejected()), (4, 2));
}

#[test]
fn proportional_admission_admits_the_share_r_th_over_ratio() {
    let window = 1000 * NANOS_PER_MILLI;
    let mut all_or_nothing = AdmissionController::new(0.1, window).unwrap();
    let mut share = AdmissionController::new(0.1, window).unwrap().with_proportional();
    // 100 outcomes, 40 missed: ratio 0.4 = 4 × R_th.
    for a in [&mut all_or_nothing, &mut share] {
        for i in 0..100 {
            a.record_task(1, i % 5 < 2);
        }
        assert!((a.miss_ratio(1) - 0.4).abs() < 1e-12);
    }
    let admitted_of = |a: &mut AdmissionController| (0..400).filter(|_| a.admit(2)).count();
    assert_eq!(admitted_of(&mut all_or_nothing), 0, "the paper's rule rejects everything above R_th");
    // R_th / ratio = 1/4 of 400 arrivals, evenly: every fourth.
    let mut evenly = AdmissionController::new(0.1, window).unwrap().with_proportional();
    for i in 0..100 {
        evenly.record_task(1, i % 5 < 2);
    }
    let pattern: Vec<bool> = (0..8).map(|_| evenly.admit(2)).collect();
    assert_eq!(pattern.iter().filter(|&&x| x).count(), 2, "{pattern:?}");
    assert!(!(pattern[0] && pattern[1]), "spread out, not in a burst: {pattern:?}");
    assert_eq!(admitted_of(&mut share), 100);
    assert_eq!(share.admitted(), 100);
    assert_eq!(share.rejected(), 300);
    // Below R_th both admit everything; a ratio twice R_th admits half.
    let mut half = AdmissionController::new(0.1, window).unwrap().with_proportional();
    for i in 0..100 {
        half.record_task(1, i % 5 == 0);
    }
    assert_eq!((0..100).filter(|_| half.admit(2)).count(), 50);
    let mut low = AdmissionController::new(0.1, window).unwrap().with_proportional();
    for i in 0..100 {
        low.record_task(1, i % 20 == 0);
    }
    assert_eq!((0..100).filter(|_| low.admit(2)).count(), 100);
    // R_th = 0: nothing is admitted while any miss is in the window, as the paper's rule.
    let mut zero = AdmissionController::new(0.0, window).unwrap().with_proportional();
    zero.record_task(1, true);
    assert!(!(0..100).any(|_| zero.admit(2)));
    // And it recovers once the misses leave the window.
    assert!(share.admit(2 + window + 2));
}

#[test]
fn the_task_window_keeps_the_last_n_outcomes() {
    let mut ac = AdmissionController::new(0.1, u64::MAX).unwrap().with_window_tasks(10);
    for i in 0..10 {
        ac.record_task(i, true);
    }
    assert!(!ac.admit(10));
    for i in 0..9 {
        ac.record_task(20 + i, false);
    }
    // One miss left among the last 10: 10% is not above R_th.
    assert_eq!(ac.window_len(30), 10);
    assert!((ac.miss_ratio(30) - 0.1).abs() < 1e-12);
    assert!(ac.admit(30));
}

/// The paper's rule: exactly the last N outcomes, whatever their age; the
/// (N+1)-th pushes the oldest out; a refused query's tasks move the window.
#[test]
fn the_count_window_is_exact_over_the_last_n_and_moves_with_refused_queries() {
    let n = 100;
    let mut ac = AdmissionController::with_window(0.02, AdmissionWindow::Outcomes(n)).unwrap();
    // 2 misses then 98 on time: 2/100 = R_th, admitted.
    for i in 0..n {
        ac.record_task(i, i < 2);
    }
    assert_eq!(ac.window_len(n), n);
    assert!((ac.miss_ratio(n) - 0.02).abs() < 1e-12);
    assert!(ac.admit_query(n, 10));
    // A miss at the boundary: it pushes out the first miss, 2/100 still.
    ac.record_task(n, true);
    assert!((ac.miss_ratio(n) - 0.02).abs() < 1e-12);
    // Another: the second early miss leaves, the new one stays: 2/100.
    ac.record_task(n, true);
    assert!((ac.miss_ratio(n) - 0.02).abs() < 1e-12);
    // A third recent one: 3/100 > R_th.
    ac.record_task(n, true);
    assert!((ac.miss_ratio(n) - 0.03).abs() < 1e-12);
    // No clock: an hour later nothing has aged out.
    let hour = 3_600_000_000_000;
    assert!(!ac.admit_query(hour, 0));
    assert_eq!(ac.window_len(hour), n);
    // Refused queries of 40 tasks each push the oldest outcomes out (97 on time, then
    // the 3 misses): 3/60, then 3/20, both above R_th...
    assert!(!ac.admit_query(hour, 40));
    assert_eq!((ac.window_len(hour), ac.window_slots()), (60, n));
    assert!(!ac.admit_query(hour, 40));
    assert_eq!(ac.window_len(hour), 20);
    assert!(!ac.admit_query(hour, 40));
    // ... until every outcome has left: an empty window admits.
    assert_eq!((ac.window_len(hour), ac.window_slots()), (0, n));
    assert!(ac.admit_query(hour, 40));
    // An admitted query adds no slot; slots never exceed N.
    assert_eq!(ac.window_slots(), n);
    assert!(ac.admit_query(hour, 1_000_000));
    assert_eq!((ac.admitted(), ac.rejected()), (3, 4));
    // The time window ignores refused queries' tasks.
    let mut timed = AdmissionController::with_window(0.0, AdmissionWindow::Time(1000)).unwrap();
    timed.record_task(0, true);
    assert!(!timed.admit_query(1, 1000));
    assert_eq!((timed.window_len(1), timed.window_slots()), (1, 1));
    // Both bounds: the count and the age.
    let mut both = AdmissionController::with_window(0.0, AdmissionWindow::OutcomesWithin(3, 1000)).unwrap();
    for t in [0, 1, 2, 3] {
        both.record_task(t, t == 0);
    }
    assert_eq!((both.window_len(3), both.miss_ratio(3)), (3, 0.0));
    both.record_task(10, true);
    assert!(!both.admit(10));
    assert!(both.admit(1011), "aged out");
    assert!(matches!(
        AdmissionController::with_window(0.1, AdmissionWindow::Outcomes(0)),
        Err(AdmissionError::BadWindowTasks)
    ));
    assert!(AdmissionController::with_window(0.1, AdmissionWindow::Time(0)).is_err());
}

/// What a refused query's tasks are decides when a rejection ends. One old miss and two new
/// ones in a window of 100 (3% > R_th = 2%); each refused query has 10 tasks.
#[test]
fn refused_tasks_no_outcome_on_time_and_ignored() {
    let history = |refused: RefusedTasks| {
        let mut ac =
            AdmissionController::with_window(0.02, AdmissionWindow::Outcomes(100)).unwrap().with_refused_tasks(refused);
        for i in 0..100u64 {
            ac.record_task(i, i == 0 || i >= 98);
        }
        ac
    };
    // No outcome: the refused slots push out the oldest outcomes, on time or not, and the ratio
    // is over the outcomes left, so it rises (2/90, 2/80...) and the rejection lasts until
    // every outcome has left: 10 refusals of 10 tasks, the whole window.
    let mut no_outcome = history(RefusedTasks::NoOutcome);
    let rejected = (0..20).take_while(|_| !no_outcome.admit_query(100, 10)).count();
    assert_eq!(rejected, 10);
    assert_eq!((no_outcome.window_len(100), no_outcome.window_slots()), (0, 100));
    // On time: the ratio is over the offered tasks; the old miss leaves with the first
    // refusal, 2/100 is not above R_th, and the next query is admitted.
    let mut on_time = history(RefusedTasks::OnTime);
    assert!(!on_time.admit_query(100, 10));
    assert_eq!(on_time.window_len(100), 100, "refused tasks count as outcomes");
    assert!((on_time.miss_ratio(100) - 0.02).abs() < 1e-12);
    assert!(on_time.admit_query(100, 10));
    // Ignored: a refusal moves nothing; only new outcomes dilute the ratio.
    let mut ignored = history(RefusedTasks::Ignored);
    assert!(!(0..50).any(|_| ignored.admit_query(100, 10)));
    assert_eq!((ignored.window_len(100), ignored.window_slots()), (100, 100));
    ignored.record_task(101, false);
    assert!(ignored.admit_query(101, 10), "the old miss left: 2/100");
    // A time window has no slots to move: every reading is the same there.
    let mut timed = AdmissionController::new(0.0, 1000).unwrap().with_refused_tasks(RefusedTasks::OnTime);
    timed.record_task(0, true);
    assert!(!timed.admit_query(1, 1000));
    assert_eq!((timed.window_len(1), timed.window_slots()), (1, 1));
}

/// The phase log: runs of equal decisions, the ratio and outcomes when each began, the last N.
#[test]
fn the_phase_log_keeps_the_last_runs_of_equal_decisions() {
    let mut ac = AdmissionController::with_window(0.1, AdmissionWindow::Outcomes(10)).unwrap().with_phase_log(2);
    assert_eq!(ac.phases().len(), 0);
    assert!(ac.admit_query(1, 5) && ac.admit_query(2, 5));
    for _ in 0..10 {
        ac.record_task(3, true);
    }
    assert!(!ac.admit_query(4, 5));
    assert!(!ac.admit_query(5, 5));
    let phases: Vec<AdmissionPhase> = ac.phases().copied().collect();
    assert_eq!(phases.len(), 2);
    assert_eq!((phases[0].start, phases[0].admitting, phases[0].queries), (1, true, 2));
    assert_eq!((phases[1].start, phases[1].admitting, phases[1].queries), (4, false, 2));
    assert_eq!((phases[1].ratio_at_start, phases[1].outcomes_at_start), (1.0, 10));
    // Two refusals of 5 emptied the window: admitted again, and the oldest phase is dropped.
    assert!(ac.admit_query(6, 5));
    let starts: Vec<(Nanos, bool)> = ac.phases().map(|p| (p.start, p.admitting)).collect();
    assert_eq!(starts, [(4, false), (6, true)]);
    // Off by default.
    let mut quiet = AdmissionController::new(0.1, 1000).unwrap();
    assert!(quiet.admit(1));
    assert_eq!(quiet.phases().len(), 0);
}

#[test]
fn a_queued_task_counts_as_missed_at_its_deadline_and_only_once() {
    let mut ac = AdmissionController::new(0.5, 1_000_000).unwrap();
    ac.task_queued(0, 100, 3);
    assert_eq!(ac.window_len(100), 0, "a deadline equal to now has not passed");
    assert_eq!(ac.window_len(101), 3);
    assert_eq!(ac.miss_ratio(101), 1.0);
    assert!(!ac.admit(101));
    // Dequeued later: already counted, not again.
    for t in [150, 160, 170] {
        ac.task_dequeued(t, 100);
    }
    assert_eq!(ac.window_len(200), 3);
    assert_eq!(ac.queued(), 0);
    // On time: counted at dequeue as a success.
    ac.task_queued(200, 1_000, 5);
    for _ in 0..5 {
        ac.task_dequeued(300, 1_000);
    }
    assert!((ac.miss_ratio(300) - 3.0 / 8.0).abs() < 1e-12);
    assert!(ac.admit(300));
    // Late on arrival: a miss right away.
    ac.task_queued(400, 350, 1);
    assert_eq!(ac.window_len(400), 9);
}

#[test]
fn min_tasks_and_validation() {
    let mut ac = AdmissionController::new(0.1, 20_000).unwrap().with_min_tasks(10);
    ac.record_task(0, true);
    assert!(ac.admit(1), "one miss out of one task is below min_tasks");
    assert!(AdmissionController::new(1.5, 1000).unwrap_err().to_string().contains("r_th = 1.5"));
    assert!(AdmissionController::new(-0.1, 1000).is_err());
    assert!(AdmissionController::new(f64::NAN, 1000).is_err());
    assert!(AdmissionController::new(0.1, 0).unwrap_err().to_string().contains("window = 0 ns"));
    assert!(AdmissionController::new(0.1, 5).is_ok());
}

#[test]
fn many_tasks_and_long_gaps() {
    let mut ac = AdmissionController::new(0.0, 1_000_000).unwrap();
    for i in 0..1_000_000u64 {
        ac.record_task(i * 7, i % 1000 == 0);
    }
    assert!(!ac.admit(7_000_000));
    assert!(ac.admit(u64::MAX / 2));
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Step {
    Record { dt: u64, missed: bool },
    Queue { dt: u64, budget: u64, n: u64 },
    Dequeue { dt: u64, pick: usize },
    Admit { dt: u64, tasks: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..50u64, any::<bool>()).prop_map(|(dt, missed)| Step::Record { dt, missed }),
        (0..50u64, 0..200u64, 1..4u64).prop_map(|(dt, budget, n)| Step::Queue { dt, budget, n }),
        (0..50u64, any::<usize>()).prop_map(|(dt, pick)| Step::Dequeue { dt, pick }),
        (0..50u64, 0..8u64).prop_map(|(dt, tasks)| Step::Admit { dt, tasks }),
    ]
}

proptest! {
    /// The controller agrees with a brute-force model, for each kind of window: every
    /// outcome is kept with the time it became known, and a refused query's tasks as
    /// slots without outcome (count windows only); the window is the last
    /// `window_tasks` slots of those not older than `window_ns`; the ratio is exact
    /// over the outcomes among them; a queued task's outcome is known at its deadline
    /// if it is still queued then, else at dequeue; each task counts exactly once;
    /// admit iff ratio ≤ R_th; the window never holds more than `window_tasks` slots.
    #[test]
    fn matches_a_brute_force_model(
        r_th in 0.0..1.0f64,
        kind in 0..3u8,
        window_ns in 1..400u64,
        window_tasks in 1..40u64,
        steps in prop::collection::vec(step(), 1..200),
    ) {
        let window = match kind {
            0 => AdmissionWindow::Time(window_ns),
            1 => AdmissionWindow::Outcomes(window_tasks),
            _ => AdmissionWindow::OutcomesWithin(window_tasks, window_ns),
        };
        let mut ac = AdmissionController::with_window(r_th, window).unwrap();
        let (window_ns, window_tasks) = match kind {
            0 => (window_ns, u64::MAX),
            1 => (u64::MAX, window_tasks),
            _ => (window_ns, window_tasks),
        };
        // Model: all slots ever, (entered_at, Some(missed) or None if refused);
        // queued tasks (deadline, counted).
        let mut outcomes: Vec<(u64, Option<bool>)> = Vec::new();
        let mut queued: Vec<(u64, bool)> = Vec::new();
        let mut now = 0u64;
        for s in steps {
            let dt = match s {
                Step::Record { dt, .. } | Step::Queue { dt, .. } | Step::Dequeue { dt, .. } | Step::Admit { dt, .. } => dt,
            };
            now += dt;
            // Deadlines that passed become misses, in deadline order, known now.
            let mut due: Vec<usize> = (0..queued.len()).filter(|&i| !queued[i].1 && queued[i].0 < now).collect();
            due.sort_by_key(|&i| queued[i].0);
            for i in due {
                queued[i].1 = true;
                outcomes.push((now, Some(true)));
            }
            match s {
                Step::Record { missed, .. } => {
                    ac.record_task(now, missed);
                    outcomes.push((now, Some(missed)));
                }
                Step::Queue { budget, n, .. } => {
                    // Deadlines may lie in the past (budget < 100 before `now`).
                    let deadline = (now + budget).saturating_sub(100);
                    ac.task_queued(now, deadline, n);
                    for _ in 0..n {
                        let late = deadline < now;
                        if late {
                            outcomes.push((now, Some(true)));
                        }
                        queued.push((deadline, late));
                    }
                }
                Step::Dequeue { pick, .. } => {
                    if queued.is_empty() {
                        continue;
                    }
                    let (deadline, counted) = queued.remove(pick % queued.len());
                    ac.task_dequeued(now, deadline);
                    if !counted {
                        outcomes.push((now, Some(now > deadline)));
                    }
                }
                Step::Admit { tasks, .. } => {
                    let horizon = now.saturating_sub(window_ns);
                    let recent: Vec<Option<bool>> = outcomes.iter().filter(|o| o.0 >= horizon).map(|o| o.1).collect();
                    let slots = &recent[recent.len().saturating_sub(window_tasks.min(1 << 20) as usize)..];
                    let known: Vec<bool> = slots.iter().flatten().copied().collect();
                    let ratio = if known.is_empty() { 0.0 } else {
                        known.iter().filter(|&&m| m).count() as f64 / known.len() as f64
                    };
                    prop_assert_eq!(ac.window_len(now), known.len() as u64);
                    prop_assert!((ac.miss_ratio(now) - ratio).abs() < 1e-12);
                    let admitted = ac.admit_query(now, tasks);
                    prop_assert_eq!(admitted, known.is_empty() || ratio <= r_th);
                    if !admitted && window_tasks != u64::MAX {
                        outcomes.extend((0..tasks).map(|_| (now, None)));
                    }
                }
            }
            prop_assert!(ac.window_slots() <= window_tasks, "bounded: {} slots", ac.window_slots());
            prop_assert_eq!(ac.queued(), queued.len() as u64);
        }
    }

    /// Liveness: whatever happened before, once no task is queued and
    /// `window_ns` passes with no new outcome, queries are admitted again.
    #[test]
    fn always_recovers_after_a_quiet_window(
        window_ns in 1..1000u64,
        misses in 1..500u64,
    ) {
        let mut ac = AdmissionController::new(0.0, window_ns).unwrap().with_window_tasks(PAPER_WINDOW_TASKS);
        for i in 0..misses {
            ac.record_task(i, true);
        }
        prop_assert!(!ac.admit(misses));
        prop_assert!(ac.admit(misses + window_ns));
    }
}
