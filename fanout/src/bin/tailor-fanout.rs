//! Process entry points for the fan-out services: task servers and a query handler as separate processes.
//!
//! The integration tests start these as real processes on loopback
//! (`tailor fanout` runs the same library code in one process):
//!
//! ```text
//! tailor-fanout servers --count 2 --policy edf --service-fixed-ms 50
//! tailor-fanout handler --servers 127.0.0.1:4001,127.0.0.1:4002 --scheme tf-edfq \
//!     --slo-ms 100 --offline-fixed-ms 50 [--min-samples N] [--queuing central] [--r-th 0.05 --window-ms 2000]
//! ```
//!
//! Each process prints `listening <addr>` once per socket it serves, then
//! `ready`, and serves until it is killed or its stdin closes. Every socket
//! also answers `GET /metrics`, `/healthz` and `/readyz` (docs/observability.md);
//! `--log-level LEVEL` / `--log-format text|json` (or RUST_LOG) set the logs on stderr.

use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use tailor_core::dist::Dist;
use tailor_core::dist::Scaled;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::{AdmissionWindow, SloClass};
use tailor_core::time::from_millis_f64;
use tailor_fanout::handler::{AdmissionConfig, HandlerConfig, Queuing, Scheme};
use tailor_fanout::{service, Handler, PreciseTimer, TaskServer, TaskServerConfig};
use tailor_telemetry::LogFormat;

/// TailGuard's fan-out services as separate processes (probes of a configuration: `tailor fanout probe|sim|sequential`).
#[derive(Parser)]
#[command(name = "tailor-fanout", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: tailor_telemetry::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Task servers on loopback: print `listening ADDR` per server, then `ready`; serve until stdin closes.
    #[command(args_override_self = true)]
    Servers(ServersArgs),
    /// A query handler in front of task servers: prints `listening ADDR`, `ready`; serves until stdin closes.
    // A flag given twice takes its last value (harnesses append overrides to a base command line).
    #[command(args_override_self = true)]
    Handler(HandlerArgs),
}

/// Queue order at the task servers.
#[derive(Clone, Copy, ValueEnum)]
enum ServerPolicy {
    Edf,
    Fifo,
    Priq,
}

/// Which outcomes the admission miss ratio is measured over.
#[derive(Clone, Copy, ValueEnum)]
enum AdmissionWindowArg {
    /// The last --window-tasks outcomes of the last --window-ms, whichever are fewer.
    Both,
    /// The last --window-tasks task outcomes (TailGuard §IV.D); refused queries move it.
    Tasks,
    /// The outcomes of the last --window-ms (TailGuard §III.C).
    Time,
}

/// Where tasks wait.
#[derive(Clone, Copy, ValueEnum)]
enum QueuingArg {
    AtServers,
    Central,
}

#[derive(Args)]
struct ServersArgs {
    /// Task servers to start.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Queue order.
    #[arg(long, value_enum, default_value_t = ServerPolicy::Edf)]
    policy: ServerPolicy,
    /// Fixed service time per task, ms.
    #[arg(long, default_value_t = 10.0)]
    service_fixed_ms: f64,
    /// Tasks a server queues before it refuses more.
    #[arg(long, default_value_t = 10_000)]
    max_queue: usize,
}

#[derive(Args)]
struct HandlerArgs {
    /// Task servers, comma-separated host:port.
    #[arg(long, value_delimiter = ',', required = true)]
    servers: Vec<SocketAddr>,
    /// tf-edfq, t-edfq, priq or fifo.
    #[arg(long, value_parser = Scheme::parse, default_value = "tf-edfq")]
    scheme: Scheme,
    /// Where tasks wait: at the servers, or in one central queue at the handler.
    #[arg(long, value_enum, default_value_t = QueuingArg::AtServers)]
    queuing: QueuingArg,
    /// Class 0's SLO (p99), ms; class 1 gets 1.5×.
    #[arg(long, default_value_t = 100.0)]
    slo_ms: f64,
    /// The servers' latency before any is measured: fixed, ms.
    #[arg(long, default_value_t = 10.0)]
    offline_fixed_ms: f64,
    /// Samples per server before the online distribution replaces the offline one
    /// [default: enough for the tail a query on every server needs].
    #[arg(long)]
    min_samples: Option<f64>,
    /// Admission control: the deadline-miss ratio above which queries are rejected (enables admission).
    #[arg(long)]
    r_th: Option<f64>,
    /// Admission: the time window of the miss ratio, ms.
    #[arg(long, default_value_t = 1000.0, requires = "r_th")]
    window_ms: f64,
    /// Admission: at most this many tasks in the window.
    #[arg(long, default_value_t = 100_000, requires = "r_th")]
    window_tasks: u64,
    /// Admission: which window bounds the miss ratio.
    #[arg(long, value_enum, default_value_t = AdmissionWindowArg::Both, requires = "r_th")]
    admission_window: AdmissionWindowArg,
    /// Admission: count predicted misses too.
    #[arg(long, default_value_t = false, action = ArgAction::Set, requires = "r_th")]
    predict_misses: bool,
    /// Admission: admit a share of queries proportional to the headroom.
    #[arg(long, default_value_t = false, action = ArgAction::Set, requires = "r_th")]
    proportional: bool,
    /// Admission: one miss ratio per server.
    #[arg(long, default_value_t = false, action = ArgAction::Set, requires = "r_th")]
    per_server_admission: bool,
    /// Admission: reject a query at once when one of its tasks would wait past its deadline.
    #[arg(long, default_value_t = false, action = ArgAction::Set, requires = "r_th")]
    reject_late: bool,
    /// A query whose tasks are not all back within this many times its SLO ends with 504,
    /// naming the servers that did not answer.
    #[arg(long, default_value_t = 20.0, value_parser = parse_positive)]
    query_timeout_slos: f64,
}

/// A flag that takes a positive number got something else.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a positive number")]
struct NotPositive(String);

fn parse_positive(s: &str) -> Result<f64, NotPositive> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(NotPositive(s.to_string())),
    }
}

/// Whatever stopped a command; `main` prints it and exits 2.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let cli = Cli::parse();
    // The two services log JSON lines by default; every command takes --log-level/--log-format.
    let daemon = matches!(cli.command, Command::Servers(_) | Command::Handler(_));
    if let Err(e) = cli.log.init(if daemon { LogFormat::Json } else { LogFormat::Text }) {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Servers(a) => servers(&a),
        Command::Handler(a) => handler(&a),
    };
    if let Err(e) = result {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            tailor_fanout::timer::raise_thread_priority();
        })
        .enable_all()
        .build()
}

/// Serves until stdin closes (the parent died or closed it) — the process never outlives its test.
fn wait_for_stdin_close() {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        if line.is_err() {
            break;
        }
    }
}

fn servers(a: &ServersArgs) -> Result<(), BoxError> {
    let (count, fixed_ms, max_queue) = (a.count, a.service_fixed_ms, a.max_queue);
    let policy = match a.policy {
        ServerPolicy::Edf => PolicySpec::Edf,
        ServerPolicy::Fifo => PolicySpec::Fifo,
        ServerPolicy::Priq => PolicySpec::Priq,
    };
    let rt = runtime()?;
    rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start()?);
        let mut held = Vec::new();
        for i in 0..count {
            let cfg = TaskServerConfig {
                policy: policy.clone(),
                service: Dist::fixed_ns(fixed_ms * 1e6),
                scale: 1.0,
                max_queue,
                seed: i as u64,
            };
            let s = TaskServer::spawn(cfg, timer.clone(), "127.0.0.1:0".parse().expect("loopback")).await?;
            println!("listening {}", s.addr);
            held.push(s);
        }
        println!("ready");
        tokio::task::spawn_blocking(wait_for_stdin_close).await?;
        Ok(())
    })
}

fn handler(a: &HandlerArgs) -> Result<(), BoxError> {
    let servers = a.servers.clone();
    let scheme = a.scheme;
    let queuing = match a.queuing {
        QueuingArg::AtServers => Queuing::AtServers,
        QueuingArg::Central => Queuing::Central,
    };
    let (slo_ms, offline_ms) = (a.slo_ms, a.offline_fixed_ms);
    let admission = a.r_th.map(|r_th| AdmissionConfig {
        r_th,
        window: {
            let ns = from_millis_f64(a.window_ms).max(1);
            match a.admission_window {
                AdmissionWindowArg::Both => AdmissionWindow::OutcomesWithin(a.window_tasks, ns),
                AdmissionWindowArg::Tasks => AdmissionWindow::Outcomes(a.window_tasks),
                AdmissionWindowArg::Time => AdmissionWindow::Time(ns),
            }
        },
        predict: a.predict_misses,
        proportional: a.proportional,
        per_server: a.per_server_admission,
        reject_late: a.reject_late,
    });
    let classes = vec![
        SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms) },
        SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms * 1.5) },
    ];
    // Default: enough samples for the tail a query on every server needs.
    let min_samples = a.min_samples.unwrap_or_else(|| Handler::tail_samples(&classes, servers.len() as u32));
    let cfg = HandlerConfig {
        scheme,
        queuing,
        classes,
        servers,
        server_weights: Vec::new(),
        class_server_weights: Vec::new(),
        offline: Arc::new(Scaled { dist: Dist::fixed_ns(offline_ms * 1e6), factor: 1.0 }),
        offline_per_server: Vec::new(),
        admission,
        refresh: Duration::from_millis(250),
        min_samples,
        seed: 1,
        query_timeout_slos: Some(a.query_timeout_slos),
    };
    let rt = runtime()?;
    rt.block_on(async {
        let h = Handler::new(cfg)?;
        let _refresher = h.spawn_refresher();
        let (addr, _task) = service::serve(h, "127.0.0.1:0".parse().expect("loopback")).await?;
        println!("listening {addr}");
        println!("ready");
        tokio::task::spawn_blocking(wait_for_stdin_close).await?;
        Ok(())
    })
}
