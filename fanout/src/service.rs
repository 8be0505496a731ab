//! The handler as an HTTP service: `POST /query`, and `GET /metrics`, `/healthz`, `/readyz` for Prometheus.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tailor_core::time::from_millis_f64;
use tokio::net::TcpListener;

use crate::handler::{Handler, HandlerStats, QueryError, QuerySpec};
use crate::metrics;
use tailor_telemetry::prometheus_client::metrics::histogram::Histogram;
use tailor_telemetry::prometheus_client::registry::Unit;
use tailor_telemetry::{AcceptLoop, AdminServer, Scraped};

pub const CLASS: &str = "tailor-class";
pub const FANOUT: &str = "tailor-fanout";
pub const SLO_MS: &str = "tailor-slo-ms";
/// Optional: the query's seed ([`QuerySpec::seed`]), for replaying the same
/// queries (servers and work) against different queue policies.
pub const SEED: &str = "tailor-seed";
pub const LATENCY_NS: &str = "tailor-latency-ns";
pub const REJECTED: &str = "tailor-rejected";

/// A query's header that cannot be read (answered with 400 and this message).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QueryHeaderError {
    /// `tailor-class` and `tailor-fanout` are decimal numbers.
    #[error("header {name}: {value:?} is not a number")]
    NotANumber { name: &'static str, value: HeaderValue },
    /// `tailor-slo-ms` is a positive, finite number of milliseconds.
    #[error("header {SLO_MS}: {slo_ms} must be a positive number of milliseconds")]
    BadSlo { slo_ms: f64 },
    /// `tailor-seed` is a decimal u64.
    #[error("header {SEED}: {value:?} is not an unsigned 64-bit integer; send a decimal seed or omit the header")]
    BadSeed { value: HeaderValue },
}

/// Serves `handler` on `bind` until the returned task is aborted.
pub async fn serve(
    handler: Arc<Handler>,
    bind: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), crate::Error> {
    let listener = TcpListener::bind(bind).await.map_err(|e| crate::Error::Io(format!("bind {bind}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| crate::Error::Io(e.to_string()))?;
    let latency = metrics::latency_histogram();
    let admin = admin(&handler, &latency);
    let task = tokio::spawn(AcceptLoop::new("fan-out handler").run(listener, std::future::pending(), move |stream| {
        let h = handler.clone();
        let (admin, latency) = (admin.clone(), latency.clone());
        async move {
            let svc = hyper::service::service_fn(move |req| handle(h.clone(), admin.clone(), latency.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        }
    }));
    Ok((addr, task))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn header<T: std::str::FromStr>(headers: &HeaderMap, name: &'static str, default: T) -> Result<T, QueryHeaderError> {
    match headers.get(name) {
        None => Ok(default),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| QueryHeaderError::NotANumber { name, value: v.clone() }),
    }
}

/// `/metrics`, `/healthz`, `/readyz` for the handler: its counters read at scrape time.
fn admin(handler: &Arc<Handler>, latency: &Histogram) -> AdminServer {
    let counter = |field: fn(&HandlerStats) -> &AtomicU64| {
        let h = handler.clone();
        move || field(&h.stats).load(Ordering::Relaxed)
    };
    let (rejected, ratio, cdfs, compute) = (handler.clone(), handler.clone(), handler.clone(), handler.clone());
    let (in_flight, central, queued) = (handler.clone(), handler.clone(), handler.clone());
    let servers = handler.server_count() as f64;
    let scraped = Scraped::new()
        .counter("tailor_fanout_queries_admitted", "Queries admitted (their tasks were sent).", counter(|s| &s.admitted))
        .counter_family(
            "tailor_fanout_queries_rejected",
            "Queries rejected at once: by admission control's miss ratio (admission), or because a task would wait past its deadline (late).",
            None,
            "reason",
            move || {
                let s = &rejected.stats;
                let (all, late) = (s.rejected.load(Ordering::Relaxed), s.rejected_late.load(Ordering::Relaxed));
                vec![("admission".into(), all.saturating_sub(late) as f64), ("late".into(), late as f64)]
            },
        )
        .counter("tailor_fanout_tasks", "Tasks that returned from a task server.", counter(|s| &s.tasks))
        .counter(
            "tailor_fanout_tasks_missed",
            "Tasks that left their server's queue after their deadline.",
            counter(|s| &s.tasks_missed),
        )
        .counter("tailor_fanout_task_errors", "Tasks that failed (connection, status).", counter(|s| &s.task_errors))
        .gauge(
            "tailor_fanout_admission_miss_ratio",
            "Admission control's windowed task deadline-miss ratio (the worst server's; 0 without admission control).",
            move || ratio.miss_ratio(),
        )
        .counter(
            "tailor_fanout_planner_refreshes",
            "Times the deadline planner was rebuilt from learned latencies.",
            counter(|s| &s.planner_refreshes),
        )
        .gauge_family(
            "tailor_fanout_servers_by_cdf",
            "Task servers by the latency CDF their deadlines are planned with at the last refresh: own, pooled or offline.",
            None,
            "source",
            move || {
                let own = cdfs.stats.servers_on_own_cdf.load(Ordering::Relaxed) as f64;
                let pooled = cdfs.stats.servers_on_pooled_cdf.load(Ordering::Relaxed) as f64;
                vec![("own".into(), own), ("pooled".into(), pooled), ("offline".into(), (servers - own - pooled).max(0.0))]
            },
        )
        .counter("tailor_fanout_plans_computed", "Sequential-request budget plans computed.", counter(|s| &s.plan_computes))
        .counter_in("tailor_fanout_plan_compute", "Time spent computing budget plans.", Unit::Seconds, move || {
            compute.stats.plan_compute_ns.load(Ordering::Relaxed) as f64 / 1e9
        })
        .counter(
            "tailor_fanout_plan_cold_misses",
            "Requests that computed their own plan (a request shape seen for the first time).",
            counter(|s| &s.plan_cold_misses),
        )
        .counter(
            "tailor_fanout_query_timeouts",
            "Queries ended by query_timeout_slos with a server that never answered (HTTP 504).",
            counter(|s| &s.timeouts),
        )
        .gauge("tailor_fanout_tasks_in_flight", "Tasks sent and not yet returned, all servers.", move || {
            in_flight.in_flight_tasks() as f64
        })
        .gauge("tailor_fanout_central_waiting", "Tasks waiting in the handler's central queues.", move || {
            central.central_waiting() as f64
        })
        .gauge(
            "tailor_fanout_admission_queued",
            "Tasks announced to admission control and not yet dequeued or expired.",
            move || queued.admission_queued() as f64,
        );
    metrics::admin(
        scraped,
        &[("tailor_fanout_query_latency", "Latency of admitted queries, arrival to the last task's answer.", latency)],
    )
}

async fn handle(
    h: Arc<Handler>,
    admin: AdminServer,
    latency: Histogram,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if metrics::is_admin_path(req.uri().path()) {
        return Ok(admin.respond(&req));
    }
    if req.method() != http::Method::POST || req.uri().path() != "/query" {
        return Ok(text(StatusCode::NOT_FOUND, "query handler: POST /query, or GET /metrics\n".into()));
    }
    let parsed = (|| -> Result<QuerySpec, QueryHeaderError> {
        let class: u8 = header(req.headers(), CLASS, 0)?;
        let fanout: u32 = header(req.headers(), FANOUT, 1)?;
        let slo_ms: f64 = header(req.headers(), SLO_MS, f64::NAN)?;
        let slo_ns = if slo_ms.is_nan() {
            None
        } else if slo_ms > 0.0 && slo_ms.is_finite() {
            Some(from_millis_f64(slo_ms))
        } else {
            return Err(QueryHeaderError::BadSlo { slo_ms });
        };
        let seed = match req.headers().get(SEED) {
            None => None,
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| QueryHeaderError::BadSeed { value: v.clone() })?,
            ),
        };
        Ok(QuerySpec { class, fanout, slo_ns, seed })
    })();
    let q = match parsed {
        Ok(q) => q,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, format!("{e}\n"))),
    };
    match h.query(q).await {
        Ok(out) => {
            latency.observe(out.latency_ns as f64 / 1e9);
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
