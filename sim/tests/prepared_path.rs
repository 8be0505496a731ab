//! The prepared path (`engine::prepared_path_applies`: a producer thread draws
//! each request's arrival, class, fan-out, instances, budget and demands ahead
//! of the engine) must give exactly the single-threaded general path's results:
//! every per-request record, every run counter and the summary.

mod same_results;

use same_results::{assert_same, model_file, model_from};
use tailor_core::PolicySpec;
use tailor_sim::engine::{self, Path as EnginePath};
use tailor_sim::model::{LoadOverride, Model, Overrides};

/// Runs `m` on the prepared path (it must qualify) and on the general one, and compares.
fn check(what: &str, m: &Model) {
    assert!(engine::prepared_path_applies(m), "{what}: should qualify for the prepared path");
    let prepared = engine::run_with(m, EnginePath::Prepared);
    let general = engine::run_with(m, EnginePath::General);
    assert_same(what, &prepared, &general);
}

const MASSTREE: &str = "scenarios/seeds/tailguard/fig04a-masstree.toml";

#[test]
fn tailguard_fan_out_case_is_identical_on_both_paths() {
    // Fan-outs 1/10/100 over 100 one-core servers, Masstree demands, TailGuard
    // deadlines: many chunks, requests in flight across chunk boundaries.
    for (policy, util) in [
        (PolicySpec::Edf, 0.3),
        (PolicySpec::Fifo, 0.5),
        (PolicySpec::Edf, 0.9),
        (PolicySpec::Ps { slice_us: 30.0 }, 0.5),
    ] {
        let name = policy.name();
        let ov = Overrides {
            policy: Some(policy),
            load: Some(LoadOverride::Utilization(util)),
            requests: Some(30_000),
            warmup: Some(1_000),
            ..Default::default()
        };
        check(&format!("masstree {name} at {util}"), &model_file(MASSTREE, &ov));
    }
}

#[test]
fn large_runs_take_the_prepared_path_by_default_with_the_same_results() {
    let ov = Overrides { requests: Some(engine::PREPARED_MIN_REQUESTS), warmup: Some(0), ..Default::default() };
    let m = model_file(MASSTREE, &ov);
    assert!(engine::prepared_path_applies(&m));
    assert_same("masstree, automatic path", &engine::run(&m), &engine::run_with(&m, EnginePath::General));
}

#[test]
fn classes_placements_noise_and_gates_are_identical_on_both_paths() {
    // Two classes with their own fan-outs and placement, heterogeneous
    // instances (per-placement budgets), two cores per node and OS noise:
    // every draw a prepared request makes, and engine state it must not
    // depend on. Then one node behind an admission gate (gates front a
    // single instance).
    let toml = r#"
name = "mixed"
seed = 21
requests = 20000
warmup = 500
[load]
utilization = 0.6
arrival = { kind = "pareto", alpha = 1.5 }
[[service]]
name = "s"
instances = 6
cores = 2
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
[noise]
rate_per_sec = 500
duration = { kind = "exp", mean_ms = 0.05 }
"#;
    check("classes, placements and noise", &model_from(toml, &Overrides::default()));
    let gated = r#"
name = "gated"
seed = 22
requests = 20000
warmup = 500
[load]
utilization = 0.8
[[service]]
name = "s"
cores = 2
policy = { kind = "ps", slice_us = 50 }
admit = { kind = "edf", c = 1 }
service_time = { kind = "lognormal", mean_ms = 1, sd_ms = 2 }
[[class]]
name = "c"
slo_ms = 20
[deadlines]
mode = "slo"
"#;
    check("a gated node", &model_from(gated, &Overrides::default()));
}

#[test]
fn chains_and_networks_stay_on_the_general_path() {
    let chain = model_file("scenarios/tailclipper-chain-exp.toml", &Overrides::default());
    assert!(!engine::prepared_path_applies(&chain), "a chain's later stages draw after the arrival");
}
