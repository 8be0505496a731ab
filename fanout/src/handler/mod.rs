//! The query handler: per query, fan-out, TailGuard deadlines, dispatch, merge, admission control.
//!
//! For each query (class, fan-out k_f, optional per-query SLO) the handler
//! 1. asks the [`AdmissionController`] (rejects fast while the task
//!    deadline-miss ratio over its window exceeds R_th);
//! 2. picks k_f distinct task servers (weighted, so some can be made hotter);
//! 3. computes the deadline by the [`Scheme`]: TF-EDFQ (and, for accounting,
//!    PRIQ and FIFO) use t_D = t0 + SLO − x_p^u(k_f) from the [`Planner`];
//!    T-EDFQ uses t0 + SLO;
//! 4. sends the tasks with the deadline in the `tailor-context` header, either
//!    straight to the servers (they queue, [`Queuing::AtServers`]) or into one
//!    queue per server here, released one at a time when that server is free
//!    ([`Queuing::Central`], the paper's testbed);
//! 5. answers when the slowest task returns.
//!
//! The planner's per-server CDFs of post-dequeue time start from an offline
//! distribution and are learned online (§III.B.2): every task result adds
//! (result time − the dequeue time the server reports) to its server's
//! histogram, or, centrally queued, (result time − release time). A background
//! refresh builds a new planner from the histograms off the query path and
//! swaps it in. A server's own histogram replaces the offline CDF once it holds
//! `min_samples`; until then the pool of every server's samples does, once *it*
//! holds that many (servers alike: the pool gets there N times sooner). A
//! histogram is halved when it holds twice `min_samples`, so it tracks change
//! with a memory counted in samples, not seconds: a CDF whose tail decides a
//! fan-out-k deadline needs samples beyond its p^(1/k) quantile however slowly
//! they come ([`Handler::tail_samples`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tailor_core::dist::Cdf;
use tailor_core::latency::LatencyHistogram;
use tailor_core::pick::DistinctPicker;
use tailor_core::policy::{AnyPolicy, Job, JobId, Policy, PolicyError, PolicySpec};
use tailor_core::rng::Rng;
use tailor_core::tailguard::{
    queue_wait_quantile, AdmissionController, AdmissionError, AdmissionWindow, BudgetSplit, Planner, PlannerError,
    SequentialPlan, SharedCdf, SloClass, TailModel, WorstCaseMax,
};
use tailor_core::time::Nanos;
use tailor_core::{wire, Context};
use tokio::sync::oneshot;

use crate::clock::wall_ns;
use crate::server::{ARRIVED_AT, DEQUEUED_AT, MISSED, QUEUE_NS, SERVICE_NS, WORK_SEED};

mod admit;
mod central;
mod config;
mod dispatch;
mod plan;
#[cfg(test)]
mod tests;

use admit::*;
use central::*;
pub use config::*;
pub use plan::*;

/// How long a connection to a task server may sit unused in the client's pool before it is
/// closed (checked as often: a surplus connection lives at most twice this). Each task queued at
/// a server holds a connection, and under steady load the pool reuses the most recently returned
/// ones, so only what a burst opened beyond the usual concurrency idles: a stalled handler on a
/// loaded machine sends the arrivals it held up at once and opens hundreds. They now go within
/// seconds instead of holding a descriptor (two when the servers share the host) and buffers
/// until the handler exits. Reopening one on loopback costs a connect, ~0.1 ms, against tasks
/// of milliseconds.
const POOL_IDLE: Duration = Duration::from_secs(2);

/// Idle connections kept per task server at most: a task server serves one task at a time, so
/// more than this many of its tasks at once only happen in a burst, whose extra connections are
/// closed as they come back instead of being pooled.
const POOL_MAX_IDLE_PER_SERVER: usize = 64;

/// A task server's answer body is empty, or one line saying why it refused; more is cut off
/// as an error rather than buffered.
const MAX_TASK_BODY: usize = 4096;

/// Sub-streams of a query's seed ([`QuerySpec::seed`]): one for its servers,
/// one per server for that task's work, so neither shifts the other.
const PICK_STREAM: u64 = 1;

const WORK_STREAM: u64 = 1 << 32;

/// A query as the caller describes it.
#[derive(Clone, Copy, Debug)]
pub struct QuerySpec {
    pub class: u8,
    pub fanout: u32,
    /// Overrides the class SLO for this query (per-query SLOs).
    pub slo_ns: Option<Nanos>,
    /// Where the query's random draws come from: with a seed, its servers and
    /// each task's service time are functions of it, so a load generator that
    /// replays the same seeds gives every queue policy the same queries on the
    /// same servers with the same work (common random numbers: policies compared
    /// on one input, not on two samples). Without one, the handler's own stream.
    pub seed: Option<u64>,
}

/// A query that ran.
#[derive(Clone, Copy, Debug)]
pub struct QueryOutcome {
    /// t0 to the slowest task's result, at the handler.
    pub latency_ns: Nanos,
    /// t_D − t0 (negative: infeasible even unloaded).
    pub budget_ns: i64,
    pub tasks_missed: u32,
    /// t0 (wall clock, ns) and the slowest task's timeline, for tracing outliers.
    pub t0_wall: Nanos,
    pub slowest: TaskTrace,
}

/// One task's timeline (wall-clock ns, one host): what a slow query spent where.
#[derive(Clone, Copy, Debug, Default)]
pub struct TaskTrace {
    pub server: usize,
    /// Handler sent the request (central queuing: after the handler's queue).
    pub sent_at: Nanos,
    /// Arrived at the server, left its queue (0 if the server did not say).
    pub arrived_at: Nanos,
    pub dequeued_at: Nanos,
    /// The service time drawn (scaled).
    pub service_ns: Nanos,
    /// The handler had the result.
    pub received_at: Nanos,
}

impl TaskTrace {
    /// Send → arrival at the server.
    pub fn dispatch_ns(&self) -> i64 {
        self.arrived_at as i64 - self.sent_at as i64
    }
    /// Arrival → dequeue (the queue wait at the server).
    pub fn queue_ns(&self) -> i64 {
        self.dequeued_at as i64 - self.arrived_at as i64
    }
    /// Result at the handler − (dequeue + service): the return trip plus timer lateness.
    pub fn return_ns(&self) -> i64 {
        self.received_at as i64 - (self.dequeued_at + self.service_ns) as i64
    }
}

/// Why one task of a query got no result from its task server.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The task's request could not be built (a header value the handler made is invalid).
    #[error("{0}")]
    Request(#[source] http::Error),
    /// No response: the server could not be reached or the connection failed.
    #[error("{0}")]
    Send(#[source] hyper_util::client::legacy::Error),
    /// The response body could not be read to its end (or is larger than a task's answer).
    #[error("HTTP {status}: reading the response body: {source}")]
    Body {
        status: http::StatusCode,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server answered with an error status; `body` is its explanation.
    #[error("HTTP {status}: {body}")]
    Status { status: http::StatusCode, body: String },
    /// The task's own tokio task ended without a result (it panicked).
    #[error("{0}")]
    Join(#[source] tokio::task::JoinError),
}

/// Why a query did not run.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(
        "rejected by admission control: task deadline-miss ratio {ratio:.4} over the window exceeds R_th = {r_th}"
    )]
    Rejected { ratio: f64, r_th: f64 },
    #[error(
        "rejected by admission control: task server {server}'s queue ahead of this query's task holds {wait_ms:.2} ms of work (at the class's SLO percentile), past its queuing budget of {slack_ms:.2} ms"
    )]
    WouldMiss { server: usize, wait_ms: f64, slack_ms: f64 },
    #[error("class {class} does not exist: the handler has {classes} classes (0-based)")]
    NoSuchClass { class: u8, classes: usize },
    #[error("fanout {fanout}: must be between 1 and the {servers} task servers")]
    BadFanout { fanout: u32, servers: usize },
    #[error("task server {server}: {error}")]
    Task {
        server: SocketAddr,
        #[source]
        error: TaskError,
    },
    #[error("no result from task server(s) {} within {waited_ms:.0} ms (the query timeout); the query ended without them", servers.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))]
    Timeout { servers: Vec<SocketAddr>, waited_ms: f64 },
    #[error("sequential request plan: {0}")]
    Plan(String),
}

/// Handler counters.
#[derive(Debug, Default)]
pub struct HandlerStats {
    pub admitted: AtomicU64,
    pub rejected: AtomicU64,
    /// Of which: rejected because a task would wait past its deadline (`reject_late`).
    pub rejected_late: AtomicU64,
    pub tasks: AtomicU64,
    pub tasks_missed: AtomicU64,
    pub task_errors: AtomicU64,
    /// Queries that ended at their timeout ([`HandlerConfig::query_timeout_slos`]).
    pub timeouts: AtomicU64,
    pub planner_refreshes: AtomicU64,
    /// At the last refresh: servers planned with their own learned CDF, and with
    /// the pool's (the rest use the offline CDF).
    pub servers_on_own_cdf: AtomicU64,
    pub servers_on_pooled_cdf: AtomicU64,
    /// Sequential plans computed (background refreshes, `prepare_request`, cold misses).
    pub plan_computes: AtomicU64,
    /// Their total compute time, ns.
    pub plan_compute_ns: AtomicU64,
    /// Plans a request had to compute itself because its shape was never
    /// prepared: the only time a request waits for a plan (once per shape).
    pub plan_cold_misses: AtomicU64,
}

pub struct Handler {
    cfg: HandlerConfig,
    client: Client<HttpConnector, Empty<Bytes>>,
    planner: Mutex<Planner>,
    learned: Vec<Mutex<LatencyHistogram>>,
    admission: Option<Admission>,
    central: Vec<Mutex<CentralQueue>>,
    /// The servers of each query, one picker per class ([`DistinctPicker`]: the
    /// simulator picks the same way).
    picker: Mutex<(Rng, Vec<DistinctPicker>)>,
    /// Sequential-request budget plans, per (class, fan-outs, split); replaced
    /// (never cleared) at each refresh, so a request always finds the latest.
    plans: Mutex<Plans>,
    /// x_p^u of the server sets queries picked, keyed [class, sorted servers...], on the CDFs of
    /// `plans.cdfs` (cleared when those are replaced; bounded).
    placement_tails: Mutex<HashMap<Vec<u16>, Nanos>>,
    /// Per-task overhead: post-dequeue time − the service time the server
    /// reports (loopback HTTP both ways, tokio scheduling, timer lateness).
    /// What the simulator has to add to the service time to see what the
    /// handler sees (docs/fanout.md, "Real vs simulated").
    overhead: Mutex<LatencyHistogram>,
    /// Of which: handler send → server arrival (wall clocks; same host).
    dispatch: Mutex<LatencyHistogram>,
    /// Per server: the tasks this handler sent there (or queued for it) that have
    /// not returned, as (queue key → count); the key is what the scheme's queue
    /// orders by (deadline, class or nothing). For predicted misses and `reject_late`.
    outstanding: Vec<Mutex<BTreeMap<Nanos, u32>>>,
    /// Per server, the mean and variance of its offline post-dequeue CDF (until it has
    /// learned its own), ns and ns².
    offline_moments: Vec<(f64, f64)>,
    /// Mean and variance of the pooled learned CDF as of the last refresh, in ns and ns²
    /// as f64 bits (mean 0: not learned yet).
    pooled_moments: (AtomicU64, AtomicU64),
    pub stats: HandlerStats,
}

/// Summary of the per-task overhead the handler measured.
#[derive(Clone, Debug, Default)]
pub struct Overhead {
    pub tasks: f64,
    pub mean_ns: f64,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    /// The dispatch part (send at the handler → arrival at the server), mean and p99.
    pub dispatch_mean_ns: f64,
    pub dispatch_p99_ns: Nanos,
    /// Both parts' samples together (dispatch and after service, equally
    /// weighted): the distribution of one network hop in the simulated side.
    pub per_hop: Option<Arc<LatencyHistogram>>,
}

/// A request of sequential queries that ran.
#[derive(Clone, Debug)]
pub struct RequestOutcome {
    pub latency_ns: Nanos,
    /// T_b^R = request SLO − x_p^{R,u}.
    pub budget_ns: i64,
    pub tasks_missed: u32,
    /// The plan the request ran with.
    pub plan: Arc<SequentialPlan>,
    /// What each query was given, in order.
    pub queries: Vec<QueryDeadline>,
}

/// One sequential query's deadline, as the request computed it.
#[derive(Clone, Copy, Debug)]
pub struct QueryDeadline {
    /// When the query started (after the previous one answered).
    pub start_ns: Nanos,
    /// The task deadline it carried: start + B_i (start when B_i < 0).
    pub deadline_ns: Nanos,
    /// Pre-dequeuing time the earlier queries spent (Σ_{j<i} t_pr,j).
    pub used_before_ns: Nanos,
    /// This query's own pre-dequeuing time t_pr,i.
    pub used_ns: Nanos,
}

/// Offline estimate helper: a [`Cdf`] as the planner's shared type.
pub fn shared_cdf<C: Cdf + Send + Sync + 'static>(c: C) -> SharedCdf {
    Arc::new(c)
}

impl Handler {
    /// Builds a handler; call [`Handler::spawn_refresher`] to learn CDFs online.
    pub fn new(cfg: HandlerConfig) -> Result<Arc<Handler>, crate::Error> {
        let servers = cfg.servers.len();
        if servers == 0 {
            return Err(HandlerConfigError::NoServers.into());
        }
        let per_server = |field: &str, entries: usize| -> Result<(), HandlerConfigError> {
            if entries == 0 || entries == servers {
                Ok(())
            } else {
                Err(HandlerConfigError::PerServerCount { field: field.to_string(), entries, servers })
            }
        };
        let positive = |field: &str, weights: &[f64]| -> Result<(), HandlerConfigError> {
            match weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
                Some(&weight) => Err(HandlerConfigError::BadWeight { field: field.to_string(), weight }),
                None => Ok(()),
            }
        };
        per_server("server_weights", cfg.server_weights.len())?;
        per_server("offline_per_server", cfg.offline_per_server.len())?;
        positive("server_weights", &cfg.server_weights)?;
        if !cfg.class_server_weights.is_empty() && cfg.class_server_weights.len() != cfg.classes.len() {
            let (entries, classes) = (cfg.class_server_weights.len(), cfg.classes.len());
            return Err(HandlerConfigError::PerClassCount { entries, classes }.into());
        }
        for (c, w) in cfg.class_server_weights.iter().enumerate() {
            per_server(&format!("class_server_weights[{c}]"), w.len())?;
            positive(&format!("class_server_weights[{c}]"), w)?;
        }
        let n = servers;
        let offline: Vec<SharedCdf> = (0..n).map(|s| cfg.offline_of(s)).collect();
        let mut planner = Planner::new(cfg.classes.clone(), TailModel::PerServer(offline.clone()))
            .map_err(HandlerConfigError::Planner)?;
        planner.precompute(n as u32);
        let admission = match cfg.admission {
            Some(a) => {
                let controller = || -> Result<Mutex<AdmissionController>, crate::Error> {
                    let c =
                        AdmissionController::with_window(a.r_th, a.window).map_err(HandlerConfigError::Admission)?;
                    Ok(Mutex::new(if a.proportional { c.with_proportional() } else { c }))
                };
                let count = if a.per_server { n } else { 1 };
                Some(Admission { controllers: (0..count).map(|_| controller()).collect::<Result<_, _>>()? })
            }
            None => None,
        };
        let central = if cfg.queuing == Queuing::Central {
            (0..n)
                .map(|i| {
                    let policy = cfg
                        .scheme
                        .queue_policy()
                        .build_any(1, cfg.seed ^ i as u64)
                        .map_err(HandlerConfigError::QueuePolicy)?;
                    Ok(Mutex::new(CentralQueue { policy, waiting: HashMap::new(), released: None, next_id: 0 }))
                })
                .collect::<Result<Vec<_>, crate::Error>>()?
        } else {
            Vec::new()
        };
        // The timer is what makes the idle timeout act: without one hyper-util only drops an
        // expired connection when a checkout pops it, and checkouts pop the most recently
        // returned, so the surplus a burst opened stayed open for good (docs/failure-modes.md,
        // "Soak").
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(POOL_MAX_IDLE_PER_SERVER)
            .build_http();
        Ok(Arc::new(Handler {
            learned: (0..n).map(|_| Mutex::new(LatencyHistogram::new())).collect(),
            planner: Mutex::new(planner),
            plans: Mutex::new(Plans { cdfs: Arc::new(offline.clone()), entries: Vec::new() }),
            placement_tails: Mutex::new(HashMap::new()),
            overhead: Mutex::new(LatencyHistogram::new()),
            dispatch: Mutex::new(LatencyHistogram::new()),
            outstanding: (0..n).map(|_| Mutex::new(BTreeMap::new())).collect(),
            // One pair per distinct CDF: servers sharing the common one share its moments.
            offline_moments: {
                let moments = |c: &SharedCdf| {
                    let xs: Vec<f64> = (0..1000).map(|i| c.quantile((i as f64 + 0.5) / 1000.0) as f64).collect();
                    let mean = xs.iter().sum::<f64>() / 1000.0;
                    (mean, xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / 1000.0)
                };
                let common = moments(&cfg.offline);
                offline.iter().map(|c| if Arc::ptr_eq(c, &cfg.offline) { common } else { moments(c) }).collect()
            },
            pooled_moments: (AtomicU64::new(0), AtomicU64::new(0)),
            admission,
            central,
            picker: Mutex::new((Rng::new(cfg.seed), {
                let picker = |w: &Vec<f64>| {
                    if w.is_empty() {
                        DistinctPicker::uniform(n)
                    } else {
                        DistinctPicker::weighted(w.clone())
                    }
                };
                let default = picker(&cfg.server_weights);
                (0..cfg.classes.len())
                    .map(|c| match cfg.class_server_weights.get(c) {
                        Some(w) if !w.is_empty() => picker(w),
                        _ => default.clone(),
                    })
                    .collect()
            })),
            client,
            cfg,
            stats: HandlerStats::default(),
        }))
    }

    pub fn config(&self) -> &HandlerConfig {
        &self.cfg
    }

    /// Task servers this handler sends to.
    pub fn server_count(&self) -> usize {
        self.cfg.servers.len()
    }

    /// The per-task overhead measured so far (post-dequeue time − reported service time).
    pub fn overhead(&self) -> Overhead {
        let h = self.overhead.lock().expect("overhead poisoned");
        let d = self.dispatch.lock().expect("dispatch poisoned");
        Overhead {
            tasks: h.count(),
            mean_ns: h.mean(),
            p50_ns: h.quantile(0.5),
            p99_ns: h.quantile(0.99),
            dispatch_mean_ns: d.mean(),
            dispatch_p99_ns: d.quantile(0.99),
            per_hop: (!h.is_empty() && !d.is_empty()).then(|| {
                // Equal weights, whatever the counts (dispatch is only recorded when the clocks agree).
                let mut m = LatencyHistogram::new();
                for (x, n) in [(&*h, h.count()), (&*d, d.count())] {
                    let mut part = x.clone();
                    part.decay(1.0 / n.max(1.0));
                    m.merge(&part);
                }
                Arc::new(m)
            }),
        }
    }

    /// Forgets the overhead measured so far (e.g. at the end of a warm-up).
    pub fn reset_overhead(&self) {
        self.overhead.lock().expect("overhead poisoned").clear();
        self.dispatch.lock().expect("dispatch poisoned").clear();
    }

    /// The CDF the planner currently uses for server `s` (for reports).
    pub fn learned_quantile(&self, s: usize, p: f64) -> Nanos {
        self.learned[s].lock().expect("histogram poisoned").quantile(p)
    }
}
