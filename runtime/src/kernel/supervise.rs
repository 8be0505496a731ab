//! The agent's supervisor (`tailor agent --supervise`): runs the agent as a child process,
//! starts a new one when it exits or hangs, and stops it (which restores every thread) on
//! SIGTERM/SIGINT.
//!
//! Why a supervisor of its own: services fall back to the cooperative backend within
//! `watchdog_ms` of the agent's heartbeat stopping and re-attach on their own once an agent
//! serves the table again, so the node's kernel ordering is back as soon as a new agent
//! runs. A hung agent (SIGSTOP, a livelock) keeps its process, so a supervisor that only
//! waits for exits (systemd's `Restart=`) would leave the node in the fallback for good:
//! this one reads the agent's heartbeat and kills an agent whose heartbeat stood still.
//! The child's stdin is a pipe from the supervisor: if the supervisor itself dies, the
//! agent reads EOF, restores every thread and exits (`stop_on_signals`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::table::{self, Table};
use crate::RuntimeError;

/// What to supervise.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// The agent's program and arguments (e.g. `tailor agent --table ...`).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The table the agent serves: its heartbeat tells a hung agent.
    pub table: PathBuf,
    /// An agent whose heartbeat stood still this long is killed and replaced.
    pub hang_ms: u64,
}

/// What the supervisor saw, returned when it stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct SupervisorReport {
    pub starts: u64,
    pub exits: u64,
    pub hangs: u64,
}

/// Restarts within this window count towards the crash-loop back-off.
const CRASH_WINDOW: Duration = Duration::from_secs(30);
const CRASH_LIMIT: usize = 5;
const CRASH_BACKOFF: Duration = Duration::from_secs(2);

/// Runs the agent until `stop` is set; then stops it with SIGTERM and waits for it.
pub fn supervise(cfg: &SupervisorConfig, stop: &AtomicBool) -> Result<SupervisorReport, RuntimeError> {
    let mut report = SupervisorReport::default();
    let mut recent: Vec<Instant> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut child = Command::new(&cfg.program)
            .args(&cfg.args)
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| RuntimeError::Io { what: format!("start the agent {}", cfg.program.display()), source: e })?;
        report.starts += 1;
        let pid = child.id();
        tracing::info!("agent pid {pid} started");
        let outcome = watch(cfg, &mut child, stop);
        match outcome {
            Outcome::Stopped => {
                // SAFETY: a signal to our own child, by pid.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                let status = child.wait();
                tracing::info!("stopped; agent pid {pid} {status:?}");
                break;
            }
            Outcome::Exited(status) => {
                report.exits += 1;
                tracing::warn!("agent pid {pid} exited ({status}); starting a new one");
            }
            Outcome::Hung(still) => {
                report.hangs += 1;
                let _ = child.kill();
                let _ = child.wait();
                tracing::warn!(
                    "agent pid {pid} hung (heartbeat still for {} ms); killed, starting a new one",
                    still.as_millis()
                );
            }
        }
        recent.retain(|t| t.elapsed() < CRASH_WINDOW);
        recent.push(Instant::now());
        if recent.len() > CRASH_LIMIT {
            // A crash loop: the services stay in their fallback meanwhile.
            tracing::warn!(
                "{} restarts in {} s; waiting {} s",
                recent.len(),
                CRASH_WINDOW.as_secs(),
                CRASH_BACKOFF.as_secs()
            );
            let until = Instant::now() + CRASH_BACKOFF;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    Ok(report)
}

enum Outcome {
    Stopped,
    Exited(std::process::ExitStatus),
    Hung(Duration),
}

/// Waits until `child` exits, hangs (its table's heartbeat stands still for `hang_ms`
/// while it says it is running), or `stop` is set.
fn watch(cfg: &SupervisorConfig, child: &mut Child, stop: &AtomicBool) -> Outcome {
    let pid = child.id();
    let hang = Duration::from_millis(cfg.hang_ms);
    let mut mapped: Option<Table> = None;
    let mut last = (u64::MAX, Instant::now());
    loop {
        if stop.load(Ordering::Relaxed) {
            return Outcome::Stopped;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Outcome::Exited(status);
        }
        // The child's own table: a table of an earlier agent would not beat.
        let ours = |t: &Table| t.header().agent_pid.load(Ordering::Acquire) == pid;
        if !mapped.as_ref().is_some_and(ours) {
            mapped = Table::open(&cfg.table).ok().filter(ours);
            last = (u64::MAX, Instant::now());
        }
        if let Some(t) = &mapped {
            let h = t.header();
            let beat = h.heartbeat.load(Ordering::Acquire);
            if beat != last.0 {
                last = (beat, Instant::now());
            } else if h.agent_state.load(Ordering::Acquire) == table::AGENT_RUNNING && last.1.elapsed() >= hang {
                return Outcome::Hung(last.1.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
