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
use tailor_core::policy::{AnyPolicy, Job, JobId, Policy, PolicySpec};
use tailor_core::rng::Rng;
use tailor_core::tailguard::{
    queue_wait_quantile, AdmissionController, AdmissionWindow, BudgetSplit, Planner, PlannerError, SequentialPlan,
    SharedCdf, SloClass, TailModel, WorstCaseMax,
};
use tailor_core::time::Nanos;
use tailor_core::{wire, Context};
use tokio::sync::oneshot;

use crate::clock::wall_ns;
use crate::server::{ARRIVED_AT, DEQUEUED_AT, MISSED, QUEUE_NS, SERVICE_NS, WORK_SEED};

/// The tasks this handler has at a server (`outstanding`: queue key → count)
/// that a new task keyed `key` would queue behind: ties count as ahead. One
/// count for the dispatch-time prediction and for `reject_late`.
fn tasks_ahead(outstanding: &BTreeMap<Nanos, u32>, key: Nanos) -> u32 {
    outstanding.range(..=key).map(|(_, &c)| c).sum()
}

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

/// Which deadline the tasks carry and how task queues order them (TailGuard §III.A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// EDF on t0 + SLO − x_p^u(k_f): TailGuard.
    TfEdfq,
    /// EDF on t0 + SLO.
    TEdfq,
    /// Strict class priority, FIFO within a class.
    Priq,
    /// First in, first out.
    Fifo,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::TfEdfq, Scheme::TEdfq, Scheme::Priq, Scheme::Fifo];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::TfEdfq => "TF-EDFQ",
            Scheme::TEdfq => "T-EDFQ",
            Scheme::Priq => "PRIQ",
            Scheme::Fifo => "FIFO",
        }
    }

    /// The core policy a task queue runs for this scheme.
    pub fn queue_policy(self) -> PolicySpec {
        match self {
            Scheme::TfEdfq | Scheme::TEdfq => PolicySpec::Edf,
            Scheme::Priq => PolicySpec::Priq,
            Scheme::Fifo => PolicySpec::Fifo,
        }
    }

    pub fn parse(s: &str) -> Result<Scheme, String> {
        match s.to_ascii_lowercase().as_str() {
            "tf-edfq" | "tailguard" => Ok(Scheme::TfEdfq),
            "t-edfq" => Ok(Scheme::TEdfq),
            "priq" => Ok(Scheme::Priq),
            "fifo" => Ok(Scheme::Fifo),
            other => Err(format!("scheme `{other}`: expected tf-edfq, t-edfq, priq or fifo")),
        }
    }
}

/// Where tasks wait (TailGuard Fig. 2 allows both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Queuing {
    /// Tasks go to the servers at once and queue there.
    AtServers,
    /// One queue per server in the handler; a task is released when its server is free.
    Central,
}

/// Admission control settings.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionConfig {
    pub r_th: f64,
    /// Which outcomes the ratio is over: the last N task outcomes (TailGuard §IV.D: 100,000,
    /// 1,000 queries of fanout 100; a rejected query's tasks move it too), those of a time
    /// window (§III.C), or both, whichever holds fewer (`tailor-fanout handler`'s default:
    /// 100,000 within 1 s). Core's [`AdmissionWindow`].
    pub window: AdmissionWindow,
    /// Count a task as missed when it is dispatched if the work queued ahead of
    /// it at its server already overruns its deadline, instead of when the miss
    /// is observed (at the deadline with central queuing, with the result at
    /// the servers). See [`Handler::expected_wait`]. Off: the paper's rule.
    pub predict: bool,
    /// Admit the share R_th / ratio of queries while the ratio exceeds R_th,
    /// instead of none (core's `AdmissionController::with_proportional`).
    pub proportional: bool,
    /// One miss ratio per server instead of one for the handler: a query is rejected
    /// while any server it picked misses more than R_th of its tasks. With servers
    /// loaded unevenly (a placement, slower servers) the global ratio is an average
    /// over cool and hot servers, and the hot ones overrun before it moves.
    pub per_server: bool,
    /// Also reject a query at once when one of its tasks would wait past its deadline at
    /// the server it picked: the work queued ahead of the task there (in the queue's
    /// order), at the query class's SLO percentile, overruns its budget. The ratio reacts
    /// to misses after a window of them; this turns away only the queries that meet a
    /// long queue, when they meet it. See [`Handler::wait_quantile`].
    pub reject_late: bool,
}

/// The admission controllers: one for the handler, or one per server.
struct Admission {
    controllers: Vec<Mutex<AdmissionController>>,
}

impl Admission {
    /// The controller that counts server `s`'s tasks.
    fn of(&self, s: usize) -> std::sync::MutexGuard<'_, AdmissionController> {
        let i = if self.controllers.len() == 1 { 0 } else { s };
        self.controllers[i].lock().expect("admission poisoned")
    }

    /// Admits a query touching `servers` (every server when `None`) at `now`, or returns
    /// the miss ratio that refused it and R_th. Per server, every server the query
    /// touches must admit it (each by its own ratio and, with `proportional`, its own
    /// share): a query's slowest task decides its latency. Measured against two looser
    /// rules (docs/fanout.md, "Per-server admission").
    /// A query refused by a count window moves it by its `tasks` (per server: by the one
    /// task the refusing server would have run).
    fn admit(&self, now: Nanos, servers: Option<&[usize]>, tasks: u64) -> Result<(), (f64, f64)> {
        let n = self.controllers.len();
        let tasks_each = if n > 1 { 1 } else { tasks };
        let check = |s: usize| {
            let mut a = self.of(s);
            if a.admit_query(now, tasks_each) {
                Ok(())
            } else {
                Err((a.miss_ratio(now), a.threshold()))
            }
        };
        match servers {
            Some(list) if n > 1 => list.iter().try_for_each(|&s| check(s)),
            _ => (0..n).try_for_each(check),
        }
    }
}

/// Everything a handler needs.
#[derive(Clone)]
pub struct HandlerConfig {
    pub scheme: Scheme,
    pub queuing: Queuing,
    pub classes: Vec<SloClass>,
    pub servers: Vec<SocketAddr>,
    /// Relative chance of each server being picked (empty: uniform).
    pub server_weights: Vec<f64>,
    /// Per class, its own placement: each server's relative chance for that
    /// class's queries (empty, or an empty entry: `server_weights`). TailGuard's
    /// testbed sent 80% of class A to one cluster.
    pub class_server_weights: Vec<Vec<f64>>,
    /// The offline estimate of every server's post-dequeue time CDF.
    pub offline: SharedCdf,
    /// Per server, an offline estimate of its own (heterogeneous servers whose
    /// speeds are known); empty: `offline` for every server.
    pub offline_per_server: Vec<SharedCdf>,
    pub admission: Option<AdmissionConfig>,
    /// How often the planner is rebuilt from the learned CDFs.
    pub refresh: Duration,
    /// Samples a learned CDF (a server's own, or the pool of all servers') needs
    /// before it replaces the offline CDF; see [`Handler::tail_samples`].
    pub min_samples: f64,
    pub seed: u64,
    /// A query whose tasks are not all back within this many times its SLO ends with
    /// [`QueryError::Timeout`] naming the servers that did not answer (a task server that
    /// hangs must not hold queries, connections and bookkeeping without bound). `None`:
    /// wait however long (measurement runs, where every latency counts).
    pub query_timeout_slos: Option<f64>,
}

impl HandlerConfig {
    /// Server `s`'s offline CDF: its own if given, else the common one.
    pub fn offline_of(&self, s: usize) -> SharedCdf {
        self.offline_per_server.get(s).cloned().unwrap_or_else(|| self.offline.clone())
    }
}

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
    #[error("task server {server}: {message}")]
    Task { server: SocketAddr, message: String },
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

/// Grid cells of a sequential plan's convolution (core's `sum_quantile`). Cost
/// is O(grid²) flops whatever M is; 2048 keeps one plan to a few ms (core's
/// default 8192 took tens of ms), and the bracket on x_p^{R,u} stays within
/// M·ΣT_i/2048, and the plan uses its upper end (the conservative side).
pub const PLAN_GRID: usize = 2048;

/// At most this many request shapes (class, fan-outs, split) get a plan: each
/// one is recomputed at every refresh, so the refresh cost is bounded too.
pub const MAX_PLANS: usize = 64;

/// The budget plans of the request shapes seen so far, and the per-server CDFs
/// they were computed from. Requests only look plans up here (a linear scan of
/// at most [`MAX_PLANS`] entries, no allocation); plans are computed with no
/// lock held and swapped in.
struct Plans {
    cdfs: Arc<Vec<SharedCdf>>,
    entries: Vec<(PlanKey, Arc<SequentialPlan>)>,
}

impl Plans {
    fn find(&self, class: u8, fanouts: &[u32], proportional: bool) -> Option<Arc<SequentialPlan>> {
        self.entries
            .iter()
            .find(|((c, ks, p), _)| *c == class && *p == proportional && ks[..] == *fanouts)
            .map(|(_, plan)| plan.clone())
    }
}

/// One server's queue in the handler (central queuing).
struct CentralQueue {
    policy: AnyPolicy,
    waiting: HashMap<JobId, oneshot::Sender<()>>,
    released: Option<JobId>,
    next_id: JobId,
}

/// A task's count in [`Handler::outstanding`], removed when the task ends however it ends.
struct Outstanding {
    handler: Arc<Handler>,
    server: usize,
    key: Nanos,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        let mut out = self.handler.outstanding[self.server].lock().expect("outstanding poisoned");
        if let Some(c) = out.get_mut(&self.key) {
            *c -= 1;
            if *c == 0 {
                out.remove(&self.key);
            }
        }
    }
}

/// A task's place in a central queue while it waits or runs. Dropped before its result came
/// back (its query timed out or was dropped), it takes the task out: a waiting one leaves the
/// queue and admission control's count of announced tasks (with no outcome: it never ran; a
/// miss if its deadline had passed, counted then), a released one frees its server for the
/// next. Without this a task aborted after its release would hold its server's queue forever.
/// `id` is `JobId::MAX` once the task has completed normally.
struct CentralSlot {
    handler: Arc<Handler>,
    server: usize,
    id: JobId,
    deadline: Nanos,
    /// Announced to admission control (`task_queued`) and not yet reported dequeued.
    announced: bool,
    released: bool,
}

impl Drop for CentralSlot {
    fn drop(&mut self) {
        let h = &self.handler;
        if self.announced {
            if let Some(a) = &h.admission {
                // Not an on-time outcome: counting the tasks of failed queries as met deadlines
                // diluted the miss ratio (a dead server fails its queries at once and their
                // siblings leave the queues here), and a burst on the healthy servers could
                // then go unrejected (docs/failure-modes.md, "Soak").
                a.of(self.server).task_withdrawn(wall_ns(), self.deadline);
            }
        }
        if self.id == JobId::MAX {
            return;
        }
        let mut q = h.central[self.server].lock().expect("central queue poisoned");
        if self.released || q.released == Some(self.id) {
            q.policy.complete(wall_ns(), self.id);
            q.released = None;
            h.release_next(&mut q);
        } else {
            // Still waiting: drop its sender; `release_next` completes it when its turn comes.
            q.waiting.remove(&self.id);
        }
    }
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

/// (class, fan-outs, proportional split?) of a cached sequential plan.
type PlanKey = (u8, Vec<u32>, bool);

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

impl Handler {
    /// Builds a handler; call [`Handler::spawn_refresher`] to learn CDFs online.
    pub fn new(cfg: HandlerConfig) -> Result<Arc<Handler>, crate::Error> {
        if cfg.servers.is_empty() {
            return Err(crate::Error::Config("the handler needs at least one task server".into()));
        }
        if !cfg.server_weights.is_empty() && cfg.server_weights.len() != cfg.servers.len() {
            return Err(crate::Error::Config(format!(
                "server_weights has {} entries for {} servers",
                cfg.server_weights.len(),
                cfg.servers.len()
            )));
        }
        if !cfg.offline_per_server.is_empty() && cfg.offline_per_server.len() != cfg.servers.len() {
            return Err(crate::Error::Config(format!(
                "offline_per_server has {} entries for {} servers",
                cfg.offline_per_server.len(),
                cfg.servers.len()
            )));
        }
        if let Some(w) = cfg.server_weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
            return Err(crate::Error::Config(format!("server_weights: {w} is not a positive weight")));
        }
        if !cfg.class_server_weights.is_empty() && cfg.class_server_weights.len() != cfg.classes.len() {
            return Err(crate::Error::Config(format!(
                "class_server_weights has {} entries for {} classes",
                cfg.class_server_weights.len(),
                cfg.classes.len()
            )));
        }
        for (c, w) in cfg.class_server_weights.iter().enumerate() {
            if !w.is_empty() && w.len() != cfg.servers.len() {
                return Err(crate::Error::Config(format!(
                    "class_server_weights[{c}] has {} entries for {} servers",
                    w.len(),
                    cfg.servers.len()
                )));
            }
            if let Some(x) = w.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(crate::Error::Config(format!("class_server_weights[{c}]: {x} is not a positive weight")));
            }
        }
        let n = cfg.servers.len();
        let offline: Vec<SharedCdf> = (0..n).map(|s| cfg.offline_of(s)).collect();
        let mut planner = Planner::new(cfg.classes.clone(), TailModel::PerServer(offline.clone()))
            .map_err(|e| crate::Error::Config(e.to_string()))?;
        planner.precompute(n as u32);
        let admission = match cfg.admission {
            Some(a) => {
                let controller = || -> Result<Mutex<AdmissionController>, crate::Error> {
                    let c = AdmissionController::with_window(a.r_th, a.window)
                        .map_err(|e| crate::Error::Config(format!("admission: {e}")))?;
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
                        .map_err(|e| crate::Error::Config(e.to_string()))?;
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

    /// Rebuilds the planner from the learned CDFs every `cfg.refresh` (tokio
    /// task). The rebuild (and the sequential plans, ms each) runs on the
    /// blocking pool so it never occupies a worker that serves queries.
    pub fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.cfg.refresh;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(h) = weak.upgrade() else { return };
                let _ = tokio::task::spawn_blocking(move || {
                    // Milliseconds of planning: never in the RT band the query path may run in.
                    crate::timer::normal_priority();
                    h.refresh_planner()
                })
                .await;
            }
        })
    }

    /// Computes one plan on `cdfs` (no lock held) and counts its cost.
    fn compute_plan(&self, cdfs: &[SharedCdf], key: &PlanKey) -> Result<SequentialPlan, PlannerError> {
        let started = Instant::now();
        let (class, fanouts, proportional) = key;
        let split = if *proportional { BudgetSplit::Proportional } else { BudgetSplit::Equal };
        let queries: Vec<WorstCaseMax<SharedCdf>> =
            fanouts.iter().map(|&k| WorstCaseMax { servers: cdfs, k }).collect();
        let plan = SequentialPlan::new(self.cfg.classes[*class as usize], &queries, split, PLAN_GRID);
        self.stats.plan_computes.fetch_add(1, Ordering::Relaxed);
        self.stats.plan_compute_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        plan
    }

    /// Checks a request shape, computes its plan (no lock held) if it has none
    /// yet, and keeps it refreshed from then on. Call it for every request
    /// shape before sending load, so no request computes a plan.
    pub fn prepare_request(
        &self,
        class: u8,
        fanouts: &[u32],
        split: BudgetSplit,
    ) -> Result<Arc<SequentialPlan>, QueryError> {
        let n = self.cfg.servers.len();
        if class as usize >= self.cfg.classes.len() {
            return Err(QueryError::NoSuchClass { class, classes: self.cfg.classes.len() });
        }
        if fanouts.is_empty() {
            return Err(QueryError::Plan("a request needs at least one query (fan-outs are empty)".into()));
        }
        if let Some(&k) = fanouts.iter().find(|&&k| k == 0 || k as usize > n) {
            return Err(QueryError::BadFanout { fanout: k, servers: n });
        }
        let proportional = split == BudgetSplit::Proportional;
        let cdfs = {
            let plans = self.plans.lock().expect("plans poisoned");
            if let Some(p) = plans.find(class, fanouts, proportional) {
                return Ok(p);
            }
            if plans.entries.len() >= MAX_PLANS {
                return Err(QueryError::Plan(format!(
                    "more than {MAX_PLANS} request shapes (class, fan-outs, split): each is re-planned at every refresh; use fewer"
                )));
            }
            plans.cdfs.clone()
        };
        let key = (class, fanouts.to_vec(), proportional);
        let plan = Arc::new(self.compute_plan(&cdfs, &key).map_err(|e| QueryError::Plan(e.to_string()))?);
        let mut plans = self.plans.lock().expect("plans poisoned");
        // Another caller may have planned the same shape meanwhile: keep one.
        if let Some(p) = plans.find(class, fanouts, proportional) {
            return Ok(p);
        }
        if plans.entries.len() < MAX_PLANS {
            plans.entries.push((key, plan.clone()));
        }
        Ok(plan)
    }

    /// The current plan of a request shape, if it has one (a lookup only).
    pub fn current_plan(&self, class: u8, fanouts: &[u32], split: BudgetSplit) -> Option<Arc<SequentialPlan>> {
        self.plans.lock().expect("plans poisoned").find(class, fanouts, split == BudgetSplit::Proportional)
    }

    /// Samples a learned CDF needs before the planner may use it: ten beyond the
    /// quantile that decides the deadline of the largest fan-out, p^(1/k) for the
    /// strictest class percentile p (the slowest of k tasks is under x with
    /// probability F(x)^k). p = 0.99: k = 32 needs ~32,000, k = 100 ~100,000.
    pub fn tail_samples(classes: &[SloClass], max_fanout: u32) -> f64 {
        let p = classes.iter().map(|c| c.p).fold(0.0, f64::max).clamp(0.5, 0.999_999);
        10.0 / (1.0 - p.powf(1.0 / max_fanout.max(1) as f64))
    }

    /// One online update (§III.B.2): each server gets its own learned CDF if it
    /// has `min_samples`, else the pool's if that has, else the offline one.
    pub fn refresh_planner(&self) {
        let n = self.cfg.servers.len();
        let min = self.cfg.min_samples;
        let mut pool = LatencyHistogram::new();
        let own: Vec<Option<SharedCdf>> = self
            .learned
            .iter()
            .map(|h| {
                let mut h = h.lock().expect("histogram poisoned");
                pool.merge(&h);
                let cdf: Option<SharedCdf> = (h.count() >= min).then(|| Arc::new(h.snapshot()) as SharedCdf);
                if h.count() >= 2.0 * min {
                    h.decay(0.5);
                }
                cdf
            })
            .collect();
        let pooled: Option<SharedCdf> = (pool.count() >= min).then(|| Arc::new(pool.snapshot()) as SharedCdf);
        let (mean, var) = if pooled.is_some() { (pool.mean(), pool.variance()) } else { (0.0, 0.0) };
        self.pooled_moments.0.store(mean.to_bits(), Ordering::Relaxed);
        self.pooled_moments.1.store(var.to_bits(), Ordering::Relaxed);
        let on_own = own.iter().filter(|c| c.is_some()).count();
        self.stats.servers_on_own_cdf.store(on_own as u64, Ordering::Relaxed);
        self.stats
            .servers_on_pooled_cdf
            .store(if pooled.is_some() { (n - on_own) as u64 } else { 0 }, Ordering::Relaxed);
        let cdfs: Vec<SharedCdf> = own
            .into_iter()
            .enumerate()
            .map(|(s, c)| c.or_else(|| pooled.clone()).unwrap_or_else(|| self.cfg.offline_of(s)))
            .collect();
        // Built and precomputed off the lock; queries keep using the old one meanwhile.
        let Ok(mut fresh) = Planner::new(self.cfg.classes.clone(), TailModel::PerServer(cdfs.clone())) else { return };
        fresh.precompute(n as u32);
        // Same for the sequential plans: recomputed on the new CDFs with no
        // lock held; requests keep the old plans until the swap below.
        let keys: Vec<PlanKey> =
            self.plans.lock().expect("plans poisoned").entries.iter().map(|(k, _)| k.clone()).collect();
        let fresh_plans: Vec<(PlanKey, Arc<SequentialPlan>)> =
            keys.into_iter().filter_map(|k| self.compute_plan(&cdfs, &k).ok().map(|p| (k, Arc::new(p)))).collect();
        *self.planner.lock().expect("planner poisoned") = fresh;
        {
            let mut plans = self.plans.lock().expect("plans poisoned");
            plans.cdfs = Arc::new(cdfs);
            for (key, plan) in fresh_plans {
                if let Some(slot) = plans.entries.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = plan;
                }
            }
        }
        self.placement_tails.lock().expect("placement tails poisoned").clear();
        self.stats.planner_refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// Most server sets whose x_p^u is remembered between refreshes.
    const PLACEMENT_MEMO: usize = 4096;

    /// x_p^u of one query of `class` whose tasks go to exactly `servers`:
    /// TailGuard Eq. 1–2 over the query's own n(k), Π F_l(t) ≥ p, on the
    /// current CDFs. [`Handler::unloaded_tail`] is the k slowest servers'
    /// instead, which gives a query on fast servers the slow ones' budget.
    /// The same sets recur (each server at k = 1, all of them at k = N), so
    /// results are kept until the CDFs change.
    pub fn unloaded_tail_of(&self, class: u8, servers: &[usize]) -> Nanos {
        // Key: [class, the servers sorted].
        let mut key: Vec<u16> = std::iter::once(u16::from(class)).chain(servers.iter().map(|&s| s as u16)).collect();
        key[1..].sort_unstable();
        if let Some(&x) = self.placement_tails.lock().expect("placement tails poisoned").get(key.as_slice()) {
            return x;
        }
        let cdfs = self.plans.lock().expect("plans poisoned").cdfs.clone();
        let chosen: Vec<&SharedCdf> = key[1..].iter().map(|&s| &cdfs[s as usize]).collect();
        let x = tailor_core::tailguard::unloaded_quantile(&chosen, self.cfg.classes[class as usize].p);
        let mut memo = self.placement_tails.lock().expect("placement tails poisoned");
        // Only if the CDFs are still the ones used: a refresh in between cleared the memo.
        if Arc::ptr_eq(&cdfs, &self.plans.lock().expect("plans poisoned").cdfs) {
            if memo.len() >= Self::PLACEMENT_MEMO {
                memo.clear();
            }
            memo.insert(key, x);
        }
        x
    }

    /// x_p^u(k) for a class as the planner currently estimates it.
    pub fn unloaded_tail(&self, class: u8, fanout: u32) -> Nanos {
        self.planner.lock().expect("planner poisoned").unloaded_tail(class, fanout)
    }

    /// Task servers this handler sends to.
    pub fn server_count(&self) -> usize {
        self.cfg.servers.len()
    }

    /// The miss ratio the admission controller sees now (0 without admission control;
    /// per server, the highest).
    pub fn miss_ratio(&self) -> f64 {
        let Some(a) = &self.admission else { return 0.0 };
        let now = wall_ns();
        (0..a.controllers.len()).map(|s| a.of(s).miss_ratio(now)).fold(0.0, f64::max)
    }

    /// The servers of one query of `class` (validated: a class the handler has).
    fn pick_servers(&self, class: u8, k: usize, seed: Option<u64>) -> Vec<usize> {
        let mut guard = self.picker.lock().expect("picker poisoned");
        let (rng, pickers) = &mut *guard;
        let mut own;
        let rng = match seed {
            Some(seed) => {
                own = Rng::derive(seed, PICK_STREAM);
                &mut own
            }
            None => rng,
        };
        pickers[class as usize].pick(rng, k).iter().map(|&i| i as usize).collect()
    }

    /// Runs one query: admission, deadline, fan-out, merge.
    pub async fn query(self: &Arc<Self>, q: QuerySpec) -> Result<QueryOutcome, QueryError> {
        let t0 = wall_ns();
        let started = Instant::now();
        let class = self
            .cfg
            .classes
            .get(q.class as usize)
            .copied()
            .ok_or(QueryError::NoSuchClass { class: q.class, classes: self.cfg.classes.len() })?;
        let n = self.cfg.servers.len();
        if q.fanout == 0 || q.fanout as usize > n {
            return Err(QueryError::BadFanout { fanout: q.fanout, servers: n });
        }
        // Per server, the query's own servers decide: pick them first.
        let servers = self.pick_servers(q.class, q.fanout as usize, q.seed);
        if let Some(a) = &self.admission {
            if let Err((ratio, r_th)) = a.admit(t0, Some(&servers), servers.len() as u64) {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Rejected { ratio, r_th });
            }
        }
        let slo_ns = q.slo_ns.unwrap_or(class.slo_ns);
        let budget_ns = match self.cfg.scheme {
            Scheme::TEdfq => slo_ns as i64,
            _ => slo_ns as i64 - self.unloaded_tail_of(q.class, &servers) as i64,
        };
        let deadline = if budget_ns >= 0 { t0 + budget_ns as Nanos } else { t0 };
        let ctx = Context { gat: t0, deadline, class: q.class, fanout: q.fanout, hop: 1 };
        if self.cfg.admission.is_some_and(|a| a.reject_late) {
            let now = wall_ns();
            if let Some((server, wait, slack)) =
                self.late_server(&servers, self.queue_key(&ctx), now, deadline, class.p)
            {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                self.stats.rejected_late.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::WouldMiss { server, wait_ms: wait as f64 / 1e6, slack_ms: slack as f64 / 1e6 });
            }
        }
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let until = self.timeout_after(started, slo_ns);
        let (missed, _, slowest) = self.fan_out_to(ctx, servers, q.seed, until).await?;
        Ok(QueryOutcome {
            latency_ns: started.elapsed().as_nanos() as Nanos,
            budget_ns,
            tasks_missed: missed,
            t0_wall: t0,
            slowest,
        })
    }

    /// Runs one request of sequential queries with the given fan-outs under
    /// `class`'s SLO (now a request SLO), splitting the request's queuing budget
    /// T_b^R across them (TailGuard Eq. 7; core's [`SequentialPlan`]): query i
    /// gets the remaining budget times its weight share, and whatever an earlier
    /// query left unused carries forward.
    pub async fn request(
        self: &Arc<Self>,
        class: u8,
        fanouts: &[u32],
        split: BudgetSplit,
    ) -> Result<RequestOutcome, QueryError> {
        let t0 = wall_ns();
        let started = Instant::now();
        let n = self.cfg.servers.len();
        if class as usize >= self.cfg.classes.len() {
            return Err(QueryError::NoSuchClass { class, classes: self.cfg.classes.len() });
        }
        if let Some(&k) = fanouts.iter().find(|&&k| k == 0 || k as usize > n) {
            return Err(QueryError::BadFanout { fanout: k, servers: n });
        }
        let plan = match self.current_plan(class, fanouts, split) {
            Some(p) => p,
            None => {
                // A shape nobody prepared: plan it now, once (no lock held).
                self.stats.plan_cold_misses.fetch_add(1, Ordering::Relaxed);
                self.prepare_request(class, fanouts, split)?
            }
        };
        // A request's later queries pick their servers as they go: per server, every
        // server must admit it.
        if let Some(a) = &self.admission {
            if let Err((ratio, r_th)) = a.admit(t0, None, fanouts.iter().map(|&k| u64::from(k)).sum()) {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Rejected { ratio, r_th });
            }
        }
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let until = self.timeout_after(started, self.cfg.classes[class as usize].slo_ns);
        let (mut used, mut missed) = (0, 0);
        let mut queries = Vec::with_capacity(fanouts.len());
        for (i, &k) in fanouts.iter().enumerate() {
            let start = wall_ns();
            let d = plan.query_deadline(i, start, used);
            let ctx = Context { gat: t0, deadline: d.at, class, fanout: k, hop: 1 };
            let (m, pre, _) = self.fan_out(ctx, until).await?;
            queries.push(QueryDeadline { start_ns: start, deadline_ns: d.at, used_before_ns: used, used_ns: pre });
            missed += m;
            used += pre;
        }
        Ok(RequestOutcome {
            latency_ns: started.elapsed().as_nanos() as Nanos,
            budget_ns: plan.budget_ns(),
            tasks_missed: missed,
            plan,
            queries,
        })
    }

    /// Dispatches `ctx.fanout` tasks with `ctx`'s deadline and waits for all.
    /// Returns (tasks that missed, the query's pre-dequeuing time: the longest
    /// time any of its tasks waited before being dequeued, the slowest task's timeline).
    async fn fan_out(
        self: &Arc<Self>,
        ctx: Context,
        until: Option<Instant>,
    ) -> Result<(u32, Nanos, TaskTrace), QueryError> {
        let servers = self.pick_servers(ctx.class, ctx.fanout as usize, None);
        self.fan_out_to(ctx, servers, None, until).await
    }

    /// When a query that started at `started` with SLO `slo_ns` times out, if it can.
    fn timeout_after(&self, started: Instant, slo_ns: Nanos) -> Option<Instant> {
        self.cfg.query_timeout_slos.map(|m| started + Duration::from_nanos((slo_ns as f64 * m).min(1e18) as u64))
    }

    /// [`Handler::fan_out`] to servers already picked. With the query's
    /// `seed`, each task carries a work seed derived from it and its server.
    /// Ends at the first task error, or at `until` with [`QueryError::Timeout`]: the tasks
    /// still running are aborted, and their guards undo what they had registered.
    async fn fan_out_to(
        self: &Arc<Self>,
        ctx: Context,
        servers: Vec<usize>,
        seed: Option<u64>,
        until: Option<Instant>,
    ) -> Result<(u32, Nanos, TaskTrace), QueryError> {
        let header = wire::encode(&ctx);
        let now = wall_ns();
        let key = self.queue_key(&ctx);
        // Which tasks are already known to miss (predicted misses; empty unless `predict`).
        let predict = self.cfg.admission.is_some_and(|a| a.predict);
        let mut predicted = vec![false; servers.len()];
        for (i, &s) in servers.iter().enumerate() {
            let mut out = self.outstanding[s].lock().expect("outstanding poisoned");
            if predict {
                let ahead = tasks_ahead(&out, key);
                predicted[i] = now.saturating_add(self.expected_wait(s, ahead)) > ctx.deadline;
            }
            *out.entry(key).or_default() += 1;
        }
        if let Some(a) = &self.admission {
            for (&s, &known) in servers.iter().zip(&predicted) {
                let mut a = a.of(s);
                // Centrally queued tasks are announced by `run_task` as they join the queue.
                if known {
                    a.record_task(now, true);
                }
            }
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, (&s, &known)) in servers.iter().zip(&predicted).enumerate() {
            let h = self.clone();
            let work_seed = seed.map(|q| Rng::derive(q, WORK_STREAM + s as u64).next_u64());
            // Made here and moved in: dropped however the task ends, with its result or aborted
            // with the query, even before it first ran (a sibling's error aborts it unpolled).
            let outstanding = Outstanding { handler: h.clone(), server: s, key };
            set.spawn(async move {
                let _outstanding = outstanding;
                (i, h.run_task(s, ctx, header, work_seed, known, now).await)
            });
        }
        let (mut missed, mut pre) = (0u32, 0);
        let mut slowest = TaskTrace::default();
        let mut answered = vec![false; servers.len()];
        loop {
            let next = match until {
                Some(t) => match tokio::time::timeout_at(t.into(), set.join_next()).await {
                    Ok(next) => next,
                    Err(_) => return Err(self.timed_out(&servers, &answered, &predicted, now)),
                },
                None => set.join_next().await,
            };
            match next {
                None => return Ok((missed, pre, slowest)),
                Some(Ok((i, Ok((m, p, t))))) => {
                    answered[i] = true;
                    missed += u32::from(m);
                    pre = pre.max(p);
                    if t.received_at >= slowest.received_at {
                        slowest = t;
                    }
                }
                // The query has failed: the other tasks are aborted as `set` drops.
                Some(Ok((_, Err(e)))) => return Err(e),
                Some(Err(e)) => {
                    let server = servers.iter().zip(&answered).find(|(_, a)| !**a).map_or(0, |(s, _)| *s);
                    return Err(QueryError::Task { server: self.cfg.servers[server], message: e.to_string() });
                }
            }
        }
    }

    /// A query's timeout: its unanswered tasks count as missed for admission control (they
    /// were not back by their deadline, which lies before the timeout) unless counted at
    /// dispatch already (predicted), and the error names their servers. Centrally queued, a
    /// task released on time has its outcome counted with its result: the hung server's
    /// silence is that outcome (missed), which is what lets the ratio see a server that takes
    /// tasks and never answers.
    fn timed_out(&self, servers: &[usize], answered: &[bool], predicted: &[bool], fanned_at: Nanos) -> QueryError {
        let pending: Vec<usize> = (0..servers.len()).filter(|&i| !answered[i]).collect();
        self.stats.task_errors.fetch_add(pending.len() as u64, Ordering::Relaxed);
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        if let Some(a) = &self.admission {
            for &i in pending.iter().filter(|&&i| !predicted[i]) {
                a.of(servers[i]).record_task(wall_ns(), true);
            }
        }
        QueryError::Timeout {
            servers: pending.iter().map(|&i| self.cfg.servers[servers[i]]).collect(),
            waited_ms: wall_ns().saturating_sub(fanned_at) as f64 / 1e6,
        }
    }

    /// Tasks sent (or queued here) and not yet returned, over every server.
    pub fn in_flight_tasks(&self) -> u64 {
        self.outstanding
            .iter()
            .map(|o| o.lock().expect("outstanding poisoned").values().map(|&c| u64::from(c)).sum::<u64>())
            .sum()
    }

    /// Tasks waiting in the handler's central queues (0 when queuing at the servers).
    pub fn central_waiting(&self) -> u64 {
        self.central.iter().map(|q| q.lock().expect("central queue poisoned").waiting.len() as u64).sum()
    }

    /// Tasks announced to admission control and not yet dequeued.
    pub fn admission_queued(&self) -> u64 {
        self.admission.as_ref().map_or(0, |a| {
            (0..a.controllers.len()).map(|s| a.controllers[s].lock().expect("admission poisoned").queued()).sum()
        })
    }

    /// One task: wait for the central queue (if any), call the server, learn from the result.
    /// `known_missed`: the miss was already counted at dispatch (predicted);
    /// the admission controller is not told about this task again.
    /// `fanned_at`: when the query started dispatching its tasks (wall clock).
    async fn run_task(
        self: &Arc<Self>,
        s: usize,
        ctx: Context,
        header: wire::Encoded,
        work_seed: Option<u64>,
        known_missed: bool,
        fanned_at: Nanos,
    ) -> Result<(bool, Nanos, TaskTrace), QueryError> {
        let queued_at = Instant::now();
        let central = self.cfg.queuing == Queuing::Central;
        let mut missed_here = false;
        let mut count_on_result = false;
        let mut job_id = None;
        // Central queuing: undoes the queue entry if this task is dropped (query timeout).
        let mut guard: Option<CentralSlot> = None;
        if central {
            if let Some(a) = self.admission.as_ref().filter(|_| !known_missed) {
                a.of(s).task_queued(wall_ns(), ctx.deadline, 1);
            }
            let (id, rx) = {
                let mut q = self.central[s].lock().expect("central queue poisoned");
                let id = q.next_id;
                q.next_id += 1;
                let (tx, rx) = oneshot::channel();
                q.waiting.insert(id, tx);
                q.policy.arrive(wall_ns(), Job { id, gat: ctx.gat, deadline: ctx.deadline, class: ctx.class });
                self.release_next(&mut q);
                (id, rx)
            };
            job_id = Some(id);
            guard = Some(CentralSlot {
                handler: self.clone(),
                server: s,
                id,
                deadline: ctx.deadline,
                announced: self.admission.is_some() && !known_missed,
                released: false,
            });
            let _ = rx.await;
            let now = wall_ns();
            missed_here = now > ctx.deadline;
            if let Some(g) = guard.as_mut() {
                g.released = true;
                g.announced = false;
            }
            // Released: late if its deadline passed in the queue (counted then). An on-time
            // release is counted once the server answers, as at-server queuing counts results:
            // a task released to a dead server fails at once and met no deadline.
            if let Some(a) = self.admission.as_ref().filter(|_| !known_missed) {
                count_on_result = !a.of(s).task_withdrawn(now, ctx.deadline);
            }
        }
        let sent = Instant::now();
        let sent_at = wall_ns();
        let waited_here = sent.duration_since(queued_at).as_nanos() as Nanos;
        let result = self.call(s, &header, work_seed).await;
        let round_trip = sent.elapsed().as_nanos() as Nanos;
        let received_at = wall_ns();
        if let Some(id) = job_id {
            let mut q = self.central[s].lock().expect("central queue poisoned");
            q.policy.complete(wall_ns(), id);
            q.released = None;
            self.release_next(&mut q);
            if let Some(g) = guard.as_mut() {
                g.id = JobId::MAX;
            }
        }
        let reply = match result {
            Ok(v) => v,
            Err(e) => {
                self.stats.task_errors.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Task { server: self.cfg.servers[s], message: e });
            }
        };
        let (queue_ns, missed_at_server) = (reply.queue_ns, reply.missed);
        // §III.B.2: post-dequeue time = result time − dequeue time, the dequeue
        // time coming with the result. On one host (loopback) the wall clocks
        // agree; a dequeue time outside [send, receive] means they do not, and
        // the round trip minus the server's queue time is used instead (which
        // also counts the dispatch, a pre-dequeue time, as post-dequeue).
        // The dispatch overhead counts from the moment the query fanned out
        // (at-server queuing): a fan-out-32 query's last task is sent ~0.5 ms
        // after its first (32 spawns and requests on two cores), which the
        // simulator, which dispatches all k at once, would not otherwise see.
        // Centrally queued, from the release (before it, the task was queued).
        let from = if central { sent_at } else { fanned_at.min(sent_at) };
        let dispatch = reply.arrived_at.checked_sub(from);
        let post_dequeue = match received_at.checked_sub(reply.dequeued_at) {
            Some(p) if reply.dequeued_at >= sent_at && dispatch.is_some() => {
                self.dispatch.lock().expect("dispatch poisoned").record(dispatch.unwrap_or(0));
                p
            }
            _ => round_trip.saturating_sub(queue_ns),
        };
        self.learned[s].lock().expect("histogram poisoned").record(post_dequeue);
        self.overhead.lock().expect("overhead poisoned").record(post_dequeue.saturating_sub(reply.service_ns));
        let missed = if central { missed_here } else { missed_at_server };
        if !central && !known_missed {
            // At-server queuing: the miss is piggybacked on the result (§III.C).
            if let Some(a) = &self.admission {
                a.of(s).record_task(wall_ns(), missed);
            }
        }
        if count_on_result {
            // Central queuing, released on time: the outcome of a task that ran.
            if let Some(a) = &self.admission {
                a.of(s).record_task(received_at, missed_here);
            }
        }
        self.stats.tasks.fetch_add(1, Ordering::Relaxed);
        if missed {
            self.stats.tasks_missed.fetch_add(1, Ordering::Relaxed);
        }
        let trace = TaskTrace {
            server: s,
            sent_at,
            arrived_at: reply.arrived_at,
            dequeued_at: reply.dequeued_at,
            service_ns: reply.service_ns,
            received_at,
        };
        Ok((missed, waited_here + queue_ns, trace))
    }

    /// What a task's queue orders it by, as a key where smaller goes first:
    /// the deadline (TF-EDFQ, T-EDFQ), the class (PRIQ) or nothing (FIFO: every
    /// outstanding task is ahead).
    fn queue_key(&self, ctx: &Context) -> Nanos {
        match self.cfg.scheme {
            Scheme::TfEdfq | Scheme::TEdfq => ctx.deadline,
            Scheme::Priq => ctx.class as Nanos,
            Scheme::Fifo => 0,
        }
    }

    /// Mean and variance of server `s`'s post-dequeue time (ns, ns²): its own learned
    /// CDF's, the pool's or the offline one's, as the planner picks.
    fn service_moments(&self, s: usize) -> (f64, f64) {
        let h = self.learned[s].lock().expect("histogram poisoned");
        let pooled = f64::from_bits(self.pooled_moments.0.load(Ordering::Relaxed));
        if h.count() >= self.cfg.min_samples {
            (h.mean(), h.variance())
        } else if pooled > 0.0 {
            (pooled, f64::from_bits(self.pooled_moments.1.load(Ordering::Relaxed)))
        } else {
            self.offline_moments[s]
        }
    }

    /// Expected wait of a task that has `ahead` tasks before it at server `s`
    /// (the one in service among them, half done on average): (ahead − ½) ×
    /// the server's mean post-dequeue time (its own, the pool's or the offline
    /// one, as the planner picks). A lower bound under EDF (a later task with an
    /// earlier deadline can still overtake), so a predicted miss is one that
    /// will almost surely happen.
    pub fn expected_wait(&self, s: usize, ahead: u32) -> Nanos {
        if ahead == 0 {
            return 0;
        }
        ((ahead as f64 - 0.5) * self.service_moments(s).0) as Nanos
    }

    /// The p-quantile of the wait of a task that has `ahead` tasks before it at
    /// server `s` (one task in service at a time), from the server's post-dequeue
    /// mean and variance: core's `queue_wait_quantile`, as the simulator computes it.
    /// `reject_late` uses it at the class's SLO percentile.
    pub fn wait_quantile(&self, s: usize, ahead: u32, p: f64) -> Nanos {
        let (mean, var) = self.service_moments(s);
        queue_wait_quantile(ahead, 1, mean, var, p)
    }

    /// The first of `servers` at which a task keyed `key` with deadline `deadline`
    /// would, at the p-quantile of its wait ([`Handler::wait_quantile`]), leave the
    /// queue after the deadline: (server, wait, time left to the deadline).
    fn late_server(
        &self,
        servers: &[usize],
        key: Nanos,
        now: Nanos,
        deadline: Nanos,
        p: f64,
    ) -> Option<(usize, Nanos, Nanos)> {
        let slack = deadline.saturating_sub(now);
        servers.iter().find_map(|&s| {
            let ahead = tasks_ahead(&self.outstanding[s].lock().expect("outstanding poisoned"), key);
            let wait = self.wait_quantile(s, ahead, p);
            (wait > slack).then_some((s, wait, slack))
        })
    }

    /// Releases the job the queue's policy runs next, if it is not out already. A job whose
    /// task was dropped while it waited (its sender is gone from `waiting`) completes at once.
    fn release_next(&self, q: &mut CentralQueue) {
        while let Some(id) = q.policy.running().first().copied().flatten() {
            if q.released == Some(id) {
                return;
            }
            if let Some(tx) = q.waiting.remove(&id) {
                q.released = Some(id);
                let _ = tx.send(());
                return;
            }
            q.policy.complete(wall_ns(), id);
        }
    }

    /// POST /task; returns what the server reported.
    async fn call(&self, s: usize, header: &wire::Encoded, work_seed: Option<u64>) -> Result<TaskReply, String> {
        let addr = self.cfg.servers[s];
        let mut req = http::Request::post(format!("http://{addr}/task")).header(wire::HEADER, header.as_str());
        if let Some(seed) = work_seed {
            req = req.header(WORK_SEED, seed);
        }
        let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        let (resp, body) = self.client.request(req).await.map_err(|e| e.to_string())?.into_parts();
        // Read to its end (bounded): a connection goes back to the pool only once its response
        // is complete, and one whose body is dropped unread is closed, so an error answer (a
        // full queue's 503 has a body) would cost a reconnect.
        let body = Limited::new(body, MAX_TASK_BODY)
            .collect()
            .await
            .map_err(|e| format!("HTTP {}: reading the response body: {e}", resp.status))?
            .to_bytes();
        if !resp.status.is_success() {
            return Err(format!("HTTP {}: {}", resp.status, String::from_utf8_lossy(&body).trim()));
        }
        let num = |name: &str| -> Nanos {
            resp.headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        Ok(TaskReply {
            queue_ns: num(QUEUE_NS),
            missed: num(MISSED) == 1,
            service_ns: num(SERVICE_NS),
            arrived_at: num(ARRIVED_AT),
            dequeued_at: num(DEQUEUED_AT),
        })
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

/// What a task server reported with a task's result.
#[derive(Clone, Copy, Debug)]
struct TaskReply {
    queue_ns: Nanos,
    missed: bool,
    service_ns: Nanos,
    /// Wall-clock arrival and dequeue at the server (0 if not reported).
    arrived_at: Nanos,
    dequeued_at: Nanos,
}

/// Offline estimate helper: a [`Cdf`] as the planner's shared type.
pub fn shared_cdf<C: Cdf + Send + Sync + 'static>(c: C) -> SharedCdf {
    Arc::new(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::dist::{Dist, Scaled};

    fn handler(min_samples: f64) -> Arc<Handler> {
        Handler::new(HandlerConfig {
            scheme: Scheme::TfEdfq,
            queuing: Queuing::AtServers,
            classes: vec![SloClass { p: 0.99, slo_ns: 100_000_000 }],
            // Never contacted: the test feeds results to the histograms directly.
            servers: (0..4).map(|i| SocketAddr::from(([127, 0, 0, 1], 9 + i))).collect(),
            server_weights: Vec::new(),
            class_server_weights: Vec::new(),
            offline: Arc::new(Scaled { dist: Dist::fixed_ns(10e6), factor: 1.0 }),
            offline_per_server: Vec::new(),
            admission: None,
            refresh: Duration::from_millis(250),
            min_samples,
            seed: 1,
            query_timeout_slos: None,
        })
        .unwrap()
    }

    /// A class with its own placement picks by it; the others by the default.
    #[test]
    fn each_class_picks_its_servers_by_its_own_placement() {
        let mut cfg = handler(1000.0).cfg.clone();
        cfg.classes.push(SloClass { p: 0.99, slo_ns: 200_000_000 });
        // Class 0: server 0 three times as likely as each other one (3 of 6); class 1 uniform.
        cfg.class_server_weights = vec![vec![3.0, 1.0, 1.0, 1.0], Vec::new()];
        let h = Handler::new(cfg.clone()).unwrap();
        let share_on_0 = |class: u8| {
            let hits = (0..20_000).filter(|_| h.pick_servers(class, 1, None)[0] == 0).count();
            hits as f64 / 20_000.0
        };
        let (a, b) = (share_on_0(0), share_on_0(1));
        assert!((a - 0.5).abs() < 0.02, "class 0 on server 0: {a}");
        assert!((b - 0.25).abs() < 0.02, "class 1 on server 0: {b}");
        // Distinct servers still: a fan-out of 4 gets all four.
        let mut all = h.pick_servers(0, 4, None);
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3]);
        cfg.class_server_weights = vec![vec![1.0; 3], Vec::new()];
        let err = Handler::new(cfg).err().expect("3 weights for 4 servers").to_string();
        assert!(err.contains("class_server_weights[0] has 3 entries for 4 servers"), "{err}");
    }

    /// A query's seed fixes its servers, whatever the handler's own stream
    /// did before: the same seeded queries land on the same servers under
    /// every scheme. Different seeds still spread over the servers.
    #[test]
    fn a_seeded_query_picks_the_same_servers_on_every_handler() {
        let a = handler(1000.0);
        let b = handler(1000.0);
        // Move b's own stream: unseeded picks must not shift seeded ones.
        for _ in 0..7 {
            b.pick_servers(0, 3, None);
        }
        let picks: Vec<Vec<usize>> = (0..200u64).map(|q| a.pick_servers(0, 2, Some(q))).collect();
        for (q, want) in picks.iter().enumerate() {
            assert_eq!(&b.pick_servers(0, 2, Some(q as u64)), want, "seed {q}");
        }
        let mut seen = [0u32; 4];
        for p in &picks {
            assert_ne!(p[0], p[1], "distinct servers");
            for &s in p {
                seen[s] += 1;
            }
        }
        // 400 picks over 4 servers: each near 100 (binomial sd ≈ 8.7).
        assert!(seen.iter().all(|&c| (60..=140).contains(&c)), "{seen:?}");
    }

    fn feed(h: &Handler, server: usize, n: usize, ns: Nanos) {
        let mut hist = h.learned[server].lock().unwrap();
        for _ in 0..n {
            hist.record(ns);
        }
    }

    fn near(got: Nanos, want_ms: f64) -> bool {
        (got as f64 / 1e6 / want_ms - 1.0).abs() < 0.05
    }

    /// §III.B.2: results replace the offline CDF, first through the pool of every
    /// server's samples, then per server, and a histogram's memory is counted in
    /// samples (halved at twice the threshold), not in refreshes.
    #[test]
    fn learned_cdfs_replace_the_offline_one_pooled_first_then_per_server() {
        let h = handler(1000.0);
        h.refresh_planner();
        assert!(near(h.unloaded_tail(0, 1), 10.0), "offline: {}", h.unloaded_tail(0, 1));
        assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 0);

        // 300 results of 20 ms per server: none has 1000 of its own, the pool has 1200.
        for s in 0..4 {
            feed(&h, s, 300, 20_000_000);
        }
        h.refresh_planner();
        assert!(near(h.unloaded_tail(0, 1), 20.0), "pooled: {}", h.unloaded_tail(0, 1));
        assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 0);
        assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 4);
        assert!(near(h.expected_wait(2, 2), 30.0), "pooled mean: {}", h.expected_wait(2, 2));
        // Refreshing again forgets nothing below twice the threshold.
        h.refresh_planner();
        assert_eq!(h.learned[0].lock().unwrap().count(), 300.0);

        // Server 0 slows down to 40 ms and learns its own CDF: a query on all four
        // servers now waits for it.
        feed(&h, 0, 1000, 40_000_000);
        h.refresh_planner();
        assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 1);
        assert_eq!(h.stats.servers_on_pooled_cdf.load(Ordering::Relaxed), 3);
        assert!(near(h.unloaded_tail(0, 4), 40.0), "per server: {}", h.unloaded_tail(0, 4));
        assert!(h.expected_wait(0, 2) > h.expected_wait(1, 2));

        // At twice the threshold a histogram is halved after the refresh.
        feed(&h, 1, 1700, 20_000_000);
        h.refresh_planner();
        assert_eq!(h.learned[1].lock().unwrap().count(), 1000.0);
        assert_eq!(h.stats.servers_on_own_cdf.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn tail_samples_cover_the_quantile_the_largest_fan_out_needs() {
        let c = [SloClass { p: 0.99, slo_ns: 1 }, SloClass { p: 0.95, slo_ns: 1 }];
        let k100 = Handler::tail_samples(&c, 100);
        assert!((99_000.0..100_500.0).contains(&k100), "{k100}");
        let k1 = Handler::tail_samples(&c, 1);
        assert!((999.0..1001.0).contains(&k1), "{k1}");
        assert!(Handler::tail_samples(&c, 32) < k100);
    }
}
