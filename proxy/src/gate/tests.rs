//! The gate's unit tests: ordering, limits, ghosts, stale entries and sheds.

use super::*;

fn gate(order: Order, c: Option<usize>) -> Arc<Gate> {
    Gate::new(GateConfig { order, c, c_max: 16, max_queue: 4, shed_cannot_meet: true })
}

/// As if the gate had seen enough latencies to shed on its estimate, of mean `ns`.
fn learned_latency(g: &Gate, ns: f64) {
    let mut st = g.lock();
    st.latency_samples = 100;
    st.latency_ewma = ns;
}

fn ctx(gat: Nanos) -> Context {
    Context::stamped(gat)
}

fn admitted(p: &mut Place) -> bool {
    match &mut p.admission {
        Admission::Now { .. } => true,
        Admission::Later(rx) => rx.try_recv().is_ok(),
        Admission::Taken => false,
    }
}

#[test]
fn only_an_adaptive_limit_reports_a_floor() {
    assert_eq!(gate(Order::Orf, Some(2)).limit_floor(), None);
    assert_eq!(gate(Order::Orf, None).limit_floor(), Some(1), "no backlog yet: no floor");
}

#[tokio::test]
async fn older_request_goes_first_with_one_slot() {
    let g = gate(Order::Orf, Some(1));
    let mut first = g.enter(&ctx(50), 100).unwrap();
    assert!(admitted(&mut first));
    let mut young = g.enter(&ctx(90), 100).unwrap();
    let mut old = g.enter(&ctx(10), 100).unwrap();
    assert!(!admitted(&mut young) && !admitted(&mut old));
    drop(first);
    assert!(admitted(&mut old), "the older GAT is admitted first");
    assert!(!admitted(&mut young));
    drop(old);
    assert!(admitted(&mut young));
    assert_eq!(g.snapshot(), (0, 1, 1));
}

#[tokio::test]
async fn fifo_ignores_gat() {
    let g = gate(Order::Fifo, Some(1));
    let first = g.enter(&ctx(50), 100).unwrap();
    let mut young = g.enter(&ctx(90), 100).unwrap();
    let mut old = g.enter(&ctx(10), 100).unwrap();
    drop(first);
    assert!(admitted(&mut young) && !admitted(&mut old));
}

#[tokio::test]
async fn bounded_queue_and_expired_deadlines_are_shed() {
    let g = gate(Order::Orf, Some(1));
    let mut expired = ctx(1);
    expired.deadline = 5;
    assert_eq!(g.enter(&expired, 10).err(), Some(ShedReason::DeadlineExpired));
    let _running = g.enter(&ctx(1), 10).unwrap();
    let places: Vec<_> = (0..4).map(|i| g.enter(&ctx(i), 10).unwrap()).collect();
    assert_eq!(g.enter(&ctx(0), 10).err(), Some(ShedReason::QueueFull));
    drop(places);
    assert_eq!(g.snapshot().0, 0);
}

#[tokio::test]
async fn a_limit_decrease_undone_before_it_took_effect_frees_its_slot() {
    let g = gate(Order::Orf, Some(2));
    let first = g.enter(&ctx(1), 10).unwrap();
    let _second = g.enter(&ctx(2), 10).unwrap();
    {
        let mut st = g.lock();
        st.set_limit(1); // a ghost waits for the next free slot...
        st.set_limit(2); // ...and is cancelled (stale) before it gets one
    }
    drop(first); // the freed slot goes to the stale ghost, which must complete at once
    let mut third = g.enter(&ctx(3), 10).unwrap();
    assert!(admitted(&mut third), "a cancelled ghost kept the slot");
}

#[tokio::test]
async fn cancelled_waiters_never_leak_slots_or_memory() {
    let g = gate(Order::Edf, Some(2));
    for round in 0..100 {
        let a = g.enter(&ctx(round), 10).unwrap();
        let b = g.enter(&ctx(round), 10).unwrap();
        let c = g.enter(&ctx(round), 10).unwrap(); // waits
        drop(c);
        drop(a);
        drop(b);
    }
    let st = g.lock();
    assert_eq!((st.waiting.len(), st.admitted.len()), (0, 0));
    assert!(st.stale.len() <= 4 && st.policy.waiting() <= 4, "stale entries are bounded");
}

#[tokio::test]
async fn a_request_that_finds_a_free_slot_needs_no_channel_and_a_queued_one_is_woken() {
    let g = gate(Order::Orf, Some(1));
    let first = g.enter(&ctx(1), 10).unwrap();
    assert!(matches!(first.admission, Admission::Now { in_flight: 1 }));
    let second = g.enter(&ctx(2), 10).unwrap();
    assert!(matches!(second.admission, Admission::Later(_)));
    let ticket = first.wait(tailor_core::time::NEVER).await.unwrap();
    assert_eq!(ticket.in_flight_at_start, 1);
    let woken = tokio::spawn(second.wait(tailor_core::time::NEVER));
    tokio::task::yield_now().await;
    assert!(!woken.is_finished(), "the only slot is taken");
    ticket.finish(1_000);
    let second = tokio::time::timeout(std::time::Duration::from_secs(5), woken).await.unwrap().unwrap().unwrap();
    assert_eq!(g.snapshot(), (0, 1, 1));
    drop(second);
    assert_eq!(g.snapshot(), (0, 0, 1));
}

#[tokio::test]
async fn requests_inside_across_a_rebuild_still_give_their_own_slot_back() {
    let g = gate(Order::Fifo, Some(2));
    let a = g.enter(&ctx(1), 10).unwrap();
    let b = g.enter(&ctx(2), 10).unwrap();
    // Five cancelled waiters: one more stale entry than max_queue rebuilds the policy,
    // which may put `a` and `b` on other CPUs than the ones they were admitted on.
    for round in 0..5 {
        drop(g.enter(&ctx(10 + round), 10).unwrap());
    }
    assert!(g.lock().stale.is_empty(), "the policy was rebuilt");
    let mut c = g.enter(&ctx(20), 10).unwrap();
    assert!(!admitted(&mut c));
    drop(a);
    assert!(admitted(&mut c), "a's slot went to the next in line");
    assert_eq!(g.snapshot(), (0, 2, 2));
    drop(b);
    drop(c);
    assert_eq!(g.snapshot(), (0, 0, 2));
    let st = g.lock();
    assert!(st.is_settled() && st.policy.waiting() == 0);
}

#[tokio::test]
async fn limit_changes_take_effect_in_policy_order() {
    let g = gate(Order::Orf, Some(1));
    let first = g.enter(&ctx(5), 10).unwrap();
    let mut young = g.enter(&ctx(9), 10).unwrap();
    let mut old = g.enter(&ctx(1), 10).unwrap();
    g.lock().set_limit(2);
    assert!(admitted(&mut old) && !admitted(&mut young));
    g.lock().set_limit(1);
    drop(first); // the freed slot goes to the ghost: still one inside
    assert!(!admitted(&mut young));
    drop(old);
    assert!(admitted(&mut young));
}

#[tokio::test]
async fn requests_run_on_the_lowest_cpus_whatever_c_max_and_limit_changes() {
    let g = Gate::new(GateConfig { order: Order::Orf, c: Some(2), c_max: 256, max_queue: 16, shed_cannot_meet: false });
    let cpus = |g: &Arc<Gate>| {
        let mut v: Vec<usize> = g.lock().admitted.values().map(|&(_, cpu)| cpu).collect();
        v.sort_unstable();
        v
    };
    let a = g.enter(&ctx(1), 10).unwrap();
    let _b = g.enter(&ctx(2), 10).unwrap();
    assert_eq!(cpus(&g), [0, 1], "the ghosts hold the 254 highest CPUs");
    g.lock().set_limit(3);
    let _c = g.enter(&ctx(3), 10).unwrap();
    assert_eq!(cpus(&g), [0, 1, 2], "a raise frees the lowest ghost's CPU");
    g.lock().set_limit(2); // a ghost waits for the next CPU to free...
    drop(a); // ...and takes CPU 0
    assert_eq!(cpus(&g), [1, 2]);
    g.lock().set_limit(3);
    let _d = g.enter(&ctx(4), 10).unwrap();
    assert_eq!(cpus(&g), [0, 1, 2], "the ghost on CPU 0 was the one freed");
    assert!(g.lock().is_settled());
}

#[tokio::test]
async fn a_deadline_that_cannot_be_met_at_its_position_is_shed() {
    let g = gate(Order::Fifo, Some(1));
    learned_latency(&g, 1_000.0);
    let _inside = g.enter(&ctx(0), 0).unwrap();
    let _w1 = g.enter(&ctx(0), 0).unwrap();
    let _w2 = g.enter(&ctx(0), 0).unwrap();
    let mut tight = ctx(0);
    tight.deadline = 2_500; // two ahead of it at 1 µs each, plus its own 1 µs
    assert_eq!(g.enter(&tight, 0).err(), Some(ShedReason::CannotMeet));
    tight.deadline = 5_000;
    assert!(g.enter(&tight, 0).is_ok());
}

/// With many inside, the line drains `c` per latency: one place back costs a fraction
/// of a latency, not a whole one.
#[tokio::test]
async fn a_short_wait_behind_a_large_limit_costs_a_fraction_of_a_latency() {
    let g = gate(Order::Fifo, Some(10));
    learned_latency(&g, 1_000.0);
    let _inside: Vec<Place> = (0..10).map(|_| g.enter(&ctx(0), 0).unwrap()).collect();
    let _ahead = g.enter(&ctx(0), 0).unwrap();
    let mut late = ctx(0);
    // Second in line: 2/10 of a latency to get in, then its own: 1.2 µs.
    late.deadline = 1_100;
    assert_eq!(g.enter(&late, 0).err(), Some(ShedReason::CannotMeet));
    late.deadline = 1_300;
    assert!(g.enter(&late, 0).is_ok(), "shed although it waits a fifth of a latency");
}
