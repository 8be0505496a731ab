//! Starting and stopping the demo chain: N tier processes on loopback, each
//! `tailor demo tier …` (the same binary), started last tier first so each
//! knows the address of the next; readiness is the line each prints once it
//! listens, never a sleep.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use http::Uri;
use tailor_runtime::BackendSpec;

use crate::tier::READY_PREFIX;

/// How to start a chain.
#[derive(Clone, Debug)]
pub struct ChainSpec {
    /// The `tailor` binary (std::env::current_exe() in the CLI).
    pub exe: PathBuf,
    /// Arguments before the tier's own, e.g. `["demo", "tier"]`.
    pub tier_args: Vec<String>,
    pub tiers: usize,
    pub backend: BackendSpec,
    /// Each tier's stderr goes to `<log_dir>/<log_prefix>-tier<i>.log`.
    pub log_dir: PathBuf,
    pub log_prefix: String,
}

/// Why the chain did not start.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("starting tier {index} ({exe}): {source}")]
    Spawn { index: usize, exe: String, source: std::io::Error },
    #[error("tier {index} did not report it was listening within {secs} s; see {log}")]
    NotReady { index: usize, secs: u64, log: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

struct Member {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// A running chain. Dropping it stops every tier it started (by pid).
pub struct Chain {
    members: Vec<Member>,
    /// The edge's address (tier 0).
    pub entry: Uri,
}

const READY_TIMEOUT: Duration = Duration::from_secs(20);

impl Chain {
    pub fn start(spec: &ChainSpec) -> Result<Chain, ChainError> {
        std::fs::create_dir_all(&spec.log_dir)
            .map_err(|source| ChainError::Io { what: format!("creating {}", spec.log_dir.display()), source })?;
        let mut chain = Chain { members: Vec::new(), entry: Uri::from_static("http://127.0.0.1/") };
        let backend = serde_json::to_string(&spec.backend).expect("BackendSpec serializes");
        let mut next: Option<String> = None;
        for index in (0..spec.tiers).rev() {
            let log = spec.log_dir.join(format!("{}-tier{index}.log", spec.log_prefix));
            let stderr = File::create(&log)
                .map_err(|source| ChainError::Io { what: format!("creating {}", log.display()), source })?;
            let mut cmd = Command::new(&spec.exe);
            cmd.args(&spec.tier_args)
                .args(["--index", &index.to_string(), "--listen", "127.0.0.1:0", "--backend", &backend])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(stderr);
            if let Some(n) = &next {
                cmd.args(["--next", n]);
            }
            let mut child = cmd.spawn().map_err(|source| ChainError::Spawn {
                index,
                exe: spec.exe.display().to_string(),
                source,
            })?;
            let stdout = child.stdout.take().expect("piped");
            let stdin = child.stdin.take();
            chain.members.push(Member { child, stdin });
            let addr = wait_ready(stdout, READY_TIMEOUT).ok_or_else(|| ChainError::NotReady {
                index,
                secs: READY_TIMEOUT.as_secs(),
                log: log.display().to_string(),
            })?;
            next = Some(format!("http://{addr}/"));
        }
        chain.entry = next.expect("at least one tier").parse().expect("valid uri");
        Ok(chain)
    }

    /// Process ids of the tiers, edge last.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.child.id()).collect()
    }
}

/// Reads the child's stdout until the readiness line; returns the address it names.
fn wait_ready(stdout: std::process::ChildStdout, timeout: Duration) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix(READY_PREFIX) {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    rx.recv_timeout(timeout).ok()
}

impl Drop for Chain {
    fn drop(&mut self) {
        // Closing stdin asks each tier to stop cleanly (its scheduler restores
        // every thread it changed); a tier still alive after 3 s is killed.
        for m in &mut self.members {
            m.stdin.take();
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for m in &mut self.members {
            stop_child(&mut m.child, deadline);
        }
    }
}

/// Waits for `child` until `deadline`, then kills it (by pid) and reaps it.
pub fn stop_child(child: &mut Child, deadline: Instant) {
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}

/// Whether this process has CAP_SYS_NICE in its effective set (bit 23 of
/// `CapEff` in /proc/self/status): the kernel backend needs it.
pub fn has_cap_sys_nice() -> bool {
    cap_eff(Path::new("/proc/self/status")).is_some_and(|caps| caps & (1 << 23) != 0)
}

fn cap_eff(status: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(status).ok()?;
    let line = text.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}
