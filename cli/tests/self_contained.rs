//! The repository is self-contained: no tracked file refers to a path outside it.
//!
//! A clone with nothing beside it must build, test and run its scenarios, so a relative path
//! that climbs out of the repository (`../../shared/data/...`), an absolute path into a
//! developer's machine, or a reference to the design brief that lives outside the repository
//! is a defect wherever it appears: code, scenarios, configs, scripts or docs.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The files git tracks, or `None` outside a git checkout (a source tarball), where the test
/// has nothing reliable to list and says so.
fn tracked_files(root: &Path) -> Option<Vec<PathBuf>> {
    let out = Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let names = String::from_utf8(out.stdout).ok()?;
    Some(names.split('\0').filter(|n| !n.is_empty()).map(|n| root.join(n)).collect())
}

/// `dir/rel` with `.` and `..` folded, without touching the file system; `None` when `..`
/// climbs above the file system root.
fn normalize(dir: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in dir.join(rel).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Every run of `../` segments followed by a path, e.g. `../../shared/data/x`.
fn relative_paths(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(pos) = line[i..].find("../") {
        let start = i + pos;
        // Only a path that starts here: not the tail of `a/../b` or of `...`.
        let starts_path = start == 0
            || !matches!(bytes[start - 1], b'/' | b'.' | b'_' | b'-') && !bytes[start - 1].is_ascii_alphanumeric();
        let end = line[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "./_-".contains(c)))
            .map_or(line.len(), |e| start + e);
        if starts_path {
            found.push(&line[start..end]);
        }
        i = end.max(start + 3);
    }
    found
}

/// Words that always point outside the repository, whatever directory they are read from.
const OUTSIDE: &[&str] = &["shared/data/", "shared/seeds/", "shared/DESIGN", "DESIGN.md", "STYLE.md", "/work/shared"];

#[test]
fn no_tracked_file_refers_to_a_path_outside_the_repository() {
    let root = repo_root();
    let Some(files) = tracked_files(&root) else {
        eprintln!("skipped: {} is not a git checkout, so the tracked files are unknown", root.display());
        return;
    };
    assert!(files.len() > 50, "git ls-files listed only {} files", files.len());
    let this_file = root.join("cli/tests/self_contained.rs");
    let mut offences = Vec::new();
    for file in &files {
        if *file == this_file {
            continue;
        }
        // Binary or non-UTF-8 files (none today) cannot carry a readable path reference.
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let rel_name = file.strip_prefix(&root).unwrap().display().to_string();
        // A path is read from the file's own directory (`include_str!`, scenario files) or, in
        // Rust sources, from the crate's (`env!("CARGO_MANIFEST_DIR")`); it is an offence when
        // it climbs out under every reading. `OUTSIDE` catches the known names either way.
        let is_rust = file.extension().is_some_and(|e| e == "rs");
        let crate_dir = if is_rust {
            file.ancestors().find(|d| d.join("Cargo.toml").is_file() && d.starts_with(&root))
        } else {
            None
        };
        let bases: Vec<&Path> = [file.parent(), crate_dir].into_iter().flatten().collect();
        for (n, line) in text.lines().enumerate() {
            for word in OUTSIDE {
                if line.contains(word) {
                    offences.push(format!("{rel_name}:{}: mentions `{word}`: {}", n + 1, line.trim()));
                }
            }
            for rel in relative_paths(line) {
                let escapes = bases.iter().all(|base| normalize(base, rel).is_none_or(|p| !p.starts_with(&root)));
                if escapes {
                    offences.push(format!("{rel_name}:{}: `{rel}` leads outside the repository", n + 1));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "tracked files refer to paths outside the repository (vendor the file under data/ or docs/ \
         and point at it there):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_path_scanner_finds_climbing_paths_and_only_those() {
    assert_eq!(relative_paths(r#"file = "../../shared/data/x""#), vec!["../../shared/data/x"]);
    assert_eq!(relative_paths("see ../data/tailbench/README.md and ./x"), vec!["../data/tailbench/README.md"]);
    assert!(relative_paths("a/../b and 1...3").is_empty());
    let root = Path::new("/r");
    assert_eq!(normalize(&root.join("scenarios"), "../data/x"), Some(PathBuf::from("/r/data/x")));
    assert!(!normalize(&root.join("scenarios"), "../../shared/x").unwrap().starts_with(root));
}

/// The targets of Markdown links (`[text](target)`) on one line, outside code spans; anchors
/// (`#…`) and URLs (`scheme:`) are left out, a `#fragment` is cut off.
fn link_targets(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(pos) = rest.find("](") {
        let after = &rest[pos + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        let path = target.split('#').next().unwrap_or("");
        let is_url = path.split_once(':').is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_lowercase()));
        if !path.is_empty() && !is_url && !path.contains(char::is_whitespace) {
            found.push(path);
        }
        rest = &after[end..];
    }
    found
}

/// Results moved between pages (docs/results/) and files move between crates: a link that no
/// longer leads anywhere is a newcomer's dead end.
#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_of_the_repository() {
    let root = repo_root();
    let Some(files) = tracked_files(&root) else {
        eprintln!("SKIP: not a git checkout, no list of tracked files");
        return;
    };
    let mut broken = Vec::new();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "md")) {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let dir = file.parent().unwrap();
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            for target in link_targets(line) {
                let resolved = normalize(dir, target);
                if !resolved.as_deref().is_some_and(|p| p.starts_with(&root) && p.exists()) {
                    broken.push(format!("{}:{}: ({target})", file.strip_prefix(&root).unwrap().display(), n + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to files that do not exist (fix the path or the link):\n{}", broken.join("\n"));
}

#[test]
fn the_link_scanner_finds_relative_targets_and_skips_urls_and_anchors() {
    let line = "see [a](results/node.md#x), [b](https://x.org/y), [c](#local), [d](../data/README.md) and `f(x)`";
    assert_eq!(link_targets(line), ["results/node.md", "../data/README.md"]);
}
