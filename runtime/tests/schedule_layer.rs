//! `ScheduleLayer` around a real async tower service: at most `c` requests inside the
//! inner service, admitted in GAT order (gfifo), and a cancelled request (its future
//! dropped, as when a client goes away) frees its place, whether admitted or waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use tailor_core::{Context, PolicySpec};
use tailor_runtime::http::ScheduleLayer;
use tailor_runtime::{BackendSpec, Scheduler, SchedulerOptions};
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt};

mod common;
use common::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_c_inside_admitted_in_gat_order_and_cancellation_frees_the_slot() {
    const C: usize = 2;
    let opts = SchedulerOptions { log: false, ..Default::default() };
    let sched = Scheduler::with_options(BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: C }, opts).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(Mutex::new(Vec::<u64>::new()));
    // Each request inside the inner service holds it until the test releases one permit.
    let release = Arc::new(Semaphore::new(0));
    let inner = {
        let (inside, most, entered, release) = (inside.clone(), most.clone(), entered.clone(), release.clone());
        tower::service_fn(move |req: Request<()>| {
            let (inside, most, entered, release) = (inside.clone(), most.clone(), entered.clone(), release.clone());
            async move {
                let gat = req.extensions().get::<Context>().unwrap().gat;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                entered.lock().unwrap().push(gat);
                // Leaves `inside` also when cancelled while holding the service.
                struct Out(Arc<AtomicUsize>);
                impl Drop for Out {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                let _out = Out(inside);
                release.acquire().await.unwrap().forget();
                Ok::<_, std::convert::Infallible>(gat)
            }
        })
    };
    let svc = ScheduleLayer::new(sched.clone()).layer(inner);
    let send = |gat: u64| {
        let svc = svc.clone();
        let mut req = Request::new(());
        req.extensions_mut().insert(Context::stamped(gat));
        tokio::spawn(async move { svc.oneshot(req).await.unwrap() })
    };

    // Two young requests fill the c = 2 places.
    let young_a = send(9_000);
    let _young_b = send(9_001);
    wait_until("two requests inside", || inside.load(Ordering::SeqCst) == C).await;
    // Older ones arrive in scrambled order and wait; one of them (the oldest) gives up.
    let mut waiting = Vec::new();
    for (k, gat) in [500u64, 300, 100, 400, 200].into_iter().enumerate() {
        waiting.push((gat, send(gat)));
        wait_until("the request to queue", || sched.waiting() == k + 1).await;
    }
    let (_, gone) = waiting.remove(2); // GAT 100: the client went away while waiting
    gone.abort();
    let _ = gone.await;
    // An admitted request is cancelled: its place goes to the oldest waiting one (200).
    young_a.abort();
    let _ = young_a.await;
    wait_until("GAT 200 admitted into the freed place", || entered.lock().unwrap().len() == 3).await;
    assert_eq!(inside.load(Ordering::SeqCst), C);

    // Let the rest through one at a time.
    for _ in 0..5 {
        release.add_permits(1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(inside.load(Ordering::SeqCst) <= C);
    }
    for (gat, task) in waiting {
        assert_eq!(task.await.unwrap(), gat);
    }
    let mut order = entered.lock().unwrap().clone();
    // The two young ones were both admitted at once; which reached the inner service first
    // is up to tokio (CI saw both orders).
    order[..2].sort();
    assert_eq!(order, [9_000, 9_001, 200, 300, 400, 500], "admitted in GAT order; the cancelled waiter never entered");
    assert!(most.load(Ordering::SeqCst) <= C, "at most c = {C} inside at once");
    assert_eq!(sched.waiting(), 0);
}
