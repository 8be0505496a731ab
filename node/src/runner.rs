//! The agent's main loop (`tailor node run`), the supervisor (`tailor node supervise`) and the
//! safe-mode switch (`tailor node safe-mode`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::attribution::Window;
use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::journal::{self, Journal};
use crate::probe::Capabilities;

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

fn install_signal_handlers() {
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // Registering can only fail for signals that must not be caught (SIGKILL, SIGSTOP).
        signal_hook::flag::register(sig, STOP.clone()).expect("SIGTERM/SIGINT can be caught");
    }
}

/// The file whose presence keeps the agent in safe mode (stock scheduling).
pub fn safe_mode_flag(state_dir: &Path) -> PathBuf {
    state_dir.join("safe-mode")
}

pub fn agent_pid_file(state_dir: &Path) -> PathBuf {
    state_dir.join("agent.pid")
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Runs the agent until SIGTERM/SIGINT, then restores everything. With `heartbeat`, prints one
/// line per reconcile on stdout for the supervisor.
pub fn run(config: NodeConfig, heartbeat: bool) -> Result<(), NodeError> {
    install_signal_handlers();
    let state_dir = config.state_dir.clone();
    std::fs::create_dir_all(&state_dir).map_err(|e| NodeError::io(&state_dir, e))?;
    let interval = Duration::from_millis(config.reconcile_interval_ms);
    let window_len = Duration::from_millis(config.window_ms);
    let gat_domain = config.gat_domain.clone();
    let mut agent = Agent::new(config, Capabilities::probe())?;
    eprint!("{}", agent.describe());
    let scheduler = gat_domain.map(GatScheduler::start);
    let pid_file = agent_pid_file(&state_dir);
    std::fs::write(&pid_file, std::process::id().to_string()).map_err(|e| NodeError::io(&pid_file, e))?;
    let windows_path = state_dir.join("windows.jsonl");
    let mut window: Option<Window> = None;
    let mut last_error = String::new();
    let stdout = std::io::stdout();
    while !STOP.load(Ordering::SeqCst) {
        let tick_start = Instant::now();
        let safe = safe_mode_flag(&state_dir).exists();
        let result = if safe && agent.enforcing() {
            agent.safe_mode().map(|r| eprintln!("tailor-node: safe mode: restored {} journal entries", r.entries))
        } else if !safe && !agent.enforcing() {
            agent.start_enforcing().map(|leftover| {
                if let Some(r) = leftover {
                    eprintln!("tailor-node: restored {} entries left by a previous run", r.entries);
                }
            })
        } else {
            agent.reconcile()
        };
        match result {
            Ok(()) => last_error.clear(),
            Err(e) => {
                let msg = e.to_string();
                if msg != last_error {
                    eprintln!("tailor-node: {msg}");
                    last_error = msg;
                }
            }
        }
        if heartbeat {
            let mut out = stdout.lock();
            let beat = writeln!(out, "heartbeat {} enforcing={}", agent.stats.ticks, u8::from(agent.enforcing()))
                .and_then(|_| out.flush());
            if beat.is_err() {
                // The supervisor is gone: nobody would restore after us, so restore and stop.
                eprintln!("tailor-node: supervisor gone (heartbeat pipe closed); restoring and stopping");
                break;
            }
        }
        if !window_len.is_zero() {
            let due = window.as_ref().is_some_and(|w| w.elapsed() >= window_len);
            if due || window.is_none() {
                if let Some(w) = window.take() {
                    append_line(&windows_path, &serde_json::to_string(&w.finish(&agent)).unwrap_or_default());
                }
                window = Some(Window::start(&agent));
            }
        }
        let next = tick_start + interval;
        while !STOP.load(Ordering::SeqCst) && Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(20)));
        }
    }
    // The scheduler first: it puts every GAT-domain thread back before the tiers go.
    drop(scheduler);
    let report = agent.safe_mode()?;
    eprintln!("tailor-node: stopping: restored {} journal entries ({} errors)", report.entries, report.errors.len());
    for e in &report.errors {
        eprintln!("tailor-node: restore: {e}");
    }
    let _ = std::fs::remove_file(&pid_file);
    Ok(())
}

/// The runtime's node-wide scheduler on a thread of the node agent (`[gat_domain]`).
/// Dropping it stops the scheduler, which restores every registered thread.
struct GatScheduler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GatScheduler {
    fn start(g: crate::config::GatDomainConfig) -> GatScheduler {
        let cfg = tailor_runtime::kernel::AgentConfig {
            table: g.table.clone(),
            policy: g.policy.clone(),
            cpus: g.cpus.unwrap_or_else(tailor_runtime::available_cpus),
            slots: 1024,
            verbose: false,
            enforce: g.enforce(),
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tailor-gat-sched".into())
            .spawn(move || {
                eprintln!(
                    "tailor-node: [gat_domain] tier {:?}: node-wide scheduler on {} ({} CPUs, policy {:?}, {:?})",
                    g.tier,
                    cfg.table.display(),
                    cfg.cpus,
                    cfg.policy,
                    cfg.enforce
                );
                match tailor_runtime::kernel::run_agent(&cfg, &flag) {
                    Ok(r) => eprintln!(
                        "tailor-node: [gat_domain] scheduler stopped: {} jobs, {} promotions, {} errors",
                        r.arrivals, r.promotions, r.errors
                    ),
                    // Tiers keep working without it; services fall back to cooperative.
                    Err(e) => eprintln!("tailor-node: [gat_domain] scheduler not running: {e}"),
                }
            })
            .ok();
        GatScheduler { stop, thread }
    }
}

impl Drop for GatScheduler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn append_line(path: &Path, line: &str) {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
    if let Ok(mut f) = file {
        let _ = writeln!(f, "{line}");
    }
}

/// How to start the agent process (the `tailor` binary and its subcommand prefix).
#[derive(Clone, Debug)]
pub struct AgentCommand {
    pub program: PathBuf,
    /// Arguments before `run --config FILE --heartbeat` (e.g. ["node"] for `tailor`).
    pub prefix: Vec<String>,
}

/// Runs the agent as a child with a heartbeat. On child death or a missed heartbeat: restore
/// from the journal, then restart. SIGTERM/SIGINT stop the child (which restores) and exit.
pub fn supervise(config_path: &Path, agent: AgentCommand) -> Result<(), NodeError> {
    install_signal_handlers();
    let config = NodeConfig::load(config_path)?;
    let state_dir = config.state_dir.clone();
    let timeout = Duration::from_millis(config.heartbeat_timeout_ms.max(config.reconcile_interval_ms * 3));
    let mut failures: Vec<Instant> = Vec::new();
    let mut failed_at: Option<Instant> = None;
    while !STOP.load(Ordering::SeqCst) {
        let mut child = Command::new(&agent.program)
            .args(&agent.prefix)
            .arg("run")
            .arg("--config")
            .arg(config_path)
            .arg("--heartbeat")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| NodeError::io(&agent.program, e))?;
        let pid = child.id();
        eprintln!("tailor-node supervise: agent pid {pid} started");
        let (tx, rx) = mpsc::sync_channel::<String>(64);
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut last_beat = Instant::now();
        let cause = loop {
            if STOP.load(Ordering::SeqCst) {
                break None;
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    last_beat = Instant::now();
                    if let (Some(t), true) = (failed_at, line.ends_with("enforcing=1")) {
                        eprintln!(
                            "tailor-node supervise: agent pid {pid} enforcing again {} ms after the failure was detected",
                            t.elapsed().as_millis()
                        );
                        failed_at = None;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if last_beat.elapsed() > timeout => {
                    break Some(format!("no heartbeat for {} ms", last_beat.elapsed().as_millis()));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break Some("exited".to_string()),
            }
        };
        let Some(cause) = cause else {
            stop_child(&mut child);
            break;
        };
        let detected = Instant::now();
        let _ = child.kill();
        let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
        let report = journal::restore(&state_dir)?;
        eprintln!(
            "tailor-node supervise: agent pid {pid} {cause} ({status}); restored {} journal entries in {:.1} ms",
            report.entries,
            detected.elapsed().as_secs_f64() * 1e3
        );
        failed_at = Some(detected);
        failures.retain(|t| t.elapsed() < Duration::from_secs(30));
        failures.push(detected);
        if failures.len() > 5 {
            // Crash loop: the node stays in stock mode (restored) between attempts.
            eprintln!("tailor-node supervise: {} failures in 30 s; backing off 5 s", failures.len());
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    let report = journal::restore(&state_dir)?;
    eprintln!("tailor-node supervise: stopped; {} leftover journal entries restored", report.entries);
    Ok(())
}

fn stop_child(child: &mut Child) {
    // SAFETY: a signal to our own child, by pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `tailor node safe-mode`: sets (or with `off` clears) the safe-mode flag. A running agent
/// restores within one reconcile interval; with no agent running, restores here.
pub fn safe_mode(config: &NodeConfig, off: bool) -> Result<String, NodeError> {
    let dir = &config.state_dir;
    std::fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
    let flag = safe_mode_flag(dir);
    if off {
        if let Err(e) = std::fs::remove_file(&flag) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(NodeError::io(&flag, e));
            }
        }
        return Ok("safe mode off: a running agent enforces the tiers again within one reconcile interval".into());
    }
    std::fs::write(&flag, "").map_err(|e| NodeError::io(&flag, e))?;
    let agent_pid = std::fs::read_to_string(agent_pid_file(dir)).ok().and_then(|s| s.trim().parse::<u32>().ok());
    if let Some(pid) = agent_pid.filter(|&p| pid_alive(p)) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !Journal::path_in(dir).exists() {
                return Ok(format!("safe mode on: agent pid {pid} restored every original setting"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return Err(NodeError::Unsupported(format!(
            "agent pid {pid} did not restore within 5 s; stop it (kill {pid}) and rerun safe-mode"
        )));
    }
    let report = journal::restore(dir)?;
    let mut msg = format!("safe mode on: no agent running; restored {} journal entries", report.entries);
    for e in report.errors {
        msg.push_str(&format!("\n  could not undo: {e}"));
    }
    Ok(msg)
}
