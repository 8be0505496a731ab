//! The command line behaves like the tools users know: `--version` names the commit, every
//! command has `--help`, bad flags and values are errors naming the flag, completions are valid
//! shell, long runs print progress lines when stderr is not a terminal, and runs write under
//! target/, never into the committed docs/.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn tailor_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailor")).args(args).current_dir(dir).output().expect("run tailor")
}

fn tailor(args: &[&str]) -> Output {
    tailor_in(&repo(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = tailor(&["--version"]);
    assert!(out.status.success());
    let v = text(&out.stdout);
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_string(), |o| text(&o.stdout).trim().to_string());
    assert_eq!(v.trim(), format!("tailor {} (commit {commit})", env!("CARGO_PKG_VERSION")));
    // Subcommands print the same.
    assert_eq!(text(&tailor(&["sim", "--version"]).stdout).trim(), v.trim().replace("tailor", "tailor-sim"));
}

#[test]
fn every_command_has_help_with_a_description() {
    for cmd in [
        &["sim"][..],
        &["reproduce"],
        &["demo"],
        &["bench", "chain"],
        &["bench", "fanout"],
        &["bench", "ladder"],
        &["fanout", "demo"],
        &["fanout", "calibrate"],
        &["node", "run"],
        &["node", "supervise"],
        &["node", "safe-mode"],
        &["node", "probe"],
        &["node", "example"],
        &["scheduler"],
        &["agent"],
        &["completions"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = tailor(&args);
        let help = text(&out.stdout);
        assert!(out.status.success(), "{cmd:?}: {}", text(&out.stderr));
        let first = help.lines().next().unwrap_or("");
        assert!(first.len() > 20 && !first.starts_with("Usage"), "{cmd:?} has no description: {help}");
        assert!(help.contains("Usage: tailor"), "{cmd:?}: {help}");
    }
    // The two node daemons say which is which.
    let top = text(&tailor(&["--help"]).stdout);
    assert!(top.contains("Node tier agent") && top.contains("Kernel scheduler agent"), "{top}");
}

#[test]
fn bad_flags_and_values_are_errors_naming_the_flag() {
    for (args, want) in [
        (&["sim", "--requests", "many"][..], "invalid value 'many' for '--requests <REQUESTS>'"),
        (&["sim", "-o", "yaml"], "invalid value 'yaml' for '--output <FORMAT>'"),
        (&["sim", "--utilisation", "0.5"], "unexpected argument '--utilisation'"),
        (&["demo", "--workload", "nope"], "invalid value 'nope' for '--workload <WORKLOAD>'"),
        (&["demo", "--modes", "linux,cfs"], "invalid value 'cfs' for '--modes <MODES>'"),
        (&["bench", "ladder", "--steps", "0,x"], "invalid value 'x' for '--steps <STEPS>'"),
        (&["scheduler", "--enforce", "sideways"], "invalid value 'sideways' for '--enforce <ENFORCE>'"),
        (&["agent", "--c", "two"], "invalid value 'two' for '--c <C>'"),
        (&["node", "run"], "--config <CONFIG>"),
        (&["fanout", "demo", "--r-th", "high"], "invalid value 'high' for '--r-th <R_TH>'"),
        (&["reproduce", "--quick", "--publish"], "'--quick' cannot be used with '--publish'"),
        (&["completions", "tcsh"], "invalid value 'tcsh' for '<SHELL>'"),
    ] {
        let out = tailor(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in: {err}");
    }
}

/// Runs `shell` with `flag` on `script`; `None` when that shell is not installed.
fn shell_check(shell: &str, flag: &str, script: &str) -> Option<Output> {
    let path = std::env::temp_dir().join(format!("tailor-completion-{}.{shell}", std::process::id()));
    std::fs::write(&path, script).unwrap();
    let out = Command::new(shell).arg(flag).arg(&path).output().ok();
    std::fs::remove_file(&path).ok();
    out
}

#[test]
fn completions_generate_valid_scripts() {
    for (shell, check) in [("bash", "-n"), ("zsh", "-n"), ("fish", "--no-execute")] {
        let out = tailor(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for word in ["reproduce", "scheduler", "safe-mode", "ladder"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
        match shell_check(shell, check, &script) {
            Some(o) => assert!(o.status.success(), "{shell} rejects the script: {}", text(&o.stderr)),
            None => println!("{shell} is not installed: syntax of its completion not checked"),
        }
    }
}

#[test]
fn json_output_is_one_document_on_stdout() {
    let p = repo().join("scenarios/mmc-fifo.toml");
    let out = tailor(&["sim", p.to_str().unwrap(), "--single", "--requests", "2000", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["schema"], "tailor.sim/v1");
}

/// A scenario and manifest small enough for a test (one M/D/1 figure).
const SCENARIO: &str = r#"
name = "md1"
seed = 3
requests = 5000
warmup = 500
[load]
utilization = 0.5
[[service]]
name = "server"
policy = { kind = "fifo" }
service_time = { kind = "fixed", value_ms = 0.05 }
"#;

const MANIFEST: &str = r#"
title = "Tiny reproduction"
[[paper]]
id = "tales"
title = "Tales of the Tail (Li et al., SoCC '14)"
[[figure]]
id = "tiny"
paper = "tales"
title = "M/D/1"
section = "§2.2"
scenario = "md1.toml"
loads = [0.5, 0.9]
series = [ { label = "FIFO", policy = { kind = "fifo" } }, { label = "LIFO", policy = { kind = "lifo" } } ]
plots = [ { metric = "p99_us" } ]
"#;

/// Every file under `dir` with its contents.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_default_reproduce_run_writes_under_target_and_never_touches_docs() {
    let d = std::env::temp_dir().join(format!("tailor-cli-no-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("seeds")).unwrap();
    std::fs::create_dir_all(d.join("docs/reproduction")).unwrap();
    std::fs::write(d.join("seeds/md1.toml"), SCENARIO).unwrap();
    std::fs::write(d.join("seeds/reproduce.toml"), MANIFEST).unwrap();
    std::fs::write(d.join("docs/reproduction.md"), "the committed reference page\n").unwrap();
    std::fs::write(d.join("docs/reproduction/tiny-p99_us.svg"), "<svg/>\n").unwrap();
    let before = snapshot(&d.join("docs"));
    let repo_docs_before = snapshot(&repo().join("docs"));

    for args in [
        &["reproduce", "--manifest", "seeds/reproduce.toml"][..],
        &["reproduce", "--quick", "--manifest", "seeds/reproduce.toml"],
    ] {
        let out = tailor_in(&d, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert_eq!(snapshot(&d.join("docs")), before, "{args:?} changed docs/");
        let md = std::fs::read_to_string(d.join("target/tailor-reproduce/reproduction.md")).unwrap();
        assert!(md.contains("M/D/1"), "{md}");
        // Progress lines, one per job, on stderr.
        assert!(text(&out.stderr).contains("jobs: [1/"), "{}", text(&out.stderr));
        // Each legend entry once in every plot written.
        for (path, svg) in snapshot(&d.join("target/tailor-reproduce/reproduction")) {
            let legend = tailor_sim::plot::legend_entries(&String::from_utf8(svg).unwrap()).expect("a legend");
            let mut unique = legend.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), legend.len(), "{}: {legend:?}", path.display());
        }
    }
    assert_eq!(snapshot(&repo().join("docs")), repo_docs_before, "the repository's docs/ changed");
    std::fs::remove_dir_all(&d).ok();
}
