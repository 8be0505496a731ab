//! The cooperative backend with real threads: the `c` bound, admission in
//! policy order, `blocked` freeing the slot, panics, and the bounded pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::{cpu, BackendSpec, RuntimeError, Scheduler, SchedulerOptions};

fn cooperative(policy: PolicySpec, c: usize) -> Scheduler {
    let opts = SchedulerOptions { log: false, ..Default::default() };
    Scheduler::with_options(BackendSpec::Cooperative { policy, c }, opts).unwrap()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn never_more_than_c_jobs_run_at_once() {
    for c in [1, 3] {
        let sched = cooperative(PolicySpec::Orf { c: 6, slice_us: 30.0 }, c);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(12));
        let threads: Vec<_> = (0..12u64)
            .map(|i| {
                let (sched, inside, most, start) = (sched.clone(), inside.clone(), most.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    sched.run(&Context::stamped(1_000 + i), |_| {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        cpu::burn_cpu(300_000);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let stats = sched.stats();
        assert!(most.load(Ordering::SeqCst) <= c, "c={c}: {} ran at once", most.load(Ordering::SeqCst));
        assert!(stats.max_running as usize <= c, "c={c}: {stats:?}");
        assert_eq!((stats.admitted, stats.completed), (12, 12));
        assert_eq!(sched.waiting(), 0);
    }
}

/// Starts jobs with the given GATs while one holder job occupies the only slot,
/// waits until every one of them is queued, frees the slot and returns the GATs
/// in the order the jobs ran.
fn admission_order(policy: PolicySpec, gats: &[u64]) -> Vec<u64> {
    let sched = cooperative(policy, 1);
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let sched = sched.clone();
        std::thread::spawn(move || sched.run(&Context::stamped(0), |_| release_rx.recv().unwrap()))
    };
    wait_until("the holder's admission", || sched.stats().admitted == 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for (queued, &gat) in gats.iter().enumerate() {
        let (sched2, order) = (sched.clone(), order.clone());
        threads.push(std::thread::spawn(move || {
            sched2.run(&Context::stamped(gat), |_| order.lock().unwrap().push(gat));
        }));
        // One at a time, so the local arrival order is exactly `gats`.
        wait_until("the job to queue", || sched.waiting() == queued + 1);
    }
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let order = order.lock().unwrap().clone();
    order
}

#[test]
fn admission_follows_the_policy_order() {
    let gats = [50, 10, 40, 20, 30];
    let mut by_gat = gats.to_vec();
    by_gat.sort();
    assert_eq!(admission_order(PolicySpec::Gfifo, &gats), by_gat, "gfifo admits oldest GAT first");
    assert_eq!(admission_order(PolicySpec::Orf { c: 6, slice_us: 30.0 }, &gats), by_gat, "orf admits oldest GAT first");
    assert_eq!(admission_order(PolicySpec::Fifo, &gats), gats.to_vec(), "fifo admits in local arrival order");
}

#[test]
fn blocked_gives_the_slot_to_another_job_and_takes_it_back() {
    let sched = cooperative(PolicySpec::Gfifo, 1);
    let (b_done_tx, b_done_rx) = std::sync::mpsc::channel::<()>();
    let events = Arc::new(Mutex::new(Vec::new()));
    let a = {
        let (sched, events) = (sched.clone(), events.clone());
        std::thread::spawn(move || {
            sched.run(&Context::stamped(1), |permit| {
                events.lock().unwrap().push("a starts");
                // While A waits for B's answer (a downstream call), B must be able to run.
                permit.blocked(|| b_done_rx.recv().unwrap());
                events.lock().unwrap().push("a resumes");
            })
        })
    };
    wait_until("a's admission", || sched.stats().admitted == 1);
    wait_until("a to block", || sched.stats().blocked == 1);
    sched.run(&Context::stamped(2), |_| events.lock().unwrap().push("b runs"));
    b_done_tx.send(()).unwrap();
    a.join().unwrap();
    assert_eq!(*events.lock().unwrap(), ["a starts", "b runs", "a resumes"]);
    assert_eq!(sched.stats().max_running, 1);
}

#[test]
fn a_panicking_job_still_frees_its_slot() {
    let sched = cooperative(PolicySpec::Gfifo, 1);
    let s = sched.clone();
    let result = std::thread::spawn(move || s.run(&Context::stamped(1), |_| panic!("handler bug"))).join();
    assert!(result.is_err());
    // The next job is admitted: the slot was freed by the unwind.
    assert_eq!(sched.run(&Context::stamped(2), |_| 7), 7);
    let stats = sched.stats();
    assert_eq!((stats.panicked, stats.completed), (1, 2));
}

#[tokio::test]
async fn spawn_is_bounded_and_sheds_beyond_the_bound() {
    let opts = SchedulerOptions { max_threads: 2, log: false, ..Default::default() };
    let sched = Scheduler::with_options(BackendSpec::None, opts).unwrap();
    let gate = Arc::new(Barrier::new(3));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let gate = gate.clone();
            sched.spawn(Context::stamped(1), move |_| {
                gate.wait();
            })
        })
        .collect();
    // Both threads are busy: the third call fails at once instead of queueing.
    let third = sched.spawn(Context::stamped(2), |_| ());
    assert!(matches!(third.await, Err(RuntimeError::Overloaded)));
    gate.wait();
    for f in busy {
        f.await.unwrap();
    }
    // Threads are reused: a new job runs on an idle pool thread.
    assert_eq!(sched.spawn(Context::stamped(3), |_| 5).await.unwrap(), 5);
    assert_eq!(sched.pool_threads(), 2);
    assert_eq!(sched.stats().overloaded, 1);
    let panicked = sched.spawn(Context::stamped(4), |_| panic!("handler bug")).await;
    assert!(matches!(panicked, Err(RuntimeError::Panicked)));
}
