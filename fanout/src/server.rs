//! A task server: an HTTP endpoint that queues tasks by a core policy and emulates a shard's service time.
//!
//! `POST /task` with a `tailor-context` header (core's wire codec) enqueues a
//! task in the server's policy (`edf` keys on the context deadline, `priq` on
//! its class, `fifo` on arrival), one at a time in service like the paper's
//! one-core task servers. Service is a precise timed wait on the shared
//! [`PreciseTimer`], drawn from the server's distribution times its `scale`
//! (a slower server has scale > 1), so dozens of servers fit on two cores and
//! the queueing and the deadlines are real while no CPU is burnt.
//!
//! The response carries what the handler needs (§III.B.2, §III.C): the time
//! the task waited here (`tailor-queue-ns`; the handler subtracts it from the
//! round trip to get the post-dequeue time), whether it left the queue after
//! its deadline (`tailor-missed`), its service time and the order in which
//! this server dequeued it (`tailor-served-seq`, for tests). `GET /metrics`
//! serves its counters to Prometheus (`/healthz`, `/readyz` too; see
//! docs/observability.md). A full queue (`max_queue`) answers 503 at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tailor_core::dist::Dist;
use tailor_core::policy::{AnyPolicy, Job, JobId, Policy, PolicySpec};
use tailor_core::rng::Rng;
use tailor_core::time::{Nanos, NEVER};
use tailor_core::{wire, Context};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::clock::wall_ns;
use crate::metrics;
use crate::timer::PreciseTimer;
use tailor_telemetry::prometheus_client::metrics::histogram::Histogram;
use tailor_telemetry::{AcceptLoop, AdminServer, Scraped};

/// Response headers a task server sets.
pub const QUEUE_NS: &str = "tailor-queue-ns";
pub const SERVICE_NS: &str = "tailor-service-ns";
pub const MISSED: &str = "tailor-missed";
pub const SERVED_SEQ: &str = "tailor-served-seq";
/// Wall-clock time (ns since the epoch) the task left the queue (§III.B.2: the
/// handler learns the post-dequeue time as result time − dequeue time).
pub const DEQUEUED_AT: &str = "tailor-dequeued-at";
/// Wall-clock time (ns since the epoch) the task arrived at the server.
pub const ARRIVED_AT: &str = "tailor-arrived-at";
/// Request header: the seed of this task's service-time draw. The handler
/// sends one derived from the query's seed when the load generator gives one,
/// so every queue policy serves the same work (common random numbers); without
/// it the server draws from its own stream.
pub const WORK_SEED: &str = "tailor-work-seed";
/// Oldest GAT a task server accepts in a context (clamping, docs/wire-format.md).
const MAX_CONTEXT_AGE_NS: Nanos = 60_000_000_000;

/// One task server's configuration.
#[derive(Clone, Debug)]
pub struct TaskServerConfig {
    /// Queue order: `edf` (TF-EDFQ or T-EDFQ, by the deadline the handler sets), `priq` or `fifo`.
    pub policy: PolicySpec,
    /// Service time distribution (already scaled to the emulation's time base).
    pub service: Dist,
    /// Multiplies every service time: > 1 for a slower server.
    pub scale: f64,
    /// Tasks queued or in service at most; more are refused with 503.
    pub max_queue: usize,
    pub seed: u64,
}

/// What a task experienced at the server.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    arrived_at: Nanos,
    dequeued_at: Nanos,
    queue_ns: Nanos,
    service_ns: Nanos,
    missed: bool,
    seq: u64,
}

struct Pending {
    tx: Option<oneshot::Sender<Outcome>>,
    arrived: Instant,
    arrived_at: Nanos,
    deadline: Nanos,
    work_seed: Option<u64>,
}

struct State {
    policy: AnyPolicy,
    waiting: HashMap<JobId, Pending>,
    in_service: Option<JobId>,
    next_id: JobId,
    served: u64,
    rng: Rng,
}

/// Counters, readable while the server runs.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub served: AtomicU64,
    pub missed: AtomicU64,
    pub refused_full: AtomicU64,
    pub bad_context: AtomicU64,
}

struct Shared {
    cfg: TaskServerConfig,
    state: Mutex<State>,
    timer: Arc<PreciseTimer>,
    stats: ServerStats,
    /// Time tasks waited in the queue, and their service times, in seconds.
    queue_wait: Histogram,
    service: Histogram,
}

/// A running task server.
pub struct TaskServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl TaskServer {
    /// Binds `bind` (port 0 for an ephemeral port) and serves until dropped.
    pub async fn spawn(
        cfg: TaskServerConfig,
        timer: Arc<PreciseTimer>,
        bind: SocketAddr,
    ) -> Result<TaskServer, crate::Error> {
        let policy =
            cfg.policy.build_any(1, cfg.seed).map_err(|e| crate::Error::Config(format!("task server policy: {e}")))?;
        if !(cfg.scale.is_finite() && cfg.scale > 0.0) {
            return Err(crate::Error::Config(format!("task server scale = {}: must be a positive number", cfg.scale)));
        }
        let listener = TcpListener::bind(bind).await.map_err(|e| crate::Error::Io(format!("bind {bind}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| crate::Error::Io(e.to_string()))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                policy,
                waiting: HashMap::new(),
                in_service: None,
                next_id: 0,
                served: 0,
                rng: Rng::new(cfg.seed),
            }),
            cfg,
            timer,
            stats: ServerStats::default(),
            queue_wait: metrics::latency_histogram(),
            service: metrics::latency_histogram(),
        });
        let admin = admin(&shared);
        let accept_shared = shared.clone();
        let accept =
            tokio::spawn(AcceptLoop::new("task server").run(listener, std::future::pending(), move |stream| {
                let (s, admin) = (accept_shared.clone(), admin.clone());
                async move {
                    let svc = hyper::service::service_fn(move |req| handle(s.clone(), admin.clone(), req));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                }
            }));
        Ok(TaskServer { addr, shared, accept })
    }

    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }
}

impl Drop for TaskServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

/// `/metrics`, `/healthz`, `/readyz` for one task server; the collector holds
/// `shared` (not the other way round, so dropping the server frees both).
fn admin(shared: &Arc<Shared>) -> AdminServer {
    let counter = |field: fn(&ServerStats) -> &AtomicU64| {
        let s = shared.clone();
        move || field(&s.stats).load(Ordering::Relaxed)
    };
    let (queued, late) = (shared.clone(), shared.clone());
    let scraped = Scraped::new()
        .counter(
            "tailor_task_server_tasks_served",
            "Tasks taken out of the queue into service.",
            counter(|s| &s.served),
        )
        .counter(
            "tailor_task_server_tasks_missed",
            "Tasks that left the queue after their deadline.",
            counter(|s| &s.missed),
        )
        .counter(
            "tailor_task_server_tasks_refused",
            "Tasks answered 503 because the queue was full (max_queue).",
            counter(|s| &s.refused_full),
        )
        .counter(
            "tailor_task_server_bad_context",
            "Tasks whose tailor-context header was malformed (served anyway, as tasks without a deadline).",
            counter(|s| &s.bad_context),
        )
        .gauge("tailor_task_server_queue_length", "Tasks queued or in service now.", move || {
            queued.state.lock().expect("server state poisoned").waiting.len() as f64
        })
        .gauge_in(
            "tailor_task_server_timer_lateness_p99",
            "99th percentile of how late the service-time timer fired.",
            tailor_telemetry::prometheus_client::registry::Unit::Seconds,
            move || late.timer.lateness().p99_ns as f64 / 1e9,
        );
    metrics::admin(
        scraped,
        &[
            ("tailor_task_server_queue_wait", "Time a task waited in the queue.", &shared.queue_wait),
            ("tailor_task_server_service", "Emulated service time of a task.", &shared.service),
        ],
    )
}

async fn handle(
    s: Arc<Shared>,
    admin: AdminServer,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if metrics::is_admin_path(req.uri().path()) {
        return Ok(admin.respond(&req));
    }
    if req.method() != http::Method::POST || req.uri().path() != "/task" {
        return Ok(text(StatusCode::NOT_FOUND, "task server: POST /task, or GET /metrics\n".into()));
    }
    let now = wall_ns();
    let work_seed = match req.headers().get(WORK_SEED) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(seed) => Some(seed),
            None => {
                return Ok(text(
                    StatusCode::BAD_REQUEST,
                    format!("header {WORK_SEED}: {v:?} is not an unsigned 64-bit integer; send a decimal seed or omit the header\n"),
                ))
            }
        },
    };
    // A missing or malformed context still gets served (docs/design.md: bad context is
    // re-stamped and counted), as a task with no deadline.
    let ctx = match wire::extract(req.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes()))) {
        Ok(Some(d)) => wire::clamp(d.context, now, MAX_CONTEXT_AGE_NS).0,
        Ok(None) => Context::stamped(now),
        Err(_) => {
            s.stats.bad_context.fetch_add(1, Ordering::Relaxed);
            Context::stamped(now)
        }
    };
    let rx = {
        let mut st = s.state.lock().expect("server state poisoned");
        if st.waiting.len() >= s.cfg.max_queue {
            drop(st);
            s.stats.refused_full.fetch_add(1, Ordering::Relaxed);
            return Ok(text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("task queue full ({} tasks, max_queue)\n", s.cfg.max_queue),
            ));
        }
        let id = st.next_id;
        st.next_id += 1;
        let (tx, rx) = oneshot::channel();
        st.waiting.insert(
            id,
            Pending { tx: Some(tx), arrived: Instant::now(), arrived_at: now, deadline: ctx.deadline, work_seed },
        );
        st.policy.arrive(now, Job { id, gat: ctx.gat, deadline: ctx.deadline, class: ctx.class });
        start_next(&s, &mut st);
        rx
    };
    let Ok(out) = rx.await else {
        return Ok(text(StatusCode::INTERNAL_SERVER_ERROR, "task dropped\n".into()));
    };
    let mut r = text(StatusCode::OK, String::new());
    let h = r.headers_mut();
    h.insert(QUEUE_NS, out.queue_ns.into());
    h.insert(SERVICE_NS, out.service_ns.into());
    h.insert(MISSED, u64::from(out.missed).into());
    h.insert(SERVED_SEQ, out.seq.into());
    h.insert(ARRIVED_AT, out.arrived_at.into());
    h.insert(DEQUEUED_AT, out.dequeued_at.into());
    Ok(r)
}

/// If the policy put a new task on the (single) CPU, starts its service.
fn start_next(s: &Arc<Shared>, st: &mut State) {
    let want = st.policy.running().first().copied().flatten();
    let Some(id) = want else { return };
    if st.in_service == Some(id) {
        return;
    }
    st.in_service = Some(id);
    let seq = st.served;
    st.served += 1;
    let work_seed = st.waiting.get(&id).expect("a running job is waiting").work_seed;
    let work = match work_seed {
        Some(seed) => s.cfg.service.sample_ns(&mut Rng::new(seed)),
        None => st.rng_sample(&s.cfg.service),
    };
    let service_ns = (work as f64 * s.cfg.scale).round() as Nanos;
    let p = st.waiting.get_mut(&id).expect("a running job is waiting");
    let queue_ns = p.arrived.elapsed().as_nanos() as Nanos;
    let dequeued_at = wall_ns();
    let arrived_at = p.arrived_at;
    let missed = p.deadline != NEVER && dequeued_at > p.deadline;
    let tx = p.tx.take();
    s.stats.served.fetch_add(1, Ordering::Relaxed);
    s.queue_wait.observe(queue_ns as f64 / 1e9);
    s.service.observe(service_ns as f64 / 1e9);
    if missed {
        s.stats.missed.fetch_add(1, Ordering::Relaxed);
    }
    let due = Instant::now() + std::time::Duration::from_nanos(service_ns);
    let done = s.clone();
    s.timer.at(due, move || {
        let mut st = done.state.lock().expect("server state poisoned");
        st.policy.complete(wall_ns(), id);
        st.waiting.remove(&id);
        st.in_service = None;
        if let Some(tx) = tx {
            let _ = tx.send(Outcome { arrived_at, dequeued_at, queue_ns, service_ns, missed, seq });
        }
        start_next(&done, &mut st);
    });
}

impl State {
    fn rng_sample(&mut self, d: &Dist) -> Nanos {
        d.sample_ns(&mut self.rng)
    }
}
