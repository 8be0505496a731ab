//! The handler as an HTTP service: `POST /query`, `GET /stats`.
//!
//! Request headers: `tailor-class` (0-based, default 0), `tailor-fanout`
//! (default 1), optional `tailor-slo-ms` (a per-query SLO) and `tailor-seed`
//! (the query's servers and work drawn from it, to replay one input). Answers 200 with
//! `tailor-latency-ns`, `tailor-budget-ns` and `tailor-tasks-missed` once the
//! slowest task returned; 503 with `tailor-rejected: admission` and the reason
//! in the body when admission control rejects (fast: no task is sent); 400 with
//! the header name and the fix for bad input.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tailor_core::time::from_millis_f64;
use tokio::net::TcpListener;

use crate::handler::{Handler, QueryError, QuerySpec};

pub const CLASS: &str = "tailor-class";
pub const FANOUT: &str = "tailor-fanout";
pub const SLO_MS: &str = "tailor-slo-ms";
/// Optional: the query's seed ([`QuerySpec::seed`]), for replaying the same
/// queries (servers and work) against different queue policies.
pub const SEED: &str = "tailor-seed";
pub const LATENCY_NS: &str = "tailor-latency-ns";
pub const REJECTED: &str = "tailor-rejected";

/// Serves `handler` on `bind` until the returned task is aborted.
pub async fn serve(
    handler: Arc<Handler>,
    bind: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), crate::Error> {
    let listener = TcpListener::bind(bind).await.map_err(|e| crate::Error::Io(format!("bind {bind}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| crate::Error::Io(e.to_string()))?;
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // E.g. out of file descriptors: back off instead of spinning on the error.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let h = handler.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(h.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok((addr, task))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn header<T: std::str::FromStr>(req: &Request<Incoming>, name: &str, default: T) -> Result<T, String> {
    match req.headers().get(name) {
        None => Ok(default),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("header {name}: {:?} is not a number", v)),
    }
}

async fn handle(h: Arc<Handler>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == http::Method::GET && req.uri().path() == "/stats" {
        let s = &h.stats;
        return Ok(text(
            StatusCode::OK,
            format!(
                "admitted {}\nrejected {}\nrejected_late {}\ntasks {}\ntasks_missed {}\ntask_errors {}\nmiss_ratio {:.6}\n\
                 planner_refreshes {}\nservers_on_own_cdf {}\nservers_on_pooled_cdf {}\ntimeouts {}\n\
                 in_flight_tasks {}\ncentral_waiting {}\nadmission_queued {}\n",
                s.admitted.load(Ordering::Relaxed),
                s.rejected.load(Ordering::Relaxed),
                s.rejected_late.load(Ordering::Relaxed),
                s.tasks.load(Ordering::Relaxed),
                s.tasks_missed.load(Ordering::Relaxed),
                s.task_errors.load(Ordering::Relaxed),
                h.miss_ratio(),
                s.planner_refreshes.load(Ordering::Relaxed),
                s.servers_on_own_cdf.load(Ordering::Relaxed),
                s.servers_on_pooled_cdf.load(Ordering::Relaxed),
                s.timeouts.load(Ordering::Relaxed),
                h.in_flight_tasks(),
                h.central_waiting(),
                h.admission_queued()
            ),
        ));
    }
    if req.method() != http::Method::POST || req.uri().path() != "/query" {
        return Ok(text(StatusCode::NOT_FOUND, "query handler: POST /query or GET /stats\n".into()));
    }
    let parsed = (|| -> Result<QuerySpec, String> {
        let class: u8 = header(&req, CLASS, 0)?;
        let fanout: u32 = header(&req, FANOUT, 1)?;
        let slo_ms: f64 = header(&req, SLO_MS, f64::NAN)?;
        let slo_ns = if slo_ms.is_nan() {
            None
        } else if slo_ms > 0.0 && slo_ms.is_finite() {
            Some(from_millis_f64(slo_ms))
        } else {
            return Err(format!("header {SLO_MS}: {slo_ms} must be a positive number of milliseconds"));
        };
        let seed = match req.headers().get(SEED) {
            None => None,
            Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
                format!(
                    "header {SEED}: {v:?} is not an unsigned 64-bit integer; send a decimal seed or omit the header"
                )
            })?),
        };
        Ok(QuerySpec { class, fanout, slo_ns, seed })
    })();
    let q = match parsed {
        Ok(q) => q,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, e + "\n")),
    };
    match h.query(q).await {
        Ok(out) => {
            let mut r = text(StatusCode::OK, String::new());
            r.headers_mut().insert(LATENCY_NS, out.latency_ns.into());
            r.headers_mut().insert("tailor-budget-ns", out.budget_ns.into());
            r.headers_mut().insert("tailor-tasks-missed", out.tasks_missed.into());
            Ok(r)
        }
        Err(e @ (QueryError::Rejected { .. } | QueryError::WouldMiss { .. })) => {
            let mut r = text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"));
            r.headers_mut().insert(REJECTED, http::HeaderValue::from_static("admission"));
            Ok(r)
        }
        Err(e @ (QueryError::NoSuchClass { .. } | QueryError::BadFanout { .. })) => {
            Ok(text(StatusCode::BAD_REQUEST, format!("{e}\n")))
        }
        Err(e @ QueryError::Timeout { .. }) => Ok(text(StatusCode::GATEWAY_TIMEOUT, format!("{e}\n"))),
        Err(e) => Ok(text(StatusCode::BAD_GATEWAY, format!("{e}\n"))),
    }
}
