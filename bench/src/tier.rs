//! One tier of the demo chain: an HTTP server that burns each request's CPU
//! demand for this tier under the configured runtime backend, then calls the
//! next tier with the request's context, then responds.
//!
//! Tier 0 is the edge: it ignores any incoming context and stamps the GAT.
//! Every tier reports the GAT it scheduled the request by in
//! `tailor-seen-gat` (its own first, then the downstream tiers'), so the
//! generator can check propagation across the whole chain.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioIo;
use tailor_core::time::NANOS_PER_SEC;
use tailor_core::{wire, Context, Nanos};
use tailor_runtime::{BackendSpec, Scheduler};

use crate::clock::wall_ns;
use crate::loadgen::{http_client, DEMAND_HEADER, REQUEST_ID_HEADER, SEEN_GAT_HEADER};

/// The line a tier prints on stdout once it accepts connections (the parent waits for it).
pub const READY_PREFIX: &str = "tailor-demo-tier listening on ";

/// The message a tier logs as it stops, followed by its [`TierStats`] as JSON: the demo
/// reads it from the tier's log to charge the run's measured hand-off cost in the model.
pub const STATS_PREFIX: &str = "tailor-demo-tier stats: ";

/// What a tier's scheduler measured over its life (`tailor_runtime::RuntimeStats`, the
/// part the demo's model uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierStats {
    pub admitted: u64,
    /// Cooperative admissions of a parked job by the job that freed its slot.
    pub handoffs: u64,
    /// Their total time from admission to running, ns, and the part of it spent
    /// waiting on a run queue for a CPU.
    pub handoff_ns: u64,
    pub handoff_run_queue_ns: u64,
}

impl TierStats {
    fn of(s: &tailor_runtime::RuntimeStats) -> TierStats {
        TierStats {
            admitted: s.admitted,
            handoffs: s.handoffs,
            handoff_ns: s.handoff_ns,
            handoff_run_queue_ns: s.handoff_run_queue_ns,
        }
    }

    /// The stats a tier logged in `log_text` (its last such line), if any.
    pub fn from_log(log_text: &str) -> Option<TierStats> {
        let (_, json) = log_text.lines().rev().find_map(|l| l.split_once(STATS_PREFIX))?;
        serde_json::from_str(json.trim()).ok()
    }

    /// The sum over several tiers.
    pub fn sum(all: impl IntoIterator<Item = TierStats>) -> TierStats {
        all.into_iter().fold(TierStats::default(), |a, b| TierStats {
            admitted: a.admitted + b.admitted,
            handoffs: a.handoffs + b.handoffs,
            handoff_ns: a.handoff_ns + b.handoff_ns,
            handoff_run_queue_ns: a.handoff_run_queue_ns + b.handoff_run_queue_ns,
        })
    }

    /// Mean time of a hand-off not spent waiting for a CPU (the wake-up), µs; None
    /// without hand-offs.
    pub fn handoff_wakeup_us(&self) -> Option<f64> {
        (self.handoffs > 0)
            .then(|| self.handoff_ns.saturating_sub(self.handoff_run_queue_ns) as f64 / self.handoffs as f64 / 1e3)
    }
}

/// How a tier runs.
#[derive(Clone, Debug)]
pub struct TierConfig {
    /// Position in the chain, 0 = the edge.
    pub index: usize,
    /// Address to listen on (port 0: any free port, printed when ready).
    pub listen: SocketAddr,
    /// The next tier, if any.
    pub next: Option<Uri>,
    /// How jobs are scheduled.
    pub backend: BackendSpec,
    /// Oldest GAT a non-edge tier accepts (older ones are clamped; wire::clamp).
    pub max_age_ns: Nanos,
}

/// Why a tier could not start.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("tier {index}: {what}: {source}")]
    Io { index: usize, what: &'static str, source: std::io::Error },
    #[error("tier {index}: backend: {source}")]
    Backend { index: usize, source: tailor_runtime::RuntimeError },
}

struct Tier {
    index: usize,
    next: Option<Uri>,
    sched: Scheduler,
    client: Client<HttpConnector, Full<Bytes>>,
    max_age_ns: Nanos,
    /// Requests whose incoming context was absent or malformed (served as if stamped here).
    context_missing: AtomicU64,
}

/// Serves until stdin closes (the parent's signal to stop), then returns, so the
/// scheduler is dropped and every thread it changed is restored.
pub fn serve(cfg: TierConfig) -> Result<(), TierError> {
    let index = cfg.index;
    let io = |what| move |source| TierError::Io { index, what, source };
    let sched = Scheduler::new(cfg.backend.clone()).map_err(|source| TierError::Backend { index, source })?;
    // One I/O thread: accepting, parsing and the downstream call. Under the
    // kernel backend it is raised above the job band, so a saturated band
    // cannot starve the I/O that feeds it.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io("tokio runtime"))?;
    if let Err(e) = sched.io_thread_started() {
        tracing::warn!(tier = index, error = %e, "I/O thread keeps its policy");
    }
    let tier = Arc::new(Tier {
        index,
        next: cfg.next.clone(),
        sched: sched.clone(),
        client: http_client(),
        max_age_ns: cfg.max_age_ns,
        context_missing: AtomicU64::new(0),
    });
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(cfg.listen).await.map_err(io("bind"))?;
        let addr = listener.local_addr().map_err(io("local address"))?;
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{READY_PREFIX}{addr}");
            let _ = out.flush();
        }
        let stdin_closed = tokio::task::spawn_blocking(|| {
            // Read until EOF: the parent closes our stdin to stop us.
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        });
        tokio::select! {
            _ = stdin_closed => Ok(()),
            r = accept_loop(listener, tier.clone()) => r.map_err(io("accept")),
        }
    });
    sched.io_thread_stopped();
    let stats = serde_json::to_string(&TierStats::of(&sched.stats())).expect("serializes");
    tracing::info!("{STATS_PREFIX}{stats}");
    let missing = tier.context_missing.load(Ordering::Relaxed);
    if missing > 0 && index > 0 {
        tracing::warn!(tier = index, missing, "requests arrived without a valid context");
    }
    result
}

async fn accept_loop(listener: tokio::net::TcpListener, tier: Arc<Tier>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let tier = tier.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, tier.clone()));
            // A broken connection only ends that connection.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn reply(status: StatusCode, body: String) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    Ok(r)
}

/// This tier's demand from `tailor-demand-us` (comma-separated µs, one per tier).
pub fn demand_for_tier(header: Option<&str>, index: usize) -> Result<u32, String> {
    let header = header.ok_or_else(|| {
        format!("missing header `{DEMAND_HEADER}`; send e.g. `{DEMAND_HEADER}: 812,95,2210` (µs per tier)")
    })?;
    let field = header.split(',').nth(index).ok_or_else(|| {
        format!("header `{DEMAND_HEADER}: {header}` has no value for tier {index}; give one µs value per tier")
    })?;
    field
        .trim()
        .parse()
        .map_err(|_| format!("header `{DEMAND_HEADER}`: `{}` (tier {index}) is not a whole number of µs", field.trim()))
}

async fn handle(req: Request<Incoming>, tier: Arc<Tier>) -> Result<Response<Full<Bytes>>, Infallible> {
    let demand_header = req.headers().get(DEMAND_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let demand_us = match demand_for_tier(demand_header.as_deref(), tier.index) {
        Ok(d) => d,
        Err(message) => return reply(StatusCode::BAD_REQUEST, message),
    };
    let now = wall_ns();
    let ctx = if tier.index == 0 {
        // The edge never trusts an incoming context (docs/design.md, "The context rides where services already forward things").
        Context::stamped(now)
    } else {
        match wire::extract(req.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes()))) {
            Ok(Some(decoded)) => wire::clamp(decoded.context, now, tier.max_age_ns).0,
            _ => {
                tier.context_missing.fetch_add(1, Ordering::Relaxed);
                Context::stamped(now)
            }
        }
    };
    let demand_ns = demand_us as Nanos * 1_000;
    if let Err(e) = tier.sched.spawn(ctx, move |_permit| tailor_runtime::cpu::burn_cpu(demand_ns)).await {
        return reply(StatusCode::SERVICE_UNAVAILABLE, format!("tier {}: {e}", tier.index));
    }
    let mut seen = ctx.gat.to_string();
    if let Some(next) = &tier.next {
        let mut call = Request::get(next.clone())
            .header(wire::HEADER, wire::encode(&ctx.child()).as_str())
            .header(DEMAND_HEADER, demand_header.unwrap_or_default());
        if let Some(id) = req.headers().get(REQUEST_ID_HEADER) {
            call = call.header(REQUEST_ID_HEADER, id.clone());
        }
        let call = call.body(Full::new(Bytes::new())).expect("valid uri and headers");
        let downstream = async {
            let response = tier.client.request(call).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let below = response.headers().get(SEEN_GAT_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
            response.into_body().collect().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("status {status}"));
            }
            Ok(below)
        };
        match downstream.await {
            Ok(Some(below)) => {
                seen.push(',');
                seen.push_str(&below);
            }
            Ok(None) => {}
            Err(e) => return reply(StatusCode::BAD_GATEWAY, format!("tier {}: next tier {next}: {e}", tier.index)),
        }
    }
    let mut response = Response::new(Full::new(Bytes::new()));
    response.headers_mut().insert(SEEN_GAT_HEADER, seen.parse().expect("digits and commas"));
    Ok(response)
}

/// A server that answers every request at once (status 200, `tailor-seen-gat: 1`):
/// the far end of [`crate::loadgen::max_rate`].
pub async fn serve_null(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|_req: Request<Incoming>| async {
                let mut r = Response::new(Full::new(Bytes::new()));
                r.headers_mut().insert(SEEN_GAT_HEADER, http::HeaderValue::from_static("1"));
                Ok::<_, Infallible>(r)
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// A default max age for clamping: a minute, far beyond any demo request.
pub const DEFAULT_MAX_AGE_NS: Nanos = 60 * NANOS_PER_SEC;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_round_trip_through_a_log_line_and_sum() {
        let a = TierStats { admitted: 10, handoffs: 4, handoff_ns: 200_000, handoff_run_queue_ns: 80_000 };
        let log = format!(
            "2026-11-28T05:42:26Z  INFO tailor_runtime::scheduler: backend cooperative\n2026-11-28T05:43:00Z  INFO tailor_bench::tier: {STATS_PREFIX}{}\n",
            serde_json::to_string(&a).unwrap()
        );
        assert_eq!(TierStats::from_log(&log), Some(a));
        assert_eq!(TierStats::from_log("no stats here\n"), None);
        let b = TierStats { admitted: 5, handoffs: 1, handoff_ns: 40_000, handoff_run_queue_ns: 0 };
        let s = TierStats::sum([a, b]);
        assert_eq!((s.admitted, s.handoffs), (15, 5));
        // (240 − 80) µs over 5 hand-offs.
        assert_eq!(s.handoff_wakeup_us(), Some(32.0));
        assert_eq!(TierStats::default().handoff_wakeup_us(), None);
    }

    #[test]
    fn demand_header_errors_name_the_header_and_the_fix() {
        assert_eq!(demand_for_tier(Some("812, 95,2210"), 1), Ok(95));
        assert!(demand_for_tier(None, 0).unwrap_err().contains("missing header `tailor-demand-us`"));
        assert!(demand_for_tier(Some("1,2"), 2).unwrap_err().contains("no value for tier 2"));
        assert!(demand_for_tier(Some("1,x"), 1).unwrap_err().contains("`x` (tier 1) is not a whole number"));
    }
}
