//! End-to-end: `tailor demo --quick` starts real tier processes on loopback,
//! sends real requests, and writes every output; the checks read them back.

use std::path::Path;
use std::process::Command;

/// One demo at a time: a demo counts other processes' CPU (the rerun test's spinner would
/// disturb the other test's runs and have them run again).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tailor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailor"))
}

#[test]
fn quick_demo_completes_every_request_propagates_the_gat_and_writes_all_outputs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("tailor-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = tailor().args(["demo", "--quick", "--out"]).arg(&out).output().expect("runs tailor");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "tailor demo --quick failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("demo.json")).unwrap()).expect("demo.json parses");
    let runs = report["runs"].as_array().unwrap();
    let skipped = report["skipped"].as_array().unwrap();
    let ran: Vec<&str> = runs.iter().map(|r| r["mode_name"].as_str().unwrap()).collect();
    // The unprivileged modes always run; a kernel mode either ran or says why not.
    for mode in ["linux", "fifo", "orf-coop"] {
        assert!(ran.contains(&mode), "{mode} did not run: {ran:?}\n{stdout}");
    }
    for mode in ["rr", "orf"] {
        let why = skipped.iter().find(|s| s["mode"] == mode);
        assert!(ran.contains(&mode) || why.is_some_and(|s| !s["reason"].as_str().unwrap().is_empty()), "{mode}");
        if let Some(s) = why {
            assert!(stderr.contains(&format!("skipping {mode}: ")), "no printed reason for {mode}:\n{stderr}");
            println!("{mode} skipped: {}", s["reason"]);
        }
    }
    for r in runs {
        let mode = r["mode_name"].as_str().unwrap();
        let s = &r["summary"];
        // Every measured request completed, with the same GAT at all three tiers.
        assert_eq!(s["requests"], 300, "{mode}");
        assert_eq!(s["ok"], 300, "{mode}: {s}");
        assert_eq!(s["gat_mismatches"], 0, "{mode}: a tier saw another GAT or none");
        assert!(s["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
        // The latency includes the three tiers' demand: never below the ideal's median.
        assert!(s["ideal"]["ratio"]["p50"].as_f64().unwrap() >= 1.0, "{mode}: {s}");
        let sim = r["predicted_p99_ms"].as_f64();
        assert!(sim.is_some(), "{mode}: no prediction: {}", r["predicted_error"]);
        // The prediction is the median of simulated runs as long as this one, inside their band.
        let band: Vec<f64> =
            r["predicted_p99_band_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(band.len() == 2 && band[0] <= sim.unwrap() && sim.unwrap() <= band[1], "{mode}: {band:?} {sim:?}");
        for f in r["files"].as_array().unwrap() {
            assert!(out.join(f.as_str().unwrap()).is_file(), "{mode}: missing {f}");
        }
        let stem = format!("runs/{mode}-exp-rho0.50");
        check_csv(&out.join(format!("{stem}.csv")), 350);
        let hgrm = std::fs::read_to_string(out.join(format!("{stem}.hgrm"))).unwrap();
        assert!(hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
        assert!(hgrm.contains("Total count    =          300]"), "{hgrm}");
        let per_run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("{stem}.json"))).unwrap()).unwrap();
        assert_eq!(per_run["summary"]["ok"], 300);
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| linux") || md.contains("linux "), "{md}");
    let svg = std::fs::read_to_string(out.join("p99-exp.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    // Each mode once in the legend (its measured and simulated lines share its colour), then
    // the two line styles once each.
    let legend = tailor_sim::plot::legend_entries(&svg).expect("a legend");
    let mut want: Vec<String> = ran.iter().map(|m| m.to_string()).collect();
    want.dedup();
    want.extend(["measured".to_string(), "simulated".to_string()]);
    assert_eq!(legend, want, "{svg}");
    assert!(stdout.contains("p99/sim"), "no table printed:\n{stdout}");
    for mode in &ran {
        let line = format!("- {mode}: measured p99 within 20% of the simulated median in ");
        assert!(stdout.contains(&line) && md.contains(&line), "no prediction summary for {mode}:\n{stdout}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// The per-request CSV: a header and one row per request, every OK row seen by all 3 tiers with one GAT.
fn check_csv(path: &Path, rows: usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (outcome, seen, consistent, demands) =
        (col("outcome"), col("tiers_seen"), col("gat_consistent"), col("demands_us"));
    let body: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(body.len(), rows, "{}", path.display());
    for row in &body {
        assert_eq!(row[outcome], "ok", "{row:?}");
        assert_eq!(row[seen], "3", "{row:?}");
        assert_eq!(row[consistent], "1", "{row:?}");
        assert_eq!(row[demands].split(';').count(), 3, "{row:?}");
    }
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let run = tailor().args(["demo", "--workload", "nope", "--quick"]).output().unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("for '--workload <WORKLOAD>': unknown workload `nope`; use one of fixed, exp"), "{err}");
    let run = tailor().args(["demo", "--modes", "linux,cfs"]).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("for '--modes <MODES>': unknown mode `cfs`"), "{err}");
    let run = tailor().args(["demo", "--loads", "1.2", "--modes", "linux"]).output().unwrap();
    assert!(String::from_utf8_lossy(&run.stderr).contains("--loads: 1.2 is not a utilization"));
}

/// A run during which another process keeps a CPU busy is run again (twice at most) and the
/// quietest attempt kept, and the output says so; after three runs in a row whose reruns were
/// all disturbed, the machine is taken as busy throughout and the rest run once. A spinner
/// this test starts stays on for the whole invocation of four runs.
#[test]
fn a_run_disturbed_by_other_processes_is_run_again() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("tailor-demo-rerun-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut spinner = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("sh runs");
    let run = tailor()
        .args([
            "demo",
            "--requests",
            "300",
            "--warmup",
            "50",
            "--modes",
            "linux",
            "--workload",
            "exp,trimodal",
            "--loads",
            "0.5,0.6",
            "--out",
        ])
        .arg(&out)
        .output();
    let _ = spinner.kill();
    let _ = spinner.wait();
    let run = run.expect("runs tailor");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "tailor demo failed\nstderr:\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("demo.json")).unwrap()).expect("demo.json parses");
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{stderr}");
    for (i, r) in runs.iter().enumerate() {
        assert!(
            r["cpu"]["background_cpus"].as_f64().unwrap() >= 0.1,
            "run {i}: the spinner was not seen: {}",
            r["cpu"]
        );
        assert_eq!(r["disturbed_runs"], if i < 3 { 2 } else { 0 }, "run {i}:\n{stderr}");
        assert_eq!(r["summary"]["ok"], 300, "run {i}: the kept attempt is a whole run: {}", r["summary"]);
    }
    assert_eq!(stderr.matches("running it again (1 of at most 2)").count(), 3, "{stderr}");
    assert_eq!(stderr.matches("running it again (2 of at most 2)").count(), 3, "{stderr}");
    assert!(stderr.contains("the remaining runs run once each"), "{stderr}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert_eq!(md.matches("(2 reruns)").count(), 3, "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
