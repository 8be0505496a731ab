//! The proxies' cost: Tailor's sidecar and edge, nginx `proxy_pass` and HAProxy, each
//! with one worker thread, relaying to one plain Go upstream, against calling the
//! upstream directly. Open-loop Poisson load at fixed rates (added p50/p99 latency, CPU
//! per request of the proxy process from /proc/<pid>/stat), then a closed loop with many
//! connections (peak throughput). Every proxy runs for the whole benchmark and the
//! configurations take turns at every step, so the machine's other load hits them alike.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use tailor_core::{Nanos, Progress};
use tailor_sim::metrics::quantile_sorted;

use super::{load_average, Processes, Programs};
use crate::cpuacct::tree_cpu_ns;
use crate::loadgen::{self, LoadgenConfig, Plan};
use crate::polyglot::{address_in, free_port};
use crate::record::Outcome;

/// What to run.
#[derive(Clone, Debug)]
pub struct CostConfig {
    /// Open-loop rates, requests/s.
    pub rates: Vec<f64>,
    /// Seconds of load per rate and configuration.
    pub seconds: f64,
    /// Rounds: every (rate, configuration) runs once per round, configurations interleaved.
    pub rounds: usize,
    /// Closed loop: connections sending back to back, and for how long (s).
    pub connections: usize,
    pub saturate_seconds: f64,
    /// Worker threads of every proxy (nginx `worker_processes`, HAProxy `nbthread`,
    /// Tailor's `TOKIO_WORKER_THREADS`).
    pub workers: usize,
    /// Install nginx and HAProxy with apt-get when missing.
    pub install: bool,
    pub out: PathBuf,
}

/// One relay in front of the upstream (or none).
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub name: String,
    pub uri: String,
    /// The proxy's process (None for the direct calls).
    pub pid: Option<u32>,
}

/// One configuration's results.
#[derive(Clone, Debug, Serialize)]
pub struct TargetResult {
    pub name: String,
    /// Per rate: (rate, p50 ms, p99 ms, requests, failed), every round's requests pooled.
    pub rates: Vec<RatePoint>,
    /// Proxy CPU per request over every open-loop run, µs (None for direct).
    pub cpu_per_request_us: Option<f64>,
    /// Closed loop: completions/s per round and their median; proxy CPU per request there.
    pub peak_rps: Vec<f64>,
    pub peak_rps_median: f64,
    pub peak_cpu_per_request_us: Option<f64>,
    pub peak_errors: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RatePoint {
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Each round's own p50 and p99 (ms), in round order (NaN for a round with no
    /// response): every relay of a round got the same arrivals back to back, so round by
    /// round is the paired comparison.
    pub p50_per_round_ms: Vec<f64>,
    pub p99_per_round_ms: Vec<f64>,
    pub requests: usize,
    pub failed: usize,
}

/// Everything one cost benchmark produced (`cost.json`).
#[derive(Clone, Debug, Serialize)]
pub struct CostReport {
    pub workers: usize,
    pub seconds_per_rate: f64,
    pub rounds: usize,
    pub connections: usize,
    pub saturate_seconds: f64,
    pub nginx_version: String,
    pub haproxy_version: String,
    pub load_average_before: String,
    pub load_average_after: String,
    pub results: Vec<TargetResult>,
    pub skipped: Vec<String>,
}

fn version(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .map(|o| {
            let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|_| "missing".into())
}

/// `nginx` and `haproxy` on PATH, installed with apt-get when missing and `install`.
fn ensure_installed(install: bool, say: &dyn Progress) -> Vec<String> {
    let missing: Vec<&str> = ["nginx", "haproxy"]
        .into_iter()
        .filter(|p| {
            !Command::new("sh").args(["-c", &format!("command -v {p}")]).output().is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() || !install {
        return missing.iter().map(|p| format!("{p}: not installed (install the Debian package `{p}`)")).collect();
    }
    say.line(&format!("installing {} with apt-get", missing.join(" ")));
    let ok = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return missing.iter().map(|p| format!("{p}: `apt-get install {p}` failed")).collect();
    }
    Vec::new()
}

fn nginx_config(dir: &Path, port: u16, upstream: &str, workers: usize) -> String {
    let d = dir.display();
    // master_process off with one worker: one process, the worker itself.
    let master = if workers == 1 { "master_process off;\n" } else { "" };
    format!(
        "daemon off;\n{master}worker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/nginx-tmp;\n  proxy_temp_path {d}/nginx-tmp;\n\
         fastcgi_temp_path {d}/nginx-tmp;\n  uwsgi_temp_path {d}/nginx-tmp;\n  scgi_temp_path {d}/nginx-tmp;\n\
         upstream up {{ server {upstream}; keepalive 64; }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://up;\n\
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
    )
}

fn haproxy_config(port: u16, upstream: &str, workers: usize) -> String {
    format!(
        "global\n  nbthread {workers}\n  maxconn 8192\n\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n\
         timeout server 30s\n  http-reuse always\n\nfrontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n\n\
         backend be\n  server s1 {upstream}\n"
    )
}

/// Starts the upstream and every proxy in front of it.
fn start(
    programs: &Programs,
    cfg: &CostConfig,
    procs: &mut Processes,
    skipped: &mut Vec<String>,
) -> Result<Vec<Target>, String> {
    let logs = cfg.out.join("logs");
    std::fs::create_dir_all(logs.join("nginx-tmp")).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let dir = std::path::absolute(&logs).map_err(|e| e.to_string())?;
    let mut go = Command::new(&programs.go_service);
    go.args(["-addr", "127.0.0.1:0"]);
    let upstream =
        address_in(&procs.start_printing("upstream", go, &logs.join("cost-upstream.log"), "listening on ")?)?;
    let mut targets = vec![Target { name: "direct".into(), uri: format!("http://{upstream}/"), pid: None }];
    let workers = cfg.workers.to_string();

    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(&dir, port, &upstream, cfg.workers)).map_err(|e| e.to_string())?;
    let mut nginx = Command::new("nginx");
    nginx.arg("-p").arg(&dir).arg("-e").arg(dir.join("nginx-error.log")).arg("-c").arg(&conf);
    match procs.start_listening("nginx", nginx, &logs.join("nginx.log"), &format!("127.0.0.1:{port}")) {
        Ok(pid) => {
            targets.push(Target { name: "nginx".into(), uri: format!("http://127.0.0.1:{port}/"), pid: Some(pid) })
        }
        Err(e) => skipped.push(format!("nginx: {e}")),
    }

    let port = free_port()?;
    let conf = dir.join("haproxy.cfg");
    std::fs::write(&conf, haproxy_config(port, &upstream, cfg.workers)).map_err(|e| e.to_string())?;
    let mut haproxy = Command::new("haproxy");
    haproxy.arg("-db").arg("-f").arg(&conf);
    match procs.start_listening("haproxy", haproxy, &logs.join("haproxy.log"), &format!("127.0.0.1:{port}")) {
        Ok(pid) => {
            targets.push(Target { name: "haproxy".into(), uri: format!("http://127.0.0.1:{port}/"), pid: Some(pid) })
        }
        Err(e) => skipped.push(format!("haproxy: {e}")),
    }

    let port = free_port()?;
    let conf = dir.join("cost-sidecar.toml");
    let text =
        format!("listen = \"127.0.0.1:{port}\"\nupstream = \"{upstream}\"\norder = \"orf\"\ndrain_timeout_ms = 100\n");
    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
    let mut sidecar = Command::new(&programs.tailor);
    sidecar.args(["proxy", "sidecar", "--config"]).arg(&conf).env("TOKIO_WORKER_THREADS", &workers);
    procs.start_printing("tailor-sidecar", sidecar, &logs.join("cost-sidecar.log"), "sidecar ready")?;
    let pid = *procs.pids().last().expect("just started");
    targets.push(Target { name: "tailor-sidecar".into(), uri: format!("http://127.0.0.1:{port}/"), pid: Some(pid) });

    let port = free_port()?;
    let conf = dir.join("cost-edge.toml");
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\ndrain_timeout_ms = 100\n\n[[routes]]\nname = \"all\"\nupstreams = [\"{upstream}\"]\n"
    );
    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
    let mut edge = Command::new(&programs.tailor);
    edge.args(["proxy", "edge", "--config"]).arg(&conf).env("TOKIO_WORKER_THREADS", &workers);
    procs.start_printing("tailor-edge", edge, &logs.join("cost-edge.log"), "edge ready")?;
    let pid = *procs.pids().last().expect("just started");
    targets.push(Target { name: "tailor-edge".into(), uri: format!("http://127.0.0.1:{port}/"), pid: Some(pid) });

    // Every relay answers before any measurement (the edge health-checks on its own schedule).
    for t in &targets {
        let uri: Uri = t.uri.parse().map_err(|e| format!("{}: {e}", t.uri))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match crate::polyglot::http_get(&uri, "GET / HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n") {
                Ok((200, _)) => break,
                other if Instant::now() > deadline => return Err(format!("{} does not relay: {other:?}", t.name)),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(targets)
}

/// Completions of a closed loop: `connections` clients each sending one request after
/// another for `seconds`; (ok, failed, elapsed s).
fn closed_loop(uri: &Uri, connections: usize, seconds: f64) -> Result<(u64, u64, f64), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting tokio: {e}"))?;
    rt.block_on(async {
        let client = loadgen::http_client();
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(seconds);
        let tasks: Vec<_> = (0..connections)
            .map(|_| {
                let (client, uri, ok, failed) = (client.clone(), uri.clone(), ok.clone(), failed.clone());
                tokio::spawn(async move {
                    while Instant::now() < end {
                        let req = Request::get(uri.clone()).body(Full::new(Bytes::new())).expect("valid request");
                        let done = match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
                            Ok(Ok(r)) => r.status().is_success() && r.into_body().collect().await.is_ok(),
                            _ => false,
                        };
                        if done { &ok } else { &failed }.fetch_add(1, Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        Ok((ok.load(Relaxed), failed.load(Relaxed), start.elapsed().as_secs_f64()))
    })
}

fn cpu_us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// Runs the cost benchmark.
pub fn run(programs: &Programs, cfg: &CostConfig, say: &dyn Progress) -> Result<CostReport, String> {
    let load_average_before = load_average();
    let mut skipped = ensure_installed(cfg.install, say);
    let mut procs = Processes::default();
    let targets = start(programs, cfg, &mut procs, &mut skipped)?;
    for s in &skipped {
        say.line(&format!("skipping {s}"));
    }
    // Latencies (ns) and failures per (target, rate index); proxy CPU ns and requests per target.
    let mut lat: HashMap<(usize, usize), (Vec<Nanos>, usize)> = HashMap::new();
    let mut per_round: HashMap<(usize, usize), (Vec<f64>, Vec<f64>)> = HashMap::new();
    let mut cpu_ns: HashMap<usize, (u64, usize)> = HashMap::new();
    let mut peak: HashMap<usize, (Vec<f64>, u64, u64, u64)> = HashMap::new();
    let steps = (cfg.rounds * targets.len() * (cfg.rates.len() + 1)) as u64;
    say.start(steps, "proxy cost");
    let mut done = 0u64;
    for round in 0..cfg.rounds {
        for (ri, &rate) in cfg.rates.iter().enumerate() {
            let n = ((rate * cfg.seconds) as usize).max(10);
            let plan = Plan {
                intended_ns: crate::arrivals::poisson(n, rate, 1 + round as u64 * 100 + ri as u64),
                demands_us: vec![Vec::new(); n],
            };
            // A different first configuration each step: none always runs right after another.
            for k in 0..targets.len() {
                let ti = (k + round + ri) % targets.len();
                let t = &targets[ti];
                let lcfg = LoadgenConfig {
                    uri: t.uri.parse().map_err(|e| format!("{}: {e}", t.uri))?,
                    timeout: Duration::from_secs(5),
                    max_in_flight: 2048,
                    rt_priority: None,
                };
                let before = t.pid.map(tree_cpu_ns);
                let records = loadgen::run(&plan, &lcfg).map_err(|e| e.to_string())?;
                if let (Some(pid), Some(b)) = (t.pid, before) {
                    let e = cpu_ns.entry(ti).or_default();
                    e.0 += tree_cpu_ns(pid).saturating_sub(b);
                    e.1 += records.len();
                }
                // The first 5% warm connections up.
                let measured = &records[records.len() / 20..];
                let mut ok: Vec<Nanos> =
                    measured.iter().filter(|r| r.outcome == Outcome::Ok).map(|r| r.latency_ns()).collect();
                ok.sort_unstable();
                // One entry per round whatever happened, so the rounds of two relays pair up.
                let q = |p: f64| if ok.is_empty() { f64::NAN } else { quantile_sorted(&ok, p) as f64 / 1e6 };
                let e = per_round.entry((ti, ri)).or_default();
                e.0.push(q(0.5));
                e.1.push(q(0.99));
                let e = lat.entry((ti, ri)).or_default();
                e.0.extend(ok);
                e.1 += measured.iter().filter(|r| r.outcome != Outcome::Ok).count();
                done += 1;
                say.advance(done, &format!("round {} {} at {rate} req/s", round + 1, t.name));
            }
        }
        for k in 0..targets.len() {
            let ti = (k + round) % targets.len();
            let t = &targets[ti];
            let uri: Uri = t.uri.parse().map_err(|e| format!("{}: {e}", t.uri))?;
            let before = t.pid.map(tree_cpu_ns);
            let (ok, failed, secs) = closed_loop(&uri, cfg.connections, cfg.saturate_seconds)?;
            let e = peak.entry(ti).or_default();
            e.0.push(ok as f64 / secs);
            e.1 += failed;
            if let (Some(pid), Some(b)) = (t.pid, before) {
                e.2 += tree_cpu_ns(pid).saturating_sub(b);
                e.3 += ok + failed;
            }
            done += 1;
            say.advance(done, &format!("round {} {} closed loop: {:.0} req/s", round + 1, t.name, ok as f64 / secs));
        }
    }
    drop(procs);
    let results = targets
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let rates = cfg
                .rates
                .iter()
                .enumerate()
                .map(|(ri, &rate)| {
                    let (mut v, failed) = lat.remove(&(ti, ri)).unwrap_or_default();
                    v.sort_unstable();
                    let q = |p: f64| if v.is_empty() { f64::NAN } else { quantile_sorted(&v, p) as f64 / 1e6 };
                    let (p50_per_round_ms, p99_per_round_ms) = per_round.remove(&(ti, ri)).unwrap_or_default();
                    RatePoint {
                        rate,
                        p50_ms: q(0.5),
                        p99_ms: q(0.99),
                        p50_per_round_ms,
                        p99_per_round_ms,
                        requests: v.len() + failed,
                        failed,
                    }
                })
                .collect();
            let (mut peaks, peak_errors, peak_ns, preq) = peak.remove(&ti).unwrap_or_default();
            let mut sorted = peaks.clone();
            sorted.sort_by(f64::total_cmp);
            let peak_rps_median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
            peaks.iter_mut().for_each(|p| *p = p.round());
            let cpu = cpu_ns.get(&ti).filter(|(_, n)| *n > 0).map(|&(tk, n)| cpu_us(tk) / n as f64);
            TargetResult {
                name: t.name.clone(),
                rates,
                cpu_per_request_us: cpu,
                peak_rps: peaks,
                peak_rps_median,
                peak_cpu_per_request_us: t.pid.filter(|_| preq > 0).map(|_| cpu_us(peak_ns) / preq as f64),
                peak_errors,
            }
        })
        .collect();
    Ok(CostReport {
        workers: cfg.workers,
        seconds_per_rate: cfg.seconds,
        rounds: cfg.rounds,
        connections: cfg.connections,
        saturate_seconds: cfg.saturate_seconds,
        nginx_version: version("nginx", "-v"),
        haproxy_version: version("haproxy", "-v"),
        load_average_before,
        load_average_after: load_average(),
        results,
        skipped,
    })
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => format!("{:.2}×", a / b),
        _ => "-".into(),
    }
}

/// The markdown tables: latency added per rate, then CPU per request and peak throughput,
/// each with its ratio to nginx.
pub fn tables(r: &CostReport) -> String {
    let mut s = String::new();
    let find = |name: &str| r.results.iter().find(|t| t.name == name);
    let direct = find("direct");
    let nginx = find("nginx");
    let added = |t: &TargetResult, ri: usize, p99: bool| -> Option<f64> {
        let d = direct?.rates.get(ri)?;
        let p = t.rates.get(ri)?;
        Some(if p99 { p.p99_ms - d.p99_ms } else { p.p50_ms - d.p50_ms } * 1e3)
    };
    let _ = writeln!(s, "| relay | rate req/s | p50 ms | p99 ms | added p50 µs | added p99 µs | added p50 ÷ nginx | added p99 ÷ nginx | failed |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for (ri, rate) in r
        .results
        .first()
        .map(|t| t.rates.iter().map(|p| p.rate).collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        for t in &r.results {
            let p = &t.rates[ri];
            let (a50, a99) = (added(t, ri, false), added(t, ri, true));
            let n50 = nginx.and_then(|n| added(n, ri, false));
            let n99 = nginx.and_then(|n| added(n, ri, true));
            let show = |v: Option<f64>| {
                if t.name == "direct" {
                    "-".into()
                } else {
                    v.map_or("-".into(), |v| format!("{v:.0}"))
                }
            };
            // A latency added at or below zero is the direct path's own noise, not a cost:
            // a ratio with it (0.00×, or thousands when nginx's is the one near zero) means nothing.
            let rat = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if t.name != "direct" && a > 0.0 && b > 0.0 => ratio(Some(a), Some(b)),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {rate:.0} | {:.3} | {:.3} | {} | {} | {} | {} | {}/{} |",
                t.name,
                p.p50_ms,
                p.p99_ms,
                show(a50),
                show(a99),
                rat(a50, n50),
                rat(a99, n99),
                p.failed,
                p.requests
            );
        }
    }
    let _ = writeln!(
        s,
        "\nAn added-latency ratio is \"-\" where the relay's or nginx's added latency is ≤ 0 µs (within the direct path's own run-to-run noise)."
    );
    let _ = writeln!(s, "\n| relay | proxy CPU µs/request (open loop) | ÷ nginx | peak req/s ({} connections, per round) | median | ÷ nginx | proxy CPU µs/request at peak | ÷ nginx | failed at peak |", r.connections);
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for t in &r.results {
        let peaks: Vec<String> = t.peak_rps.iter().map(|p| format!("{p:.0}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            t.name,
            t.cpu_per_request_us.map_or("-".into(), |c| format!("{c:.1}")),
            ratio(t.cpu_per_request_us, nginx.and_then(|n| n.cpu_per_request_us)),
            peaks.join(" / "),
            t.peak_rps_median,
            ratio(Some(t.peak_rps_median), nginx.map(|n| n.peak_rps_median)),
            t.peak_cpu_per_request_us.map_or("-".into(), |c| format!("{c:.1}")),
            ratio(t.peak_cpu_per_request_us, nginx.and_then(|n| n.peak_cpu_per_request_us)),
            t.peak_errors,
        );
    }
    s
}

/// The sidecar's latency against nginx's round by round (each round gave both the same
/// arrivals, one after the other, so the machine's drift between rounds cancels): the
/// median and range of the per-round differences, and in how many rounds the sidecar was
/// no slower. A pooled p50 a few µs above nginx's says little when the rounds' differences
/// straddle zero.
fn paired(what: &str, relay_ms: &[f64], nginx_ms: &[f64]) -> String {
    // A round where either got no response (NaN) pairs with nothing.
    let mut d: Vec<f64> = relay_ms.iter().zip(nginx_ms).map(|(a, b)| (a - b) * 1e3).filter(|x| x.is_finite()).collect();
    if d.is_empty() {
        return format!("{what} per round: no rounds");
    }
    d.sort_by(f64::total_cmp);
    let median = if d.len() % 2 == 1 { d[d.len() / 2] } else { (d[d.len() / 2 - 1] + d[d.len() / 2]) / 2.0 };
    let no_slower = d.iter().filter(|x| **x <= 0.0).count();
    format!(
        "{what} − nginx's per round {median:+.0} µs median ({:+.0} to {:+.0}), no slower in {no_slower} of {} rounds",
        d[0],
        d[d.len() - 1],
        d.len()
    )
}

/// Whether Tailor's sidecar meets issue 20's cost targets against nginx.
pub fn verdict(r: &CostReport) -> String {
    let find = |name: &str| r.results.iter().find(|t| t.name == name);
    let (Some(d), Some(n), Some(t)) = (find("direct"), find("nginx"), find("tailor-sidecar")) else {
        return "nginx or the sidecar did not run: no verdict".into();
    };
    let mut s = String::new();
    for (ri, p) in t.rates.iter().enumerate() {
        let (dn, nn) = (&d.rates[ri], &n.rates[ri]);
        let a50 = (p.p50_ms - dn.p50_ms) * 1e3;
        let a99 = (p.p99_ms - dn.p99_ms) * 1e3;
        let n50 = (nn.p50_ms - dn.p50_ms) * 1e3;
        let n99 = (nn.p99_ms - dn.p99_ms) * 1e3;
        let met = |a: f64, b: f64| if a <= b { "met" } else { "not met" };
        let _ = writeln!(
            s,
            "- {:.0} req/s: added p50 {a50:.0} µs vs nginx {n50:.0} µs ({}), added p99 {a99:.0} µs vs {n99:.0} µs ({}); {}; {}",
            p.rate,
            met(a50, n50),
            met(a99, n99),
            paired("p50", &p.p50_per_round_ms, &nn.p50_per_round_ms),
            paired("p99", &p.p99_per_round_ms, &nn.p99_per_round_ms),
        );
    }
    if let (Some(a), Some(b)) = (t.cpu_per_request_us, n.cpu_per_request_us) {
        let _ = writeln!(
            s,
            "- CPU per request {a:.1} µs vs nginx {b:.1} µs: {:.2}× (target ≤ 1.2×: {})",
            a / b,
            if a / b <= 1.2 { "met" } else { "not met" }
        );
    }
    if n.peak_rps_median > 0.0 {
        let x = t.peak_rps_median / n.peak_rps_median;
        let _ = writeln!(
            s,
            "- peak throughput {:.0} vs nginx {:.0} req/s: {x:.2}× (target ≥ 0.8×: {})",
            t.peak_rps_median,
            n.peak_rps_median,
            if x >= 0.8 { "met" } else { "not met" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(name: &str, p99_ms: f64) -> TargetResult {
        TargetResult {
            name: name.into(),
            rates: vec![RatePoint {
                rate: 3000.0,
                p50_ms: 0.2,
                p99_ms,
                p50_per_round_ms: vec![],
                p99_per_round_ms: vec![],
                requests: 100,
                failed: 0,
            }],
            cpu_per_request_us: None,
            peak_rps: vec![],
            peak_rps_median: 0.0,
            peak_cpu_per_request_us: None,
            peak_errors: 0,
        }
    }

    fn report(results: Vec<TargetResult>) -> CostReport {
        CostReport {
            workers: 1,
            seconds_per_rate: 1.0,
            rounds: 1,
            connections: 1,
            saturate_seconds: 1.0,
            nginx_version: String::new(),
            haproxy_version: String::new(),
            load_average_before: String::new(),
            load_average_after: String::new(),
            results,
            skipped: vec![],
        }
    }

    fn added_p99_ratio(table: &str, name: &str) -> String {
        let row = table.lines().find(|l| l.starts_with(&format!("| {name} |"))).expect("row");
        row.split('|').map(str::trim).nth(8).expect("added p99 ÷ nginx").to_string()
    }

    #[test]
    fn an_added_latency_at_or_below_zero_gets_no_ratio() {
        // direct 1.0 ms; nginx adds 0.5 ms; one relay adds 0.25 ms, one is faster than direct.
        let r = report(vec![relay("direct", 1.0), relay("nginx", 1.5), relay("half", 1.25), relay("faster", 0.9)]);
        let t = tables(&r);
        assert_eq!(added_p99_ratio(&t, "half"), "0.50×", "{t}");
        assert_eq!(added_p99_ratio(&t, "faster"), "-", "{t}");
        // nginx faster than direct: no ratio for anyone.
        let t = tables(&report(vec![relay("direct", 1.0), relay("nginx", 0.95), relay("half", 1.25)]));
        assert_eq!(added_p99_ratio(&t, "half"), "-", "{t}");
    }

    #[test]
    fn the_verdict_compares_the_sidecar_with_nginx_round_by_round() {
        let mut sidecar = relay("tailor-sidecar", 0.5);
        let mut nginx = relay("nginx", 0.5);
        // Four rounds: the sidecar 10 µs slower, 4 faster, equal, 30 slower (p50).
        sidecar.rates[0].p50_per_round_ms = vec![0.110, 0.096, 0.100, 0.140];
        nginx.rates[0].p50_per_round_ms = vec![0.100, 0.100, 0.100, 0.110];
        sidecar.rates[0].p99_per_round_ms = vec![0.4, 0.3];
        nginx.rates[0].p99_per_round_ms = vec![0.5, 0.5];
        let v = verdict(&report(vec![relay("direct", 0.3), nginx, sidecar]));
        assert!(v.contains("p50 − nginx's per round +5 µs median (-4 to +30), no slower in 2 of 4 rounds"), "{v}");
        assert!(v.contains("p99 − nginx's per round -150 µs median (-200 to -100), no slower in 2 of 2 rounds"), "{v}");
        // Without rounds (a report from before they were kept) it says so instead of guessing.
        assert_eq!(paired("p50", &[], &[]), "p50 per round: no rounds");
        // A round in which one side got no response leaves the other rounds paired as they ran.
        assert_eq!(
            paired("p50", &[0.110, f64::NAN, 0.096], &[0.100, 0.100, 0.100]),
            "p50 − nginx's per round +3 µs median (-4 to +10), no slower in 1 of 2 rounds"
        );
    }
}
