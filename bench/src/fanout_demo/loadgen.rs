//! Open-loop Poisson load on a handler, and what one run measured.
//!
//! Arrivals follow a precomputed Poisson schedule and never wait for
//! responses; each query's latency runs from its *intended* send time, so a
//! slow handler cannot hide queueing (no coordinated omission). Sends are
//! paced by `tailor-loadgen`'s sender thread, not tokio's 1 ms wheel. At most
//! `max_in_flight` queries are outstanding; arrivals beyond that are counted
//! as dropped rather than queued without bound.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tailor_core::rng::Rng;
use tailor_core::tailguard::BudgetSplit;
use tailor_core::time::Nanos;
use tailor_loadgen::{run_in_current_runtime, Arrival, OpenLoopConfig, OpenLoopError, Outcome as SendOutcome};

use crate::clock::{monotonic_ns, wall_ns};
use tailor_fanout::handler::{Handler, QueryError, QuerySpec, TaskTrace};

/// How long after the run's end a query still unanswered counts as an error (a hang: the
/// handler's tasks have deadlines far shorter).
const HANG_TIMEOUT: Duration = Duration::from_secs(60);

/// What queries look like: classes and fan-outs with their weights.
#[derive(Clone, Debug)]
pub struct Mix {
    /// (class weight) per class index.
    pub class_weights: Vec<f64>,
    /// Per class index, (fanout, weight) pairs.
    pub fanouts: Vec<Vec<(u32, f64)>>,
}

impl Mix {
    /// Mean tasks per query, over the classes.
    pub fn mean_fanout(&self) -> f64 {
        let classes: f64 = self.class_weights.iter().sum();
        let mean = |f: &[(u32, f64)]| {
            let total: f64 = f.iter().map(|f| f.1).sum();
            f.iter().map(|&(k, w)| k as f64 * w).sum::<f64>() / total
        };
        self.class_weights.iter().zip(&self.fanouts).map(|(w, f)| w * mean(f)).sum::<f64>() / classes
    }

    fn draw(weights: impl Iterator<Item = f64> + Clone, rng: &mut Rng) -> usize {
        let total: f64 = weights.clone().sum();
        let mut u = rng.next_f64() * total;
        let mut last = 0;
        for (i, w) in weights.enumerate() {
            last = i;
            if u < w {
                return i;
            }
            u -= w;
        }
        last
    }
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub rate_qps: f64,
    pub warmup: Duration,
    pub measure: Duration,
    pub mix: Mix,
    pub seed: u64,
    pub max_in_flight: u64,
    /// Instead of single queries: requests of sequential queries with these
    /// fan-outs and budget split (recorded under fan-out 0).
    pub sequential: Option<(Vec<u32>, BudgetSplit)>,
}

/// Per (class, fanout) results.
#[derive(Clone, Debug, Default)]
pub struct Group {
    pub latencies_ns: Vec<Nanos>,
    /// Each query's intended send time since the run began, in the order of
    /// `latencies_ns`: it puts all groups' queries back on one time line (the
    /// judge's busy-period check across groups).
    pub sent_ns: Vec<Nanos>,
    pub rejected: u64,
    /// Where each single query's time went, in the order of `latencies_ns`
    /// (empty for sequential requests).
    pub traces: Vec<QueryTrace>,
}

/// One query's timeline, for tracing outliers (`tailor fanout probe` prints the slowest).
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryTrace {
    pub latency_ns: Nanos,
    /// Intended send time → the handler's t0 (timer lateness, spawn delay).
    pub start_late_ns: i64,
    /// The handler's t0 → the slowest task's send.
    pub to_send_ns: i64,
    /// The slowest task (the last result back).
    pub slowest: TaskTrace,
    /// The slowest result at the handler → the load generator saw the answer.
    pub merge_ns: i64,
}

impl Group {
    /// Nearest-rank p-quantile of the completed queries (0 if none).
    pub fn quantile(&self, p: f64) -> Nanos {
        let mut v = self.latencies_ns.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0;
        }
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }
}

/// What a run measured (warm-up excluded).
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// (class, fanout) → group.
    pub groups: BTreeMap<(u8, u32), Group>,
    pub offered: u64,
    pub dropped: u64,
    pub errors: u64,
    /// Tasks offered and tasks of admitted queries (measured queries only).
    pub tasks_offered: u64,
    pub tasks_admitted: u64,
}

impl RunReport {
    pub fn completed(&self) -> u64 {
        self.groups.values().map(|g| g.latencies_ns.len() as u64).sum()
    }
    pub fn rejected(&self) -> u64 {
        self.groups.values().map(|g| g.rejected).sum()
    }
}

/// One query of the schedule, drawn before the run from the arrival stream.
struct Query {
    intended_ns: Nanos,
    class: u8,
    /// The fan-out (for sequential requests, the sum of theirs).
    fanout: u32,
    /// The query's own draws (servers, work): the same seed and load give every scheme the
    /// same queries.
    seed: u64,
}

/// The Poisson schedule of `spec`: arrival times from 0 with their classes, fan-outs and seeds.
fn schedule(spec: &RunSpec) -> Vec<Query> {
    let mut rng = Rng::new(spec.seed);
    let end_ns = (spec.warmup + spec.measure).as_nanos() as Nanos;
    let mean_gap_ns = 1e9 / spec.rate_qps;
    let mut t = 0;
    let mut queries = Vec::new();
    loop {
        t += rng.exp(mean_gap_ns) as Nanos;
        if t >= end_ns {
            return queries;
        }
        let class = Mix::draw(spec.mix.class_weights.iter().copied(), &mut rng) as u8;
        let ks = &spec.mix.fanouts[class as usize];
        let mut fanout = ks[Mix::draw(ks.iter().map(|f| f.1), &mut rng)].0;
        let seed = rng.next_u64();
        if let Some((ks, _)) = &spec.sequential {
            fanout = ks.iter().sum();
        }
        queries.push(Query { intended_ns: t, class, fanout, seed });
    }
}

/// Drives `handler` open-loop for `spec.warmup + spec.measure`, then waits for the last
/// responses. The queries run as tasks of the runtime this is awaited in, where the
/// handler lives; `tailor-loadgen`'s sender thread starts each at its time.
pub async fn run(handler: Arc<Handler>, spec: &RunSpec) -> Result<RunReport, OpenLoopError> {
    if let Some((ks, split)) = &spec.sequential {
        // Plan every request shape before the first arrival, so no request
        // computes one (they would otherwise wait for the first plan). Errors
        // surface per request below, with the same message.
        for class in 0..spec.mix.class_weights.len() as u8 {
            let _ = handler.prepare_request(class, ks, *split);
        }
    }
    let queries = Arc::new(schedule(spec));
    let intended: Vec<Nanos> = queries.iter().map(|q| q.intended_ns).collect();
    // The handler waits for every query (its tasks have deadlines); the timeout only
    // guards against a hang.
    let cfg = OpenLoopConfig {
        // As the fan-out timer thread: a real-time sender, if allowed, so busy
        // processes on the machine do not make it send late.
        rt_priority: Some(10),
        ..OpenLoopConfig::new(spec.max_in_flight as usize, spec.warmup + spec.measure + HANG_TIMEOUT)
    };
    // Wall clock minus monotonic clock: places intended send times on the handler's clock.
    let wall_offset = wall_ns() as i64 - monotonic_ns() as i64;
    let (sequential, planned) = (spec.sequential.clone(), queries.clone());
    let sent = run_in_current_runtime(intended, &cfg, move |a: Arrival| {
        let (h, sequential) = (handler.clone(), sequential.clone());
        let q = &planned[a.index];
        let (class, fanout, seed) = (q.class, q.fanout, q.seed);
        async move {
            let res = match &sequential {
                None => h.query(QuerySpec { class, fanout, slo_ns: None, seed: Some(seed) }).await.map(Some),
                Some((ks, split)) => h.request(class, ks, *split).await.map(|_| None),
            };
            (res, wall_ns())
        }
    })
    .await?;
    let measure_from = spec.warmup.as_nanos() as Nanos;
    let mut r = RunReport::default();
    for (record, q) in sent.records.into_iter().zip(queries.iter()) {
        if q.intended_ns < measure_from {
            continue;
        }
        r.offered += 1;
        r.tasks_offered += q.fanout as u64;
        let group = if spec.sequential.is_some() { 0 } else { q.fanout };
        let latency = record.latency_ns();
        match record.outcome {
            SendOutcome::Overflow => r.dropped += 1,
            SendOutcome::Done((Err(QueryError::Rejected { .. } | QueryError::WouldMiss { .. }), _)) => {
                r.groups.entry((q.class, group)).or_default().rejected += 1
            }
            SendOutcome::Done((Err(_), _)) | SendOutcome::TimedOut => r.errors += 1,
            SendOutcome::Done((Ok(outcome), done_wall)) => {
                let latency = latency.expect("a finished query has a latency");
                r.tasks_admitted += q.fanout as u64;
                let g = r.groups.entry((q.class, group)).or_default();
                g.latencies_ns.push(latency);
                g.sent_ns.push(q.intended_ns);
                if let Some(o) = outcome {
                    let intended_wall = (sent.start_ns + q.intended_ns) as i64 + wall_offset;
                    g.traces.push(QueryTrace {
                        latency_ns: latency,
                        start_late_ns: o.t0_wall as i64 - intended_wall,
                        to_send_ns: o.slowest.sent_at as i64 - o.t0_wall as i64,
                        slowest: o.slowest,
                        merge_ns: done_wall as i64 - o.slowest.received_at as i64,
                    });
                }
            }
        }
    }
    Ok(r)
}
