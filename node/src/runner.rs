//! The agent's main loop (`tailor node run`), the supervisor (`tailor node supervise`) and the
//! safe-mode switch (`tailor node safe-mode`).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
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
use crate::metrics::NodeMetrics;
use crate::probe::Capabilities;
use tailor_runtime::kernel::AgentStats;
use tailor_telemetry::prometheus_client::registry::Registry;
use tailor_telemetry::{AdminHandle, AdminServer, Readiness};

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));
/// SIGHUP: reload the config (the agent) or pass the signal on to the agent (the supervisor).
static RELOAD: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

fn install_signal_handlers() {
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // Registering can only fail for signals that must not be caught (SIGKILL, SIGSTOP).
        signal_hook::flag::register(sig, STOP.clone()).expect("SIGTERM/SIGINT can be caught");
    }
    // SIGHUP's default action would end the process without restoring anything.
    signal_hook::flag::register(signal_hook::consts::SIGHUP, RELOAD.clone()).expect("SIGHUP can be caught");
}

/// The agent's config and everything built from it, swapped whole on a reload.
fn build(config: NodeConfig) -> Result<Agent, NodeError> {
    Agent::new(config, Capabilities::probe())
}

/// SIGHUP: the file is read and checked again; on any error the running config stays in force
/// (the error names the file, and the line and field where it can). A good one replaces it:
/// the old tiers are restored, the new ones apply at the next pass.
fn reload(path: &Path, agent: &mut Agent) {
    let fresh = NodeConfig::load(path).and_then(build);
    match fresh {
        Err(e) => tracing::error!("reload of {}: {e}; the running config stays in force", path.display()),
        Ok(new) => {
            if agent.enforcing() {
                match agent.safe_mode() {
                    Ok(r) => tracing::info!("reload: restored {} entries of the old config", r.entries),
                    Err(e) => {
                        tracing::warn!("reload of {}: restoring the old config: {e}; keeping it", path.display());
                        return;
                    }
                }
            }
            *agent = new;
            tracing::info!("reloaded {}", path.display());
            log_plan(agent);
        }
    }
}

/// The start-up report at info, and each thing the config asks for that this node cannot
/// give (or that looks wrong) at warn.
fn log_plan(agent: &Agent) {
    tracing::info!("{}", agent.describe().trim_end());
    for w in &agent.warnings {
        tracing::warn!("{w}");
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

/// Runs the agent on the config at `config_path` until SIGTERM/SIGINT, then restores
/// everything; SIGHUP reloads the file. With `heartbeat`, prints one line per reconcile on
/// stdout for the supervisor.
pub fn run(config_path: &Path, heartbeat: bool) -> Result<(), NodeError> {
    install_signal_handlers();
    let config = NodeConfig::load(config_path)?;
    let state_dir = config.state_dir.clone();
    std::fs::create_dir_all(&state_dir).map_err(|e| NodeError::io(&state_dir, e))?;
    // The state dir and the reconcile loop's timing are fixed for the process (a reload that
    // changes them takes a restart).
    let interval = Duration::from_millis(config.reconcile_interval_ms);
    let window_len = Duration::from_millis(config.window_ms);
    let gat_domain = config.gat_domain.clone();
    let metrics_addr = config.metrics_addr;
    let mut agent = build(config)?;
    log_plan(&agent);
    let metrics = NodeMetrics::new();
    let scheduler_stats = tailor_runtime::kernel::AgentStats::new();
    let _admin = match metrics_addr {
        Some(addr) => Some(serve_metrics(addr, &metrics, gat_domain.is_some().then_some(&scheduler_stats))?),
        None => None,
    };
    let scheduler = gat_domain.map(|g| GatScheduler::start(g, scheduler_stats.clone()));
    let pid_file = agent_pid_file(&state_dir);
    std::fs::write(&pid_file, std::process::id().to_string()).map_err(|e| {
        NodeError::Journal(format!(
            "{}: {e}: the state directory does not take writes; the agent journals every change there before \
             making it, so it will not start. Make {} writable (and not full)",
            pid_file.display(),
            state_dir.display()
        ))
    })?;
    let windows_path = state_dir.join("windows.jsonl");
    let mut window: Option<Window> = None;
    let mut last_error = String::new();
    let stdout = std::io::stdout();
    while !STOP.load(Ordering::SeqCst) {
        let tick_start = Instant::now();
        if RELOAD.swap(false, Ordering::SeqCst) {
            let keep = (agent.config.state_dir.clone(), agent.config.reconcile_interval_ms, agent.config.window_ms);
            reload(config_path, &mut agent);
            if (agent.config.state_dir.clone(), agent.config.reconcile_interval_ms, agent.config.window_ms) != keep {
                tracing::warn!("reload: state_dir, reconcile_interval_ms and window_ms take effect at the next start");
            }
        }
        let safe = safe_mode_flag(&state_dir).exists();
        let result = if safe && agent.enforcing() {
            agent.safe_mode().map(|r| tracing::warn!("safe mode: restored {} journal entries", r.entries))
        } else if !safe && !agent.enforcing() {
            agent.start_enforcing().map(|leftover| {
                if let Some(r) = leftover {
                    tracing::info!("restored {} entries left by a previous run", r.entries);
                }
            })
        } else {
            agent.reconcile()
        };
        metrics.publish(&agent, safe, result.is_err(), tick_start.elapsed());
        match result {
            Ok(()) => last_error.clear(),
            Err(e) => {
                let msg = e.to_string();
                if msg != last_error {
                    tracing::error!("{msg}");
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
                tracing::warn!("supervisor gone (heartbeat pipe closed); restoring and stopping");
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
    tracing::info!("stopping: restored {} journal entries ({} errors)", report.entries, report.errors.len());
    for p in report.problems() {
        tracing::error!("restore: {p}");
    }
    let _ = std::fs::remove_file(&pid_file);
    Ok(())
}

/// Serves the agent's metrics (and the GAT-domain scheduler's, when it runs) on `addr`;
/// ready once a reconcile pass succeeded.
fn serve_metrics(
    addr: SocketAddr,
    metrics: &Arc<NodeMetrics>,
    scheduler: Option<&Arc<AgentStats>>,
) -> Result<AdminHandle, NodeError> {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    if let Some(stats) = scheduler {
        registry.register_collector(Box::new(stats.scraped()));
    }
    let ready = metrics.clone();
    AdminServer::new(Arc::new(registry))
        .readiness(Readiness::from_fn(move || ready.ready()))
        .spawn(addr)
        .map_err(|e| NodeError::Config(format!("metrics_addr = \"{addr}\": cannot listen: {e}")))
}

/// The runtime's node-wide scheduler on a thread of the node agent (`[gat_domain]`).
/// Dropping it stops the scheduler, which restores every registered thread.
struct GatScheduler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GatScheduler {
    fn start(g: crate::config::GatDomainConfig, stats: Arc<AgentStats>) -> GatScheduler {
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
                tracing::info!(
                    "[gat_domain] tier {:?}: node-wide scheduler on {} ({} CPUs, policy {:?}, {:?})",
                    g.tier,
                    cfg.table.display(),
                    cfg.cpus,
                    cfg.policy,
                    cfg.enforce
                );
                match tailor_runtime::kernel::run_agent_with_stats(&cfg, &flag, &stats) {
                    Ok(r) => tracing::info!(
                        jobs = r.arrivals,
                        promotions = r.promotions,
                        errors = r.errors,
                        "[gat_domain] scheduler stopped"
                    ),
                    // Tiers keep working without it; services fall back to cooperative.
                    Err(e) => tracing::error!("[gat_domain] scheduler not running: {e}"),
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
        tracing::info!("supervise: agent pid {pid} started");
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
            if RELOAD.swap(false, Ordering::SeqCst) {
                // SAFETY: a signal to our own child, by pid: it re-reads the config.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    last_beat = Instant::now();
                    if let (Some(t), true) = (failed_at, line.ends_with("enforcing=1")) {
                        tracing::info!(
                            "supervise: agent pid {pid} enforcing again {} ms after the failure was detected",
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
        tracing::warn!("supervise: agent pid {pid} {cause}: restoring");
        let _ = child.kill();
        let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
        let report = restore_node(&config)?;
        tracing::warn!(
            "supervise: agent pid {pid} {cause} ({status}); restored {} journal entries in {:.1} ms",
            report.entries,
            detected.elapsed().as_secs_f64() * 1e3
        );
        for p in report.problems() {
            tracing::error!("supervise: restore: {p}");
        }
        failed_at = Some(detected);
        failures.retain(|t| t.elapsed() < Duration::from_secs(30));
        failures.push(detected);
        if failures.len() > 5 {
            // Crash loop: the node stays in stock mode (restored) between attempts.
            tracing::warn!("supervise: {} failures in 30 s; backing off 5 s", failures.len());
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    let report = restore_node(&config)?;
    tracing::info!("supervise: stopped; {} leftover journal entries restored", report.entries);
    for p in report.problems() {
        tracing::error!("supervise: restore: {p}");
    }
    Ok(())
}

/// The journal's undo and a sweep of the config's own cgroups, without an agent.
fn restore_node(config: &NodeConfig) -> Result<journal::RestoreReport, NodeError> {
    let roots: Vec<PathBuf> = Capabilities::probe().hierarchies.iter().map(|h| h.root.clone()).collect();
    journal::restore_and_sweep(&config.state_dir, &config.cgroup_name, &roots)
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
    let report = restore_node(config)?;
    let mut msg = format!("safe mode on: no agent running; restored {} journal entries", report.entries);
    if report.swept > 0 {
        msg.push_str(&format!("; {} leftovers swept from the agent's own cgroups", report.swept));
    }
    for p in report.problems() {
        msg.push_str(&format!("\n  {p}"));
    }
    if !report.corrupt.is_empty() {
        return Err(NodeError::Journal(msg));
    }
    Ok(msg)
}
