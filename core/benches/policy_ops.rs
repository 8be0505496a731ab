//! Cost of one enqueue + dispatch with 1,000 jobs waiting, per policy.
//!
//! TailClipper reports 0.4–0.6 µs for its heap; we aim for ≤ 0.1 µs. Each
//! iteration is one `arrive` of a new job (younger than all waiting, as in
//! steady state) plus one `complete` of a running job, which makes the policy
//! dispatch the next job (and, for orf, refill its pool from the heap).
//! Reported: median ns per iteration over 15 repetitions of 200,000
//! iterations, and each policy's ratio to fifo measured in the same run, since
//! absolute times on a shared machine move with the neighbours' load.
//!
//! Run: `cargo bench -p tailor-core --bench policy_ops`

use std::hint::black_box;
use std::time::Instant;

use tailor_core::{Job, Policy, PolicySpec};

const WAITING: u64 = 1_000;
const ITERS: u64 = 200_000;
const REPS: usize = 15;
const CPUS: usize = 3;

fn job(id: u64) -> Job {
    Job { id, gat: id * 10, deadline: id * 10 + 5_000, class: (id % 2) as u8 }
}

/// Median ns per arrive+complete for `spec`, with `WAITING` jobs queued.
fn measure(spec: &PolicySpec) -> f64 {
    let mut samples = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let mut p = spec.build_any(CPUS, 1).unwrap();
        let mut now = 0;
        for id in 0..WAITING + CPUS as u64 {
            p.arrive(now, job(id));
        }
        let first_new = WAITING + CPUS as u64;
        let started = Instant::now();
        for i in 0..ITERS {
            now += 1;
            p.arrive(now, job(first_new + i));
            let cpu = (i % CPUS as u64) as usize;
            let running = p.running()[cpu].expect("all CPUs busy");
            p.complete(now, running);
            black_box(p.running());
            black_box(p.next_tick());
        }
        samples.push(started.elapsed().as_nanos() as f64 / ITERS as f64);
        assert_eq!(p.waiting() as u64, WAITING, "steady state keeps {WAITING} waiting");
    }
    samples.sort_by(f64::total_cmp);
    samples[REPS / 2]
}

fn main() {
    let specs = [
        PolicySpec::Fifo,
        PolicySpec::Orf { c: 6, slice_us: 30.0 },
        PolicySpec::Gfifo,
        PolicySpec::Edf,
        PolicySpec::Priq,
        PolicySpec::Rr { slice_us: 30.0 },
        PolicySpec::Fair { min_granularity_ms: 1.0, latency_ms: 10.0 },
    ];
    println!(
        "one arrive + complete (enqueue + dispatch) with {WAITING} waiting, {CPUS} CPUs; median of {REPS} x {ITERS}"
    );
    println!("{:>8}  {:>8}  {:>9}", "policy", "ns/op", "vs fifo");
    let mut fifo = None;
    for spec in &specs {
        let ns = measure(spec);
        let base = *fifo.get_or_insert(ns);
        println!("{:>8}  {:>8.1}  {:>8.2}x", spec.name(), ns, ns / base);
    }
}
