//! The per-node path (`engine::per_node_path_applies`: one-stage requests whose
//! tasks all reach their nodes at arrival, one-core queue nodes, no gate or OS
//! noise; each node's queue runs on its own) must give exactly the
//! single-threaded general path's results: every per-request record in the same
//! order, every run counter and the summary, including where events tie.

mod same_results;

use same_results::{assert_same, model_file, model_from};
use tailor_core::PolicySpec;
use tailor_sim::engine::{self, Path as EnginePath};
use tailor_sim::model::{LoadOverride, Model, Overrides};

/// Runs `m` on the per-node path (it must qualify) and on the general one, and compares.
fn check(what: &str, m: &Model) {
    assert!(engine::per_node_path_applies(m), "{what}: should qualify for the per-node path");
    let per_node = engine::run_with(m, EnginePath::PerNode);
    let general = engine::run_with(m, EnginePath::General);
    assert_same(what, &per_node, &general);
}

const MASSTREE: &str = "scenarios/seeds/tailguard/fig04a-masstree.toml";

#[test]
fn tailguard_fan_out_case_is_identical_on_both_paths() {
    // Fan-outs 1/10/100 over 100 one-core servers, Masstree demands, TailGuard
    // deadlines; at 0.9 queues are long and late requests overtake measured ones.
    for (policy, util) in [
        (PolicySpec::Edf, 0.3),
        (PolicySpec::Edf, 0.9),
        (PolicySpec::Fifo, 0.5),
        (PolicySpec::Gfifo, 0.7),
        (PolicySpec::Lifo, 0.7),
        (PolicySpec::Random { seed: 4 }, 0.7),
        // Above capacity: the requests first drawn are too few for the run's
        // end, so the path goes on with more (the queues as they were).
        (PolicySpec::Edf, 1.2),
        (PolicySpec::Fifo, 1.5),
    ] {
        let name = policy.name();
        let ov = Overrides {
            policy: Some(policy),
            load: Some(LoadOverride::Utilization(util)),
            requests: Some(20_000),
            warmup: Some(1_000),
            ..Default::default()
        };
        check(&format!("masstree {name} at {util}"), &model_file(MASSTREE, &ov));
    }
}

#[test]
fn exact_ties_between_arrivals_and_completions_are_ordered_as_the_general_path_does() {
    // Arrivals every 100 µs exactly and demands of whole multiples of 100 µs:
    // completions land on arrivals (and on each other) all the time, on one
    // node and across nodes, so the order of events at one instant decides
    // which task a queue starts and the order of the records.
    let toml = r#"
name = "ties"
seed = 3
requests = 5000
warmup = 100
[load]
rps = 10000
arrival = { kind = "deterministic" }
[[service]]
name = "s"
instances = 8
policy = { kind = "edf" }
service_time = { kind = "mixture", parts = [
    { weight = 4, dist = { kind = "fixed", value_ms = 0.1 } },
    { weight = 3, dist = { kind = "fixed", value_ms = 0.2 } },
    { weight = 2, dist = { kind = "fixed", value_ms = 0.3 } },
    { weight = 1, dist = { kind = "fixed", value_ms = 0.5 } },
] }
[[stage]]
name = "q"
service = "s"
fanout = { values = [1, 2, 5], weights = [5, 3, 1] }
[[class]]
name = "a"
weight = 2
slo_ms = 1
[[class]]
name = "b"
weight = 1
slo_ms = 2
[deadlines]
mode = "slo"
"#;
    for policy in ["edf", "fifo", "gfifo", "priq", "lifo"] {
        let text = toml.replace(r#"{ kind = "edf" }"#, &format!(r#"{{ kind = "{policy}" }}"#));
        check(&format!("ties under {policy}"), &model_from(&text, &Overrides::default()));
    }
}

#[test]
fn classes_and_placements_are_identical_on_both_paths() {
    // Two classes with their own fan-outs and placement, heterogeneous
    // instances (per-placement budgets), Pareto arrivals.
    let toml = r#"
name = "mixed"
seed = 21
requests = 20000
warmup = 500
[load]
utilization = 0.7
arrival = { kind = "pareto", alpha = 1.5 }
[[service]]
name = "s"
instances = 6
policy = { kind = "edf" }
service_time = { kind = "lognormal", mean_ms = 1, sd_ms = 2 }
groups = [ { first = 0, count = 2, scale = 0.5, weight = 3 } ]
[[stage]]
name = "q"
service = "s"
fanout = { values = [1, 3], weights = [2, 1] }
fanout_by_class = { search = { values = [4, 6], weights = [1, 1] } }
weights_by_class = { search = [ { first = 4, count = 2, weight = 5 } ] }
[[class]]
name = "lookup"
weight = 3
slo_ms = 20
[[class]]
name = "search"
weight = 1
slo_ms = 40
[deadlines]
mode = "tailguard"
"#;
    check("classes and placements", &model_from(toml, &Overrides::default()));
}

#[test]
fn the_automatic_choice_takes_it_with_the_same_results() {
    // Below the two-thread size (one thread) and above it.
    for requests in [3_000, engine::PREPARED_MIN_REQUESTS] {
        let ov = Overrides { requests: Some(requests), warmup: Some(0), ..Default::default() };
        let m = model_file(MASSTREE, &ov);
        assert!(engine::per_node_path_applies(&m));
        assert_same("masstree, automatic path", &engine::run(&m), &engine::run_with(&m, EnginePath::General));
    }
}

#[test]
fn preemption_cores_noise_gates_and_chains_stay_off_it() {
    let ov = |policy| Overrides { policy: Some(policy), ..Default::default() };
    let ps = model_file(MASSTREE, &ov(PolicySpec::Ps { slice_us: 30.0 }));
    assert!(!engine::per_node_path_applies(&ps), "a preemptive node's schedule needs the event loop");
    let base = r#"
name = "one"
requests = 1000
[load]
utilization = 0.5
[[service]]
name = "s"
instances = 4
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1 }
[[stage]]
name = "q"
service = "s"
fanout = 2
"#;
    let plain = model_from(base, &Overrides::default());
    assert!(engine::per_node_path_applies(&plain));
    let two_cores = base.replace("instances = 4", "instances = 4\ncores = 2");
    assert!(!engine::per_node_path_applies(&model_from(&two_cores, &Overrides::default())));
    let noisy = format!("{base}[noise]\nrate_per_sec = 500\nduration = {{ kind = \"exp\", mean_ms = 0.05 }}\n");
    assert!(!engine::per_node_path_applies(&model_from(&noisy, &Overrides::default())));
    let chain = model_file("scenarios/tailclipper-chain-exp.toml", &Overrides::default());
    assert!(!engine::per_node_path_applies(&chain));
}

#[test]
fn a_run_too_large_to_draw_up_front_streams_through_the_event_loop() {
    // The path keeps every drawn task in memory; the TailGuard case's mean
    // fan-out is 2.7, so 5 M queries would be ~14 M tasks and 7 M ~19 M.
    let at = |requests: u64| {
        let ov = Overrides { requests: Some(requests), warmup: Some(0), ..Default::default() };
        engine::per_node_path_applies(&model_file(MASSTREE, &ov))
    };
    const { assert!(engine::PER_NODE_MAX_TASKS < 19e6 && engine::PER_NODE_MAX_TASKS > 14e6) };
    assert!(at(5_000_000), "~14 M tasks fit");
    assert!(!at(7_000_000), "~19 M tasks do not");
}
