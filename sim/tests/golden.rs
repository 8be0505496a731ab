//! Fixed-seed outputs of the engine must not change by accident: every shipped
//! scenario (`scenarios/*.toml`, `scenarios/seeds/*/*.toml`) under each policy it names,
//! plus inline scenarios for the features no shipped file uses (reject-late admission,
//! count and time windows, per-task returns, gates, traces, class placement), is run
//! and its full summary, run counters and a hash of every per-request record are
//! compared with `tests/fixtures/engine_golden.json`.
//!
//! A change that is meant to move results regenerates the file with
//! `TAILOR_BLESS_GOLDEN=1 cargo test --release -p tailor-sim --test golden` and says
//! so in its commit message.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tailor_core::PolicySpec;
use tailor_sim::engine::{self, Path as EnginePath, RunStats};
use tailor_sim::metrics::Recorder;
use tailor_sim::model::{LoadOverride, Model, Overrides};
use tailor_sim::scenario::{LoadedScenario, Scenario};
use tailor_sim::sweep::{default_threads, parallel_map, policy_label};

/// Measured requests per case: enough to reach every code path (queues build up,
/// windows fill), small enough that the whole set (about 110 cases) runs in well
/// under a minute in release.
const REQUESTS: u64 = 5_000;
const WARMUP: u64 = 500;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine_golden.json")
}

/// FNV-1a over the words of every per-request record and counter.
struct Fnv(u64);

impl Fnv {
    fn words(&mut self, words: impl IntoIterator<Item = u64>) {
        for w in words {
            for b in w.to_le_bytes() {
                self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
}

fn fingerprint(rec: &Recorder, stats: &RunStats) -> Value {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.words(rec.gat.iter().copied());
    h.words(rec.latency.iter().copied());
    h.words(rec.ideal_latency.iter().copied());
    h.words(rec.class.iter().map(|&c| c as u64));
    h.words(rec.fanout.iter().map(|&k| k as u64));
    h.words(rec.demand.iter().copied());
    h.words(rec.rejected_by_class.iter().copied());
    let summary = serde_json::to_value(rec.summarize()).expect("a summary serialises");
    json!({
        "records_fnv": format!("{:016x}", h.0),
        "records": rec.latency.len(),
        "admitted": rec.admitted,
        "tasks_dequeued": rec.tasks_dequeued,
        "tasks_missed": rec.tasks_missed,
        "events": stats.events,
        "arrivals": stats.arrivals,
        "end_time": stats.end_time,
        "noise_stolen": stats.noise_stolen,
        "preemptions": stats.preemptions,
        "rejected_late": stats.rejected_late,
        "summary": summary,
    })
}

struct Case {
    label: String,
    model: Model,
    path: EnginePath,
}

fn overrides(policy: Option<PolicySpec>) -> Overrides {
    Overrides { policy, requests: Some(REQUESTS), warmup: Some(WARMUP), ..Default::default() }
}

/// Every shipped scenario file, under its own policy and each one its sweep or search names.
fn shipped_cases(cases: &mut Vec<Case>) {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["scenarios", "scenarios/seeds/tailclipper", "scenarios/seeds/tailguard", "scenarios/seeds/tales"] {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 25, "the shipped scenarios moved: found {} files", files.len());
    for path in files {
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        let loaded: LoadedScenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut policies: Vec<Option<PolicySpec>> = vec![None];
        let sc = &loaded.scenario;
        let named =
            sc.sweep.iter().flat_map(|s| s.policies.iter()).chain(sc.search.iter().flat_map(|s| s.policies.iter()));
        for p in named {
            if !policies.contains(&Some(p.clone())) {
                policies.push(Some(p.clone()));
            }
        }
        for policy in policies {
            let label = format!("{rel} [{}]", policy.as_ref().map_or("file".to_string(), policy_label));
            let model = Model::build(&loaded, &overrides(policy)).unwrap_or_else(|e| panic!("{label}: {e}"));
            cases.push(Case { label, model, path: EnginePath::Auto });
        }
    }
}

fn inline(cases: &mut Vec<Case>, label: &str, toml: &str, ov: Overrides) {
    let loaded = Scenario::from_toml(toml, &repo_root().join("scenarios").join(format!("{label}.toml")))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let model = Model::build(&loaded, &ov).unwrap_or_else(|e| panic!("{label}: {e}"));
    cases.push(Case { label: format!("inline {label}"), model, path: EnginePath::Auto });
}

fn fan_out(utilization: f64, admission: &str) -> String {
    format!(
        r#"
name = "fan-out"
seed = 4
[load]
utilization = {utilization}
[[service]]
name = "s"
instances = 10
policy = {{ kind = "edf" }}
service_time = {{ kind = "exp", mean_ms = 1 }}
[[stage]]
name = "q"
service = "s"
fanout = {{ values = [1, 5], weights = [5, 1] }}
[[class]]
name = "c"
slo_ms = 10
[deadlines]
mode = "tailguard"
{admission}
"#
    )
}

fn inline_cases(cases: &mut Vec<Case>, trace_dir: &Path) {
    let ov = || overrides(None);
    inline(cases, "fan-out-no-admission", &fan_out(0.9, ""), ov());
    inline(cases, "fan-out-time-window", &fan_out(1.3, "[admission]\nr_th = 0.02\nwindow_ms = 5\n"), ov());
    inline(cases, "fan-out-count-window", &fan_out(1.3, "[admission]\nr_th = 0.02\nwindow_tasks = 1000\n"), ov());
    inline(
        cases,
        "fan-out-reject-late",
        &fan_out(1.5, "[admission]\nr_th = 0.999\nwindow_ms = 5\nreject_late = true\n"),
        ov(),
    );
    for returns in ["per-task", "per-request"] {
        let toml = format!(
            r#"
name = "hops"
seed = 61
[load]
utilization = 0.6
[network]
delay = {{ kind = "exp", mean_ms = 0.2 }}
returns = "{returns}"
[[service]]
name = "s"
instances = 20
cores = 1
policy = {{ kind = "orf", c = 1, slice_us = 50 }}
service_time = {{ kind = "lognormal", mean_ms = 1, sd_ms = 1 }}
[[stage]]
name = "fan"
service = "s"
fanout = {{ values = [1, 4, 20], weights = [6, 3, 1] }}
next = [ {{ stage = "after", p = 0.5 }} ]
[[stage]]
name = "after"
service = "s"
[[class]]
name = "c"
slo_ms = 20
[deadlines]
mode = "tailguard"
"#
        );
        inline(cases, &format!("hops-{returns}"), &toml, ov());
    }
    let gate = r#"
name = "gate"
seed = 32
[load]
utilization = 0.8
[[host]]
name = "node"
cores = 2
policy = { kind = "ps", slice_us = 20 }
[[service]]
name = "a"
host = "node"
admit = { kind = "gfifo", c = 2 }
service_time = { kind = "exp", mean_ms = 1 }
[[service]]
name = "b"
host = "node"
admit = { kind = "fifo", c = 1 }
service_time = { kind = "exp", mean_ms = 0.5 }
"#;
    inline(cases, "gates-on-a-ps-host", gate, ov());
    let placement = r#"
name = "class-placement"
seed = 71
[load]
utilization = 0.7
[[class]]
name = "A"
slo_ms = 8
[[class]]
name = "B"
slo_ms = 12
[[service]]
name = "s"
instances = 4
cores = 2
groups = [ { first = 0, count = 1, scale = 2.0 } ]
policy = { kind = "fair", min_granularity_ms = 0.1, latency_ms = 1 }
service_time = { kind = "exp", mean_ms = 1.0 }
[[stage]]
name = "one"
service = "s"
fanout = { values = [1, 2], weights = [1, 1] }
weights_by_class = { A = [ { first = 0, count = 1, weight = 3.0 } ] }
[deadlines]
mode = "tailguard"
"#;
    // Instance 0 is slow and class A prefers it: its queue grows through the run, and
    // the fair policy's cost per event with it, so this case runs fewer requests.
    let few = Overrides { requests: Some(1_000), warmup: Some(100), ..Default::default() };
    inline(cases, "class-placement", placement, few);
    let classes = r#"
name = "classes"
seed = 11
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
[admission]
r_th = 0.05
window_tasks = 500
"#;
    for policy in
        [PolicySpec::Fifo, PolicySpec::Edf, PolicySpec::Priq, PolicySpec::Lifo, PolicySpec::Random { seed: 5 }]
    {
        let name = policy.name();
        inline(cases, &format!("pareto-classes-{name}"), classes, overrides(Some(policy)));
    }
    let capped = classes.replace("arrival = { kind = \"pareto\", alpha = 1.5 }", "in_flight_cap = 3");
    inline(cases, "in-flight-cap", &capped, ov());
    let ties = r#"
name = "ties"
seed = 9
[load]
utilization = 1.0
arrival = { kind = "deterministic" }
[[service]]
name = "s"
cores = 2
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 0.5 }
"#;
    inline(cases, "deterministic-ties", ties, ov());
    // Trace replay: a small bursty trace, repeated and scaled to the load.
    let trace = trace_dir.join("golden-trace.csv");
    let mut csv = String::from("arrival_ms\n");
    let mut t = 0.0f64;
    for i in 0..500u32 {
        t += if i % 10 < 3 { 0.05 } else { 1.3 } + (i % 7) as f64 * 0.01;
        csv.push_str(&format!("{t:.3}\n"));
    }
    std::fs::write(&trace, csv).expect("write the trace");
    let traced = format!(
        r#"
name = "trace"
seed = 5
[load]
utilization = 0.7
arrival = {{ kind = "trace", file = "{}" }}
[[service]]
name = "a"
cores = 2
policy = {{ kind = "orf", c = 2, slice_us = 30 }}
service_time = {{ kind = "exp", mean_ms = 1 }}
[[service]]
name = "b"
cores = 2
policy = {{ kind = "rr", slice_us = 100 }}
service_time = {{ kind = "exp", mean_ms = 1 }}
[noise]
rate_per_sec = 500
duration = {{ kind = "exp", mean_ms = 0.05 }}
"#,
        trace.display()
    );
    inline(cases, "trace-noise-chain", &traced, ov());
}

fn all_cases(trace_dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    shipped_cases(&mut cases);
    inline_cases(&mut cases, trace_dir);
    // The lone-request scenarios once more through the general path: both are pinned.
    let lone: Vec<(String, Model)> = cases
        .iter()
        .filter(|c| engine::lone_path_applies(&c.model))
        .map(|c| (format!("{} (general path)", c.label), c.model.clone()))
        .collect();
    assert!(lone.len() >= 5, "few lone-path cases: {}", lone.len());
    cases.extend(lone.into_iter().map(|(label, model)| Case { label, model, path: EnginePath::General }));
    let mut seen = std::collections::HashSet::new();
    for c in &cases {
        assert!(seen.insert(c.label.clone()), "two cases are labelled {}", c.label);
    }
    cases
}

#[test]
fn fixed_seed_outputs_match_the_golden_file() {
    let trace_dir = std::env::temp_dir().join(format!("tailor-golden-{}", std::process::id()));
    std::fs::create_dir_all(&trace_dir).expect("temp dir");
    let cases = all_cases(&trace_dir);
    let outputs = parallel_map(&cases, default_threads(), |c| {
        let (rec, stats) = engine::run_with(&c.model, c.path);
        fingerprint(&rec, &stats)
    });
    std::fs::remove_dir_all(&trace_dir).ok();
    let got: BTreeMap<String, Value> = cases.iter().map(|c| c.label.clone()).zip(outputs).collect();

    // Compared as text: the file is exactly what a run writes, so equal runs give equal
    // text whatever a JSON parser does with the last digit of a float.
    let now = serde_json::to_string_pretty(&got).expect("serialise") + "\n";
    if std::env::var_os("TAILOR_BLESS_GOLDEN").is_some() {
        std::fs::write(fixture(), &now).expect("write the golden file");
        eprintln!("wrote {} cases to {}", got.len(), fixture().display());
        return;
    }
    let text = std::fs::read_to_string(fixture()).unwrap_or_else(|e| {
        panic!("{}: {e}; create it with TAILOR_BLESS_GOLDEN=1 (see the top of this file)", fixture().display())
    });
    if text == now {
        return;
    }
    // Name the cases that differ. Both sides are parsed from text by the same parser
    // (which may round a float's last digit), so a case differs only if its text does.
    let want: BTreeMap<String, Value> = serde_json::from_str(&text).expect("the golden file is JSON");
    let got: BTreeMap<String, Value> = serde_json::from_str(&now).expect("a run's output is JSON");
    let mut problems = Vec::new();
    for (label, w) in &want {
        match got.get(label) {
            None => problems.push(format!("{label}: in the golden file but no longer run")),
            Some(g) if g != w => problems.push(format!("{label}:\n  want {w}\n  got  {g}")),
            Some(_) => {}
        }
    }
    for label in got.keys().filter(|l| !want.contains_key(*l)) {
        problems.push(format!("{label}: not in the golden file (bless it if the case is new)"));
    }
    panic!(
        "{} of {} cases differ from {}:\n{}",
        problems.len(),
        got.len(),
        fixture().display(),
        if problems.is_empty() { "(only in formatting)".to_string() } else { problems.join("\n") }
    );
}

#[test]
fn the_fingerprint_sees_a_one_nanosecond_change() {
    let loaded = Scenario::load(&repo_root().join("scenarios/mmc-fifo.toml")).unwrap_or_else(|e| panic!("{e}"));
    let ov = Overrides {
        requests: Some(2_000),
        warmup: Some(0),
        load: Some(LoadOverride::Utilization(0.5)),
        ..Default::default()
    };
    let (mut rec, stats) = engine::run(&Model::build(&loaded, &ov).unwrap());
    let before = fingerprint(&rec, &stats);
    rec.latency[1_000] += 1;
    let after = fingerprint(&rec, &stats);
    assert_ne!(before["records_fnv"], after["records_fnv"]);
}
