//! The polyglot chain: `tailor proxy edge` (stamps the GAT) → the Go SDK's example
//! service → the Python SDK's WSGI example → the Rust runtime's example service, real
//! processes on loopback, each tier burning its share of the request's CPU demand
//! (`tailor-demand-us`) and reporting the GAT it saw (`tailor-seen-gat`); driven open-loop
//! side by side with the Rust-only demo chain (docs/sdk.md, "The polyglot chain").

use std::fs::File;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use http::Uri;
use serde::Serialize;
use tailor_core::{Nanos, PolicySpec};
use tailor_runtime::BackendSpec;

use crate::chain::{has_cap_sys_nice, stop_child, Chain, ChainSpec};
use crate::cpuacct;
use crate::demo::{plan_for, start_agent, stop_agent, DemoConfig, Mode};
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::record::{summarize, RequestRecord, RunSummary};
use crate::workload::Workload;

/// Tiers behind the edge: Go, Python, Rust.
pub const TIERS: usize = 3;

/// What orders each tier's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Ordering {
    /// Every handler runs at once (no gate, no registration; the Rust backend `none`).
    Neither,
    /// Each tier's ordering gate (Go `gate`, Python `ThreadGate`, Rust cooperative), GAT order.
    Gates,
    /// Every handler thread registers with one node-wide `tailor agent --enforce priority`.
    Kernel,
}

impl Ordering {
    pub const ALL: [Ordering; 3] = [Ordering::Neither, Ordering::Gates, Ordering::Kernel];

    pub fn name(self) -> &'static str {
        match self {
            Ordering::Neither => "neither",
            Ordering::Gates => "gates",
            Ordering::Kernel => "kernel",
        }
    }

    /// The Rust tiers' runtime backend: `none`, cooperative gfifo with `c` = `cores`, or
    /// the kernel backend on `table`.
    pub fn rust_backend(self, cores: usize, table: &Path) -> BackendSpec {
        match self {
            Ordering::Neither => BackendSpec::None,
            Ordering::Gates => BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: cores },
            Ordering::Kernel => BackendSpec::kernel(table),
        }
    }

    pub fn parse(s: &str) -> Result<Ordering, String> {
        Ordering::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| format!("unknown ordering `{s}`; use neither, gates or kernel"))
    }
}

/// The programs the chain runs.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `tailor` (proxy edge, agent, the Rust-only chain's `demo tier`).
    pub tailor: PathBuf,
    /// The Rust runtime's example service (`cargo build --release -p tailor-runtime --example service`).
    pub rust_service: PathBuf,
    /// The Go example service, built by [`Tools::find`] with `go build`.
    pub go_service: PathBuf,
    pub python: PathBuf,
    /// sdk/python/examples/wsgi_service.py.
    pub python_service: PathBuf,
}

impl Tools {
    /// Finds (and builds the Go tier of) everything under the checkout `root`, the Go
    /// binary going to `out`. Err names what is missing and how to get it: callers
    /// that test skip with it.
    pub fn find(root: &Path, out: &Path) -> Result<Tools, String> {
        let release = root.join("target/release");
        let tailor = release.join("tailor");
        let rust_service = release.join("examples/service");
        for (path, build) in [
            (&tailor, "cargo build --release -p tailor-cli"),
            (&rust_service, "cargo build --release -p tailor-runtime --example service"),
        ] {
            if !path.is_file() {
                return Err(format!("{} is missing; build it with `{build}`", path.display()));
            }
        }
        let python = PathBuf::from("python3");
        let has_waitress = Command::new(&python).args(["-c", "import waitress"]).output();
        if !has_waitress.is_ok_and(|o| o.status.success()) {
            return Err("python3 with waitress is needed for the Python tier; `pip install waitress`".into());
        }
        std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
        // Absolute: `go build` runs in sdk/go.
        let go_service = std::path::absolute(out).map_err(|e| format!("{}: {e}", out.display()))?.join("go-service");
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&go_service)
            .arg("./examples/service")
            .current_dir(root.join("sdk/go"))
            .output();
        match built {
            Err(e) => return Err(format!("the Go toolchain is needed for the Go tier (`go`: {e}); install Go 1.22+")),
            Ok(o) if !o.status.success() => {
                return Err(format!(
                    "go build ./examples/service in sdk/go failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
            Ok(_) => {}
        }
        Ok(Tools {
            tailor,
            rust_service,
            go_service,
            python,
            python_service: root.join("sdk/python/examples/wsgi_service.py"),
        })
    }
}

/// A started process whose output is copied to a log; readiness is a line it prints.
pub(crate) struct Member {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
}

/// Makes `cmd`'s process get SIGTERM when the thread that starts it ends. A harness stopped
/// by a signal runs no destructor: each tier then stops (and restores what it changed)
/// instead of serving on as an orphan. The runs start their tiers from one long-lived thread.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe, all the closure does between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

/// Starts `cmd` with stdout and stderr copied to `log`; returns it and the first line
/// that contains `marker` (within 20 s), or why not.
pub(crate) fn start_member(
    name: &'static str,
    mut cmd: Command,
    log: &Path,
    marker: &'static str,
) -> Result<(Member, String), String> {
    let file = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let file = Arc::new(Mutex::new(file));
    die_with_parent(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the {name} tier ({:?}): {e}", cmd.get_program()))?;
    let (tx, rx) = mpsc::channel();
    let stdout: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().expect("piped"));
    let stderr: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().expect("piped"));
    for stream in [stdout, stderr] {
        let (tx, file) = (tx.clone(), file.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(file.lock().expect("log lock"), "{line}");
                if line.contains(marker) {
                    let _ = tx.send(line);
                }
            }
        });
    }
    let member = Member { name, child };
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(line) => Ok((member, line)),
        Err(_) => {
            stop_member(member);
            Err(format!("the {name} tier did not print `{marker}` within 20 s; see {}", log.display()))
        }
    }
}

/// SIGTERM by pid (each tier restores what it changed and exits), SIGKILL after 3 s.
pub(crate) fn stop_member(mut m: Member) {
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    unsafe { libc::kill(m.child.id() as libc::pid_t, libc::SIGTERM) };
    stop_child(&mut m.child, Instant::now() + Duration::from_secs(3));
    tracing::debug!(tier = m.name, "stopped");
}

/// The address after `listening on ` in a readiness line.
pub(crate) fn address_in(line: &str) -> Result<String, String> {
    line.split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .ok_or_else(|| format!("no address in the readiness line `{line}`"))
}

/// A loopback port for a process to listen on that nothing else takes meanwhile (the
/// shared race-free claim; the process's own readiness line confirms it got it).
pub(crate) fn free_port() -> Result<u16, String> {
    tailor_telemetry::testing::claim_port().map_err(|e| format!("finding a free loopback port: {e}"))
}

/// A running polyglot chain; dropping it stops every process it started (by pid), edge first.
pub struct PolyglotChain {
    members: Vec<Member>,
    /// The edge's address.
    pub entry: Uri,
}

impl PolyglotChain {
    /// Starts Rust, then Python, then Go, then the edge, each told the address of the
    /// next; `table` is the kernel agent's table (used by [`Ordering::Kernel`], whose
    /// agent the caller runs).
    pub fn start(
        tools: &Tools,
        ordering: Ordering,
        cores: usize,
        table: &Path,
        logs: &Path,
    ) -> Result<PolyglotChain, String> {
        std::fs::create_dir_all(logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
        let log = |tier: &str| logs.join(format!("polyglot-{}-{tier}.log", ordering.name()));
        let mut chain = PolyglotChain { members: Vec::new(), entry: Uri::from_static("http://127.0.0.1/") };

        let backend = ordering.rust_backend(cores, table);
        let mut rust = Command::new(&tools.rust_service);
        rust.args(["--listen", "127.0.0.1:0", "--index", "2", "--backend"])
            .arg(serde_json::to_string(&backend).expect("BackendSpec serializes"));
        let (m, line) = start_member("rust", rust, &log("rust"), "listening on ")?;
        chain.members.push(m);
        let rust_addr = address_in(&line)?;

        let mut python = Command::new(&tools.python);
        python.arg(&tools.python_service).args(["--port", "0", "--index", "1", "--threads", "16"]);
        python.args(["--downstream", &format!("http://{rust_addr}/"), "--table"]).arg(table);
        // The GIL runs one Python thread at a time: the gate admits one.
        let python_ordering = match ordering {
            Ordering::Neither => "none",
            Ordering::Gates => "gate",
            Ordering::Kernel => "kernel",
        };
        python.args(["--c", "1", "--ordering", python_ordering]);
        let (m, line) = start_member("python", python, &log("python"), "listening on ")?;
        chain.members.push(m);
        let python_addr = address_in(&line)?;

        let mut go = Command::new(&tools.go_service);
        go.args(["-addr", "127.0.0.1:0", "-demand-index", "0", "-downstream", &format!("http://{python_addr}/")]);
        let (c, table_arg) = match ordering {
            Ordering::Neither => (0, String::new()),
            Ordering::Gates => (cores, String::new()),
            Ordering::Kernel => (cores, table.display().to_string()),
        };
        go.args(["-c", &c.to_string(), "-table", &table_arg]);
        let (m, line) = start_member("go", go, &log("go"), "listening on ")?;
        chain.members.push(m);
        let go_addr = address_in(&line)?;

        let port = free_port()?;
        let config = logs.join(format!("polyglot-{}-edge.toml", ordering.name()));
        let toml = format!(
            "listen = \"127.0.0.1:{port}\"\ndrain_timeout_ms = 100\n\n[[routes]]\nname = \"chain\"\nupstreams = [\"{go_addr}\"]\n"
        );
        std::fs::write(&config, toml).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut edge = Command::new(&tools.tailor);
        edge.args(["proxy", "edge", "--config"]).arg(&config);
        let (m, _) = start_member("edge", edge, &log("edge"), "edge ready")?;
        chain.members.push(m);
        chain.entry = format!("http://127.0.0.1:{port}/").parse().expect("valid uri");
        chain.wait_serving()?;
        Ok(chain)
    }

    /// Waits until a request goes through every tier (the edge checks its upstream's
    /// health on its own schedule): one zero-demand request at a time, up to 10 s.
    fn wait_serving(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.trace(&[]) {
                Ok(hops) if hops.len() == TIERS => return Ok(()),
                Ok(hops) => last = format!("{} tiers answered", hops.len()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("the polyglot chain did not answer through every tier within 10 s (last: {last}); see the logs"))
    }

    /// Sends one zero-demand request through the edge with `extra` headers and returns
    /// what each tier saw, Go first. The edge removes `tailor-*` headers from replies
    /// (the generator's `tailor-seen-gat` does not reach a client), so this reads the
    /// body, where every tier writes its line after the next tier's.
    pub fn trace(&self, extra: &[(&str, &str)]) -> Result<Vec<Seen>, String> {
        let mut head =
            format!("GET / HTTP/1.1\r\nhost: polyglot\r\nconnection: close\r\n{}: 0,0,0\r\n", loadgen::DEMAND_HEADER);
        for (name, value) in extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let (status, body) = http_get(&self.entry, &(head + "\r\n"))?;
        if status != 200 {
            return Err(format!("status {status}: {body}"));
        }
        let mut seen: Vec<Seen> = body.lines().map(Seen::parse).collect::<Result<_, _>>()?;
        seen.reverse();
        Ok(seen)
    }

    /// The Go tier's Prometheus text (its /metrics, reached through the edge's `/` route).
    pub fn go_metrics(&self) -> Result<String, String> {
        let (status, body) =
            http_get(&self.entry, "GET /metrics HTTP/1.1\r\nhost: polyglot\r\nconnection: close\r\n\r\n")?;
        if status != 200 {
            return Err(format!("/metrics: status {status}"));
        }
        Ok(body)
    }

    /// Process ids of every member.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.child.id()).collect()
    }
}

impl Drop for PolyglotChain {
    fn drop(&mut self) {
        while let Some(m) = self.members.pop() {
            stop_member(m);
        }
    }
}

/// What one tier saw: the GAT and hop of the context it served the request by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub gat: Nanos,
    pub hop: u32,
}

impl Seen {
    /// One tier's line of a reply body: Rust `gat G hop H`, Python `context <encoded>`,
    /// Go `hop H gat G context <encoded>`.
    fn parse(line: &str) -> Result<Seen, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("unexpected reply line `{line}`");
        let num = |w: Option<&&str>| w.and_then(|w| w.parse::<u64>().ok()).ok_or_else(bad);
        match words.first() {
            Some(&"gat") => Ok(Seen { gat: num(words.get(1))?, hop: num(words.get(3))? as u32 }),
            Some(&"hop") => Ok(Seen { gat: num(words.get(3))?, hop: num(words.get(1))? as u32 }),
            Some(&"context") => {
                let d =
                    tailor_core::wire::decode(words.get(1).ok_or_else(bad)?).map_err(|e| format!("{}: {e}", bad()))?;
                Ok(Seen { gat: d.context.gat, hop: d.context.hop as u32 })
            }
            _ => Err(bad()),
        }
    }
}

/// A blocking HTTP/1.1 exchange on a fresh connection (`request` is the whole head,
/// `connection: close`): status and body.
pub(crate) fn http_get(entry: &Uri, request: &str) -> Result<(u16, String), String> {
    use std::io::Read as _;
    let addr = format!("{}:{}", entry.host().unwrap_or("127.0.0.1"), entry.port_u16().unwrap_or(80));
    let mut stream = std::net::TcpStream::connect(&addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream.write_all(request.as_bytes()).map_err(|e| format!("sending to {addr}: {e}"))?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).map_err(|e| format!("reading from {addr}: {e}"))?;
    let (head, body) =
        reply.split_once("\r\n\r\n").ok_or_else(|| format!("a reply without a header end: `{reply}`"))?;
    let status =
        head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status in `{head}`"))?;
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    Ok((status, if chunked { dechunk(body) } else { body.to_string() }))
}

/// The payload of a chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `n` requests with zero demand, `gap_ns` apart.
fn zero_demand(n: usize, gap_ns: Nanos) -> Plan {
    Plan { intended_ns: (0..n).map(|i| i as Nanos * gap_ns).collect(), demands_us: vec![vec![0; TIERS]; n] }
}

fn send(entry: &Uri, plan: &Plan) -> Result<Vec<RequestRecord>, String> {
    let cfg = LoadgenConfig {
        uri: entry.clone(),
        timeout: Duration::from_secs(10),
        max_in_flight: 4096,
        // Above the registered handlers, as the demo's generator (it stands for clients elsewhere).
        rt_priority: has_cap_sys_nice().then_some(tailor_runtime::kernel::IO_PRIORITY),
    };
    loadgen::run(plan, &cfg).map_err(|e| e.to_string())
}

/// Which chain a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ChainKind {
    /// Edge → Go → Python → Rust.
    Polyglot,
    /// The demo's three Rust tiers (`tailor demo tier`), the first one the edge.
    RustOnly,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub chain: ChainKind,
    pub ordering: Ordering,
    pub workload: String,
    pub rho: f64,
    pub seed: u64,
    pub rate_rps: f64,
    /// The chain's own CPU per request at zero demand (µs), which ρ includes.
    pub overhead_us: f64,
    /// CPUs the chain (and generator) and everything else on the machine used during the run.
    pub cpu: cpuacct::CpuUsage,
    pub summary: RunSummary,
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct PolyglotConfig {
    pub tools: Tools,
    /// CPUs ρ is computed against (λ = ρ · cores / (E[demand] + overhead)); on a machine
    /// other jobs share, fewer than it has.
    pub cores: usize,
    /// Mean CPU demand per tier (ms) of the scaled TailClipper workloads.
    pub mean_ms: f64,
    pub workloads: Vec<Workload>,
    pub loads: Vec<f64>,
    pub seeds: Vec<u64>,
    pub requests: usize,
    pub warmup: usize,
    pub chains: Vec<(ChainKind, Ordering)>,
    pub out: PathBuf,
}

impl PolyglotConfig {
    /// The demo's settings for these runs; `cores` as [`DemoConfig::cores`] (the rate's, or
    /// the agent's `--cpus`).
    fn demo(&self, cores: usize) -> DemoConfig {
        DemoConfig {
            exe: self.tools.tailor.clone(),
            tier_args: vec!["demo".into(), "tier".into()],
            agent_args: vec!["agent".into()],
            tiers: TIERS,
            cores,
            mean_ms: self.mean_ms,
            workloads: self.workloads.clone(),
            loads: self.loads.clone(),
            modes: vec![Mode::Orf],
            requests: self.requests,
            warmup: self.warmup,
            seed: 0,
            out: self.out.clone(),
            orf_c: tailor_runtime::available_cpus(),
            slice_us: 500.0,
            bucket_us: 2_000.0 * self.mean_ms,
            trace: None,
            timeout: Duration::from_secs(10),
            idle_states_off: false,
            overhead_us: None,
        }
    }
}

/// A chain of either kind, kept up for all of its points.
enum Running {
    Polyglot(PolyglotChain),
    Rust(Chain),
}

impl Running {
    fn entry(&self) -> &Uri {
        match self {
            Running::Polyglot(c) => &c.entry,
            Running::Rust(c) => &c.entry,
        }
    }
    fn pids(&self) -> Vec<u32> {
        match self {
            Running::Polyglot(c) => c.pids(),
            Running::Rust(c) => c.pids(),
        }
    }
}

/// Why a chain did not run (kernel ordering without CAP_SYS_NICE, an agent that did not start).
fn start_chain(cfg: &PolyglotConfig, kind: ChainKind, ordering: Ordering, table: &Path) -> Result<Running, String> {
    let logs = cfg.out.join("logs");
    match kind {
        ChainKind::Polyglot => {
            PolyglotChain::start(&cfg.tools, ordering, tailor_runtime::available_cpus(), table, &logs)
                .map(Running::Polyglot)
        }
        ChainKind::RustOnly => {
            let backend = ordering.rust_backend(tailor_runtime::available_cpus(), table);
            let spec = ChainSpec {
                exe: cfg.tools.tailor.clone(),
                tier_args: vec!["demo".into(), "tier".into()],
                tiers: TIERS,
                backend,
                log_dir: logs,
                log_prefix: format!("rust-only-{}", ordering.name()),
            };
            Chain::start(&spec).map(Running::Rust).map_err(|e| e.to_string())
        }
    }
}

/// Runs every (chain, ordering) over every workload, load and seed; `say` gets progress
/// and skips. Each chain is started once (with its agent for kernel ordering) and
/// calibrated at zero demand, so ρ = λ · (E[demand] + its own CPU per request) / cores.
pub fn run(cfg: &PolyglotConfig, mut say: impl FnMut(&str)) -> Result<Vec<PointResult>, String> {
    let demo = cfg.demo(cfg.cores);
    let cpus = tailor_runtime::available_cpus();
    let mut results = Vec::new();
    for &(kind, ordering) in &cfg.chains {
        let label = format!("{kind:?}/{}", ordering.name());
        if ordering == Ordering::Kernel && !has_cap_sys_nice() {
            say(&format!("skip {label}: kernel registration needs CAP_SYS_NICE (run as root)"));
            continue;
        }
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let table = dir.join(format!("tailor-polyglot-{}-{}", std::process::id(), ordering.name()));
        let agent = if ordering == Ordering::Kernel {
            let log = cfg.out.join("logs").join(format!("{kind:?}-agent.log"));
            std::fs::create_dir_all(cfg.out.join("logs")).map_err(|e| e.to_string())?;
            match start_agent(&cfg.demo(cpus), Mode::Orf, &table, &log) {
                Ok(a) => Some(a),
                Err(e) => {
                    say(&format!("skip {label}: {e}"));
                    continue;
                }
            }
        } else {
            None
        };
        let outcome = start_chain(cfg, kind, ordering, &table).and_then(|chain| {
            let mut pids = chain.pids();
            pids.extend(agent.as_ref().map(|a| a.id()));
            if let Running::Polyglot(p) = &chain {
                say(&format!("{label}: each tier saw (Go, Python, Rust) {:?}", p.trace(&[])?));
            }
            let overhead_us = calibrate(chain.entry(), &pids)?;
            say(&format!("{label}: chain CPU per request at zero demand {overhead_us:.0} µs"));
            for &w in &cfg.workloads {
                for &rho in &cfg.loads {
                    for &seed in &cfg.seeds {
                        let rate = demo.rate_for(w, rho, overhead_us * 1e3);
                        let plan = plan_for(&demo, w, rate, seed).map_err(|e| e.to_string())?;
                        let before = cpuacct::snapshot(&pids);
                        let records = send(chain.entry(), &plan)?;
                        let cpu = cpuacct::usage(&before, &cpuacct::snapshot(&pids), records.len());
                        let summary = summarize(&records, cfg.warmup, TIERS as u32, cpus);
                        say(&format!(
                            "{label} {w} ρ {rho} seed {seed}: {rate:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, ok {}/{}, CPUs: chain {:.2}, others {:.2}",
                            summary.latency_ms.p50, summary.latency_ms.p99, summary.ok, summary.requests, cpu.demo_cpus, cpu.background_cpus
                        ));
                        results.push(PointResult {
                            chain: kind,
                            ordering,
                            workload: w.name().into(),
                            rho,
                            seed,
                            rate_rps: rate,
                            overhead_us,
                            cpu,
                            summary,
                        });
                    }
                }
            }
            Ok(())
        });
        if let Some(a) = agent {
            stop_agent(a);
        }
        let _ = std::fs::remove_file(&table);
        outcome?;
    }
    Ok(results)
}

/// The chain's CPU per request (all its processes and the generator) at zero demand, µs:
/// 200 warm-up requests, then 400 measured, 4 ms apart.
fn calibrate(entry: &Uri, pids: &[u32]) -> Result<f64, String> {
    send(entry, &zero_demand(200, 4_000_000))?;
    let before = cpuacct::snapshot(pids);
    send(entry, &zero_demand(400, 4_000_000))?;
    Ok(cpuacct::usage(&before, &cpuacct::snapshot(pids), 400).cpu_per_request_us)
}

/// The markdown table of `results`: per chain, ordering, workload and ρ, the p99 of every
/// seed, their median, and the cut against `neither` of the same chain.
pub fn table(results: &[PointResult]) -> String {
    let mut out = String::from(
        "| chain | ordering | workload | ρ | p99 ms per seed | median p99 ms | vs neither | errors | other jobs' CPUs |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let mut keys: Vec<(ChainKind, Ordering, String, u64)> = Vec::new();
    for r in results {
        let k = (r.chain, r.ordering, r.workload.clone(), (r.rho * 1000.0) as u64);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (chain, ordering, workload, rho) in &keys {
        let of = |o: Ordering| -> Vec<&PointResult> {
            results
                .iter()
                .filter(|r| {
                    r.chain == *chain && r.ordering == o && &r.workload == workload && (r.rho * 1000.0) as u64 == *rho
                })
                .collect()
        };
        let runs = of(*ordering);
        let p99: Vec<f64> = runs.iter().map(|r| r.summary.latency_ms.p99).collect();
        let med = median(p99.clone());
        let base = of(Ordering::Neither);
        let cut = if base.is_empty() || *ordering == Ordering::Neither {
            "".to_string()
        } else {
            let b = median(base.iter().map(|r| r.summary.latency_ms.p99).collect());
            format!("{:+.0}%", (med / b - 1.0) * 100.0)
        };
        let others = median(runs.iter().map(|r| r.cpu.background_cpus).collect());
        let errors: u64 = runs.iter().map(|r| r.summary.requests - r.summary.ok).sum();
        let per_seed: Vec<String> = p99.iter().map(|p| format!("{p:.1}")).collect();
        let chain_name = match chain {
            ChainKind::Polyglot => "edge→Go→Python→Rust",
            ChainKind::RustOnly => "Rust ×3",
        };
        out.push_str(&format!(
            "| {chain_name} | {} | {workload} | {:.2} | {} | {med:.1} | {cut} | {errors} | {others:.2} |\n",
            ordering.name(),
            *rho as f64 / 1000.0,
            per_seed.join(" / "),
        ));
    }
    out
}
