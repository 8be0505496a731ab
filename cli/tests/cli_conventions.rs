//! The command line behaves like the tools users know: `--version` names the commit, every
//! command has `--help`, bad flags and values are errors naming the flag, completions are valid
//! shell, and `-o json` prints one document. (Runs writing under target/, never into docs/:
//! reproduce_cli.rs.)

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
    let clean = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(repo())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.is_empty());
    let exact = format!("tailor {} (commit {commit})", env!("CARGO_PKG_VERSION"));
    let modified = format!("tailor {} (commit {commit}-modified)", env!("CARGO_PKG_VERSION"));
    // A clean checkout (CI, a user's clone) names the commit alone; a build of edited crates
    // is marked, and an edit outside the crates (docs) may or may not be.
    if clean {
        assert_eq!(v.trim(), exact);
    } else {
        assert!(v.trim() == exact || v.trim() == modified, "{v}");
    }
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
        &["fanout", "probe"],
        &["fanout", "sim"],
        &["fanout", "sequential"],
        &["node", "run"],
        &["node", "supervise"],
        &["node", "safe-mode"],
        &["node", "probe"],
        &["node", "example"],
        &["node", "plan"],
        &["proxy", "edge"],
        &["proxy", "sidecar"],
        &["proxy", "example"],
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
        (&["node", "plan", "--demand-cpus", "lots"], "invalid value 'lots' for '--demand-cpus <DEMAND_CPUS>'"),
        (&["bench", "ladder", "--server", "memcached"], "invalid value 'memcached' for '--server <SERVER>'"),
        (&["sim", "--log-format", "xml"], "invalid value 'xml' for '--log-format <FORMAT>'"),
        (&["fanout", "demo", "--r-th", "high"], "invalid value 'high' for '--r-th <R_TH>'"),
        (&["fanout", "probe", "x.toml", "tf-edfq", "high"], "invalid value 'high' for '<LOAD>'"),
        (&["fanout", "sim", "x.toml", "edf"], "for '<SCHEME>'"),
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
