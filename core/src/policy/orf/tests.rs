//! Tests of `orf`.

use super::*;

fn job(id: JobId, gat: Nanos) -> Job {
    Job::with_gat(id, gat)
}

fn queue(p: &Orf) -> Vec<JobId> {
    p.rr.iter().map(|m| m.key.2).collect()
}

#[test]
fn outside_the_pool_jobs_leave_oldest_first_whatever_the_arrival_order() {
    let mut o = Outside::default();
    let mut rng = crate::rng::Rng::new(3);
    let mut keys = Vec::new();
    for seq in 0..2000u64 {
        // Mostly increasing GATs with some stragglers, and ties.
        let gat = seq / 2 + if rng.below(4) == 0 { 0 } else { rng.below(50) };
        keys.push((gat, seq, 1000 + seq));
        o.push(Waiter::new(keys[keys.len() - 1]));
        if rng.below(3) == 0 {
            let oldest = keys.iter().copied().min().unwrap();
            assert_eq!(o.peek().map(Waiter::key), Some(oldest));
            assert_eq!(o.pop().map(Waiter::key), Some(oldest));
            keys.retain(|k| *k != oldest);
        }
    }
    assert!(o.run.len() > 100 && o.heap.len() > 100, "both lanes used: {} {}", o.run.len(), o.heap.len());
    keys.sort();
    let drained: Vec<Key> = std::iter::from_fn(|| o.pop().map(Waiter::key)).collect();
    assert_eq!(drained, keys);
    assert_eq!(o.len(), 0);
}

#[test]
fn an_old_arrival_goes_ahead_of_younger_members_that_have_not_started() {
    let mut p = Orf::new(1, 4, 30);
    p.arrive(0, job(1, 10));
    p.arrive(1, job(2, 20));
    p.arrive(2, job(3, 30));
    assert_eq!((p.running(), queue(&p)), (&[Some(1)][..], vec![2, 3]));
    // Figure 3: a request reordered upstream arrives late with the oldest GAT.
    p.arrive(3, job(4, 5));
    assert_eq!(queue(&p), [4, 2, 3]);
    p.check();
    p.tick(30);
    assert_eq!((p.running(), queue(&p)), (&[Some(4)][..], vec![2, 3, 1]));
    // Older than 1, 2 and 3: ahead of 2 and 3, which have not started.
    // The pool (4, 5, 1, 2, 3) overflows and its youngest, 3, goes back to the heap.
    p.arrive(31, job(5, 8));
    assert_eq!(queue(&p), [5, 2, 1]);
    assert_eq!((p.pool_len(), p.heap_len(), p.waiting()), (4, 1, 4));
    p.check();
    p.tick(60);
    p.tick(90);
    assert_eq!((p.running(), queue(&p)), (&[Some(2)][..], vec![1, 4, 5]));
    // Every waiting member has had a slice: the oldest job of all takes
    // its round-robin turn at the back. The pool's youngest, 2, is running:
    // marked, it goes to the heap when its slice ends.
    p.arrive(91, job(6, 1));
    assert_eq!(queue(&p), [1, 4, 5, 6]);
    assert_eq!((p.pool_len(), p.marked_len(), p.heap_len()), (5, 1, 1));
    p.check();
    p.tick(120);
    assert_eq!((p.running(), queue(&p)), (&[Some(1)][..], vec![4, 5, 6]));
    assert_eq!((p.pool_len(), p.marked_len(), p.heap_len()), (4, 0, 2));
    p.check();
}

#[test]
fn a_younger_arrival_waits_in_the_heap_when_the_pool_is_full() {
    let mut p = Orf::new(1, 2, 30);
    p.arrive(0, job(1, 10));
    p.arrive(0, job(2, 20));
    p.arrive(0, job(3, 30));
    p.check();
    assert_eq!((p.pool_len(), p.heap_len(), p.queue_len()), (2, 1, 1));
    // Only the pool rotates: 3 never runs while 1 and 2 share the CPU.
    for k in 1..=6 {
        p.tick(30 * k);
        assert_eq!(p.running(), [Some(if k % 2 == 1 { 2 } else { 1 })]);
        p.check();
    }
    p.complete(200, 1);
    assert_eq!((p.running(), queue(&p)), (&[Some(2)][..], vec![3]));
    assert_eq!((p.pool_len(), p.heap_len()), (2, 0));
    p.check();
}

#[test]
fn an_older_arrival_evicts_the_youngest_waiting_member() {
    let mut p = Orf::new(1, 2, 30);
    p.arrive(0, job(1, 10));
    p.arrive(0, job(2, 20));
    p.arrive(0, job(3, 15));
    p.check();
    assert_eq!(queue(&p), [3]);
    assert_eq!((p.heap_len(), p.marked_len()), (1, 0));
    p.complete(5, 1);
    // Job 2 comes back from the heap; job 3 is older and runs first.
    assert_eq!((p.running(), queue(&p)), (&[Some(3)][..], vec![2]));
    p.check();
}

#[test]
fn a_running_youngest_member_is_evicted_at_its_next_preemption() {
    let mut p = Orf::new(2, 2, 30);
    p.arrive(0, job(2, 20));
    p.arrive(2, job(1, 10));
    p.arrive(10, job(3, 5));
    p.check();
    // Job 2 is the youngest of three pool members but running: marked, not preempted.
    assert_eq!(p.running(), [Some(2), Some(1)]);
    assert_eq!((p.pool_len(), p.marked_len(), p.heap_len(), queue(&p)), (3, 1, 0, vec![3]));
    assert_eq!(p.next_tick(), Some(30));
    p.tick(30);
    // To the heap, not to the back of Q_rr.
    assert_eq!(p.running(), [Some(3), Some(1)]);
    assert_eq!((p.pool_len(), p.marked_len(), p.heap_len(), p.queue_len()), (2, 0, 1, 0));
    assert_eq!(p.next_tick(), None);
    p.check();
    p.complete(40, 1);
    assert_eq!(p.running(), [Some(3), Some(2)]);
    p.check();
}

#[test]
fn a_marked_job_is_readmitted_when_the_pool_shrinks_before_its_slice_ends() {
    let mut p = Orf::new(2, 2, 30);
    p.arrive(0, job(1, 10));
    p.arrive(0, job(2, 20));
    p.arrive(5, job(3, 5));
    p.arrive(6, job(4, 25)); // younger than every member: heap
    assert_eq!((p.marked_len(), p.heap_len()), (1, 1));
    p.complete(7, 1);
    // The pool has room; job 2 (marked, running) is older than job 4 (heap):
    // it is simply unmarked, and job 3 takes the free CPU.
    assert_eq!(p.running(), [Some(3), Some(2)]);
    assert_eq!((p.pool_len(), p.marked_len(), p.heap_len(), p.next_tick()), (2, 0, 1, None));
    p.check();
}

#[test]
fn c_1_on_one_cpu_is_global_fcfs() {
    let mut p = Orf::new(1, 1, 30);
    let gats = [50, 20, 90, 10, 70, 30, 60, 40, 80];
    p.arrive(0, job(0, 0));
    for (i, &g) in gats.iter().enumerate() {
        p.arrive(1 + i as Nanos, job(1 + i as JobId, g));
        // Nobody shares the CPU with the oldest job: slices never matter.
        assert_eq!(p.next_tick(), None);
        p.tick(1_000_000);
        assert_eq!(p.running(), [Some(0)]);
    }
    let mut served = Vec::new();
    let mut cur = 0;
    for t in 0..gats.len() as Nanos {
        p.complete(100 + t, cur);
        p.check();
        assert_eq!(p.next_tick(), None);
        cur = p.running()[0].unwrap();
        served.push(gats[cur as usize - 1]);
    }
    let mut sorted = gats.to_vec();
    sorted.sort();
    assert_eq!(served, sorted);
    assert_eq!(p.waiting(), 0);
}

#[test]
fn c_1_preempts_a_younger_running_job_at_its_slice_end() {
    let mut p = Orf::new(1, 1, 30);
    p.arrive(0, job(1, 20));
    p.arrive(100, job(2, 10)); // reordered upstream: older than the running job
    assert_eq!((p.marked_len(), p.next_tick()), (1, Some(120)));
    p.tick(120);
    assert_eq!(p.running(), [Some(2)]);
    assert_eq!((p.heap_len(), p.next_tick()), (1, None));
    p.check();
}

#[test]
fn the_pool_is_at_least_as_large_as_the_cpu_count() {
    let mut p = Orf::new(4, 1, 30);
    assert_eq!(p.cap(), 4);
    for id in 1..=6 {
        p.arrive(0, job(id, 100 - id));
    }
    // Each arrival is older than all before it. Four CPUs busy, like
    // global FCFS on four cores; the two oldest wait for the youngest
    // two, marked, to reach their slice end.
    assert_eq!(p.running(), [Some(1), Some(2), Some(3), Some(4)]);
    assert_eq!((p.pool_len(), p.marked_len(), p.queue_len(), p.heap_len()), (6, 2, 2, 0));
    p.check();
    p.tick(30);
    assert_eq!(p.running(), [Some(6), Some(5), Some(3), Some(4)]);
    assert_eq!((p.pool_len(), p.marked_len(), p.queue_len(), p.heap_len(), p.next_tick()), (4, 0, 0, 2, None));
    p.check();
}

#[test]
fn expired_slices_rotate_fairly_without_migrations() {
    let mut p = Orf::new(3, 6, 30);
    for id in 1..=4 {
        p.arrive(0, job(id, id));
    }
    let mut sat_out = [0; 5];
    let mut t = 0;
    for _ in 0..40 {
        let before = p.running().to_vec();
        t = p.next_tick().unwrap();
        p.tick(t);
        p.check();
        for (cpu, r) in p.running().iter().enumerate() {
            // A job that keeps running keeps its CPU.
            if let Some(id) = r {
                let was = before.iter().position(|b| b == r);
                assert!(was.is_none() || was == Some(cpu), "job {id} migrated");
            }
        }
        sat_out[p.rr[0].key.2 as usize] += 1;
    }
    assert_eq!(t, 40 * 30);
    assert_eq!(&sat_out[1..], [10, 10, 10, 10]);
}
