//! Stamps the binary with the commit it was built from, for `tailor --version` and the
//! benchmark reports: `git rev-parse --short HEAD`, with `-modified` when a tracked source or
//! manifest of a workspace crate differs from that commit (a build of uncommitted code must not pass for the
//! commit: a report once named the HEAD a build started from while it measured two edits
//! made after it), or "unknown" outside a git checkout (a source tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The workspace's member directories as `Cargo.toml` lists them (`members = ["core", …]`),
/// read here rather than copied so that a new crate is covered without editing this file.
fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members = [") else { return Vec::new() };
    let list = &manifest[start + "members = [".len()..];
    let list = &list[..list.find(']').unwrap_or(0)];
    list.split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    // What goes into the binary: each crate's sources and manifest, the workspace's manifest
    // and lock file, this script. Not tests or docs: an edit there rebuilds nothing.
    let mut scope: Vec<String> = workspace_members(&manifest)
        .iter()
        .flat_map(|m| [format!("../{m}/src"), format!("../{m}/Cargo.toml")])
        .collect();
    scope.extend(["../Cargo.toml", "../Cargo.lock", "build.rs"].map(String::from));
    let commit = match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => {
            let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
            status.extend(scope.iter().map(String::as_str));
            let modified = git(&status).is_some();
            if modified {
                format!("{head}-modified")
            } else {
                head
            }
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=TAILOR_GIT_COMMIT={commit}");
    // Rerun when one of them changes (cargo scans a directory for any newer file), so the
    // `-modified` mark follows edits and their reverts; such an edit rebuilds this crate anyway.
    for dir in &scope {
        println!("cargo:rerun-if-changed={dir}");
    }
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the branch's ref (a commit).
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
