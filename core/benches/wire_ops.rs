//! Cost of the context codec per request, against the runtime's 5 µs budget.
//!
//! Each row is what one hop does for one request: read the context off the
//! carrier, clamp it, and encode what its outgoing calls carry (the child).
//! Inputs are built before the timed loop; each iteration varies the GAT so
//! the work cannot be hoisted. Reported: median ns per request over 15
//! repetitions of 200,000 iterations, and each row's ratio to the bare header
//! row measured in the same run, since absolute times on a shared machine
//! move with the neighbours' load.
//!
//! Run: `cargo bench -p tailor-core --bench wire_ops`
//!
//! Seconds on a shared 2-core machine move with the neighbours; instruction
//! counts do not. `WIRE_BENCH_ITERS`, `WIRE_BENCH_REPS` and `WIRE_BENCH_ROW`
//! (a prefix of a row's name) shrink the run for
//! `valgrind --tool=cachegrind --cache-sim=no`: the difference between two
//! iteration counts, divided by the difference, is instructions per request
//! (`docs/wire-format.md`, "Cost", shows the commands).

use std::hint::black_box;
use std::time::Instant;

use tailor_core::wire::{self, baggage, Key, Keyring};
use tailor_core::Context;

const ITERS: u64 = 200_000;
const REPS: usize = 15;

const NOW: u64 = 1_732_272_000_123_456_789;
const MAX_AGE: u64 = 30_000_000_000;

/// An environment override of a default (see the module doc).
fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A named per-request operation, `f(i)` for iteration `i`.
type Row<'a> = (&'static str, Box<dyn FnMut(u64) -> usize + 'a>);

/// Median ns per call of `f(i)`.
fn measure(iters: u64, reps: usize, mut f: impl FnMut(u64) -> usize) -> f64 {
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        let mut sink = 0;
        for i in 0..iters {
            sink += f(black_box(i));
        }
        black_box(sink);
        samples.push(started.elapsed().as_nanos() as f64 / iters.max(1) as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[reps / 2]
}

fn ctx(i: u64) -> Context {
    Context { gat: NOW - 1_000_000 - (i & 1023), deadline: NOW + 2_000_000, class: 1, fanout: 4, hop: 2 }
}

fn main() {
    let key = Key::new("edge-1", b"0123456789abcdef0123456789abcdef").unwrap();
    let ring = Keyring::new([key.clone()]).unwrap();
    // 1024 distinct inputs of each kind, built up front.
    let plain: Vec<_> = (0..1024).map(|i| wire::encode(&ctx(i))).collect();
    let signed: Vec<_> = (0..1024).map(|i| wire::encode_signed(&ctx(i), &key)).collect();
    let bags: Vec<String> = plain
        .iter()
        .map(|v| format!("userId=alice,sessionId=8f14e45fceea167a5a36dedd4bea2543,tailor={v},isProduction=false"))
        .collect();

    let rows: Vec<Row> = vec![
        ("encode", Box::new(|i| wire::encode(&ctx(i)).len())),
        ("decode", Box::new(|i| wire::decode(plain[(i & 1023) as usize]).map_or(0, |d| d.context.hop as usize))),
        (
            "header: extract+clamp+encode",
            Box::new(|i| {
                let v = &plain[(i & 1023) as usize];
                let d = wire::extract([("tailor-context", v.as_bytes())]).unwrap().unwrap();
                let (c, _) = wire::clamp(d.context, NOW, MAX_AGE);
                wire::encode(&c.child()).len()
            }),
        ),
        (
            "baggage (4 members): extract+clamp+encode+rewrite",
            Box::new(|i| {
                let b = &bags[(i & 1023) as usize];
                let d = wire::extract([("baggage", b.as_bytes())]).unwrap().unwrap();
                let (c, _) = wire::clamp(d.context, NOW, MAX_AGE);
                baggage::with(Some(b), &wire::encode(&c.child())).len()
            }),
        ),
        (
            "signed in: extract+verify+clamp+encode",
            Box::new(|i| {
                let v = &signed[(i & 1023) as usize];
                let d = wire::extract([("tailor-context", v.as_bytes())]).unwrap().unwrap();
                let (c, _) = wire::clamp(d.verify(&ring).unwrap(), NOW, MAX_AGE);
                wire::encode(&c.child()).len()
            }),
        ),
        ("signed out: encode_signed", Box::new(|i| wire::encode_signed(&ctx(i), &key).len())),
    ];

    let iters = knob("WIRE_BENCH_ITERS", ITERS);
    let reps = knob("WIRE_BENCH_REPS", REPS).max(1);
    let only = knob("WIRE_BENCH_ROW", String::new());
    println!("context codec per request; median of {reps} x {iters}");
    println!("{:>42}  {:>8}  {:>9}", "operation", "ns/op", "vs header");
    let mut results = Vec::new();
    for (name, mut f) in rows.into_iter().filter(|(n, _)| n.starts_with(only.as_str())) {
        results.push((name, measure(iters, reps, &mut f)));
    }
    let base = results.iter().find(|(n, _)| n.starts_with("header")).map_or(f64::NAN, |r| r.1);
    for (name, ns) in results {
        println!("{name:>42}  {ns:>8.1}  {:>8.2}x", ns / base);
    }
}
