//! Process entry points for the fan-out services: task servers and a query handler as separate processes.
//!
//! The integration tests start these as real processes on loopback
//! (`tailor fanout` runs the same library code in one process):
//!
//! ```text
//! tailor-fanout servers --count 2 --policy edf --service-fixed-ms 50
//! tailor-fanout handler --servers 127.0.0.1:4001,127.0.0.1:4002 --scheme tf-edfq \
//!     --slo-ms 100 --offline-fixed-ms 50 [--queuing central] [--r-th 0.05 --window-ms 2000]
//! tailor-fanout probe fanout/configs/masstree-two-class.toml tf-edfq 0.4
//! ```
//!
//! Each process prints `listening <addr>` once per socket it serves, then
//! `ready`, and serves until it is killed or its stdin closes.

use std::collections::HashMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tailor_core::dist::Dist;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::SloClass;
use tailor_core::time::from_millis_f64;
use tailor_fanout::demo::{self, Scaled};
use tailor_fanout::handler::{AdmissionConfig, HandlerConfig, Queuing, Scheme};
use tailor_fanout::{service, Handler, PreciseTimer, TaskServer, TaskServerConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("servers") => servers(&flags(&args[1..])),
        Some("handler") => handler(&flags(&args[1..])),
        Some("probe") if args.len() == 4 => probe(&args[1], &args[2], &args[3]),
        Some("sim") if args.len() == 3 || args.len() == 4 => sim(&args[1], &args[2], args.get(3).map(String::as_str)),
        Some("sequential") if args.len() == 4 => sequential(&args[1], &args[2], &args[3]),
        _ => Err("usage: tailor-fanout servers|handler [--flag value ...] | probe CONFIG SCHEME LOAD | sim CONFIG SCHEME [OVERHEAD_US] | sequential CONFIG FANOUTS LOAD".into()),
    };
    if let Err(e) = result {
        eprintln!("tailor-fanout: {e}");
        std::process::exit(2);
    }
}

fn flags(args: &[String]) -> HashMap<String, String> {
    args.chunks(2).filter_map(|c| Some((c[0].trim_start_matches("--").to_string(), c.get(1)?.clone()))).collect()
}

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
        }),
        None => None,
    };
    let cfg = HandlerConfig {
        scheme,
        queuing,
        classes: vec![
            SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms) },
            SloClass { p: 0.99, slo_ns: from_millis_f64(slo_ms * 1.5) },
        ],
        servers,
        server_weights: Vec::new(),
        offline: Arc::new(Scaled { dist: Dist::fixed_ns(offline_ms * 1e6), factor: 1.0 }),
        admission,
        refresh: Duration::from_millis(250),
        min_samples: 200.0,
        seed: 1,
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
    let s = &l.cfg.search;
    let p = demo::run_real(
        &l,
        scheme,
        load,
        None,
        Duration::from_secs_f64(s.warmup_s),
        Duration::from_secs_f64(s.measure_s),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "{} load {:.3}: met {} worst p/SLO {:.3} offered {} completed {} errors {} dropped {} miss% {:.2} timer p99 late {} us overhead mean {:.0} p99 {} us dispatch mean {:.0} p99 {} us",
        scheme.name(),
        load,
        p.met,
        p.worst_ratio,
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
    let classes = l.slo_classes();
    for (&(c, k), g) in &p.report.groups {
        println!(
            "  class {c} k {k:>2}: n {:>6} p99 {:>8.2} ms (SLO {:.1} ms)",
            g.latencies_ns.len(),
            g.quantile(classes[c as usize].p) as f64 / 1e6,
            classes[c as usize].slo_ns as f64 / 1e6
        );
    }
    Ok(())
}

/// `sim CONFIG SCHEME [OVERHEAD_US]`: the simulated side alone, optionally with a per-task overhead.
fn sim(config: &str, scheme: &str, extra: Option<&str>) -> Result<(), String> {
    let l = demo::Loaded::load(Path::new(config)).map_err(|e| e.to_string())?;
    let scheme = Scheme::parse(scheme)?;
    let overhead_us: Option<f64> = match extra {
        Some(v) => Some(v.parse().map_err(|_| format!("overhead {v}: not a number of µs"))?),
        None => None,
    };
    let max = demo::search_sim(&l, scheme, overhead_us.map(|u| u * 1e3)).map_err(|e| e.to_string())?;
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
