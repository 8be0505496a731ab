//! Requests of M sequential queries on real task servers on loopback (in-process
//! handler and servers, real sockets, the precise timer thread).
//!
//! Checks that (1) unloaded requests of M = 2 and 3 queries meet a generous
//! request SLO; (2) every query's deadline is start + B_i with B_i the split
//! core's `SequentialPlan` defines (Equal: the remaining budget over the
//! queries left; Proportional: by x_p^u weights), recomputed here
//! independently; (3) once a shape is prepared, no request computes a plan,
//! even while background refreshes replace the plans. Nothing asserts an
//! absolute time except the SLO, which is ~20x the unloaded request latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tailor_core::dist::Dist;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::{BudgetSplit, SequentialPlan, SharedCdf, SloClass, WorstCaseMax};
use tailor_fanout::handler::{RequestOutcome, PLAN_GRID};
use tailor_fanout::{Handler, HandlerConfig, PreciseTimer, Queuing, Scheme, TaskServer, TaskServerConfig};

const SERVERS: usize = 8;
/// Mean service time: 1 ms, so an unloaded request of ≤ 3 queries takes ~5–15 ms.
const MEAN_SERVICE_NS: f64 = 1e6;
/// Generous: ~20x the unloaded p99 request latency, so a busy machine still meets it.
const REQUEST_SLO_NS: u64 = 300_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

async fn testbed() -> (Vec<TaskServer>, Arc<Handler>) {
    let timer = Arc::new(PreciseTimer::start().expect("timer thread"));
    let mut servers = Vec::new();
    for i in 0..SERVERS {
        let cfg = TaskServerConfig {
            policy: PolicySpec::Edf,
            service: Dist::exp_ns(MEAN_SERVICE_NS),
            scale: 1.0,
            max_queue: 1000,
            seed: 7 + i as u64,
        };
        servers.push(TaskServer::spawn(cfg, timer.clone(), "127.0.0.1:0".parse().unwrap()).await.expect("task server"));
    }
    let handler = Handler::new(HandlerConfig {
        scheme: Scheme::TfEdfq,
        queuing: Queuing::AtServers,
        classes: vec![SloClass { p: 0.99, slo_ns: REQUEST_SLO_NS }],
        servers: servers.iter().map(|s| s.addr).collect(),
        server_weights: Vec::new(),
        class_server_weights: Vec::new(),
        offline: Arc::new(Dist::exp_ns(MEAN_SERVICE_NS)),
        offline_per_server: Vec::new(),
        admission: None,
        refresh: Duration::from_millis(250),
        // Never replace the offline CDF in these tests: the plans stay comparable.
        min_samples: f64::INFINITY,
        seed: 11,
        query_timeout_slos: None,
    })
    .expect("handler");
    (servers, handler)
}

/// B_i as sequential.rs defines it, recomputed from the plan's public numbers.
fn expected_budget(plan: &SequentialPlan, split: BudgetSplit, i: usize, used_before: u64) -> i64 {
    let remaining = plan.budget_ns() - used_before as i64;
    let m = plan.len();
    if i + 1 == m {
        return remaining;
    }
    let w = |j: usize| match split {
        BudgetSplit::Equal => 1.0,
        BudgetSplit::Proportional => plan.query_unloaded_tail(j) as f64,
    };
    let suffix: f64 = (i..m).rev().map(w).sum();
    (remaining as f64 * w(i) / suffix).floor() as i64
}

fn check_deadlines(out: &RequestOutcome, split: BudgetSplit) {
    assert_eq!(out.queries.len(), out.plan.len());
    for (i, q) in out.queries.iter().enumerate() {
        let want = expected_budget(&out.plan, split, i, q.used_before_ns).max(0);
        let got = q.deadline_ns as i64 - q.start_ns as i64;
        assert!((got - want).abs() <= 1, "{split:?} query {i}: deadline − start = {got} ns, the split says {want} ns");
    }
}

#[test]
fn sequential_requests_meet_the_slo_and_split_the_budget_as_planned() {
    let rt = runtime();
    rt.block_on(async {
        let (_servers, handler) = testbed().await;
        for fanouts in [vec![1u32, 8], vec![2, 4, 8]] {
            let equal = handler.prepare_request(0, &fanouts, BudgetSplit::Equal).expect("plan equal");
            let prop = handler.prepare_request(0, &fanouts, BudgetSplit::Proportional).expect("plan proportional");
            // Same queries, same CDFs: the same request budget T_b^R, split differently.
            assert_eq!(equal.budget_ns(), prop.budget_ns());
            assert!(equal.budget_ns() > 0, "T_b^R = {} ns: the SLO should be feasible", equal.budget_ns());
            let m = fanouts.len() as i64;
            assert_eq!(equal.query_budget_ns(0, 0), equal.budget_ns() / m);
            // The first query has the smallest fan-out, so the smallest x_p^u:
            // Proportional gives it less than an equal share.
            assert!(prop.query_budget_ns(0, 0) < equal.query_budget_ns(0, 0), "{fanouts:?}");

            let computes = handler.stats.plan_computes.load(std::sync::atomic::Ordering::Relaxed);
            for split in [BudgetSplit::Equal, BudgetSplit::Proportional] {
                let mut latencies = Vec::new();
                for _ in 0..40 {
                    let out = handler.request(0, &fanouts, split).await.expect("request");
                    check_deadlines(&out, split);
                    latencies.push(out.latency_ns);
                }
                latencies.sort_unstable();
                let over = latencies.iter().filter(|&&l| l > REQUEST_SLO_NS).count();
                eprintln!(
                    "{fanouts:?} {split:?}: median {:.2} ms, max {:.2} ms, T_b^R {:.1} ms, over SLO {over}/40",
                    latencies[20] as f64 / 1e6,
                    latencies[39] as f64 / 1e6,
                    equal.budget_ns() as f64 / 1e6
                );
                // p99 of 40 requests: at most one may be slower than the SLO.
                assert!(over <= 1, "{fanouts:?} {split:?}: {over}/40 requests over the {REQUEST_SLO_NS} ns SLO");
            }
            // The requests only looked plans up.
            assert_eq!(handler.stats.plan_computes.load(std::sync::atomic::Ordering::Relaxed), computes);
        }
        assert_eq!(handler.stats.plan_cold_misses.load(std::sync::atomic::Ordering::Relaxed), 0);
    });
}

#[test]
fn plans_are_refreshed_off_the_request_path_and_looked_up_cheaply() {
    let rt = runtime();
    rt.block_on(async {
        let (_servers, handler) = testbed().await;
        let shapes = [vec![1u32, 8], vec![2, 4, 8]];
        for ks in &shapes {
            for split in [BudgetSplit::Equal, BudgetSplit::Proportional] {
                handler.prepare_request(0, ks, split).expect("plan");
            }
        }
        let stats = &handler.stats;
        let ord = std::sync::atomic::Ordering::Relaxed;
        let per_plan_ns = stats.plan_compute_ns.load(ord) / stats.plan_computes.load(ord);

        // Lookup cost: what a request pays for its plan.
        let lookups = 100_000u32;
        let started = Instant::now();
        for i in 0..lookups {
            let ks = &shapes[i as usize % 2];
            std::hint::black_box(handler.current_plan(0, ks, BudgetSplit::Proportional).expect("prepared"));
        }
        let lookup_ns = started.elapsed().as_nanos() as u64 / lookups as u64;
        eprintln!(
            "plan compute (grid {PLAN_GRID}): {:.2} ms per plan; lookup: {lookup_ns} ns",
            per_plan_ns as f64 / 1e6
        );
        assert!(lookup_ns * 50 < per_plan_ns, "lookup {lookup_ns} ns vs compute {per_plan_ns} ns");

        // What the bounded grid costs in accuracy and saves in time, next to
        // core's default grid, on the same CDFs (8 exponential servers, M = 3).
        // One shared CDF for every server, as the handler's offline model.
        let offline: SharedCdf = Arc::new(Dist::exp_ns(MEAN_SERVICE_NS));
        let cdfs = vec![offline; SERVERS];
        let queries: Vec<WorstCaseMax<SharedCdf>> =
            shapes[1].iter().map(|&k| WorstCaseMax { servers: &cdfs, k }).collect();
        let slo = SloClass { p: 0.99, slo_ns: REQUEST_SLO_NS };
        let mut timed = Vec::new();
        for grid in [PLAN_GRID, SequentialPlan::DEFAULT_GRID] {
            let started = Instant::now();
            let plan = SequentialPlan::new(slo, &queries, BudgetSplit::Equal, grid).expect("plan");
            let took = started.elapsed().as_nanos() as u64;
            let (lo, hi) = plan.unloaded_tail_bounds();
            eprintln!(
                "grid {grid}: {:.2} ms, x_p^(R,u) in [{:.3}, {:.3}] ms",
                took as f64 / 1e6,
                lo as f64 / 1e6,
                hi as f64 / 1e6
            );
            timed.push((took, lo, hi));
        }
        // The finer bracket lies inside the coarser one's (both contain the exact value).
        assert!(timed[0].1 <= timed[1].2 && timed[1].1 <= timed[0].2, "{timed:?}");

        // Requests while refreshes replace the plans in the background.
        let before = handler.current_plan(0, &shapes[1], BudgetSplit::Equal).unwrap();
        let refresher = handler.spawn_refresher();
        let computes_before = stats.plan_computes.load(ord);
        let deadline = Instant::now() + Duration::from_millis(1200);
        let mut n = 0;
        while Instant::now() < deadline || stats.planner_refreshes.load(ord) < 2 {
            let split = if n % 2 == 0 { BudgetSplit::Equal } else { BudgetSplit::Proportional };
            let out = handler.request(0, &shapes[n % 2], split).await.expect("request");
            check_deadlines(&out, split);
            assert!(out.latency_ns < REQUEST_SLO_NS, "request {n}: {} ns", out.latency_ns);
            n += 1;
        }
        refresher.abort();
        let refreshes = stats.planner_refreshes.load(ord);
        assert!(refreshes >= 2);
        // Every refresh recomputed all 4 shapes, none on a request.
        assert!(stats.plan_computes.load(ord) - computes_before >= 4 * refreshes - 4);
        assert_eq!(stats.plan_cold_misses.load(ord), 0);
        let after = handler.current_plan(0, &shapes[1], BudgetSplit::Equal).unwrap();
        assert!(!Arc::ptr_eq(&before, &after), "the refresh swapped in a new plan");
        eprintln!("{n} requests during {refreshes} refreshes");
    });
}

#[test]
fn an_unprepared_shape_is_planned_once_and_bad_shapes_are_refused() {
    let rt = runtime();
    rt.block_on(async {
        let (_servers, handler) = testbed().await;
        let ord = std::sync::atomic::Ordering::Relaxed;
        handler.request(0, &[3, 3], BudgetSplit::Equal).await.expect("request");
        handler.request(0, &[3, 3], BudgetSplit::Equal).await.expect("request");
        assert_eq!(handler.stats.plan_cold_misses.load(ord), 1);
        assert_eq!(handler.stats.plan_computes.load(ord), 1);
        let e = handler.request(0, &[], BudgetSplit::Equal).await.unwrap_err().to_string();
        assert!(e.contains("at least one query"), "{e}");
        let e = handler.request(0, &[2, 99], BudgetSplit::Equal).await.unwrap_err().to_string();
        assert!(e.contains("fanout 99"), "{e}");
        let e = handler.request(5, &[2], BudgetSplit::Equal).await.unwrap_err().to_string();
        assert!(e.contains("class 5"), "{e}");
    });
}
