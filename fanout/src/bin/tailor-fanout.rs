//! Process entry points for the fan-out services: task servers and a query handler as separate processes.
//!
//! The integration tests start these as real processes on loopback
//! (`tailor fanout` runs the same library code in one process):
//!
//! ```text
//! tailor-fanout servers --count 2 --policy edf --service-fixed-ms 50
//! tailor-fanout handler --servers 127.0.0.1:4001,127.0.0.1:4002 --scheme tf-edfq \
//!     --slo-ms 100 --offline-fixed-ms 50 [--min-samples N] [--queuing central] [--r-th 0.05 --window-ms 2000]
//! tailor-fanout probe fanout/configs/masstree-two-class.toml tf-edfq 0.4
//! ```
//!
//! Each process prints `listening <addr>` once per socket it serves, then
//! `ready`, and serves until it is killed or its stdin closes. Every socket
//! also answers `GET /metrics`, `/healthz` and `/readyz` (docs/observability.md);
//! `--log-level LEVEL` / `--log-format text|json` (or RUST_LOG) set the logs on stderr.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use tailor_core::dist::Dist;
use tailor_core::dist::Scaled;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::{AdmissionWindow, SloClass};
use tailor_core::time::from_millis_f64;
use tailor_fanout::demo;
use tailor_fanout::handler::{AdmissionConfig, HandlerConfig, Queuing, Scheme};
use tailor_fanout::{service, Handler, PreciseTimer, TaskServer, TaskServerConfig};
use tailor_telemetry::LogFormat;

/// TailGuard's fan-out services as separate processes, and probes of one configuration.
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
    /// One judged real probe of a configuration at one load: per-group bounds and the slowest queries traced.
    Probe {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// tf-edfq, t-edfq, priq or fifo.
        #[arg(value_parser = parse_scheme)]
        scheme: Scheme,
        /// Load (utilization of the servers).
        load: f64,
    },
    /// The simulated side alone: the scheme's max load under SLO, optionally with a per-task overhead.
    Sim {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// tf-edfq, t-edfq, priq or fifo.
        #[arg(value_parser = parse_scheme)]
        scheme: Scheme,
        /// Mean per-task overhead, µs (fixed, or lognormal with OVERHEAD_P99_US).
        overhead_us: Option<f64>,
        /// p99 of the per-task overhead, µs.
        overhead_p99_us: Option<f64>,
    },
    /// Sequential queries (fan-outs e.g. `1,10,32`) at one load: the proportional budget split against the equal one.
    Sequential {
        /// Fan-out configuration (TOML).
        config: PathBuf,
        /// Fan-outs of the sequential steps, comma-separated.
        #[arg(value_delimiter = ',', required = true)]
        fanouts: Vec<u32>,
        /// Load (utilization of the servers).
        load: f64,
    },
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
    #[arg(long, value_parser = parse_scheme, default_value = "tf-edfq")]
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

fn parse_scheme(s: &str) -> Result<Scheme, String> {
    Scheme::parse(s)
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

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
        Command::Probe { config, scheme, load } => probe(&config, scheme, load),
        Command::Sim { config, scheme, overhead_us, overhead_p99_us } => {
            sim(&config, scheme, overhead_us, overhead_p99_us)
        }
        Command::Sequential { config, fanouts, load } => sequential(&config, fanouts, load),
    };
    if let Err(e) = result {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            tailor_fanout::timer::raise_thread_priority();
        })
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
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

fn servers(a: &ServersArgs) -> Result<(), String> {
    let (count, fixed_ms, max_queue) = (a.count, a.service_fixed_ms, a.max_queue);
    let policy = match a.policy {
        ServerPolicy::Edf => PolicySpec::Edf,
        ServerPolicy::Fifo => PolicySpec::Fifo,
        ServerPolicy::Priq => PolicySpec::Priq,
    };
    let rt = runtime()?;
    rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start().map_err(|e| e.to_string())?);
        let mut held = Vec::new();
        for i in 0..count {
            let cfg = TaskServerConfig {
                policy: policy.clone(),
                service: Dist::fixed_ns(fixed_ms * 1e6),
                scale: 1.0,
                max_queue,
                seed: i as u64,
            };
            let s = TaskServer::spawn(cfg, timer.clone(), "127.0.0.1:0".parse().expect("loopback"))
                .await
                .map_err(|e| e.to_string())?;
            println!("listening {}", s.addr);
            held.push(s);
        }
        println!("ready");
        tokio::task::spawn_blocking(wait_for_stdin_close).await.map_err(|e| e.to_string())?;
        Ok(())
    })
}

fn handler(a: &HandlerArgs) -> Result<(), String> {
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
        let h = Handler::new(cfg).map_err(|e| e.to_string())?;
        let _refresher = h.spawn_refresher();
        let (addr, _task) =
            service::serve(h, "127.0.0.1:0".parse().expect("loopback")).await.map_err(|e| e.to_string())?;
        println!("listening {addr}");
        println!("ready");
        tokio::task::spawn_blocking(wait_for_stdin_close).await.map_err(|e| e.to_string())?;
        Ok(())
    })
}

fn probe(config: &Path, scheme: Scheme, load: f64) -> Result<(), String> {
    let l = demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let pace = demo::Pace::of(&l, false);
    let p = demo::run_judged(&l, scheme, load, pace.judging()).map_err(|e| e.to_string())?;
    let classes = l.slo_classes();
    println!("{} load {:.3}: {}", scheme.name(), load, p.describe(&classes, pace.confidence));
    println!(
        "  offered {} completed {} errors {} dropped {} miss% {:.2} timer p99 late {} us overhead mean {:.0} p99 {} us dispatch mean {:.0} p99 {} us",
        p.report.offered,
        p.report.completed(),
        p.report.errors,
        p.report.dropped,
        p.tasks_missed_pct,
        p.timer_p99_late_ns / 1000,
        p.overhead.mean_ns / 1e3,
        p.overhead.p99_ns / 1000,
        p.overhead.dispatch_mean_ns / 1e3,
        p.overhead.dispatch_p99_ns / 1000
    );
    let ms = |x: Option<u64>| x.map_or("—".to_string(), |v| format!("{:.2}", v as f64 / 1e6));
    for ((c, k), j) in &p.groups {
        println!(
            "  class {c} k {k:>2}: n {:>6} p99 {:>6} ms, {:.0}% bounds [{}, {}] (SLO {:.1} ms, design effect {:.1}): {:?}",
            j.n,
            ms(Some(j.point_ns)),
            pace.confidence * 100.0,
            ms(j.lower_ns),
            ms(j.upper_ns),
            classes[*c as usize].slo_ns as f64 / 1e6,
            j.design_effect,
            j.verdict
        );
    }
    // The slowest queries of each class: where their time went (the slowest task's timeline).
    let ms = |ns: i64| ns as f64 / 1e6;
    for (ci, c) in classes.iter().enumerate() {
        let mut all: Vec<(u32, demo::QueryTrace)> = p
            .report
            .groups
            .iter()
            .filter(|(&(cl, _), _)| cl as usize == ci)
            .flat_map(|(&(_, k), g)| g.traces.iter().map(move |t| (k, *t)))
            .collect();
        all.sort_by_key(|(_, t)| std::cmp::Reverse(t.latency_ns));
        println!(
            "  class {ci} slowest (SLO {:.1} ms): latency = start late + to send + dispatch + queue + service + return + merge, ms",
            c.slo_ns as f64 / 1e6
        );
        for (k, t) in all.iter().take(6) {
            let s = &t.slowest;
            println!(
                "    k {k:>2} {:>6.2} = {:.2} + {:.2} + {:.2} + {:.2} + {:.2} (draw {:.3} ms unscaled, server {}) + {:.2} + {:.2}",
                ms(t.latency_ns as i64),
                ms(t.start_late_ns),
                ms(t.to_send_ns),
                ms(s.dispatch_ns()),
                ms(s.queue_ns()),
                ms(s.service_ns as i64),
                s.service_ns as f64 / 1e6 / l.cfg.time_scale,
                s.server,
                ms(s.return_ns()),
                ms(t.merge_ns)
            );
        }
    }
    Ok(())
}

/// `sim CONFIG SCHEME [OVERHEAD_US [OVERHEAD_P99_US]]`: the simulated side alone, optionally with a
/// per-task overhead (mean; with a p99, lognormal per hop as the demo's [`demo::HopDelay`], else fixed).
fn sim(config: &Path, scheme: Scheme, overhead_us: Option<f64>, extra_p99: Option<f64>) -> Result<(), String> {
    let l = demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let delay = match (overhead_us, extra_p99) {
        (Some(m), Some(p99)) => {
            // A lognormal per hop with half the given mean and p99 (Φ⁻¹(0.99) = 2.326), as a table.
            let (mean, q) = (m * 1e3 / 2.0, p99 * 1e3 / 2.0);
            let z = 2.326_347_874f64;
            let sigma = z - (z * z - 2.0 * (q / mean).max(1.0).ln()).max(0.0).sqrt();
            let mu = mean.ln() - sigma * sigma / 2.0;
            let mut h = tailor_core::latency::LatencyHistogram::new();
            let mut rng = tailor_core::rng::Rng::new(1);
            for _ in 0..200_000 {
                h.record((mu + sigma * rng.normal()).exp() as u64);
            }
            Some(demo::HopDelay::Measured(Arc::new(h)))
        }
        (Some(m), None) => Some(demo::HopDelay::fixed_total(m * 1e3)),
        _ => None,
    };
    let max = demo::search_sim(&l, scheme, delay).map_err(|e| e.to_string())?;
    println!("{} simulated max load {max:.3}", scheme.name());
    Ok(())
}

/// Requests of sequential queries (fan-outs e.g. `1,10,32`) at one load: the
/// proportional budget split against the equal one, side by side.
fn sequential(config: &Path, ks: Vec<u32>, load: f64) -> Result<(), String> {
    use tailor_core::tailguard::BudgetSplit;
    let l = demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let s = &l.cfg.search;
    for split in [BudgetSplit::Equal, BudgetSplit::Proportional] {
        let p = demo::run_real_with(
            &l,
            Scheme::TfEdfq,
            load,
            None,
            Duration::from_secs_f64(s.warmup_s),
            Duration::from_secs_f64(s.measure_s),
            Some((ks.clone(), split)),
        )
        .map_err(|e| e.to_string())?;
        let classes = l.slo_classes();
        let per: Vec<String> = p
            .report
            .groups
            .iter()
            .map(|(&(c, _), g)| {
                let slo = classes[c as usize];
                format!(
                    "class {c}: n {} p99 {:.2} ms / SLO {:.1} ms",
                    g.latencies_ns.len(),
                    g.quantile(slo.p) as f64 / 1e6,
                    slo.slo_ns as f64 / 1e6
                )
            })
            .collect();
        println!(
            "{split:?} split, requests {ks:?} at load {load:.2}: {} | task miss {:.2}%",
            per.join(" | "),
            p.tasks_missed_pct
        );
    }
    Ok(())
}
