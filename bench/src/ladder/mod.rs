//! `tailor bench ladder`: a latency-critical probe driven open-loop at a fixed rate, with
//! 0/1/2/4/8 co-located single-thread spinners, in two arms on the same machine back to back —
//! the agent in safe mode (stock) and the agent enforcing — with PSI attribution per window.

pub mod cli;
pub mod processes;
mod redis;
mod report;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use processes::ClientResult;
use tailor_node::agent::Agent;
use tailor_node::attribution::{Window, WindowRecord};
use tailor_node::config::NodeConfig;
use tailor_node::procs;
use tailor_node::runner::AgentCommand;
use tailor_node::Capabilities;

pub use report::{plot, table, write_outputs};

/// The latency-critical server the ladder measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Server {
    /// This project's probe server (`probe-server`): burns `service_us` per request.
    Probe,
    /// `redis-server` from the distribution (not part of this project): each request is an
    /// `EVAL` of a Lua loop calibrated to `service_us` of CPU. Its client runs at SCHED_FIFO
    /// outside every tier in both arms, as a separate client machine would.
    Redis,
}

/// SCHED_FIFO priority of the load client in `Server::Redis` runs: any RT level keeps it
/// ahead of the spinners; this one is above the critical band (SCHED_RR 1).
const PROTECTED_CLIENT_PRIORITY: i32 = 2;

/// Ladder parameters.
#[derive(Clone, Debug, Serialize)]
pub struct LadderOptions {
    pub server: Server,
    pub steps: Vec<usize>,
    pub reps: usize,
    pub window_s: f64,
    pub warmup_s: f64,
    pub rate_per_s: f64,
    pub service_us: f64,
    pub exponential: bool,
    pub workers: usize,
    pub seed: u64,
    /// Enforcing arm's agent config; None: the generated two-tier config (see `ladder_config`).
    #[serde(skip)]
    pub config: Option<NodeConfig>,
    #[serde(skip)]
    pub helper: Option<AgentCommand>,
}

impl LadderOptions {
    /// The default run: about 3 minutes.
    pub fn standard() -> LadderOptions {
        LadderOptions {
            server: Server::Probe,
            steps: vec![0, 1, 2, 4, 8],
            reps: 3,
            window_s: 4.0,
            warmup_s: 0.5,
            rate_per_s: 1000.0,
            service_us: 500.0,
            exponential: false,
            workers: 4,
            seed: 1,
            config: None,
            helper: None,
        }
    }
    /// `--quick`: same ladder, short windows (about 1 minute).
    pub fn quick() -> LadderOptions {
        LadderOptions { window_s: 1.0, warmup_s: 0.25, ..Self::standard() }
    }
}

/// One measured window.
#[derive(Clone, Debug, Serialize)]
pub struct WindowResult {
    pub arm: String,
    pub spinners: usize,
    pub rep: usize,
    pub latency: ClientResult,
    /// CPU the spinners got during the window, in % of one CPU.
    pub best_effort_cpu_pct: f64,
    pub attribution: WindowRecord,
    /// The window's tag agrees with its arm (stock = not protected, enforcing = protected).
    pub tag_ok: bool,
}

/// Per arm and step: medians over the repetitions whose tag agrees with the arm.
#[derive(Clone, Debug, Serialize)]
pub struct StepSummary {
    pub arm: String,
    pub spinners: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p99_reps_us: Vec<f64>,
    pub best_effort_cpu_pct: f64,
    pub windows_excluded: usize,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct LadderReport {
    pub options: LadderOptions,
    /// The server as run: its version and, for Redis, the calibrated request.
    pub server: String,
    pub capabilities: String,
    pub enforcing_mechanisms: Vec<String>,
    pub windows: Vec<WindowResult>,
    pub steps: Vec<StepSummary>,
    /// p99 at the top step / p99 at 0 spinners.
    pub stock_p99_growth: f64,
    pub enforcing_p99_growth: f64,
    /// p50 at the top step / p50 at 0 spinners, enforcing arm.
    pub enforcing_p50_change: f64,
    pub elapsed_s: f64,
}

/// The enforcing arm's config: the shipped defaults (`tailor node plan`, see `sizing`, with
/// its selectors) for a critical tier of demand `rho` CPUs — on this 2-CPU VM no fence, a
/// SCHED_RR band capped by its RT budget and the top weight; a fence only on nodes where it
/// leaves critical work two or more cores — and the spinners in a best-effort tier with
/// cpu.idle. The ladder's own processes carry `TAILOR_TIER`; redis-server, which overwrites
/// its environment with its process title, is selected by name as the defaults do.
pub fn ladder_config(caps: &Capabilities, state_dir: &Path, cgroup_name: &str, rho: f64) -> NodeConfig {
    use tailor_node::sizing::{tiers_toml, NodeShape, BEST_EFFORT_MATCH, CRITICAL_MATCH};
    let tiers = tiers_toml(&NodeShape::probe(caps), rho, CRITICAL_MATCH, BEST_EFFORT_MATCH);
    let text = format!(
        "state_dir = {state:?}\ncgroup_name = \"{cgroup_name}\"\nwindow_ms = 0\n{tiers}",
        state = state_dir.display().to_string(),
    );
    NodeConfig::parse(&text, "ladder config").expect("generated ladder config is valid")
}

/// Children we started; killed by pid (and their stdin closed) on drop, even on error or panic.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            drop(c.stdin.take());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Restores the agent on drop so a failed run leaves nothing behind.
struct AgentGuard(Agent);

impl Drop for AgentGuard {
    fn drop(&mut self) {
        if let Err(e) = self.0.safe_mode() {
            tracing::error!(error = %e, "ladder: restoring the agent failed");
        }
        let _ = std::fs::remove_dir_all(self.0.state_dir());
    }
}

fn spawn_helper(helper: &AgentCommand, args: &[&str], tier: Option<&str>) -> Result<Child, String> {
    let mut cmd = Command::new(&helper.program);
    procs::start_at_stock_policy(&mut cmd).args(&helper.prefix).args(args);
    if let Some(tier) = tier {
        cmd.env("TAILOR_TIER", tier);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {} {args:?}: {e}", helper.program.display()))
}

fn read_line(out: &mut BufReader<ChildStdout>, what: &str) -> Result<String, String> {
    let mut line = String::new();
    match out.read_line(&mut line) {
        Ok(n) if n > 0 => Ok(line.trim().to_string()),
        _ => Err(format!("{what} exited before answering")),
    }
}

/// Runs the ladder. `progress` gets one step and one line per window.
pub fn run(opts: &LadderOptions, progress: &dyn tailor_core::Progress) -> Result<LadderReport, String> {
    let begun = Instant::now();
    let helper = opts.helper.clone().ok_or("ladder: no helper command to start the probe processes")?;
    let caps = Capabilities::probe();
    if !caps.root {
        return Err("ladder: needs root (cgroups and scheduling policies); run it as root".into());
    }
    let unique = format!("tailor-ladder-{}", std::process::id());
    let state_dir = std::env::temp_dir().join(&unique);
    let rho = opts.rate_per_s * opts.service_us / 1e6;
    let config = opts.config.clone().unwrap_or_else(|| ladder_config(&caps, &state_dir, &unique, rho));
    let mut agent = AgentGuard(Agent::new(config, caps.clone()).map_err(|e| e.to_string())?);
    agent.0.exclude_pid(std::process::id());
    let capabilities = caps.to_string();
    let enforcing_mechanisms =
        agent.0.tiers.iter().map(|t| format!("{}: {}", t.name, t.mechanisms.join(", "))).collect();

    let mut server_children = Children(Vec::new());
    let (port, client_args, server_description) = match opts.server {
        Server::Probe => {
            let mut server =
                spawn_helper(&helper, &["probe-server", "--workers", &opts.workers.to_string()], Some("critical"))?;
            let mut server_out = BufReader::new(server.stdout.take().expect("piped"));
            server_children.0.push(server);
            let port_line = read_line(&mut server_out, "probe server")?;
            let port: u16 = port_line
                .strip_prefix("port ")
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("probe server said {port_line:?}"))?;
            (port, Vec::new(), format!("probe-server, {} workers", opts.workers))
        }
        Server::Redis => {
            let (child, port, version) = redis::start(&state_dir)?;
            server_children.0.push(child);
            let (iterations, per_iteration_ns, rtt_us) = redis::calibrate(port, opts.service_us)?;
            let description = format!(
                "{version}; EVAL of a {iterations}-step Lua loop per request ({per_iteration_ns:.1} ns per step, \
                 calibrated to {} µs of CPU; idle round trip {rtt_us:.0} µs); client SCHED_FIFO/{PROTECTED_CLIENT_PRIORITY} \
                 outside the tiers",
                opts.service_us
            );
            progress.line(&description);
            let args = vec![
                "--protocol".to_string(),
                "redis".into(),
                "--redis-iterations".into(),
                iterations.to_string(),
                "--rt-priority".into(),
                PROTECTED_CLIENT_PRIORITY.to_string(),
            ];
            (port, args, description)
        }
    };

    let mut windows = Vec::new();
    let arms = ["stock", "enforcing"];
    progress.start((opts.steps.len() * opts.reps * arms.len()) as u64, "windows");
    for &spinners in &opts.steps {
        let mut spinner_children = Children(Vec::new());
        for _ in 0..spinners {
            spinner_children.0.push(spawn_helper(&helper, &["spinner"], Some("best-effort"))?);
        }
        let spinner_pids: Vec<u32> = spinner_children.0.iter().map(|c| c.id()).collect();
        for rep in 0..opts.reps {
            // Alternate the arm order per repetition so slow drift (other jobs on the machine)
            // does not always land on the same arm.
            let order: Vec<&str> = if rep % 2 == 0 { arms.to_vec() } else { arms.iter().rev().copied().collect() };
            for arm in order {
                if arm == "enforcing" {
                    agent.0.start_enforcing().map_err(|e| e.to_string())?;
                } else {
                    agent.0.safe_mode().map_err(|e| e.to_string())?;
                }
                let seed = opts.seed + (spinners * 1000 + rep) as u64;
                let result = measure_window(&helper, opts, port, &client_args, seed, &mut agent.0, &spinner_pids)?;
                let (latency, be_pct, attribution) = result;
                let tag_ok = attribution.protected == (arm == "enforcing");
                progress.advance(windows.len() as u64 + 1, &format!("{arm} spinners={spinners} rep={rep}"));
                progress.line(&format!(
                    "[{:.0} s] {arm:>9} spinners={spinners} rep={rep}: p50 {:.0} µs p99 {:.0} µs, best-effort CPU {be_pct:.0}%, {}{}",
                    begun.elapsed().as_secs_f64(),
                    latency.p50_us,
                    latency.p99_us,
                    if attribution.protected { "protected".to_string() } else { format!("not protected ({})", attribution.reason) },
                    if tag_ok { "" } else { " (* tag disagrees with arm: excluded)" }
                ));
                windows.push(WindowResult {
                    arm: arm.to_string(),
                    spinners,
                    rep,
                    latency,
                    best_effort_cpu_pct: be_pct,
                    attribution,
                    tag_ok,
                });
            }
        }
        agent.0.safe_mode().map_err(|e| e.to_string())?;
        drop(spinner_children);
    }
    drop(server_children);
    drop(agent);

    let median = |mut v: Vec<f64>| -> f64 {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let mut steps = Vec::new();
    for arm in arms {
        for &spinners in &opts.steps {
            let all: Vec<&WindowResult> = windows.iter().filter(|w| w.arm == arm && w.spinners == spinners).collect();
            let ok: Vec<&&WindowResult> = all.iter().filter(|w| w.tag_ok).collect();
            steps.push(StepSummary {
                arm: arm.to_string(),
                spinners,
                p50_us: median(ok.iter().map(|w| w.latency.p50_us).collect()),
                p99_us: median(ok.iter().map(|w| w.latency.p99_us).collect()),
                p99_reps_us: all.iter().map(|w| w.latency.p99_us).collect(),
                best_effort_cpu_pct: median(ok.iter().map(|w| w.best_effort_cpu_pct).collect()),
                windows_excluded: all.len() - ok.len(),
            });
        }
    }
    let (lo, hi) = (opts.steps.first().copied().unwrap_or(0), opts.steps.last().copied().unwrap_or(0));
    let at = |arm: &str, n: usize| steps.iter().find(|s| s.arm == arm && s.spinners == n).cloned();
    let growth = |arm: &str, f: fn(&StepSummary) -> f64| match (at(arm, lo), at(arm, hi)) {
        (Some(a), Some(b)) => f(&b) / f(&a),
        _ => f64::NAN,
    };
    Ok(LadderReport {
        options: opts.clone(),
        server: server_description,
        capabilities,
        enforcing_mechanisms,
        stock_p99_growth: growth("stock", |s| s.p99_us),
        enforcing_p99_growth: growth("enforcing", |s| s.p99_us),
        enforcing_p50_change: growth("enforcing", |s| s.p50_us),
        windows,
        steps,
        elapsed_s: begun.elapsed().as_secs_f64(),
    })
}

fn measure_window(
    helper: &AgentCommand,
    opts: &LadderOptions,
    port: u16,
    client_args: &[String],
    seed: u64,
    agent: &mut Agent,
    spinner_pids: &[u32],
) -> Result<(ClientResult, f64, WindowRecord), String> {
    let seconds = (opts.warmup_s + opts.window_s).to_string();
    let (rate, warmup, service) = (opts.rate_per_s.to_string(), opts.warmup_s.to_string(), opts.service_us.to_string());
    let args = [
        "load-client",
        "--port",
        &port.to_string(),
        "--rate",
        &rate,
        "--seconds",
        &seconds,
        "--warmup",
        &warmup,
        "--service-us",
        &service,
        "--dist",
        if opts.exponential { "exp" } else { "fixed" },
        "--seed",
        &seed.to_string(),
    ];
    let mut args: Vec<&str> = args.to_vec();
    args.extend(client_args.iter().map(String::as_str));
    // A protected client (Redis runs) is outside every tier; the probe's is in the critical one.
    let tier = if client_args.is_empty() { Some("critical") } else { None };
    let mut children = Children(vec![spawn_helper(helper, &args, tier)?]);
    let mut out = BufReader::new(children.0[0].stdout.take().expect("piped"));
    let ready = read_line(&mut out, "load client")?;
    if ready != "ready" {
        return Err(format!("load client said {ready:?}"));
    }
    // Place the client (and anything new) before the first request: readiness, not a sleep.
    agent.reconcile().map_err(|e| e.to_string())?;
    let cpu_before: u64 = spinner_pids.iter().filter_map(|&p| procs::cpu_ticks(p)).sum();
    let window = Window::start(agent);
    let started = Instant::now();
    let mut stdin: ChildStdin = children.0[0].stdin.take().expect("piped");
    writeln!(stdin, "go").map_err(|e| format!("load client: {e}"))?;
    // The client prints its result when done; keep reconciling meanwhile, as the agent would.
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let _ = tx.send(read_line(&mut out, "load client"));
    });
    let line = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => break line?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                agent.reconcile().map_err(|e| e.to_string())?;
            }
            Err(_) => return Err("load client vanished".into()),
        }
    };
    let record = window.finish(agent);
    let cpu_after: u64 = spinner_pids.iter().filter_map(|&p| procs::cpu_ticks(p)).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let be_pct = 100.0 * (cpu_after.saturating_sub(cpu_before)) as f64 / hz / started.elapsed().as_secs_f64();
    drop(stdin);
    let result: ClientResult = serde_json::from_str(&line).map_err(|e| format!("load client output {line:?}: {e}"))?;
    Ok((result, be_pct, record))
}
