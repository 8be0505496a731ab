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

use std::collections::HashMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tailor_core::dist::Dist;
use tailor_core::dist::Scaled;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::SloClass;
use tailor_core::time::from_millis_f64;
use tailor_fanout::handler::{AdmissionConfig, HandlerConfig, Queuing, Scheme};
use tailor_fanout::{demo, flags};
use tailor_fanout::{service, Handler, PreciseTimer, TaskServer, TaskServerConfig};
use tailor_telemetry::LogFormat;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // The two services log JSON lines by default; every command takes --log-level/--log-format.
    let daemon = matches!(args.first().map(String::as_str), Some("servers" | "handler"));
    let format = if daemon { LogFormat::Json } else { LogFormat::Text };
    if let Err(e) = tailor_telemetry::take_log_flags(&mut args, format) {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
    let result = match args.first().map(String::as_str) {
        Some("servers") => flags(&args[1..], SERVER_FLAGS).and_then(|f| servers(&f)),
        Some("handler") => flags(&args[1..], HANDLER_FLAGS).and_then(|f| handler(&f)),
        Some("probe") if args.len() == 4 => probe(&args[1], &args[2], &args[3]),
        Some("sim") if (3..=5).contains(&args.len()) => {
            sim(&args[1], &args[2], args.get(3).map(String::as_str), args.get(4).map(String::as_str))
        }
        Some("sequential") if args.len() == 4 => sequential(&args[1], &args[2], &args[3]),
        _ => Err("usage: tailor-fanout servers|handler [--flag value ...] | probe CONFIG SCHEME LOAD | sim CONFIG SCHEME [OVERHEAD_US [OVERHEAD_P99_US]] | sequential CONFIG FANOUTS LOAD".into()),
    };
    if let Err(e) = result {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
}

const SERVER_FLAGS: &[&str] = &["count", "policy", "service-fixed-ms", "max-queue"];
const HANDLER_FLAGS: &[&str] = &[
    "servers",
    "scheme",
    "queuing",
    "slo-ms",
    "offline-fixed-ms",
    "min-samples",
    "r-th",
    "window-ms",
    "window-tasks",
    "predict-misses",
    "proportional",
    "per-server-admission",
    "reject-late",
    "query-timeout-slos",
];

fn get<T: std::str::FromStr>(f: &HashMap<String, String>, name: &str, default: Option<T>) -> Result<T, String> {
    match f.get(name) {
        Some(v) => v.parse().map_err(|_| format!("--{name} {v}: not a valid value")),
        None => default.ok_or_else(|| format!("--{name} is required")),
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

fn servers(f: &HashMap<String, String>) -> Result<(), String> {
    let count: usize = get(f, "count", Some(1))?;
    let policy = match get::<String>(f, "policy", Some("edf".into()))?.as_str() {
        "edf" => PolicySpec::Edf,
        "fifo" => PolicySpec::Fifo,
        "priq" => PolicySpec::Priq,
        other => return Err(format!("--policy {other}: expected edf, fifo or priq")),
    };
    let fixed_ms: f64 = get(f, "service-fixed-ms", Some(10.0))?;
    let max_queue: usize = get(f, "max-queue", Some(10_000))?;
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

fn handler(f: &HashMap<String, String>) -> Result<(), String> {
    let servers: Vec<SocketAddr> = get::<String>(f, "servers", None)?
        .split(',')
        .map(|s| s.parse().map_err(|_| format!("--servers: {s} is not host:port")))
        .collect::<Result<_, _>>()?;
    let scheme = Scheme::parse(&get::<String>(f, "scheme", Some("tf-edfq".into()))?)?;
    let queuing = match get::<String>(f, "queuing", Some("at-servers".into()))?.as_str() {
        "at-servers" => Queuing::AtServers,
        "central" => Queuing::Central,
        other => return Err(format!("--queuing {other}: expected at-servers or central")),
    };
    let slo_ms: f64 = get(f, "slo-ms", Some(100.0))?;
    let offline_ms: f64 = get(f, "offline-fixed-ms", Some(10.0))?;
    let admission = match f.get("r-th") {
        Some(_) => Some(AdmissionConfig {
            r_th: get(f, "r-th", None)?,
            window: Duration::from_secs_f64(get::<f64>(f, "window-ms", Some(1000.0))? / 1e3),
            window_tasks: get(f, "window-tasks", Some(100_000))?,
            predict: get(f, "predict-misses", Some(false))?,
            proportional: get(f, "proportional", Some(false))?,
            per_server: get(f, "per-server-admission", Some(false))?,
            reject_late: get(f, "reject-late", Some(false))?,
        }),
        None => None,
    };
    let classes = vec![
        SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms) },
        SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms * 1.5) },
    ];
    // Default: enough samples for the tail a query on every server needs.
    let min_samples = get(f, "min-samples", Some(Handler::tail_samples(&classes, servers.len() as u32)))?;
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
        query_timeout_slos: Some(get(f, "query-timeout-slos", Some(20.0))?),
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

fn probe(config: &str, scheme: &str, load: &str) -> Result<(), String> {
    let l = demo::Loaded::load(Path::new(config)).map_err(|e| e.to_string())?;
    let scheme = Scheme::parse(scheme)?;
    let load: f64 = load.parse().map_err(|_| format!("load {load}: not a number"))?;
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
fn sim(config: &str, scheme: &str, extra: Option<&str>, p99: Option<&str>) -> Result<(), String> {
    let l = demo::Loaded::load(Path::new(config)).map_err(|e| e.to_string())?;
    let scheme = Scheme::parse(scheme)?;
    let overhead_us: Option<f64> = match extra {
        Some(v) => Some(v.parse().map_err(|_| format!("overhead {v}: not a number of µs"))?),
        None => None,
    };
    let extra_p99: Option<f64> = match p99 {
        Some(v) => Some(v.parse().map_err(|_| format!("overhead p99 {v}: not a number of µs"))?),
        None => None,
    };
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
fn sequential(config: &str, fanouts: &str, load: &str) -> Result<(), String> {
    use tailor_core::tailguard::BudgetSplit;
    let l = demo::Loaded::load(Path::new(config)).map_err(|e| e.to_string())?;
    let ks: Vec<u32> = fanouts
        .split(',')
        .map(|k| k.parse().map_err(|_| format!("fan-out {k}: not a number")))
        .collect::<Result<_, _>>()?;
    let load: f64 = load.parse().map_err(|_| format!("load {load}: not a number"))?;
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
