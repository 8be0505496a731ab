//! The open-loop HTTP load generator: `tailor-loadgen`'s pacing core sends each request
//! at its intended time on a keep-alive pool (hyper) and never waits for a response;
//! latency is measured from the intended time, so a slow system cannot slow the
//! arrivals down (no coordinated omission).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailor_core::Nanos;
use tailor_loadgen::{Arrival, OpenLoopConfig, Outcome as SendOutcome};

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
    #[error(transparent)]
    OpenLoop(#[from] tailor_loadgen::OpenLoopError),
    #[error("load generator: plan has {times} send times but {demands} demand lists; give one per request")]
    PlanMismatch { times: usize, demands: usize },
}

/// An HTTP/1.1 keep-alive client for loopback: Nagle off (small requests must
/// not wait for ACKs), an unbounded idle pool so every concurrent request
/// reuses a warm connection once one exists, and idle connections closed after
/// [`IDLE_CONNECTION_S`]. The pool hands out the most recently used connection,
/// so a burst's extra connections go idle and are closed; without the pool timer
/// hyper-util never reaps them and a long run holds the most connections it
/// ever needed at once (the soak saw a tier's descriptors climb 11 -> 77 in a minute).
pub fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(std::time::Duration::from_secs(IDLE_CONNECTION_S))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

/// How long an idle keep-alive connection is kept (as a tokio blocking-pool thread is).
pub const IDLE_CONNECTION_S: u64 = 10;

/// Runs `plan` against `cfg.uri` and returns one record per request, in plan order.
pub fn run(plan: &Plan, cfg: &LoadgenConfig) -> Result<Vec<RequestRecord>, LoadgenError> {
    run_with_headers(plan, cfg, &[])
}

/// [`run`], every request also carrying `headers` (e.g. a `grpc-timeout` as its deadline).
pub fn run_with_headers(
    plan: &Plan,
    cfg: &LoadgenConfig,
    headers: &[(&'static str, String)],
) -> Result<Vec<RequestRecord>, LoadgenError> {
    if plan.intended_ns.len() != plan.demands_us.len() {
        return Err(LoadgenError::PlanMismatch { times: plan.intended_ns.len(), demands: plan.demands_us.len() });
    }
    let open = OpenLoopConfig { rt_priority: cfg.rt_priority, ..OpenLoopConfig::new(cfg.max_in_flight, cfg.timeout) };
    let client = http_client();
    let uri = cfg.uri.clone();
    let demand_headers: Arc<Vec<String>> = Arc::new(
        plan.demands_us.iter().map(|d| d.iter().map(|us| us.to_string()).collect::<Vec<_>>().join(",")).collect(),
    );
    let headers = headers.to_vec();
    let sent = tailor_loadgen::run(&plan.intended_ns, &open, move |a: Arrival| {
        let mut request = Request::get(uri.clone())
            .header(DEMAND_HEADER, demand_headers[a.index].as_str())
            .header(REQUEST_ID_HEADER, a.index as u64);
        for (name, value) in &headers {
            request = request.header(*name, value.as_str());
        }
        let request = request.body(Full::new(Bytes::new())).expect("static method, valid uri and ASCII headers");
        one_request(client.clone(), request)
    })?;
    Ok(sent
        .records
        .into_iter()
        .map(|r| {
            let demands = &plan.demands_us[r.index];
            to_record(r, demands)
        })
        .collect())
}

/// One request on the pool; the response head once the whole body has arrived.
async fn one_request(
    client: Client<HttpConnector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<http::response::Parts, Box<dyn std::error::Error + Send + Sync>> {
    let response = client.request(request).await?;
    let (parts, body) = response.into_parts();
    body.collect().await?;
    Ok(parts)
}

type Answer = Result<http::response::Parts, Box<dyn std::error::Error + Send + Sync>>;

/// The pacing core's record as the benchmark keeps it (status, GATs the tiers saw).
fn to_record(sent: tailor_loadgen::Record<Answer>, demands_us: &[u32]) -> RequestRecord {
    let mut record = RequestRecord {
        id: sent.index as u64,
        intended_ns: sent.intended_ns,
        sent_ns: sent.sent_ns,
        done_ns: 0,
        status: 0,
        outcome: Outcome::Dropped,
        demands_us: demands_us.to_vec(),
        gat_ns: 0,
        tiers_seen: 0,
        gat_consistent: false,
    };
    match sent.outcome {
        SendOutcome::Overflow => {}
        SendOutcome::TimedOut => record.outcome = Outcome::Timeout,
        SendOutcome::Done(Err(_)) => record.outcome = Outcome::Transport,
        SendOutcome::Done(Ok(parts)) => {
            record.done_ns = sent.done_ns;
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
