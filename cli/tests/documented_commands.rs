//! Every command line the README and docs/ show still parses: each `tailor …` (and
//! `tailor-node …`, `tailor-fanout …`) command found in a code block or an inline code span is
//! run with `--help` appended, so nothing runs but clap checks the subcommands, flags and values.
//!
//! Two strengths of check, because docs show both commands and synopses:
//! - a complete command line in a code block (no placeholders such as `FILE`, `[--quick]`,
//!   `...`): the whole line must parse (`tailor sim x.toml --policy '{…}' --help` exits 0);
//! - a synopsis, or a fragment quoted in prose: its subcommand path must exist and every
//!   `--flag` it names must appear in that subcommand's `--help`.
//!
//! Commands under a "What remains" heading are planned, not shipped, and are not checked.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut out);
    out.sort();
    out
}

/// One piece of code a document shows: a line of a fenced block (continuations joined) or an
/// inline code span.
struct Snippet {
    line: usize,
    text: String,
    in_block: bool,
}

fn snippets(doc: &str) -> Vec<Snippet> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending: Option<(usize, String)> = None;
    let mut planned = false;
    for (i, raw) in doc.lines().enumerate() {
        if !in_block && raw.starts_with('#') {
            planned = raw.to_lowercase().contains("what remains");
        }
        if planned {
            continue;
        }
        if raw.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let (start, mut text) = pending.take().unwrap_or((i + 1, String::new()));
            let line = raw.trim();
            match line.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push(' ');
                    pending = Some((start, text));
                }
                None => {
                    text.push_str(line);
                    out.push(Snippet { line: start, text, in_block: true });
                }
            }
        } else {
            for (k, span) in raw.split('`').enumerate() {
                if k % 2 == 1 {
                    out.push(Snippet { line: i + 1, text: span.to_string(), in_block: false });
                }
            }
        }
    }
    out
}

/// Shell-like words (quotes removed); `None` for an unbalanced quote.
fn words(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            None => cur.push(c),
        }
    }
    if quote.is_some() {
        return None;
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    Some(out)
}

const BINARIES: [&str; 3] = ["tailor", "tailor-node", "tailor-fanout"];

/// The Tailor binary a snippet runs and its arguments, up to a pipe, redirection or comment.
fn command(snippet: &str) -> Option<(String, Vec<String>)> {
    let text = snippet.trim().trim_start_matches("$ ");
    let w = words(text)?;
    let base = |t: &str| t.rsplit('/').next().unwrap_or(t).to_string();
    let (bin, start) = (0..w.len()).find_map(|i| {
        let b = base(&w[i]);
        if !BINARIES.contains(&b.as_str()) {
            return None;
        }
        // `cargo run … --bin tailor-fanout -- ARGS`
        if i > 0 && w[i - 1] == "--bin" {
            return w.get(i + 1).filter(|t| *t == "--").map(|_| (b, i + 2));
        }
        // At the start, after sudo, or after `--` (kubectl exec … -- tailor …).
        (i == 0 || w[i - 1] == "sudo" || w[i - 1] == "--").then_some((b, i + 1))
    })?;
    let args: Vec<String> = w[start..]
        .iter()
        .take_while(|t| {
            !(["|", "||", "&&", "&", ";", "2>&1"].contains(&t.as_str()) || t.starts_with('>') || t.starts_with('#'))
        })
        .cloned()
        .collect();
    Some((bin, args))
}

/// A synopsis rather than a command: placeholders, optional parts, alternatives, ellipses,
/// shell variables.
fn is_synopsis(args: &[String]) -> bool {
    args.iter().any(|a| {
        a.contains(['[', ']', '<', '>', '…', '|', '$']) || a.contains("...") || {
            let upper = a.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            upper && a.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        }
    })
}

fn run(bin: &Path, args: &[String]) -> std::process::Output {
    Command::new(bin).args(args).current_dir(repo()).output().expect("run a Tailor binary")
}

#[test]
fn every_documented_command_parses() {
    let tailor = PathBuf::from(env!("CARGO_BIN_EXE_tailor"));
    let dir = tailor.parent().unwrap().to_path_buf();
    let mut checked = 0;
    let mut missing_bins = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(repo()).unwrap().display().to_string();
        for s in snippets(&text) {
            let Some((bin, args)) = command(&s.text) else { continue };
            let exe = dir.join(&bin);
            if !exe.exists() {
                // `cargo test --workspace` (scripts/test.sh) builds every binary first;
                // `cargo test -p tailor-cli` alone builds only `tailor`.
                missing_bins.insert(bin);
                continue;
            }
            let whole = s.in_block && !is_synopsis(&args);
            let where_ = format!("{name}:{}: `{}`", s.line, s.text.trim());
            if whole {
                let mut with_help = args.clone();
                with_help.push("--help".into());
                let out = run(&exe, &with_help);
                if !out.status.success() {
                    failures.push(format!("{where_}\n    {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
            } else {
                // The subcommand path: the leading plain words.
                let path: Vec<String> = args
                    .iter()
                    .take_while(|a| a.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
                    .take_while(|a| !a.starts_with('-'))
                    .cloned()
                    .collect();
                let mut with_help = path.clone();
                with_help.push("--help".into());
                let out = run(&exe, &with_help);
                let help = String::from_utf8_lossy(&out.stdout).into_owned();
                if !out.status.success() {
                    failures.push(format!("{where_}\n    {}", String::from_utf8_lossy(&out.stderr).trim()));
                    continue;
                }
                for flag in args.iter().filter(|a| a.starts_with("--") && a.len() > 2) {
                    let flag = flag.split('=').next().unwrap();
                    let named = help.match_indices(flag).any(|(i, _)| {
                        !help[i + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
                    });
                    if !named {
                        failures.push(format!("{where_}\n    `{bin} {}` has no {flag}", path.join(" ")));
                    }
                }
            }
            checked += 1;
        }
    }
    for bin in &missing_bins {
        println!("{bin} is not built (cargo test -p tailor-cli alone): its documented commands are not checked");
    }
    println!("{checked} documented command lines checked");
    assert!(checked > 50, "only {checked} documented commands found: is the extraction broken?");
    assert!(failures.is_empty(), "documented commands that no longer parse:\n{}", failures.join("\n"));
}

#[test]
fn the_extraction_finds_commands_and_synopses() {
    let (bin, args) = command("sudo target/release/tailor agent --table /dev/shm/x &").unwrap();
    assert_eq!((bin.as_str(), args.as_slice()), ("tailor", &["agent", "--table", "/dev/shm/x"].map(String::from)[..]));
    let (bin, args) =
        command("cargo run --release -p tailor-fanout --bin tailor-fanout -- servers --count 2   # two servers")
            .unwrap();
    assert_eq!(bin, "tailor-fanout");
    assert_eq!(args, ["servers", "--count", "2"]);
    let (_, args) = command("tailor node plan --demand-cpus 1.5 > node.toml").unwrap();
    assert_eq!(args, ["node", "plan", "--demand-cpus", "1.5"]);
    assert!(command("helm template tailor deploy/helm/tailor").is_none());
    let (_, args) = command("tailor sim x.toml --policy '{kind=\"orf\", c=2}'").unwrap();
    assert_eq!(args[3], "{kind=\"orf\", c=2}");
    assert!(is_synopsis(&command("tailor node run --config FILE").unwrap().1));
    assert!(is_synopsis(&command("tailor bench ladder [--quick]").unwrap().1));
    assert!(is_synopsis(&command("tailor demo --seed $s").unwrap().1));
    let planned = snippets("## What remains\n\n- `tailor bench proxy`\n\n## Next\n\n`tailor sim`\n");
    assert_eq!(planned.iter().map(|s| s.text.as_str()).collect::<Vec<_>>(), ["tailor sim"]);
    assert!(!is_synopsis(&command("tailor bench ladder --steps 0,8 --out out/ladder").unwrap().1));
}
