//! Open-loop Poisson load on a handler, and what one run measured.
//!
//! Arrivals follow a precomputed Poisson schedule and never wait for
//! responses; each query's latency runs from its *intended* send time, so a
//! slow handler cannot hide queueing (no coordinated omission). Sends are
//! timed by the [`PreciseTimer`], not tokio's 1 ms wheel. At most
//! `max_in_flight` queries are outstanding; arrivals beyond that are counted
//! as dropped rather than queued without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::rng::Rng;
use tailor_core::tailguard::BudgetSplit;
use tailor_core::time::Nanos;

use crate::clock::wall_ns;
use tailor_fanout::handler::{Handler, QueryError, QuerySpec, TaskTrace};
use tailor_fanout::timer::PreciseTimer;

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

/// Drives `handler` open-loop for `spec.warmup + spec.measure`, then waits for the last responses.
pub async fn run(handler: Arc<Handler>, timer: Arc<PreciseTimer>, spec: &RunSpec) -> RunReport {
    let report = Arc::new(Mutex::new(RunReport::default()));
    let in_flight = Arc::new(AtomicU64::new(0));
    let mut rng = Rng::new(spec.seed);
    let start = Instant::now() + Duration::from_millis(5);
    // Wall clock of `start`, to place intended send times on the handler's clock.
    let start_wall = wall_ns() + 5_000_000;
    let end = start + spec.warmup + spec.measure;
    let measure_from = start + spec.warmup;
    let mean_gap_ns = 1e9 / spec.rate_qps;
    let mut t = start;
    let mut tasks = tokio::task::JoinSet::new();
    if let Some((ks, split)) = &spec.sequential {
        // Plan every request shape before the first arrival, so no request
        // computes one (they would otherwise wait for the first plan). Errors
        // surface per request below, with the same message.
        for class in 0..spec.mix.class_weights.len() as u8 {
            let _ = handler.prepare_request(class, ks, *split);
        }
    }
    loop {
        t += Duration::from_nanos(rng.exp(mean_gap_ns) as u64);
        if t >= end {
            break;
        }
        let class = Mix::draw(spec.mix.class_weights.iter().copied(), &mut rng) as u8;
        let ks = &spec.mix.fanouts[class as usize];
        let mut fanout = ks[Mix::draw(ks.iter().map(|f| f.1), &mut rng)].0;
        // The query's own draws (servers, work), from the arrival stream: the
        // same seed and load give every scheme the same queries.
        let query_seed = rng.next_u64();
        let sequential = spec.sequential.clone();
        if let Some((ks, _)) = &sequential {
            fanout = ks.iter().sum();
        }
        timer.sleep_until(t).await;
        let measured = t >= measure_from;
        if measured {
            let mut r = report.lock().expect("report poisoned");
            r.offered += 1;
            r.tasks_offered += fanout as u64;
        }
        if in_flight.load(Ordering::Relaxed) >= spec.max_in_flight {
            if measured {
                report.lock().expect("report poisoned").dropped += 1;
            }
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (h, rep, fl) = (handler.clone(), report.clone(), in_flight.clone());
        let intended = t;
        let sent_ns = t.duration_since(start).as_nanos() as Nanos;
        let intended_wall = start_wall + sent_ns;
        tasks.spawn(async move {
            let res = match &sequential {
                None => h.query(QuerySpec { class, fanout, slo_ns: None, seed: Some(query_seed) }).await.map(Some),
                Some((ks, split)) => h.request(class, ks, *split).await.map(|_| None),
            };
            let done_wall = wall_ns();
            let group = if sequential.is_some() { 0 } else { fanout };
            let latency = intended.elapsed().as_nanos() as Nanos;
            fl.fetch_sub(1, Ordering::Relaxed);
            if !measured {
                return;
            }
            let mut r = rep.lock().expect("report poisoned");
            match res {
                Ok(outcome) => {
                    r.tasks_admitted += fanout as u64;
                    let g = r.groups.entry((class, group)).or_default();
                    g.latencies_ns.push(latency);
                    g.sent_ns.push(sent_ns);
                    if let Some(o) = outcome {
                        g.traces.push(QueryTrace {
                            latency_ns: latency,
                            start_late_ns: o.t0_wall as i64 - intended_wall as i64,
                            to_send_ns: o.slowest.sent_at as i64 - o.t0_wall as i64,
                            slowest: o.slowest,
                            merge_ns: done_wall as i64 - o.slowest.received_at as i64,
                        });
                    }
                }
                Err(QueryError::Rejected { .. } | QueryError::WouldMiss { .. }) => {
                    r.groups.entry((class, group)).or_default().rejected += 1
                }
                Err(_) => r.errors += 1,
            }
        });
        // Reap finished ones so the set stays as small as what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let r = report.lock().expect("report poisoned").clone();
    r
}
