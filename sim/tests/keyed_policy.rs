//! The `keyed` policy (key ordering, what the kernel enforces under `tailor agent
//! --enforce priority`) in scenario files: it runs, it agrees with global FCFS where the
//! two must agree, and bad parameters are named.

use std::path::Path;

use tailor_sim::engine;
use tailor_sim::model::{Model, Overrides};
use tailor_sim::scenario::Scenario;

fn scenario(policy: &str) -> String {
    format!(
        r#"
name = "keyed"
seed = 11
requests = 20000
warmup = 1000
[load]
rps = 1500
[[service]]
name = "s"
cores = 2
policy = {policy}
service_time = {{ kind = "exp", mean_ms = 1 }}
"#
    )
}

fn latencies(policy: &str) -> Vec<u64> {
    let text = scenario(policy);
    let loaded = Scenario::from_toml(&text, Path::new("keyed.toml")).unwrap_or_else(|e| panic!("{e}"));
    let model = Model::build(&loaded, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    engine::run(&model).0.latency
}

#[test]
fn keyed_by_gat_on_one_node_is_global_fcfs() {
    // One node, one task per request: keys arrive in order, so key ordering never
    // preempts and serves in GAT order, whatever the bucket (fine buckets move the base
    // thousands of times in this run, coarse ones put many keys on one level).
    let gfifo = latencies(r#"{ kind = "gfifo" }"#);
    assert_eq!(gfifo.len(), 20000);
    for bucket in ["1", "50", "100000"] {
        let keyed = latencies(&format!(r#"{{ kind = "keyed", key = "gat", bucket_us = {bucket} }}"#));
        assert_eq!(keyed, gfifo, "bucket {bucket} µs");
    }
    // The defaults are the agent's: key = gat, 1000 µs.
    assert_eq!(latencies(r#"{ kind = "keyed" }"#), gfifo);
}

fn error(policy: &str) -> String {
    let text = scenario(policy);
    match Scenario::from_toml(&text, Path::new("dir/keyed.toml")) {
        Ok(loaded) => match Model::build(&loaded, &Overrides::default()) {
            Ok(_) => panic!("accepted: {policy}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_keyed_parameters_are_named() {
    let e = error(r#"{ kind = "keyed", bucket = 5 }"#);
    assert!(e.contains("dir/keyed.toml") && e.contains("`bucket`") && e.contains("bucket_us"), "{e}");
    let e = error(r#"{ kind = "keyed", key = "class" }"#);
    assert!(e.contains("class") && e.contains("gat") && e.contains("deadline"), "{e}");
    let e = error(r#"{ kind = "keyed", bucket_us = 0 }"#);
    assert!(e.contains("keyed") && e.contains("bucket_us"), "{e}");
}
