use super::*;

#[test]
fn every_chain_runs_once_at_every_point_and_the_first_rotates() {
    for chains in 1..=5 {
        let mut firsts = Vec::new();
        for point in 0..chains {
            let mut order: Vec<usize> = turns(point, chains).collect();
            firsts.push(order[0]);
            order.sort_unstable();
            assert_eq!(order, (0..chains).collect::<Vec<_>>(), "point {point} of {chains} chains");
        }
        firsts.sort_unstable();
        assert_eq!(firsts, (0..chains).collect::<Vec<_>>(), "{chains} chains");
    }
}

#[test]
fn sidecar_c_is_a_count_or_adaptive() {
    assert_eq!(SidecarC::parse("3"), Ok(SidecarC::Fixed(3)));
    assert_eq!(SidecarC::parse("adaptive"), Ok(SidecarC::Adaptive));
    for bad in ["0", "-1", "auto", ""] {
        let e = SidecarC::parse(bad).expect_err(bad);
        assert!(e.contains("adaptive") && e.contains(&format!("`{bad}`")), "{e}");
    }
    assert_eq!((SidecarC::Fixed(6).fixed(), SidecarC::Adaptive.fixed()), (Some(6), None));
    assert_eq!(SidecarC::Adaptive.to_string(), "adaptive");
}

#[test]
fn the_limit_seen_is_modelled_by_its_rounded_mean() {
    assert_eq!(LimitSeen::of(&[]), None);
    let seen = LimitSeen::of(&[(4.0, 0.0), (5.0, 2.0), (7.0, 1.0)]).expect("samples");
    assert_eq!((seen.samples, seen.min, seen.max), (3, 4.0, 7.0));
    assert!((seen.mean - 16.0 / 3.0).abs() < 1e-9 && (seen.queue_mean - 1.0).abs() < 1e-9, "{seen:?}");
    assert_eq!(seen.model_c(), 5);
    assert_eq!(LimitSeen::of(&[(0.2, 0.0)]).expect("one").model_c(), 1, "never a c of 0");
}

fn run(sidecars: Sidecars, seed: u64, p99: f64, limit: Option<(f64, f64)>) -> EffectRun {
    let mut summary = summarize(&[], 0, TIERS as u32, 2);
    summary.latency_ms.p99 = p99;
    EffectRun {
        sidecars,
        workload: "exp".into(),
        rho: 0.85,
        seed,
        rate_rps: 100.0,
        summary,
        cpu: CpuUsage::default(),
        overhead_us: 2000.0,
        cpu_by_process_us: Vec::new(),
        mean_demand_us: [0.0; TIERS],
        limit: limit.and_then(|(lo, hi)| LimitSeen::of(&[(lo, 0.0), (hi, 0.0)])),
        predicted_c: None,
        predicted_p99_ms: Some(p99),
        predicted_p99_band_ms: Some([p99 * 0.8, p99 * 1.3]),
        predicted_reordering_pct: Some(0.0),
        predicted_error: None,
    }
}

fn report(c: SidecarC, runs: Vec<EffectRun>) -> EffectReport {
    EffectReport {
        cores: 2,
        c,
        python_workers: 4,
        mean_ms: 5.0,
        requests: 5000,
        warmup: 300,
        rho_overhead_us: 2500.0,
        calibrations: Vec::new(),
        runs,
        load_average_before: String::new(),
        load_average_after: String::new(),
        wall_seconds: 0.0,
    }
}

#[test]
fn the_table_pairs_each_seed_with_no_sidecars_on_the_same_requests() {
    // Medians 200 vs 120 (−40%); per seed −30%, −40%, −20% (median −30%).
    let runs = vec![
        run(Sidecars::None, 1, 100.0, None),
        run(Sidecars::None, 2, 200.0, None),
        run(Sidecars::None, 3, 300.0, None),
        run(Sidecars::OrfChain, 1, 70.0, Some((3.0, 5.0))),
        run(Sidecars::OrfChain, 2, 120.0, Some((4.0, 6.0))),
        run(Sidecars::OrfChain, 3, 240.0, Some((2.0, 4.0))),
    ];
    let table = table(&report(SidecarC::Adaptive, runs.clone()));
    let row = table.lines().find(|l| l.contains("| orf-chain |")).expect("an orf-chain row");
    assert!(row.contains("| 70.0 / 120.0 / 240.0 | 120.0 | 3.43 |"), "{row}");
    assert!(row.contains("| -40% | -30% / -40% / -20% (-30%) |"), "{row}");
    assert!(row.contains("| adaptive 4.0 (2–6) |"), "{row}");
    let none = table.lines().find(|l| l.contains("| none |")).expect("a none row");
    assert!(none.contains("| 100.0 / 200.0 / 300.0 | 200.0 | 3.00 |"), "{none}");

    // A run whose seed has no partner without sidecars gets no paired ratio.
    let mut alone = runs.clone();
    alone.retain(|r| r.sidecars != Sidecars::None || r.seed != 2);
    let table = super::table(&report(SidecarC::Fixed(3), alone));
    let row = table.lines().find(|l| l.contains("| orf-chain |")).expect("an orf-chain row");
    assert!(row.contains("| orf-chain | 3 |") && row.contains("| -30% / -20% (-20%) |"), "{row}");
}

/// The CPU table: per process beyond its tier's demand, the median over a point's runs, beside
/// the calibration's zero-demand reading; a process a chain does not have is "–".
#[test]
fn the_cpu_table_takes_each_tier_s_demand_out_and_medians_the_runs() {
    let cpu = |pairs: &[(&'static str, f64)]| -> Vec<ProcessCpu> {
        pairs.iter().map(|&(process, us)| ProcessCpu { process, us }).collect()
    };
    let mut runs = Vec::new();
    for (seed, (go, sidecar)) in [(1, (5_300.0, 900.0)), (2, (5_500.0, 700.0)), (3, (5_400.0, 800.0))] {
        let mut r = run(Sidecars::OrfChain, seed, 100.0, None);
        r.cpu_by_process_us = cpu(&[("go-0", go), ("sidecar0", sidecar), ("generator", 100.0)]);
        r.mean_demand_us = [5_000.0, 5_000.0, 5_000.0];
        runs.push(r);
    }
    let mut none = run(Sidecars::None, 1, 150.0, None);
    none.cpu_by_process_us = cpu(&[("go-0", 5_200.0), ("generator", 90.0)]);
    none.mean_demand_us = [5_000.0, 5_000.0, 5_000.0];
    runs.push(none);
    let mut r = report(SidecarC::Fixed(4), runs);
    r.calibrations = vec![Calibration {
        sidecars: Sidecars::OrfChain,
        overhead_us: 2_000.0,
        cpu_by_process_us: cpu(&[("go-0", 250.0), ("sidecar0", 400.0), ("generator", 80.0)]),
        p50_us: 1_500.0,
        hop_us: 0.0,
    }];
    let table = super::report::cpu_table(&r);
    // Columns in the order a request meets the processes.
    assert!(table.contains("| sidecars | at | sidecar0 | go-0 | generator | total |"), "{table}");
    assert!(table.contains("| orf-chain | zero demand | 400 | 250 | 80 | 730 |"), "{table}");
    // go-0: 300 / 500 / 400 beyond its 5 ms → 400; the sidecar's 900 / 700 / 800 → 800.
    assert!(table.contains("| orf-chain | exp ρ 0.85 | 800 | 400 | 100 | 1300 |"), "{table}");
    assert!(table.contains("| none | exp ρ 0.85 | – | 200 | 90 | 290 |"), "{table}");
}

/// The band columns: the medians of the runs' simulated 10–90% band ends, and how many runs
/// measured a p99 inside their own band; the verdict counts the runs in band over all rows.
#[test]
fn the_table_places_each_run_in_the_simulated_band_of_runs_like_it() {
    let mut runs = vec![
        run(Sidecars::None, 1, 100.0, None),
        run(Sidecars::None, 2, 200.0, None),
        run(Sidecars::None, 3, 300.0, None),
    ];
    runs[0].predicted_p99_band_ms = Some([80.0, 120.0]); // 100 inside
    runs[1].predicted_p99_band_ms = Some([90.0, 150.0]); // 200 above
    runs[2].predicted_p99_band_ms = Some([300.0, 400.0]); // 300 on the edge: inside
    let r = report(SidecarC::Adaptive, runs);
    let table = table(&r);
    let row = table.lines().find(|l| l.contains("| none |")).expect("a none row");
    assert!(row.contains("| 90–150 | 2 of 3 |"), "{row}");
    let verdict = super::report::verdict(&r);
    assert!(
        verdict.contains(
            "band of runs like it (10th–90th percentile of 30 simulated runs of the same length) in 2 of 3 runs"
        ),
        "{verdict}"
    );
}
