//! Oracle tests: the simulator against closed-form queueing theory.
//!
//! Each test runs a scenario whose exact answer is known and asserts that the
//! simulated value lies within `Z` batch-means standard errors of theory.
//! Batch means: measured requests, in arrival order, are cut into 20 batches;
//! the statistic (mean or a quantile) is computed per batch; its standard
//! error is the batch spread / √20. With 19 degrees of freedom, Z = 4 is a
//! 99.95% two-sided t-interval, so a correct simulator fails a given seed with
//! probability ~5e-4; seeds are fixed, so the outcome is reproducible. Every
//! test also asserts the interval is *tight* (relative half-width bound), so a
//! test cannot pass merely by being noisy.
//!
//! `TAILOR_LONG_TESTS=1` multiplies every run length by 10 (CI sets it): the
//! same assertions, four times tighter intervals.

use std::path::Path;

use tailor_sim::metrics::{quantile_sorted, Recorder};
use tailor_sim::model::{Model, Overrides};
use tailor_sim::scenario::Scenario;
use tailor_sim::theory;

const Z: f64 = 4.0;
const BATCHES: usize = 20;

fn scale() -> u64 {
    if std::env::var("TAILOR_LONG_TESTS").is_ok_and(|v| v == "1") {
        10
    } else {
        1
    }
}

/// Runs scenario text; returns the per-request records.
fn simulate(toml: &str, requests: u64) -> Recorder {
    let loaded = Scenario::from_toml(toml, Path::new("oracle.toml")).unwrap_or_else(|e| panic!("{e}"));
    let ov =
        Overrides { requests: Some(requests * scale()), warmup: Some(requests * scale() / 20), ..Default::default() };
    let model = Model::build(&loaded, &ov).unwrap();
    tailor_sim::engine::run(&model).0
}

/// Indices of the records in arrival (GAT) order.
fn arrival_order(rec: &Recorder) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..rec.gat.len()).collect();
    idx.sort_by_key(|&i| rec.gat[i]);
    idx
}

/// (estimate over all, standard error by batch means) of `stat` over batches
/// of the values (in ms), taken in arrival order.
fn batch_estimate(values_ms: &[f64], stat: impl Fn(&mut [f64]) -> f64) -> (f64, f64) {
    let size = values_ms.len() / BATCHES;
    let per_batch: Vec<f64> = (0..BATCHES).map(|b| stat(&mut values_ms[b * size..(b + 1) * size].to_vec())).collect();
    let mean = per_batch.iter().sum::<f64>() / BATCHES as f64;
    let var = per_batch.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (BATCHES - 1) as f64;
    let overall = stat(&mut values_ms.to_vec());
    (overall, (var / BATCHES as f64).sqrt())
}

fn mean(v: &mut [f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn quantile(p: f64) -> impl Fn(&mut [f64]) -> f64 {
    move |v: &mut [f64]| {
        v.sort_by(f64::total_cmp);
        let ns: Vec<u64> = v.iter().map(|x| (x * 1e6) as u64).collect();
        quantile_sorted(&ns, p) as f64 / 1e6
    }
}

fn latencies_ms(rec: &Recorder, keep: impl Fn(usize) -> bool) -> Vec<f64> {
    arrival_order(rec).into_iter().filter(|&i| keep(i)).map(|i| rec.latency[i] as f64 / 1e6).collect()
}

/// Asserts |sim − theory| ≤ Z·SE and that the interval is tight (SE ≤ `max_rel_se` · theory).
#[track_caller]
fn assert_agrees(what: &str, (sim, se): (f64, f64), theory: f64, max_rel_se: f64) {
    eprintln!("{what}: sim {sim:.4} ± {se:.4} (1 SE), theory {theory:.4}, diff {:+.2}%", 100.0 * (sim / theory - 1.0));
    assert!(
        se <= max_rel_se * theory,
        "{what}: interval too wide to be a test: SE {se:.4} > {max_rel_se} × {theory:.4}"
    );
    assert!(
        (sim - theory).abs() <= Z * se,
        "{what}: sim {sim:.5} vs theory {theory:.5}: off by {:.1} SE",
        (sim - theory).abs() / se
    );
}

fn single_queue(cores: usize, policy: &str, service: &str, utilization: f64, seed: u64) -> String {
    format!(
        r#"
name = "oracle"
seed = {seed}
[load]
utilization = {utilization}
[[service]]
name = "q"
cores = {cores}
policy = {policy}
service_time = {service}
"#
    )
}

#[test]
fn mm1_mean_and_p99() {
    // λ = 0.8/ms, μ = 1/ms: response ~ Exp(0.2/ms): mean 5 ms, p99 = 5·ln 100 = 23.03 ms.
    let rec = simulate(&single_queue(1, r#"{ kind = "fifo" }"#, r#"{ kind = "exp", mean_ms = 1 }"#, 0.8, 11), 400_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees("M/M/1 mean", batch_estimate(&lat, mean), theory::mm1_mean_response(0.8, 1.0), 0.03);
    assert_agrees(
        "M/M/1 p99",
        batch_estimate(&lat, quantile(0.99)),
        theory::mm1_response_quantile(0.8, 1.0, 0.99),
        0.03,
    );
}

/// `[admission] reject_late` on one FIFO server with exponential service and a fixed
/// queuing budget B turns an arrival away exactly when the p99 of the work in the system
/// exceeds B, that is when K or more requests are in it, for the K the rule's gamma
/// quantile gives: the server becomes an M/M/1/K queue. Its blocking probability and
/// the admitted requests' mean response are known.
#[test]
fn rejecting_late_tasks_makes_mm1_an_mm1k_queue() {
    let budget_ms = 10.0;
    // K: the fewest requests in the system (all ahead under FIFO) whose wait, as the rule
    // computes it ((n − ½) and n mean services, 1 ms each), overruns the budget at p99.
    let k = (1..100u32)
        .find(|&n| tailor_core::dist::special::gamma_quantile(n as f64 - 0.5, n as f64, 0.99) > budget_ms)
        .unwrap();
    assert_eq!(k, 5, "the budget sits between two values of K, away from either edge");
    let toml = format!(
        r#"
name = "oracle"
seed = 31
[load]
utilization = 0.8
[[service]]
name = "q"
policy = {{ kind = "fifo" }}
service_time = {{ kind = "exp", mean_ms = 1 }}
[[class]]
name = "all"
slo_ms = {budget_ms}
[deadlines]
mode = "slo"
[admission]
r_th = 0.999
window_ms = 1000
reject_late = true
"#
    );
    let requests = 400_000;
    let rec = simulate(&toml, requests);
    let rejected = rec.rejected_by_class[0] as f64;
    let offered = rec.admitted as f64 + rejected;
    let blocked = rejected / offered;
    let want = theory::mm1k_blocking(0.8, k);
    eprintln!("M/M/1/{k} blocking: sim {blocked:.5}, theory {want:.5} ({offered} offered)");
    // Binomial-like error inflated by the queue's correlation: 3% relative at 400,000.
    assert!((blocked / want - 1.0).abs() < 0.03 / (scale() as f64).sqrt() + 0.01, "{blocked} vs {want}");
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees("M/M/1/K mean response", batch_estimate(&lat, mean), theory::mm1k_mean_response(0.8, 1.0, k), 0.03);
}

#[test]
fn mmc_erlang_c_two_and_four_servers() {
    for (c, seed) in [(2u32, 21), (4, 22)] {
        // ρ = 0.8 per server, mean service 1 ms: λ = 0.8·c per ms.
        let lambda = 0.8 * c as f64;
        // 800,000 requests: with 400,000 the p99's batch-means SE exceeded its
        // 3% cap for 35 of 100 seeds on M/M/2 (with either random generator),
        // so whether the test ran at all was luck of the seed.
        let rec = simulate(
            &single_queue(c as usize, r#"{ kind = "fifo" }"#, r#"{ kind = "exp", mean_ms = 1 }"#, 0.8, seed),
            800_000,
        );
        let lat = latencies_ms(&rec, |_| true);
        assert_agrees(
            &format!("M/M/{c} mean"),
            batch_estimate(&lat, mean),
            theory::mmc_mean_response(lambda, 1.0, c),
            0.02,
        );
        assert_agrees(
            &format!("M/M/{c} p99"),
            batch_estimate(&lat, quantile(0.99)),
            theory::mmc_response_quantile(lambda, 1.0, c, 0.99),
            0.03,
        );
    }
}

#[test]
fn orf_with_c_at_most_cores_is_global_fcfs_on_mmc() {
    // On a single node, GAT order is arrival order; with c ≤ cores nothing is
    // time-sliced, so orf must reproduce M/M/c FCFS exactly as fifo does.
    let c = 3u32;
    let policy = r#"{ kind = "orf", c = 1, slice_us = 30 }"#;
    let rec = simulate(&single_queue(c as usize, policy, r#"{ kind = "exp", mean_ms = 1 }"#, 0.85, 23), 300_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees(
        "orf c=1 on M/M/3 mean",
        batch_estimate(&lat, mean),
        theory::mmc_mean_response(0.85 * 3.0, 1.0, c),
        0.03,
    );
}

#[test]
fn md1_mean_pollaczek_khinchine() {
    let rec =
        simulate(&single_queue(1, r#"{ kind = "fifo" }"#, r#"{ kind = "fixed", value_ms = 1 }"#, 0.7, 31), 300_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees("M/D/1 mean", batch_estimate(&lat, mean), theory::md1_mean_response(0.7, 1.0), 0.02);
}

#[test]
fn mg1_ps_conditional_mean_is_x_over_one_minus_rho() {
    // Processor sharing approximated by round-robin with a 5 µs quantum (1/200
    // of the mean). Under PS, E[T | S = x] = x/(1−ρ) for every x: the slowdown
    // is the same for short and long jobs. The quantum biases it by O(q/x),
    // under 1% for the bins used here (x ≥ 0.5 ms), inside the tolerance.
    let rho = 0.6;
    let toml = single_queue(1, r#"{ kind = "ps", slice_us = 5 }"#, r#"{ kind = "exp", mean_ms = 1 }"#, rho, 41);
    let rec = simulate(&toml, 60_000);
    for (lo, hi) in [(0.5, 0.8), (0.9, 1.2), (1.8, 2.6), (3.0, 5.0)] {
        let in_bin = |i: usize| {
            let x = rec.demand[i] as f64 / 1e6;
            x >= lo && x < hi
        };
        let slowdown: Vec<f64> = arrival_order(&rec)
            .into_iter()
            .filter(|&i| in_bin(i))
            .map(|i| rec.latency[i] as f64 / rec.demand[i] as f64)
            .collect();
        assert_agrees(
            &format!("M/M/1-PS slowdown for x in [{lo}, {hi}) ms"),
            batch_estimate(&slowdown, mean),
            theory::mg1_ps_conditional_response(0.6, 1.0, 1.0), // x/(1−ρ) at x = 1: the slowdown
            0.04,
        );
    }
}

#[test]
fn fork_join_two_way_nelson_tantawi() {
    // Two M/M/1 servers; every request forks one task to each and joins.
    let toml = r#"
name = "fj2"
seed = 51
[load]
utilization = 0.7
[[service]]
name = "s"
instances = 2
cores = 1
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1 }
[[stage]]
name = "fork"
service = "s"
fanout = 2
"#;
    let rec = simulate(toml, 400_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees("2-way fork-join mean", batch_estimate(&lat, mean), theory::fork_join2_mean_response(0.7, 1.0), 0.02);
}

#[test]
fn nonpreemptive_priorities_cobham() {
    // Three equally likely classes, Exp(1 ms) service, ρ = 0.8 in total; priq
    // serves class 0 first, FCFS within a class.
    let toml = r#"
name = "cobham"
seed = 61
[load]
utilization = 0.8
[[service]]
name = "s"
cores = 1
policy = { kind = "priq" }
service_time = { kind = "exp", mean_ms = 1 }
[[class]]
name = "gold"
[[class]]
name = "silver"
[[class]]
name = "bronze"
"#;
    let rec = simulate(toml, 600_000);
    let lambda = 0.8 / 3.0;
    let classes = vec![theory::PriorityClass { lambda, mean_service: 1.0, second_moment: 2.0 }; 3];
    let expect = theory::cobham_mean_responses(&classes);
    for (c, &want) in expect.iter().enumerate() {
        let lat = latencies_ms(&rec, |i| rec.class[i] as usize == c);
        assert_agrees(&format!("Cobham class {c} mean"), batch_estimate(&lat, mean), want, 0.03);
    }
}

#[test]
fn chain_on_one_shared_host_is_bcmp_product_form() {
    // Three stages, each Exp(1 ms), all on one 2-CPU FCFS host: a BCMP network
    // with class switching (stage = class) and the same exponential rate for
    // every class at the FCFS node, so it has product form and each visit sees
    // an M/M/2 queue at the total rate 3λ. Mean end-to-end = 3 · M/M/2 mean.
    // This is what a whole chain on one machine (the `tailor demo` setup) is.
    let util = 0.75; // of the host: λ · 3 visits · 1 ms / 2 CPUs
    let lambda = util * 2.0 / 3.0; // per ms
    let toml = format!(
        r#"
name = "shared-host"
seed = 31
[load]
utilization = {util}
[[host]]
name = "node"
cores = 2
policy = {{ kind = "fifo" }}
[[service]]
name = "a"
host = "node"
service_time = {{ kind = "exp", mean_ms = 1 }}
[[service]]
name = "b"
host = "node"
service_time = {{ kind = "exp", mean_ms = 1 }}
[[service]]
name = "c"
host = "node"
service_time = {{ kind = "exp", mean_ms = 1 }}
"#
    );
    let rec = simulate(&toml, 300_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees(
        "3-stage chain on a shared M/M/2 host, mean",
        batch_estimate(&lat, mean),
        3.0 * theory::mmc_mean_response(3.0 * lambda, 1.0, 2),
        0.03,
    );
}

#[test]
fn admission_gate_of_one_on_a_two_cpu_host_is_mm1() {
    // The gate admits one task at a time, so the host's second CPU never helps:
    // the service is an M/M/1 queue (the gate is the queue), whatever the
    // host's own policy — here processor sharing, which alone would be M/M/2-PS.
    let toml = r#"
name = "gate"
seed = 32
[load]
rps = 800
[[host]]
name = "node"
cores = 2
policy = { kind = "ps", slice_us = 1 }
[[service]]
name = "q"
host = "node"
admit = { kind = "fifo", c = 1 }
service_time = { kind = "exp", mean_ms = 1 }
"#;
    let rec = simulate(toml, 400_000);
    let lat = latencies_ms(&rec, |_| true);
    assert_agrees("gate c=1 on 2 CPUs, mean", batch_estimate(&lat, mean), theory::mm1_mean_response(0.8, 1.0), 0.03);
    assert_agrees(
        "gate c=1 on 2 CPUs, p99",
        batch_estimate(&lat, quantile(0.99)),
        theory::mm1_response_quantile(0.8, 1.0, 0.99),
        0.05,
    );
}

/// A fan-out of k with no queueing (utilization 10⁻³): each task pays a hop out,
/// a fixed service time S and, when answers return per task, a hop back of its own,
/// so a query takes S + the slowest of k sums of two Exp(d) hops (Erlang-2);
/// when answers return once per request, S + the slowest of k Exp(d) hops + one more.
#[test]
fn fan_out_hops_per_task_and_per_request() {
    let (k, d, s) = (10u32, 1.0f64, 1.0f64);
    let scenario = |returns: &str| {
        format!(
            r#"
name = "hops"
seed = 61
[load]
utilization = 0.001
[network]
delay = {{ kind = "exp", mean_ms = {d} }}
returns = "{returns}"
[[service]]
name = "s"
instances = 100
cores = 1
policy = {{ kind = "fifo" }}
service_time = {{ kind = "fixed", value_ms = {s} }}
[[stage]]
name = "fan"
service = "s"
fanout = {k}
"#
        )
    };
    // E[max of k iid X] = ∫ 1 − F(t)^k dt, by the trapezoid rule far into the tail.
    let expected_max = |cdf: &dyn Fn(f64) -> f64| {
        let (h, end) = (1e-4, 60.0 * d);
        (0..(end / h) as usize).map(|i| h * (1.0 - cdf((i as f64 + 0.5) * h).powi(k as i32))).sum::<f64>()
    };
    let erlang2 = |t: f64| 1.0 - (-t / d).exp() * (1.0 + t / d);
    let exp = |t: f64| 1.0 - (-t / d).exp();
    let per_task = simulate(&scenario("per-task"), 40_000);
    let lat = latencies_ms(&per_task, |_| true);
    assert_agrees("per-task returns, mean", batch_estimate(&lat, mean), s + expected_max(&erlang2), 0.01);
    let per_request = simulate(&scenario("per-request"), 40_000);
    let lat = latencies_ms(&per_request, |_| true);
    let harmonic: f64 = (1..=k).map(|i| 1.0 / i as f64).sum();
    assert_agrees("per-request return, mean", batch_estimate(&lat, mean), s + d * harmonic + d, 0.01);
    // The closed form of the second matches the integral used for the first.
    assert!((expected_max(&exp) - d * harmonic).abs() < 1e-3);
}

#[test]
fn a_class_placement_feeds_its_own_instances() {
    // Two instances of Exp(1 ms), two equally likely classes of fan-out 1.
    // Class A picks instance 0 with weight 3 (3/4 of its queries), class B
    // uniformly. Nominal utilization 0.4 of 2 is λ = 0.8 per ms, 0.4 per class:
    // instance 0 gets 0.3 + 0.2 = 0.5, instance 1 gets 0.1 + 0.2 = 0.3, each an
    // M/M/1 (sojourn rate μ − λ: 0.5 and 0.7). Class A's mean sojourn is
    // 3/4 / 0.5 + 1/4 / 0.7, class B's 1/2 / 0.5 + 1/2 / 0.7; with no placement
    // both would be 1 / 0.6, so the test tells the classes' placements apart.
    let toml = r#"
name = "class-placement"
seed = 71
[load]
utilization = 0.4
[[class]]
name = "A"
[[class]]
name = "B"
[[service]]
name = "s"
instances = 2
cores = 1
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1.0 }
[[stage]]
name = "one"
service = "s"
weights_by_class = { A = [ { first = 0, count = 1, weight = 3.0 } ] }
"#;
    let rec = simulate(toml, 200_000);
    for (class, share0) in [(0usize, 0.75), (1, 0.5)] {
        let lat = latencies_ms(&rec, |i| rec.class[i] as usize == class);
        let theory = share0 / 0.5 + (1.0 - share0) / 0.7;
        assert_agrees(
            &format!("class {class} placed {share0} on instance 0, mean"),
            batch_estimate(&lat, mean),
            theory,
            0.03,
        );
    }
}

#[test]
fn heterogeneous_instances_are_mm1_queues_fed_by_weight() {
    // Four instances of Exp(1 ms): 0–1 picked with weight 3, 2–3 twice as slow
    // and picked with weight 1. Nominal utilization 0.4 of 4 instances is
    // λ = 1.6 per ms; a fan-out of one sends 3/8 of it to each fast instance
    // and 1/8 to each slow one, so each is an M/M/1 of its own: fast λ 0.6,
    // μ 1; slow λ 0.2, μ 0.5. A request sees the fast pair with probability
    // 3/4. Uniform picks would give each instance λ 0.4 (slow: ρ 0.8, a mean
    // of 10 ms), so the test tells weights from no weights.
    let toml = r#"
name = "heterogeneous"
seed = 67
[load]
utilization = 0.4
[[service]]
name = "s"
instances = 4
cores = 1
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1.0 }
groups = [ { first = 0, count = 2, weight = 3.0 }, { first = 2, count = 2, scale = 2.0, weight = 1.0 } ]
[[stage]]
name = "one"
service = "s"
"#;
    let rec = simulate(toml, 200_000);
    let lat = latencies_ms(&rec, |_| true);
    let groups = [(0.75, 1.0 - 0.6), (0.25, 0.5 - 0.2)]; // (share of requests, μ − λ per ms)
    let mean_theory: f64 = groups.iter().map(|(p, r)| p / r).sum();
    assert_agrees("weighted heterogeneous instances, mean", batch_estimate(&lat, mean), mean_theory, 0.02);
    // p99 of the mixture of exponential sojourn times: Σ p·e^{−r·t} = 0.01.
    let survival = |t: f64| groups.iter().map(|(p, r)| p * (-r * t).exp()).sum::<f64>();
    let (mut lo, mut hi) = (0.0, 100.0);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if survival(mid) > 0.01 {
            lo = mid
        } else {
            hi = mid
        }
    }
    assert_agrees("weighted heterogeneous instances, p99", batch_estimate(&lat, quantile(0.99)), lo, 0.03);
}
