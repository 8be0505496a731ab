//! End-to-end tests of `tailor sim`: the real binary on the shipped scenarios
//! and on bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn tailor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailor")).args(args).current_dir(repo()).output().expect("run tailor")
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "tailor failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn every_shipped_scenario_runs() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        seen += 1;
        let p = path.to_str().unwrap();
        let out = tailor(&["sim", p, "--single", "--requests", "3000", "--warmup", "300", "--json", "-"]);
        let v = json_of(&out);
        assert_eq!(v["schema"], "tailor.sim/v1");
        let run = &v["runs"][0];
        let s = &run["summary"];
        let done = s["requests"].as_u64().unwrap() + s["rejected"].as_u64().unwrap();
        assert_eq!(done, 3000, "{p}: every measured request completes or is rejected");
        let l = &s["latency_ms"];
        let (p50, p99, max) = (l["p50"].as_f64().unwrap(), l["p99"].as_f64().unwrap(), l["max"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{p}: percentiles out of order: {l}");
        assert!(run["events"].as_u64().unwrap() > 3000, "{p}: too few events");
    }
    assert!(seen >= 7, "expected the shipped scenarios, found {seen}");
}

#[test]
fn default_scenario_sweep_writes_csv_and_svg() {
    let dir = std::env::temp_dir().join(format!("tailor-cli-test-{}", std::process::id()));
    let out = tailor(&["sim", "--requests", "1500", "--warmup", "100", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for policy in ["orf(c=adaptive<=64", "orf(c=6,slice=30us)", "rr(slice=30us)", "fair(", "fifo"] {
        assert!(stdout.contains(policy), "table lacks {policy}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5 * 4, "header + 5 policies x 4 loads:\n{csv}");
    let svg = std::fs::read_to_string(dir.join("p99.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.trim_end().ends_with("</svg>"));
    let legend = tailor_sim::plot::legend_entries(&svg).expect("a legend");
    assert_eq!(legend.len(), 5, "each policy once: {legend:?}");
    // stderr is a pipe here: one plain progress line per finished point (5 policies × 4
    // loads), with an ETA and no terminal control sequences.
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("points: [")).collect();
    assert_eq!(lines.len(), 20, "{err}");
    assert!(lines.last().unwrap().starts_with("points: [20/20]") && lines[0].contains("ETA"), "{err}");
    assert!(!err.contains('\u{1b}'), "escape codes in non-tty output: {err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_key_names_file_line_and_valid_keys() {
    let dir = std::env::temp_dir().join(format!("tailor-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "name = \"x\"\n[load]\nrps = 10\n[[service]]\nname = \"a\"\ncorez = 2\npolicy = { kind = \"fifo\" }\nservice_time = { kind = \"exp\", mean_ms = 1 }\n").unwrap();
    let out = tailor(&["sim", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(err.contains("line 6"), "{err}");
    assert!(err.contains("corez") && err.contains("cores"), "should list the valid keys: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn semantic_problems_are_reported_together() {
    let dir = std::env::temp_dir().join(format!("tailor-bad2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(
        &f,
        "name = \"x\"\n[load]\nrps = -1\n[[service]]\nname = \"a\"\ncores = 0\npolicy = { kind = \"orf\", c = 0 }\nservice_time = { kind = \"exp\", mean_ms = 1 }\ngroups = [ { first = 0, count = 2, scale = 2.0 } ]\n[[stage]]\nname = \"s\"\nservice = \"nope\"\nfanout = 0\n[[stage]]\nname = \"t\"\nservice = \"a\"\nfanout_by_class = { gold = 2 }\nweights_by_class = { gold = [ { first = 0, count = 3, weight = 2.0 } ] }\n",
    )
    .unwrap();
    let out = tailor(&["sim", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "rps = -1",
        "cores = 0",
        "`c` must be at least 1",
        "\"nope\" is not declared",
        "stage \"s\": fanout = 0; give at least 1",
        "groups entry { first = 0, count = 2",
        "stage \"t\": fanout_by_class.gold: no [[class]] is named \"gold\"",
        "fanout_by_class.gold: up to 2 but service \"a\" has only 1 instances",
        "stage \"t\": weights_by_class.gold: no [[class]] is named \"gold\"",
        "weights_by_class.gold: entry { first = 0, count = 3, weight = 2 }: needs count ≥ 1 within the service's 1 instances",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn same_seed_same_numbers() {
    let p = repo().join("scenarios/dag-branches.toml");
    let args = ["sim", p.to_str().unwrap(), "--single", "--requests", "2000", "--json", "-"];
    let a = json_of(&tailor(&args));
    let b = json_of(&tailor(&args));
    assert_eq!(a["runs"][0]["summary"], b["runs"][0]["summary"]);
    assert_eq!(a["runs"][0]["events"], b["runs"][0]["events"]);
}
