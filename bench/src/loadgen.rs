//! The open-loop HTTP load generator. A dedicated sender thread sleeps until
//! each request's intended send time and hands it to a tokio runtime that
//! owns the connections; the sender never waits for a response, and latency
//! is measured from the intended time, so a slow system cannot slow the
//! arrivals down (no coordinated omission).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailor_core::Nanos;

use crate::clock::{monotonic_ns, sleep_until_monotonic, tighten_timer_slack};
use crate::record::{Outcome, RequestRecord};

/// Request header carrying each tier's CPU demand in µs, e.g. `812,95,2210`.
pub const DEMAND_HEADER: &str = "tailor-demand-us";
/// Response header in which every tier reports the GAT it scheduled the request by, edge first.
pub const SEEN_GAT_HEADER: &str = "tailor-seen-gat";
/// Request header with the generator's request id (for logs and traces).
pub const REQUEST_ID_HEADER: &str = "tailor-request-id";

/// What to send and when.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Intended send times, ns from the start, ascending.
    pub intended_ns: Vec<Nanos>,
    /// Per-request, per-tier CPU demand in µs.
    pub demands_us: Vec<Vec<u32>>,
}

/// How to send it.
#[derive(Clone, Debug)]
pub struct LoadgenConfig {
    /// The chain's entry point, e.g. `http://127.0.0.1:40123/`.
    pub uri: Uri,
    /// A request without a response after this long is a timeout.
    pub timeout: Duration,
    /// Requests outstanding at once; a request due while this many are
    /// outstanding is recorded as dropped instead of queued without bound.
    pub max_in_flight: usize,
    /// Run the generator's threads at this SCHED_FIFO priority (needs
    /// CAP_SYS_NICE). The generator stands in for clients on other machines:
    /// with a kernel-enforced band saturating the CPUs, a SCHED_OTHER generator
    /// would be starved and send late, which is not the system's doing.
    pub rt_priority: Option<i32>,
}

/// The generator could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("load generator: cannot start its tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("load generator: plan has {times} send times but {demands} demand lists; give one per request")]
    PlanMismatch { times: usize, demands: usize },
}

/// An HTTP/1.1 keep-alive client for loopback: Nagle off (small requests must
/// not wait for ACKs), an unbounded idle pool so every concurrent request
/// reuses a warm connection once one exists.
pub fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(usize::MAX).build(connector)
}

/// Runs `plan` against `cfg.uri` and returns one record per request, in plan order.
pub fn run(plan: &Plan, cfg: &LoadgenConfig) -> Result<Vec<RequestRecord>, LoadgenError> {
    if plan.intended_ns.len() != plan.demands_us.len() {
        return Err(LoadgenError::PlanMismatch { times: plan.intended_ns.len(), demands: plan.demands_us.len() });
    }
    // Two workers: the connections' I/O must never be what limits the rate
    // (`max_rate` measures what this reaches).
    let rt_priority = cfg.rt_priority;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tailor-loadgen")
        .on_thread_start(move || {
            if let Some(p) = rt_priority {
                set_fifo_priority(p);
            }
        })
        .enable_all()
        .build()
        .map_err(LoadgenError::Runtime)?;
    let handle = rt.handle().clone();
    // The sender is a thread of its own (it exits with the run, so the
    // priority it takes never outlives it).
    let handles = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("tailor-loadgen-sender".into())
            .spawn_scoped(scope, || send_all(plan, cfg, &handle))
            .expect("spawn the sender thread")
            .join()
            .expect("the sender never panics")
    });
    let records = rt.block_on(async {
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(match h {
                Ok(join) => join.await.expect("a request task never panics"),
                Err(dropped) => dropped,
            });
        }
        out
    });
    Ok(records)
}

type Pending = Result<tokio::task::JoinHandle<RequestRecord>, RequestRecord>;

/// The sender loop: sleeps until each intended time, then hands the request to the runtime.
fn send_all(plan: &Plan, cfg: &LoadgenConfig, rt: &tokio::runtime::Handle) -> Vec<Pending> {
    if let Some(p) = cfg.rt_priority {
        set_fifo_priority(p);
    }
    let client = http_client();
    let in_flight = Arc::new(AtomicUsize::new(0));
    tighten_timer_slack();
    let start = monotonic_ns();
    let mut handles = Vec::with_capacity(plan.intended_ns.len());
    for (i, (&intended, demands)) in plan.intended_ns.iter().zip(&plan.demands_us).enumerate() {
        sleep_until_monotonic(start + intended);
        let record = RequestRecord {
            id: i as u64,
            intended_ns: intended,
            sent_ns: 0,
            done_ns: 0,
            status: 0,
            outcome: Outcome::Dropped,
            demands_us: demands.clone(),
            gat_ns: 0,
            tiers_seen: 0,
            gat_consistent: false,
        };
        if in_flight.load(Ordering::Relaxed) >= cfg.max_in_flight {
            handles.push(Err(record));
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let fut = one_request(client.clone(), cfg.uri.clone(), record, start, cfg.timeout, in_flight.clone());
        handles.push(Ok(rt.spawn(fut)));
    }
    handles
}

/// Puts the calling thread in SCHED_FIFO at `priority`; failure (no
/// CAP_SYS_NICE) leaves it as it was, which only makes the generator weaker.
fn set_fifo_priority(priority: i32) {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "load generator cannot take SCHED_FIFO {priority}");
    }
}

async fn one_request(
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    mut record: RequestRecord,
    start: Nanos,
    timeout: Duration,
    in_flight: Arc<AtomicUsize>,
) -> RequestRecord {
    let demands: Vec<String> = record.demands_us.iter().map(|d| d.to_string()).collect();
    let request = Request::get(uri)
        .header(DEMAND_HEADER, demands.join(","))
        .header(REQUEST_ID_HEADER, record.id)
        .body(Full::new(Bytes::new()))
        .expect("static method, valid uri and ASCII headers");
    record.sent_ns = monotonic_ns() - start;
    let result = tokio::time::timeout(timeout, async {
        let response = client.request(request).await?;
        let (parts, body) = response.into_parts();
        body.collect().await.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(parts)
    })
    .await;
    record.done_ns = monotonic_ns() - start;
    in_flight.fetch_sub(1, Ordering::Relaxed);
    match result {
        Err(_) => {
            record.outcome = Outcome::Timeout;
            record.done_ns = 0;
        }
        Ok(Err(_)) => {
            record.outcome = Outcome::Transport;
            record.done_ns = 0;
        }
        Ok(Ok(parts)) => {
            record.status = parts.status.as_u16();
            record.outcome = if parts.status.is_success() { Outcome::Ok } else { Outcome::HttpError };
            if let Some(seen) = parts.headers.get(SEEN_GAT_HEADER).and_then(|v| v.to_str().ok()) {
                let gats: Vec<Option<Nanos>> = seen.split(',').map(|g| g.trim().parse().ok()).collect();
                record.tiers_seen = gats.len() as u32;
                record.gat_ns = gats[0].unwrap_or(0);
                record.gat_consistent = gats.iter().all(|g| g.is_some() && *g == gats[0]);
            }
        }
    }
    record
}

/// The generator's own ceiling: offers `rate` requests/s for `seconds` to a
/// server on loopback that answers at once, and returns (completions/s, p99
/// send lag µs). If completions keep up with the offered rate and the lag
/// stays small, the generator is not the bottleneck at that rate.
/// `rt_priority` as in [`LoadgenConfig`].
pub fn max_rate(rate: f64, seconds: f64, rt_priority: Option<i32>) -> Result<(f64, f64), LoadgenError> {
    let server_rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(LoadgenError::Runtime)?;
    let listener = server_rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).map_err(LoadgenError::Runtime)?;
    let addr = listener.local_addr().map_err(LoadgenError::Runtime)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        server_rt.block_on(async move {
            tokio::select! {
                _ = stop_rx => {}
                _ = crate::tier::serve_null(listener) => {}
            }
        })
    });
    let n = (rate * seconds) as usize;
    let plan =
        Plan { intended_ns: (0..n).map(|i| (i as f64 * 1e9 / rate) as Nanos).collect(), demands_us: vec![vec![0]; n] };
    let cfg = LoadgenConfig {
        uri: format!("http://{addr}/").parse().expect("valid"),
        timeout: Duration::from_secs(5),
        max_in_flight: 10_000,
        rt_priority,
    };
    let records = run(&plan, &cfg)?;
    let _ = stop_tx.send(());
    let _ = server.join();
    let summary = crate::record::summarize(&records, 0, 1, 1);
    Ok((summary.throughput_rps, summary.send_lag.p99_us))
}
