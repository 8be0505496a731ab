//! Behaviour of the simulator's features beyond the single-queue oracles:
//! in-flight cap, OS noise, context switches, admission control, call graphs,
//! trace replay, determinism across threads, and scenario errors.

use std::path::Path;

use tailor_sim::engine;
use tailor_sim::model::{class_shares, expected_visits, LoadOverride, Model, Overrides};
use tailor_sim::scenario::Scenario;
use tailor_sim::sweep::{self, parallel_map};
use tailor_sim::theory;

fn model(toml: &str, ov: Overrides) -> Model {
    let loaded = Scenario::from_toml(toml, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e}"));
    Model::build(&loaded, &ov).unwrap_or_else(|e| panic!("{e}"))
}

fn mean_ms(lat: &[u64]) -> f64 {
    lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len() as f64 / 1e6
}

#[test]
fn in_flight_cap_of_one_turns_four_cores_into_mm1() {
    // With at most one request inside, four cores serve like one: the edge
    // queue is the M/M/1 queue. Mean 1/(μ−λ) = 2.5 ms at λ = 0.6/ms.
    let toml = r#"
name = "cap"
seed = 5
requests = 200000
warmup = 10000
[load]
rps = 600
in_flight_cap = 1
[[service]]
name = "s"
cores = 4
policy = { kind = "fifo" }
service_time = { kind = "exp", mean_ms = 1 }
"#;
    let (rec, _) = engine::run(&model(toml, Overrides::default()));
    let m = mean_ms(&rec.latency);
    let want = theory::mm1_mean_response(0.6, 1.0);
    // Batch-means SE of this run is ≈ 0.015 ms (measured); allow 4 SE.
    assert!((m - want).abs() < 0.06, "mean {m} vs M/M/1 {want}");
}

const CHAIN_FIXED: &str = r#"
name = "chain"
seed = 3
requests = 20000
warmup = 1000
[load]
rps = 250
[[service]]
name = "a"
cores = 3
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 5 }
[[service]]
name = "b"
cores = 3
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 5 }
"#;

#[test]
fn equal_demands_do_not_reorder_without_noise_and_do_with_it() {
    // TailClipper §2.3: with equal demands, FCFS never reorders in theory;
    // scheduler noise (interrupts) makes it reorder.
    let quiet = model(CHAIN_FIXED, Overrides::default());
    let s = engine::run(&quiet).0.summarize();
    assert_eq!(s.reordering_pct, 0.0, "no noise, equal demands: nothing overtakes");
    let noisy_toml =
        format!("{CHAIN_FIXED}\n[noise]\nrate_per_sec = 2000\nduration = {{ kind = \"exp\", mean_ms = 0.05 }}\n");
    let noisy = model(&noisy_toml, Overrides::default());
    let (rec, stats) = engine::run(&noisy);
    let s = rec.summarize();
    assert!(stats.noise_stolen > 0);
    assert!(s.reordering_pct > 1.0, "noise should reorder some requests, got {}%", s.reordering_pct);
}

#[test]
fn context_switch_cost_slows_round_robin_but_not_fifo() {
    let base = r#"
name = "cs"
seed = 9
requests = 20000
warmup = 1000
[load]
utilization = 0.8
[[service]]
name = "s"
cores = 2
policy = { kind = "rr", slice_us = 100 }
service_time = { kind = "exp", mean_ms = 1 }
"#;
    let with_cost = base.replace("service_time", "context_switch_us = 5\nservice_time");
    let rr = |t: &str, p: Option<&str>| {
        let policy = p.map(|n| toml::from_str::<Wrap>(&format!("p = {{ kind = \"{n}\" }}")).unwrap().p);
        let (rec, stats) = engine::run(&model(t, Overrides { policy, ..Default::default() }));
        (rec.summarize().latency_ms.mean, stats.preemptions)
    };
    #[derive(serde::Deserialize)]
    struct Wrap {
        p: tailor_core::PolicySpec,
    }
    let (free, preempt) = rr(base, None);
    let (costly, _) = rr(&with_cost, None);
    assert!(preempt > 10_000, "rr with a 100 µs slice preempts often: {preempt}");
    assert!(costly > free * 1.02, "5 µs per re-dispatch must cost: {free} → {costly}");
    let (fifo_free, fifo_preempt) = rr(base, Some("fifo"));
    let (fifo_costly, _) = rr(&with_cost, Some("fifo"));
    assert_eq!(fifo_preempt, 0);
    assert_eq!(fifo_free, fifo_costly, "fifo never re-dispatches, so the cost never applies");
}

/// Ten EDF servers at `utilization`, queries of fan-out 1 or 5, one class with a 10 ms
/// p99 SLO and TailGuard deadlines, then `admission` (a TOML section, or nothing).
fn overloaded_fan_out(utilization: f64, admission: &str) -> String {
    format!(
        r#"
name = "ac"
seed = 4
requests = 60000
warmup = 5000
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

#[test]
fn admission_control_rejects_under_overload_and_protects_the_tail() {
    let toml = &overloaded_fan_out(1.3, "[admission]\nr_th = 0.02\nwindow_ms = 5\n");
    // The controller is the paper's rule, which sheds more than the 23% excess:
    // a miss is only seen when a late task is dequeued, so it reacts a queuing
    // budget late and then rejects until the misses age out of the window.
    let with = engine::run(&model(toml, Overrides::default())).0.summarize();
    assert!(with.rejected_pct > 23.0 * 0.9, "30% overload must be shed: {}%", with.rejected_pct);
    assert!(with.rejected_pct < 90.0, "but not everything: {}%", with.rejected_pct);
    assert!(with.latency_ms.p99 < 30.0, "admitted requests keep a bounded tail: {}", with.latency_ms.p99);
    let without = engine::run(&model(&overloaded_fan_out(1.3, ""), Overrides::default())).0.summarize();
    assert_eq!(without.rejected, 0);
    assert!(
        without.latency_ms.p99 > 10.0 * with.latency_ms.p99,
        "overload without admission: {}",
        without.latency_ms.p99
    );
}

/// TailGuard §IV.D's rule: the miss ratio over the last N task outcomes, no clock. A
/// rejected request's tasks move the window, so it never locks out (a window that only
/// outcomes move would hold the overload's misses for good once everything is rejected).
/// Like the time window it over-rejects here (measured: 89% against the 64% of a 5 ms
/// window, seed 4): the simulator counts a miss when the late task is dequeued, a queuing
/// budget after the overload began, and the misses of the queue built by then keep
/// arriving while it rejects.
#[test]
fn a_count_window_sheds_the_excess_and_never_locks_out() {
    let toml = &overloaded_fan_out(1.3, "[admission]\nr_th = 0.02\nwindow_tasks = 1000\n");
    let counted = engine::run(&model(toml, Overrides::default())).0.summarize();
    let timed = engine::run(&model(
        &overloaded_fan_out(1.3, "[admission]\nr_th = 0.02\nwindow_ms = 5\n"),
        Overrides::default(),
    ))
    .0
    .summarize();
    eprintln!(
        "count window: rejected {:.1}%, p99 {:.2} ms; time window: rejected {:.1}%, p99 {:.2} ms",
        counted.rejected_pct, counted.latency_ms.p99, timed.rejected_pct, timed.latency_ms.p99
    );
    assert!(counted.rejected_pct > 23.0 * 0.9, "30% overload must be shed: {}%", counted.rejected_pct);
    assert!(counted.rejected_pct < 95.0, "not locked out: {}%", counted.rejected_pct);
    assert!(counted.latency_ms.p99 < 30.0, "admitted requests keep a bounded tail: {}", counted.latency_ms.p99);
}

#[test]
fn the_admission_section_names_a_bad_or_missing_window() {
    let with = |section: &str| Scenario::from_toml(&overloaded_fan_out(0.5, section), Path::new("ac.toml"));
    let err = with("[admission]\nr_th = 0.02\nwindow_task = 1000\n").unwrap_err().to_string();
    assert!(err.contains("window_task"), "an unknown key is named: {err}");
    let err = with("[admission]\nr_th = 0.02\n").unwrap_err().to_string();
    assert!(err.contains("window_ms") && err.contains("window_tasks"), "no window: {err}");
    let err = with("[admission]\nr_th = 0.02\nwindow_tasks = 0\n").unwrap_err().to_string();
    assert!(err.contains("window_tasks = 0"), "{err}");
    assert!(with("[admission]\nr_th = 0.02\nwindow_tasks = 10\nwindow_ms = 5\n").is_ok());
    // `refused` only means something to a count window; an unknown reading is named.
    let err = with("[admission]\nr_th = 0.02\nwindow_ms = 5\nrefused = \"on_time\"\n").unwrap_err().to_string();
    assert!(err.contains("refused") && err.contains("window_tasks"), "{err}");
    let err = with("[admission]\nr_th = 0.02\nwindow_tasks = 10\nrefused = \"late\"\n").unwrap_err().to_string();
    assert!(err.contains("on_time"), "the readings are listed: {err}");
    let ok = "[admission]\nr_th = 0.02\nwindow_tasks = 10\nrefused = \"ignored\"\nproportional = true\nmin_tasks = 5\n";
    assert!(with(ok).is_ok());
}

/// The handler's `reject_late` in the model: at 1.5× overload of ten EDF servers with
/// fan-outs 1 and 5, turning away the queries whose tasks would wait past their
/// deadlines holds the class's p99 within its SLO while the ratio (R_th 0.999) never acts,
/// and sheds about the excess rather than everything.
#[test]
fn rejecting_late_tasks_holds_the_slo_at_overload() {
    let toml = &overloaded_fan_out(1.5, "[admission]\nr_th = 0.999\nwindow_ms = 5\nreject_late = true\n");
    let (rec, stats) = engine::run(&model(toml, Overrides::default()));
    let s = rec.summarize();
    eprintln!(
        "rejected {:.1}%, p99 {:.2} ms, tasks missed {}/{}",
        s.rejected_pct, s.latency_ms.p99, rec.tasks_missed, rec.tasks_dequeued
    );
    assert!(s.latency_ms.p99 <= 10.0, "the admitted queries' p99 holds the 10 ms SLO: {}", s.latency_ms.p99);
    // A third of the work is excess; fan-out-5 queries are turned away more often, so by
    // queries somewhat less than a third is rejected.
    assert!(s.rejected_pct > 20.0 && s.rejected_pct < 50.0, "sheds about the excess: {}%", s.rejected_pct);
    assert!(
        stats.rejected_late >= s.rejected,
        "every rejection is the late rule's: {} of {}",
        stats.rejected_late,
        s.rejected
    );
    assert!(
        (rec.tasks_missed as f64) < 0.02 * rec.tasks_dequeued as f64,
        "few admitted tasks miss: {}",
        rec.tasks_missed
    );
    // Without admission control the tail grows without bound.
    let without = engine::run(&model(&overloaded_fan_out(1.5, ""), Overrides::default())).0.summarize();
    assert_eq!(without.rejected, 0);
    assert!(without.latency_ms.p99 > 100.0, "1.5× overload unchecked: {}", without.latency_ms.p99);
}

#[test]
fn reject_late_needs_one_root_stage_and_no_in_flight_cap() {
    let toml = r#"
name = "late"
[load]
utilization = 0.5
in_flight_cap = 10
[[service]]
name = "s"
policy = { kind = "edf" }
service_time = { kind = "exp", mean_ms = 1 }
[[class]]
name = "c"
slo_ms = 10
[deadlines]
mode = "slo"
[admission]
r_th = 0.5
window_ms = 5
reject_late = true
"#;
    let loaded = Scenario::from_toml(toml, Path::new("late.toml")).unwrap();
    let err = Model::build(&loaded, &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("late.toml") && err.contains("reject_late") && err.contains("in_flight_cap"), "{err}");
}

#[test]
fn dag_visits_and_utilization_follow_the_branch_probabilities() {
    let loaded = Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/dag-branches.toml")).unwrap();
    let m = Model::build(&loaded, &Overrides::default()).unwrap();
    let v = expected_visits(&m.stages, &m.roots, m.services.len(), &class_shares(&m.classes));
    let idx = |name: &str| m.services.iter().position(|s| s.name == name).unwrap();
    // frontend 1, auth 1, search 0.7 × fanout 4, cache 0.3, logger 0.5.
    for (name, want) in [("frontend", 1.0), ("auth", 1.0), ("search", 2.8), ("cache", 0.3), ("logger", 0.5)] {
        assert!((v[idx(name)] - want).abs() < 1e-12, "{name}: {}", v[idx(name)]);
    }
    assert!((m.utilization - 0.7).abs() < 1e-9);
    // The simulated task counts agree with the expected visits.
    let (rec, _) =
        engine::run(&Model::build(&loaded, &Overrides { requests: Some(40_000), ..Default::default() }).unwrap());
    let searched = rec.fanout.iter().filter(|&&k| k == 4).count() as f64 / rec.fanout.len() as f64;
    // Binomial SE at p = 0.7, n = 40k is 0.0023.
    assert!((searched - 0.7).abs() < 0.01, "fraction fanning out to search: {searched}");
}

#[test]
fn trace_replay_follows_the_file_and_scales_to_a_load() {
    let dir = std::env::temp_dir().join(format!("tailor-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Bursts: 5 arrivals 0.1 ms apart every 10 ms → native rate 500/s.
    let mut csv = String::from("arrival_ms,note\n");
    for burst in 0..20 {
        for i in 0..5 {
            csv.push_str(&format!("{},x\n", burst as f64 * 10.0 + i as f64 * 0.1));
        }
    }
    std::fs::write(dir.join("t.csv"), csv).unwrap();
    let toml = r#"
name = "trace"
requests = 5000
[load]
arrival = { kind = "trace", file = "t.csv" }
[[service]]
name = "s"
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 0.05 }
"#;
    let path = dir.join("trace.toml");
    std::fs::write(&path, toml).unwrap();
    let loaded = Scenario::load(&path).unwrap();
    let native = Model::build(&loaded, &Overrides::default()).unwrap();
    // 99 gaps from 0 to 190.4 ms: 99 / 0.1904 s = 520 requests/s.
    assert!((native.rps - 99.0 / 0.1904).abs() < 1e-6, "{}", native.rps);
    let s = engine::run(&native).0.summarize();
    assert!((s.throughput_rps / native.rps - 1.0).abs() < 0.02, "throughput {} vs {}", s.throughput_rps, native.rps);
    let scaled =
        Model::build(&loaded, &Overrides { load: Some(LoadOverride::Rps(2000.0)), ..Default::default() }).unwrap();
    let s = engine::run(&scaled).0.summarize();
    assert!((s.throughput_rps / 2000.0 - 1.0).abs() < 0.02, "scaled throughput {}", s.throughput_rps);
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "arrival_ms\n1\n0.5\n").unwrap();
    std::fs::write(&path, toml.replace("t.csv", "bad.csv")).unwrap();
    let err = Model::build(&Scenario::load(&path).unwrap(), &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("bad.csv") && err.contains("line 3") && err.contains("sort"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sweeps_are_deterministic_whatever_the_thread_count() {
    let loaded =
        Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/tailclipper-chain-trimodal.toml"))
            .unwrap();
    let ov = Overrides { requests: Some(1500), warmup: Some(100), ..Default::default() };
    let one = sweep::sweep(&loaded, &ov, 1).unwrap();
    let two = sweep::sweep(&loaded, &ov, 2).unwrap();
    assert_eq!(one.len(), 16);
    for (a, b) in one.iter().zip(&two) {
        assert_eq!(a.policy, b.policy);
        assert_eq!(a.events, b.events);
        assert_eq!(serde_json::to_string(&a.summary).unwrap(), serde_json::to_string(&b.summary).unwrap());
    }
    // parallel_map keeps job order.
    assert_eq!(
        parallel_map(&(0..100).collect::<Vec<u32>>(), 4, |x| x * 2),
        (0..100).map(|x| x * 2).collect::<Vec<_>>()
    );
}

#[test]
fn policies_see_the_same_requests() {
    // Common random numbers: a request's demands do not depend on the policy.
    let toml = CHAIN_FIXED.replace(r#"{ kind = "fixed", value_ms = 5 }"#, r#"{ kind = "exp", mean_ms = 5 }"#);
    let run = |p: &str| {
        let policy = Some(toml::from_str::<toml::Value>(&format!("kind = \"{p}\"")).unwrap().try_into().unwrap());
        let (rec, _) = engine::run(&model(&toml, Overrides { policy, ..Default::default() }));
        let mut by_gat: Vec<(u64, u64)> = rec.gat.iter().copied().zip(rec.demand.iter().copied()).collect();
        by_gat.sort();
        by_gat
    };
    assert_eq!(run("fifo"), run("lifo"));
}

#[test]
fn unknown_nested_key_is_reported_with_its_line() {
    let toml = "name = \"x\"\n[load]\nrps = 1\n[[service]]\nname = \"a\"\npolicy = { kind = \"orf\", cc = 4 }\nservice_time = { kind = \"exp\", mean_ms = 1 }\n";
    let err = Scenario::from_toml(toml, Path::new("dir/s.toml")).unwrap_err().to_string();
    assert!(err.starts_with("dir/s.toml"), "{err}");
    assert!(err.contains("line 6"), "{err}");
    assert!(err.contains("cc") && err.contains("slice_us"), "{err}");
}

#[test]
fn tailguard_budgets_come_from_the_planner_or_a_rut_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/tailguard-masstree.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let computed = Model::build(&Scenario::from_toml(&text, &path).unwrap(), &Overrides::default()).unwrap();
    let with_rut =
        text.replace("mode = \"tailguard\"", "mode = \"tailguard\"\nrut_file = \"../data/tailbench/RUT_Mastree\"");
    let table = Model::build(&Scenario::from_toml(&with_rut, &path).unwrap(), &Overrides::default()).unwrap();
    let slo = 800_000; // 0.8 ms
                       // RUT_Mastree lines 1, 10, 100: 0.219, 0.24685, 0.47235 ms (TailGuard Table II).
    for (k, rut) in [(1u32, 219_000u64), (10, 246_850), (100, 472_350)] {
        assert_eq!(table.budgets.get(0, 0, k), Some(slo - rut), "fanout {k} from the table");
        let b = computed.budgets.get(0, 0, k).unwrap();
        // The planner's x_99^u(k) from the quantile table agrees with RUT within
        // 0.4% for k = 1, 10 and sits 4% low at k = 100, where the table's
        // sampling model leaves a flat CDF stretch (core/src/tailguard/tests.rs).
        let planned = slo - b;
        assert!((planned as f64 / rut as f64 - 1.0).abs() < 0.05, "k = {k}: planner {planned} vs RUT {rut}");
    }
    // T-EDFQ ignores the fanout: budget = SLO.
    let slo_mode = text.replace("mode = \"tailguard\"", "mode = \"slo\"");
    let t = Model::build(&Scenario::from_toml(&slo_mode, &path).unwrap(), &Overrides::default()).unwrap();
    assert_eq!(t.budgets.get(0, 0, 100), Some(slo));
}

fn load_err(toml: &str) -> String {
    match tailor_sim::scenario::Scenario::from_toml(toml, std::path::Path::new("bad.toml")) {
        Ok(_) => panic!("scenario should be rejected:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hosts_and_gates_reject_bad_placement_with_the_fix() {
    let e = load_err(
        r#"
name = "x"
[load]
rps = 1
[[service]]
name = "a"
host = "nowhere"
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 1 }
"#,
    );
    assert!(e.contains("host \"nowhere\" is not a declared [[host]]"), "{e}");
    assert!(e.contains("remove `cores`, `policy`"), "{e}");
    let e = load_err(
        r#"
name = "x"
[load]
rps = 1
[[service]]
name = "a"
service_time = { kind = "fixed", value_ms = 1 }
"#,
    );
    assert!(e.contains("no `policy`"), "{e}");
    let e = load_err(
        r#"
name = "x"
[load]
rps = 1
[[host]]
name = "h"
cores = 2
policy = { kind = "fair" }
[[service]]
name = "a"
host = "h"
admit = { kind = "orf", c = 2 }
service_time = { kind = "fixed", value_ms = 1 }
"#,
    );
    assert!(e.contains("unknown variant `orf`") && e.contains("gfifo"), "{e}");
}

#[test]
fn a_service_alone_on_a_host_is_the_same_as_a_service_with_its_own_cpus() {
    let own = r#"
name = "x"
seed = 5
requests = 20000
[load]
utilization = 0.8
[[service]]
name = "a"
cores = 2
policy = { kind = "orf", c = 6, slice_us = 30 }
service_time = { kind = "exp", mean_ms = 1 }
"#;
    let hosted = r#"
name = "x"
seed = 5
requests = 20000
[load]
utilization = 0.8
[[host]]
name = "h"
cores = 2
policy = { kind = "orf", c = 6, slice_us = 30 }
[[service]]
name = "a"
host = "h"
service_time = { kind = "exp", mean_ms = 1 }
"#;
    let run = |t: &str| {
        let loaded = tailor_sim::scenario::Scenario::from_toml(t, std::path::Path::new("x.toml")).unwrap();
        let m = tailor_sim::model::Model::build(&loaded, &Default::default()).unwrap();
        assert!((m.utilization - 0.8).abs() < 1e-9);
        tailor_sim::engine::run(&m).0.latency
    };
    assert_eq!(run(own), run(hosted));
}

#[test]
fn fan_out_by_class_sets_each_class_fan_out_and_the_load_counts_it() {
    // Class "lookup" (weight 3) asks one server, "search" (weight 1) asks 8 of 8,
    // the stage's own fan-out (2) is for nobody: E[k] = 3/4 · 1 + 1/4 · 8 = 2.75.
    let toml = r#"
name = "by-class"
seed = 5
[load]
utilization = 0.01
[[service]]
name = "s"
instances = 8
cores = 1
policy = { kind = "edf" }
service_time = { kind = "exp", mean_ms = 1.0 }
[[stage]]
name = "q"
service = "s"
fanout = 2
fanout_by_class = { lookup = 1, search = 8 }
[[class]]
name = "lookup"
weight = 3
slo_ms = 10
[[class]]
name = "search"
weight = 1
slo_ms = 10
[deadlines]
mode = "tailguard"
"#;
    let m = model(toml, Overrides { requests: Some(40_000), ..Default::default() });
    let v = expected_visits(&m.stages, &m.roots, m.services.len(), &class_shares(&m.classes));
    assert!((v[0] - 2.75).abs() < 1e-12, "visits {}", v[0]);
    // utilization = rps · E[k] · E[S] / instances.
    assert!((m.rps * 2.75 * 1e-3 / 8.0 - 0.01).abs() < 1e-9, "rps {}", m.rps);
    let (rec, _) = engine::run(&m);
    for i in 0..rec.fanout.len() {
        let want = if rec.class[i] == 0 { 1 } else { 8 };
        assert_eq!(rec.fanout[i], want, "request {i} of class {}", rec.class[i]);
    }
    // Nearly unloaded: a search waits for the slowest of 8 Exp(1 ms), mean H_8 = 2.718 ms.
    let search: Vec<f64> =
        (0..rec.fanout.len()).filter(|&i| rec.class[i] == 1).map(|i| rec.latency[i] as f64 / 1e6).collect();
    let mean = search.iter().sum::<f64>() / search.len() as f64;
    let h8: f64 = (1..=8).map(|i| 1.0 / i as f64).sum();
    assert!((mean - h8).abs() < 0.06, "search mean {mean} vs H_8 {h8}");
    // TailGuard budgets follow the class's own fan-out: x_99^u(8) for search, x_99^u(1) for lookup.
    let (lookup, search) = (m.budgets.get(0, 0, 1).unwrap(), m.budgets.get(1, 0, 8).unwrap());
    assert!(m.budgets.get(0, 0, 8).is_none() && m.budgets.get(1, 0, 1).is_none());
    let x1 = -(0.01f64).ln(); // ms
    let x8 = -(1.0 - 0.99f64.powf(1.0 / 8.0)).ln();
    assert!((lookup as f64 / 1e6 - (10.0 - x1)).abs() < 0.01, "lookup budget {lookup}");
    assert!((search as f64 / 1e6 - (10.0 - x8)).abs() < 0.01, "search budget {search}");
}

#[test]
fn a_task_budget_is_eq_1_over_the_instances_its_query_picked() {
    // Two instances of a fixed 1 ms task, the first twice as fast. The k = 1
    // budget in the table is the slowest instance's (SLO 10 − 1 ms); a query
    // that picked the fast one may wait 9.5 ms (Eq. 1 over its own n(k)).
    let toml = r#"
name = "placement-budget"
[load]
utilization = 0.3
[[service]]
name = "s"
instances = 2
cores = 1
policy = { kind = "edf" }
service_time = { kind = "fixed", value_ms = 1.0 }
groups = [ { first = 0, count = 1, scale = 0.5 } ]
[[stage]]
name = "q"
service = "s"
fanout = { values = [1, 2], weights = [1, 1] }
[[class]]
name = "c"
slo_ms = 10
[deadlines]
mode = "tailguard"
"#;
    let m = model(toml, Overrides::default());
    let ms = |x: u64| x as f64 / 1e6;
    let near = |got: Option<u64>, want: f64| got.is_some_and(|b| (ms(b) - want).abs() < 1e-3);
    assert!(near(m.budgets.get(0, 0, 1), 9.0), "{:?}", m.budgets.get(0, 0, 1));
    assert!(near(m.placement_budget(0, 0, &[0]), 9.5), "{:?}", m.placement_budget(0, 0, &[0]));
    assert!(near(m.placement_budget(0, 0, &[1]), 9.0));
    assert!(near(m.placement_budget(0, 0, &[0, 1]), 9.0));
    // T-EDFQ (deadline = SLO) has no placement to account for.
    let slo = model(&toml.replace("mode = \"tailguard\"", "mode = \"slo\""), Overrides::default());
    assert_eq!(slo.placement_budget(0, 0, &[0]), None);
    // The engine runs with per-placement budgets (memoised per instance set).
    let (rec, _) = engine::run(&m);
    assert!(rec.tasks_dequeued > 0);
}

#[test]
fn a_gate_hand_off_delays_only_the_tasks_that_waited() {
    // A gate of one in front of two CPUs, fixed 1 ms tasks at 500/s: without a hand-off an
    // M/D/1 queue (mean 1 + ρ/(2(1−ρ)) = 1.5 ms at ρ 0.5). With 0.5 ms per hand-off, a task
    // that waited reaches the CPUs 0.5 ms after its admission and holds the slot meanwhile,
    // so the queue slows, up to an M/D/1 of 1.5 ms tasks (1.5 + 0.75·1.5/(2·0.25) = 3.75 ms);
    // a task that finds the gate empty still takes exactly 1 ms.
    let base = r#"
name = "handoff"
seed = 4
requests = 40000
warmup = 2000
[load]
rps = 500
[[host]]
name = "node"
cores = 2
policy = { kind = "ps", slice_us = 1 }
[[service]]
name = "q"
host = "node"
admit = { kind = "fifo", c = 1 }
service_time = { kind = "fixed", value_ms = 1 }
"#;
    let run = |toml: &str| {
        let (mut rec, _) = engine::run(&model(toml, Overrides::default()));
        rec.latency.sort_unstable();
        rec.latency
    };
    let free = run(base);
    let slow = run(&base.replace("c = 1 }", "c = 1, handoff_us = 500 }"));
    assert_eq!(run(&base.replace("c = 1 }", "c = 1, handoff_us = 0 }")), free, "0 is no hand-off");
    let (m0, m1) = (mean_ms(&free), mean_ms(&slow));
    assert!((m0 - 1.5).abs() < 0.05, "M/D/1 mean {m0}");
    assert!(m1 > m0 + 0.3 && m1 < 3.75, "hand-offs slow the queue within the bounds: {m0} → {m1}");
    assert_eq!((free[0], slow[0]), (1_000_000, 1_000_000), "a task that did not wait enters at once");
    assert!(load_err(&base.replace("c = 1 }", "c = 1, handoff_us = -1 }")).contains("handoff_us = -1 must be ≥ 0"));
}
