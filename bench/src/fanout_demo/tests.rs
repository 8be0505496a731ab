//! Tests of the fan-out benchmark: config loading, the simulated scenario, the search grid.

/// Two searches reach one load by different paths (a step up, a step
/// down, a bisection, a snapped hint): the same load value and seed.
#[test]
fn searches_that_meet_at_a_load_probe_it_with_one_seed() {
    let (min, tol) = (0.2, 0.04);
    let up = on_grid(on_grid(0.40, min, tol) + 2.0 * tol, min, tol);
    let down = on_grid(0.56 - 2.0 * tol, min, tol);
    let mid = on_grid((0.44 + 0.52) / 2.0, min, tol);
    let hint = on_grid(0.4712, min, tol);
    for x in [up, down, mid, hint] {
        assert_eq!(x, 0.48, "grid load");
        assert_eq!(probe_seed(7, x), probe_seed(7, 0.48));
    }
    assert_ne!(probe_seed(7, 0.48), probe_seed(7, 0.52), "another load, another input");
    assert_ne!(probe_seed(7, 0.48), probe_seed(8, 0.48), "another run seed, another input");
}

use super::*;

#[test]
fn measured_hop_delay_becomes_an_empirical_table_the_simulator_reads() {
    let mut h = LatencyHistogram::new();
    for i in 0..10_000u64 {
        h.record(100_000 + (i % 100) * 20_000); // 0.1–2.08 ms
    }
    let table = quantile_table_ms(&h);
    let v: Vec<f64> = table.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(v.len(), tailor_core::dist::TABLE_LEN);
    assert!(v.windows(2).all(|w| w[0] <= w[1]) && v[0] >= 0.09 && v[9999] <= 2.2, "{} {}", v[0], v[9999]);
    let l = Loaded::load(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/masstree-two-class.toml")))
        .expect("default config");
    let scenario = sim_scenario(&l, Scheme::TfEdfq, Some(HopDelay::Measured(Arc::new(h))))
        .expect("the simulator accepts the scenario");
    // The table is a temporary file the scenario names: gone once the scenario is.
    let table = match &scenario.loaded.scenario.network.as_ref().expect("a network delay").delay {
        DistSpec::Empirical { file, .. } => file.clone(),
        other => panic!("an empirical table, not {other:?}"),
    };
    tailor_sim::model::Model::build(&scenario.loaded, &Default::default()).expect("the simulator reads the table");
    assert!(table.exists(), "{}", table.display());
    drop(scenario);
    assert!(!table.exists(), "{} left behind", table.display());
}

/// Every shipped config loads and gives the simulator a scenario it accepts,
/// whatever its service distribution (a mixture was refused until 25 Nov).
#[test]
fn every_shipped_config_loads_and_simulates() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let l = Loaded::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for &scheme in &l.cfg.schemes {
            sim_scenario(&l, scheme, None).unwrap_or_else(|e| panic!("{} {scheme:?}: {e}", path.display()));
        }
        n += 1;
    }
    assert!(n >= 9, "{n} configs");
}

/// The setting shipped to show TailGuard's gain keeps it in the simulator:
/// on one input (the shipped seed and 10⁶ queries; deterministic, so an
/// exact repeat), TF-EDFQ's max load is ≥ 1.14× T-EDFQ's and ≥ 1.26×
/// FIFO's, the issue's targets (+21% and +48%; docs/fanout.md). Shorter
/// runs move each max load a lot at this setting (2·10⁵ queries: +10%).
#[test]
fn the_mixture_setting_keeps_tailguards_gain_in_the_simulator() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/mixture-two-class.toml"));
    let l = Loaded::load(path).expect("mixture config");
    let max = |scheme| search_sim(&l, scheme, None).unwrap();
    let (tf, t, fifo) = (max(Scheme::TfEdfq), max(Scheme::TEdfq), max(Scheme::Fifo));
    assert!(tf >= 1.14 * t, "TF-EDFQ {tf} vs T-EDFQ {t}");
    assert!(tf >= 1.26 * fifo, "TF-EDFQ {tf} vs FIFO {fifo}");
}

/// The simulated overload check on the testbed shape at 1.5× its max load (0.44):
/// with `reject_late` (the shipped config) every class holds while more than the max
/// load is accepted; with the ratio alone at the same R_th class C misses. The
/// simulator is deterministic, so these are exact repeats, not samples.
#[test]
fn simulated_admission_carries_reject_late_and_holds_the_testbed_shape() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/testbed-shape.toml"));
    let l = Loaded::load(path).expect("testbed config");
    assert!(l.cfg.admission.as_ref().unwrap().reject_late, "the shipped config rejects late tasks");
    let with = sim_admission(&l, 0.04, 0.66, None).unwrap();
    assert!(with.holds(), "{:?}", with.classes);
    assert!(with.accepted_load > 0.44, "accepts more than the max load: {}", with.accepted_load);
    let c = with.classes.iter().find(|c| c.name == "C").unwrap();
    assert!(c.accepted > 0.5 && c.accepted < 0.95, "fan-out-32 queries are the ones turned away: {}", c.accepted);
    let mut ratio_only = l.clone();
    ratio_only.cfg.admission.as_mut().unwrap().reject_late = false;
    let without = sim_admission(&ratio_only, 0.04, 0.66, None).unwrap();
    assert!(!without.holds(), "the ratio alone does not hold class C: {:?}", without.classes);
}

/// What the TOML generator this module had before the scenario builder
/// wrote for `testbed-shape.toml`, TF-EDFQ, a fixed 0.05 ms hop, byte for byte.
const TESTBED_TF_EDFQ_TOML: &str = r#"name = "testbed-shape-edf-tailguard"
seed = 1
requests = 1000000
warmup = 100000

[load]
utilization = 0.2

[[service]]
name = "server"
instances = 32
cores = 1
policy = { kind = "edf" }
service_time = { kind = "exp", mean_ms = 5.0 }
groups = [ { first = 0, count = 8, scale = 1.108, weight = 1 }, { first = 8, count = 8, scale = 0.419, weight = 1 }, { first = 16, count = 8, scale = 1.243, weight = 1 }, { first = 24, count = 8, scale = 1.23, weight = 1 } ]

[[stage]]
name = "query"
service = "server"
fanout = { values = [1], weights = [1] }
fanout_by_class = { "A" = { values = [1], weights = [1] }, "B" = { values = [4], weights = [1] }, "C" = { values = [32], weights = [1] } }
weights_by_class = { "A" = [ { first = 0, count = 8, weight = 12 } ] }

[network]
delay = { kind = "fixed", value_ms = 0.05 }
returns = "per-task"

[[class]]
name = "A"
weight = 50
slo_ms = 54.050000000000004
percentile = 99

[[class]]
name = "B"
weight = 40
slo_ms = 87.85
percentile = 99

[[class]]
name = "C"
weight = 10
slo_ms = 121.6
percentile = 99

[deadlines]
mode = "tailguard"

[search]
policies = [ { kind = "edf" } ]
min_utilization = 0.2
max_utilization = 0.8
tolerance = 0.01
"#;

/// The fan-out demo's simulated side built in code runs exactly as the
/// TOML it used to generate: the same summary, field for field, at a
/// fixed load, with and without the simulator's admission control.
#[test]
fn the_built_simulator_scenario_equals_the_old_toml_path_field_for_field() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/testbed-shape.toml"));
    let l = Loaded::load(path).expect("testbed config");
    let ov = Overrides {
        load: Some(LoadOverride::Utilization(0.5)),
        requests: Some(40_000),
        warmup: Some(4_000),
        ..Default::default()
    };
    let summary = |loaded: &LoadedScenario| {
        let run = tailor_sim::sweep::run_one(loaded, &ov).expect("runs");
        format!("{:?}", run.summary)
    };
    let fixture = |text: &str| Scenario::from_toml(text, &l.base_dir.join("x-sim.toml")).expect("fixture parses");
    let delay = || Some(HopDelay::Fixed { ns: 50_000.0 });
    let built = sim_scenario(&l, Scheme::TfEdfq, delay()).expect("built");
    assert_eq!(summary(&fixture(TESTBED_TF_EDFQ_TOML)), summary(&built.loaded));
    // sim_admission's scenario: the same plus `[admission]`.
    let a = AdmissionSpec {
        r_th: 0.02,
        window_ms: Some(200.0),
        window_tasks: Some(1_000),
        reject_late: true,
        refused: Default::default(),
        proportional: false,
        min_tasks: 0,
    };
    let with = sim_scenario_with(&l, Scheme::TfEdfq, delay(), Some(a)).expect("built");
    let text = format!(
        "{TESTBED_TF_EDFQ_TOML}\n[admission]\nr_th = 0.02\nwindow_ms = 200\nwindow_tasks = 1000\nreject_late = true\n"
    );
    let old = summary(&fixture(&text));
    assert_eq!(old, summary(&with.loaded));
    assert_ne!(old, summary(&built.loaded), "admission control changes the run");
}

#[test]
fn heterogeneous_servers_are_the_same_in_the_simulated_scenario() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/masstree-two-class.toml"));
    let mut text = std::fs::read_to_string(path).unwrap();
    text +=
        "\n[[group]]\nfirst = 0\ncount = 8\nscale = 1.5\nweight = 4\n\n[[group]]\nfirst = 30\ncount = 2\nscale = 3\n";
    let l = Loaded::from_toml(&text, path).expect("config with groups");
    let shapes = l.server_shapes();
    let scenario = sim_scenario(&l, Scheme::TfEdfq, None).expect("the simulator accepts it");
    let model = tailor_sim::model::Model::build(&scenario.loaded, &Default::default()).expect("model");
    let svc = &model.services[0];
    assert_eq!(svc.instances, shapes.len());
    assert_eq!(svc.instance_scale, shapes.iter().map(|s| s.0).collect::<Vec<_>>(), "{:?}", scenario.loaded.scenario);
    assert_eq!(svc.instance_weight, shapes.iter().map(|s| s.1).collect::<Vec<_>>());
    assert_eq!((shapes[0], shapes[8], shapes[31]), ((1.5, 4.0), (1.0, 1.0), (3.0, 1.0)));
    // The real handler's deadlines (per-server offline CDFs) and the
    // simulated ones agree: T_b = SLO − x_p^u(k) for every class and fan-out.
    let addrs = (0..shapes.len()).map(|i| std::net::SocketAddr::from(([127, 0, 0, 1], 9 + i as u16))).collect();
    let handler = Handler::new(l.handler_config(Scheme::TfEdfq, addrs, None, None)).expect("handler");
    let homogeneous = Loaded::load(path).expect("default config");
    for (c, class) in l.slo_classes().iter().enumerate() {
        for k in l.cfg.all_fanouts() {
            let real = class.slo_ns as i64 - handler.unloaded_tail(c as u8, k) as i64;
            let sim = model.budgets.get(c as u8, 0, k).expect("a simulated budget") as i64;
            assert!((real - sim).abs() <= 1_000, "class {c} k {k}: handler {real} ns, simulator {sim} ns");
            // A server 3× slower makes every budget smaller than on identical servers.
            let same = homogeneous.handler_config(Scheme::TfEdfq, vec![], None, None);
            let x_same = tailor_core::tailguard::Planner::unloaded_quantile_homogeneous(&*same.offline, k, class.p);
            assert!(real < class.slo_ns as i64 - x_same as i64, "class {c} k {k}");
        }
        // Per placement (Eq. 1 over the servers a query picked), too: a
        // query on the normal servers 8–10 may wait longer than one that
        // touched the 3× slower server 31, and both engines say how much.
        for servers in [vec![8usize], vec![31], vec![0], vec![8, 9, 10], vec![8, 9, 31], (0..32).collect()] {
            let real = class.slo_ns as i64 - handler.unloaded_tail_of(c as u8, &servers) as i64;
            let picked: Vec<u32> = servers.iter().map(|&s| s as u32).collect();
            let sim = model.placement_budget(c as u8, 0, &picked).expect("a per-placement budget") as i64;
            assert!(
                (real - sim).abs() <= 1_000,
                "class {c} servers {servers:?}: handler {real} ns, simulator {sim} ns"
            );
        }
        let budget = |servers: &[usize]| class.slo_ns as i64 - handler.unloaded_tail_of(c as u8, servers) as i64;
        assert!(budget(&[8]) > budget(&[0]) && budget(&[0]) > budget(&[31]), "class {c}");
        assert!(budget(&[8, 9, 10]) > budget(&[8, 9, 31]), "class {c}");
        // Any 3 servers' budget is at least the 3 slowest ones' (the table's).
        assert!(budget(&[8, 9, 31]) >= class.slo_ns as i64 - handler.unloaded_tail(c as u8, 3) as i64);
    }
}

#[test]
fn class_placement_reaches_the_handler_and_the_simulated_scenario() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/testbed-shape.toml"));
    let text = std::fs::read_to_string(path).unwrap();
    let l = Loaded::from_toml(&text, path).unwrap();
    let servers: Vec<std::net::SocketAddr> =
        (0..32).map(|i| std::net::SocketAddr::from(([127, 0, 0, 1], 9 + i))).collect();
    // Class A's placement: 80% on the first cluster (weight 12 on 8 of 32).
    let weights = l.handler_config(Scheme::TfEdfq, servers.clone(), None, None).class_server_weights;
    let a = &weights[0];
    assert_eq!(a.len(), 32);
    let first: f64 = a[..8].iter().sum();
    assert!((first / a.iter().sum::<f64>() - 0.8).abs() < 1e-12, "{a:?}");
    assert!(weights[1].is_empty() && weights[2].is_empty(), "{weights:?}");
    // The simulated stage picks class A's instances by the same weights, the others by the groups'.
    let scenario = sim_scenario(&l, Scheme::TfEdfq, None).expect("the simulator accepts it");
    let model = tailor_sim::model::Model::build(&scenario.loaded, &Default::default()).expect("model");
    assert_eq!(model.stages[0].class_weights, weights, "{:?}", scenario.loaded.scenario);
    // A bad entry is named with its class.
    let bad = text.replacen("first = 0, count = 8, weight = 12", "first = 8, count = 30, weight = 12", 1);
    let err = Loaded::from_toml(&bad, path).expect_err("past the 32 servers").to_string();
    assert!(err.contains("[[class]] \"A\": placement entry { first = 8, count = 30, weight = 12 }"), "{err}");
}

#[test]
fn class_fan_outs_reach_the_load_generator_and_the_simulated_scenario() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fanout/configs/masstree-two-class.toml"));
    let text = std::fs::read_to_string(path).unwrap();
    // Class I asks one server, class II 1 or 32; no top-level fan-outs at all.
    let text = text.replace("fanouts = { values = [1, 10, 32], weights = [32, 3.2, 1] }\n", "").replacen(
        "weight = 1\n",
        "weight = 1\nfanouts = { values = [1], weights = [1] }\n",
        1,
    );
    let missing = Loaded::from_toml(&text, path).expect_err("class II has no fan-outs").to_string();
    assert!(missing.contains("[[class]] \"II\" has no fan-outs"), "{missing}");
    let text = text.replacen(
        "weight = 1\n\n[search]",
        "weight = 3\nfanouts = { values = [1, 32], weights = [3, 1] }\n\n[search]",
        1,
    );
    let l = Loaded::from_toml(&text, path).expect("every class has its own fan-outs");
    assert_eq!(l.cfg.all_fanouts(), vec![1, 32]);
    let mix = l.mix();
    assert_eq!(mix.fanouts, vec![vec![(1, 1.0)], vec![(1, 3.0), (32, 1.0)]]);
    // E[k] = 1/4 · 1 + 3/4 · (3/4 · 1 + 1/4 · 32) = 6.8125.
    assert!((mix.mean_fanout() - 6.8125).abs() < 1e-12, "{}", mix.mean_fanout());
    let scenario = sim_scenario(&l, Scheme::TfEdfq, None).expect("the simulator accepts it");
    let model = tailor_sim::model::Model::build(&scenario.loaded, &Default::default()).expect("model");
    let stage = &model.stages[0];
    assert_eq!(stage.fanout_of(0).values(), vec![1], "{:?}", scenario.loaded.scenario);
    assert_eq!(stage.fanout_of(1).values(), vec![1, 32]);
    let visits = tailor_sim::model::expected_visits(
        &model.stages,
        &model.roots,
        1,
        &tailor_sim::model::class_shares(&model.classes),
    );
    assert!((visits[0] - mix.mean_fanout()).abs() < 1e-9, "sim E[k] {} vs real {}", visits[0], mix.mean_fanout());
}
