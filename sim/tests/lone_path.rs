//! The lone-request path (`engine::lone_path_applies`: one stage, one
//! single-instance node, a non-preemptive queue policy) must give exactly the
//! general path's results: every per-request record and every run counter.

mod same_results;

use same_results::{assert_same, model_file, model_from};
use tailor_core::PolicySpec;
use tailor_sim::engine::{self, Path as EnginePath};
use tailor_sim::model::{LoadOverride, Model, Overrides};

/// Runs `m` through both paths (it must qualify for the lone one) and compares.
fn check(what: &str, m: &Model) {
    assert!(engine::lone_path_applies(m), "{what}: should take the lone-request path");
    let lone = engine::run_with(m, EnginePath::Auto);
    let general = engine::run_with(m, EnginePath::General);
    assert_same(what, &lone, &general);
}

#[test]
fn mmc_fifo_scenario_is_identical_on_both_paths() {
    let ov = Overrides { requests: Some(100_000), warmup: Some(5_000), ..Default::default() };
    check("mmc-fifo", &model_file("scenarios/mmc-fifo.toml", &ov));
    // Near saturation: long queues, every CPU busy most of the time.
    let ov = Overrides { load: Some(LoadOverride::Utilization(0.98)), requests: Some(50_000), ..ov };
    check("mmc-fifo at 0.98", &model_file("scenarios/mmc-fifo.toml", &ov));
}

#[test]
fn deterministic_arrivals_and_fixed_demands_tie_break_identically() {
    // Integer gaps and demands: arrivals and completions fall on the same
    // nanosecond all the time, so the (time, seq) tie-break is exercised.
    for (cores, util) in [(1, 0.5), (2, 1.0), (3, 0.75)] {
        let toml = format!(
            r#"
name = "ties"
seed = 9
requests = 20000
warmup = 100
[load]
utilization = {util}
arrival = {{ kind = "deterministic" }}
[[service]]
name = "s"
cores = {cores}
policy = {{ kind = "fifo" }}
service_time = {{ kind = "fixed", value_ms = 0.5 }}
"#
        );
        check(&format!("ties, {cores} cores at {util}"), &model_from(&toml, &Overrides::default()));
    }
}

const TWO_CLASSES: &str = r#"
name = "classes"
seed = 11
requests = 40000
warmup = 2000
[load]
utilization = 0.9
arrival = { kind = "pareto", alpha = 1.5 }
[[service]]
name = "s"
cores = 3
policy = { kind = "fifo" }
service_time = { kind = "lognormal", mean_ms = 1, sd_ms = 2 }
[[class]]
name = "gold"
weight = 1
slo_ms = 5
[[class]]
name = "bronze"
weight = 3
slo_ms = 20
[deadlines]
mode = "slo"
"#;

#[test]
fn every_queue_policy_with_classes_and_deadlines_is_identical_on_both_paths() {
    for policy in [
        PolicySpec::Fifo,
        PolicySpec::Gfifo,
        PolicySpec::Edf,
        PolicySpec::Priq,
        PolicySpec::Lifo,
        PolicySpec::Random { seed: 5 },
    ] {
        let name = policy.name();
        let ov = Overrides { policy: Some(policy), ..Default::default() };
        check(&format!("two classes, {name}"), &model_from(TWO_CLASSES, &ov));
    }
}

#[test]
fn admission_control_and_a_shared_host_are_identical_on_both_paths() {
    let overload = r#"
name = "ac"
seed = 4
requests = 30000
warmup = 3000
[load]
utilization = 1.3
[[service]]
name = "s"
cores = 2
policy = { kind = "edf" }
service_time = { kind = "exp", mean_ms = 1 }
[[class]]
name = "c"
slo_ms = 10
[deadlines]
mode = "slo"
[admission]
r_th = 0.02
window_ms = 5
"#;
    let m = model_from(overload, &Overrides::default());
    let (rec, _) = engine::run(&m);
    assert!(rec.rejected_by_class[0] > 0, "the overload should be shed");
    check("admission control", &m);

    let host = r#"
name = "host"
seed = 2
requests = 20000
warmup = 1000
[load]
utilization = 0.7
arrival = { kind = "gaps", dist = { kind = "uniform", min_ms = 0, max_ms = 1 } }
[[host]]
name = "h"
cores = 2
policy = { kind = "gfifo" }
[[service]]
name = "s"
host = "h"
service_time = { kind = "mixture", parts = [
    { weight = 0.9, dist = { kind = "fixed", value_ms = 0.5 } },
    { weight = 0.1, dist = { kind = "exp", mean_ms = 5 } },
] }
"#;
    check("one service on a host", &model_from(host, &Overrides::default()));
}

#[test]
fn other_scenarios_take_the_general_path() {
    let ov = Overrides { requests: Some(100), warmup: Some(0), ..Default::default() };
    let general = |file: &str, ov: &Overrides| !engine::lone_path_applies(&model_file(file, ov));
    assert!(general("scenarios/tailclipper-chain-exp.toml", &ov), "a chain");
    assert!(general("scenarios/tailguard-masstree.toml", &ov), "fan-out");
    assert!(general("scenarios/dag-branches.toml", &ov), "a DAG");
    let orf = Overrides { policy: Some(PolicySpec::Orf { c: 4, slice_us: 30.0 }), ..ov.clone() };
    assert!(general("scenarios/mmc-fifo.toml", &orf), "a preemptive policy");
    let capped = TWO_CLASSES.replace("arrival = { kind = \"pareto\", alpha = 1.5 }", "in_flight_cap = 3");
    assert!(!engine::lone_path_applies(&model_from(&capped, &ov)), "an in-flight cap");
}
