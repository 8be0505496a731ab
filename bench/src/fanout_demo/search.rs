//! Real runs: one probe (fresh servers and handler, open-loop load, judged per group) and the max-load search over probes.

use super::*;

/// One probe's outcome.
#[derive(Clone, Debug)]
pub struct Probe {
    pub load: f64,
    /// Whether the probe counts as meeting every SLO: its verdict, or, if it is
    /// still undecided at the cap, the point estimates (every group's p99 ≤ SLO).
    pub met: bool,
    /// The pooled verdict at the judging confidence ([`judge::combine`]).
    pub verdict: Verdict,
    pub report: RunReport,
    /// Worst (group p-quantile point estimate / class SLO).
    pub worst_ratio: f64,
    /// Per (class, fan-out) group: its judgement.
    pub groups: Vec<((u8, u32), GroupJudgement)>,
    /// Runs pooled (each `measure` long, seeds seed, seed + 1, …) and seconds measured in all.
    pub runs: u32,
    pub measured_s: f64,
    /// Runs discarded and run again because of a machine stall ([`STALL_NS`]).
    pub stalled_runs: u32,
    pub timer_p99_late_ns: Nanos,
    pub tasks_missed_pct: f64,
    /// Per-task overhead the handler measured (post-dequeue − service time).
    pub overhead: Overhead,
}

impl Probe {
    /// Judges the (pooled) report at `conf`: every (class, fan-out) group meets on its
    /// own, misses family-wise ([`judge::judge_probe`]).
    pub fn judge(&mut self, classes: &[SloClass], conf: f64) {
        let (keys, inputs): (Vec<(u8, u32)>, Vec<judge::ProbeGroup>) = self
            .report
            .groups
            .iter()
            .filter(|(_, g)| !g.latencies_ns.is_empty())
            .map(|(&key, g)| {
                let c = classes[key.0 as usize];
                let group =
                    judge::ProbeGroup { latencies_ns: &g.latencies_ns, sent_ns: &g.sent_ns, p: c.p, slo_ns: c.slo_ns };
                (key, group)
            })
            .unzip();
        self.groups = keys.into_iter().zip(judge::judge_probe(&inputs, conf)).collect();
        let ok = self.report.completed() > 0 && self.report.errors == 0;
        self.verdict = if ok { judge::combine(self.groups.iter().map(|g| g.1.verdict)) } else { Verdict::Misses };
        self.worst_ratio = self
            .groups
            .iter()
            .map(|((c, _), j)| j.point_ns as f64 / classes[*c as usize].slo_ns as f64)
            .fold(0.0, f64::max);
        self.met = match self.verdict {
            Verdict::Meets => true,
            Verdict::Misses => false,
            Verdict::Undecided => self.worst_ratio <= 1.0,
        };
    }

    /// Adds another run of the same scheme and load (the next seed) to this one.
    fn pool(&mut self, other: Probe) {
        let (a, b) = (self.report.completed() as f64, other.report.completed() as f64);
        if a + b > 0.0 {
            self.tasks_missed_pct = (self.tasks_missed_pct * a + other.tasks_missed_pct * b) / (a + b);
        }
        self.timer_p99_late_ns = self.timer_p99_late_ns.max(other.timer_p99_late_ns);
        let (o, p) = (self.overhead.clone(), other.overhead);
        let t = o.tasks + p.tasks;
        if t > 0.0 {
            let per_hop = match (&o.per_hop, &p.per_hop) {
                (Some(a), Some(b)) => {
                    let mut m = (**a).clone();
                    m.merge(b);
                    Some(Arc::new(m))
                }
                (a, b) => a.clone().or(b.clone()),
            };
            self.overhead = Overhead {
                per_hop,
                tasks: t,
                mean_ns: (o.mean_ns * o.tasks + p.mean_ns * p.tasks) / t,
                p50_ns: o.p50_ns.max(p.p50_ns),
                p99_ns: o.p99_ns.max(p.p99_ns),
                dispatch_mean_ns: (o.dispatch_mean_ns * o.tasks + p.dispatch_mean_ns * p.tasks) / t,
                dispatch_p99_ns: o.dispatch_p99_ns.max(p.dispatch_p99_ns),
            };
        }
        let r = &mut self.report;
        // The next run's queries come after this one's on the judge's time line.
        let shift = r.groups.values().flat_map(|g| g.sent_ns.iter()).max().map_or(0, |&t| t + 1_000_000_000);
        for (key, g) in other.report.groups {
            let mine = r.groups.entry(key).or_default();
            mine.latencies_ns.extend(g.latencies_ns);
            mine.sent_ns.extend(g.sent_ns.iter().map(|&t| t + shift));
            mine.traces.extend(g.traces);
            mine.rejected += g.rejected;
        }
        r.offered += other.report.offered;
        r.dropped += other.report.dropped;
        r.errors += other.report.errors;
        r.tasks_offered += other.report.tasks_offered;
        r.tasks_admitted += other.report.tasks_admitted;
        self.runs += other.runs;
        self.measured_s += other.measured_s;
        self.stalled_runs += other.stalled_runs;
    }

    /// The group that decides: a missing one, else an undecided one, else the
    /// one with the highest point estimate relative to its SLO.
    pub fn binding_group(&self, classes: &[SloClass]) -> Option<((u8, u32), GroupJudgement)> {
        let rank = |v: Verdict| match v {
            Verdict::Misses => 2,
            Verdict::Undecided => 1,
            Verdict::Meets => 0,
        };
        self.groups.iter().copied().max_by(|a, b| {
            let ra = a.1.point_ns as f64 / classes[a.0 .0 as usize].slo_ns as f64;
            let rb = b.1.point_ns as f64 / classes[b.0 .0 as usize].slo_ns as f64;
            rank(a.1.verdict).cmp(&rank(b.1.verdict)).then(ra.total_cmp(&rb))
        })
    }

    /// One line: verdict, how it was reached, the binding group.
    pub fn describe(&self, classes: &[SloClass], conf: f64) -> String {
        let how = match self.verdict {
            Verdict::Meets => format!("meets SLOs (every group, {:.0}% bound)", conf * 100.0),
            Verdict::Misses => format!("misses (a group's lower bound > SLO, {:.0}% for the probe)", conf * 100.0),
            Verdict::Undecided if self.met => "undecided at the cap: point estimates meet".into(),
            Verdict::Undecided => "undecided at the cap: a point estimate misses".into(),
        };
        let ms = |x: Option<Nanos>| x.map_or("—".into(), |v| format!("{:.2}", v as f64 / 1e6));
        let binding = self.binding_group(classes).map_or(String::new(), |((c, k), j)| {
            format!(
                "; class {c} k {k}: n {}, p99 {} ms in [{}, {}] vs SLO {:.1}, D {:.1}",
                j.n,
                ms(Some(j.point_ns)),
                ms(j.lower_ns),
                ms(j.upper_ns),
                classes[c as usize].slo_ns as f64 / 1e6,
                j.design_effect
            )
        });
        let stalled = if self.stalled_runs > 0 {
            format!(", {} stalled run(s) redone", self.stalled_runs)
        } else {
            String::new()
        };
        format!(
            "{how} ({} run(s), {:.0} s measured{stalled}, worst p99/SLO {:.3}{binding})",
            self.runs, self.measured_s, self.worst_ratio
        )
    }
}

/// The runtime a real run's servers, handler and load generator share: two workers at nice −10,
/// and so is the calling thread, where the load generator runs (`block_on`).
pub fn probe_runtime() -> Result<tokio::runtime::Runtime, tailor_fanout::Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            tailor_fanout::timer::raise_thread_priority();
        })
        .enable_all()
        .build()
        .map_err(|e| tailor_fanout::Error::Io(e.to_string()))?;
    tailor_fanout::timer::raise_thread_priority();
    Ok(rt)
}

/// The configuration's task servers on loopback, queuing as `scheme` does (FIFO at the servers
/// when the handler queues centrally).
pub async fn spawn_servers(
    l: &Loaded,
    scheme: Scheme,
    timer: &Arc<PreciseTimer>,
) -> Result<Vec<TaskServer>, tailor_fanout::Error> {
    let mut servers = Vec::new();
    for (i, &(scale, _)) in l.server_shapes().iter().enumerate() {
        let policy = if l.cfg.queuing == Queuing::Central { PolicySpec::Fifo } else { scheme.queue_policy() };
        let cfg = TaskServerConfig {
            policy,
            service: l.service.clone(),
            scale: scale * l.cfg.time_scale,
            max_queue: 100_000,
            seed: l.cfg.seed.wrapping_mul(1000).wrapping_add(i as u64),
        };
        servers.push(TaskServer::spawn(cfg, timer.clone(), "127.0.0.1:0".parse().expect("loopback")).await?);
    }
    Ok(servers)
}

/// Runs one probe on a fresh runtime: servers, handler, open-loop load.
pub fn run_real(
    l: &Loaded,
    scheme: Scheme,
    load: f64,
    admission: Option<AdmissionConfig>,
    warmup: Duration,
    measure: Duration,
) -> Result<Probe, tailor_fanout::Error> {
    run_real_with(l, scheme, load, admission, warmup, measure, None)
}

/// [`run_real`], optionally with requests of sequential queries instead of single queries.
pub fn run_real_with(
    l: &Loaded,
    scheme: Scheme,
    load: f64,
    admission: Option<AdmissionConfig>,
    warmup: Duration,
    measure: Duration,
    sequential: Option<(Vec<u32>, BudgetSplit)>,
) -> Result<Probe, tailor_fanout::Error> {
    let rt = probe_runtime()?;
    rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start().map_err(|e| tailor_fanout::Error::Io(e.to_string()))?);
        let servers = spawn_servers(l, scheme, &timer).await?;
        let handler = Handler::new(l.handler_config(
            scheme,
            servers.iter().map(|s| s.addr).collect(),
            admission,
            sequential.as_ref().map(|(ks, _)| &ks[..]),
        ))?;
        let refresher = handler.spawn_refresher();
        let rate = match &sequential {
            // Load counts tasks: a request brings Σk tasks instead of E[k].
            Some((ks, _)) => l.rate_for(load) * l.mix().mean_fanout() / ks.iter().sum::<u32>() as f64,
            None => l.rate_for(load),
        };
        let spec = RunSpec {
            rate_qps: rate,
            warmup,
            measure,
            mix: l.mix(),
            seed: probe_seed(l.cfg.seed, load),
            max_in_flight: 50_000,
            sequential: sequential.clone(),
        };
        timer.reset_lateness();
        let report = loadgen::run(handler.clone(), &spec).await;
        refresher.abort();
        let report = report.map_err(|e| tailor_fanout::Error::Io(e.to_string()))?;
        let tasks = handler.stats.tasks.load(std::sync::atomic::Ordering::Relaxed).max(1);
        let missed = handler.stats.tasks_missed.load(std::sync::atomic::Ordering::Relaxed);
        let mut p = Probe {
            load,
            met: false,
            verdict: Verdict::Undecided,
            worst_ratio: 0.0,
            groups: Vec::new(),
            runs: 1,
            measured_s: measure.as_secs_f64(),
            stalled_runs: 0,
            timer_p99_late_ns: timer.lateness().p99_ns,
            tasks_missed_pct: 100.0 * missed as f64 / tasks as f64,
            overhead: handler.overhead(),
            report,
        };
        p.judge(&l.slo_classes(), l.cfg.search.confidence);
        Ok(p)
    })
}

/// The load generator's seed for a probe: the same for every scheme at one
/// load (and run seed), so their queries, servers and work are the same.
pub fn probe_seed(seed: u64, load: f64) -> u64 {
    seed ^ (load * 1e6).round() as u64
}

/// The load nearest `x` on the grid min + i × tol, to 10⁻⁶: sums and halvings
/// that should meet at one grid load give one value (and one [`probe_seed`]).
pub(super) fn on_grid(x: f64, min: f64, tol: f64) -> f64 {
    let i = ((x - min) / tol).round();
    ((min + i * tol) * 1e6).round() / 1e6
}

/// How the real side decides a probe: runs of `chunk` (fresh servers and
/// handler, seeds seed, seed + 1, …) pooled until every (class, fan-out) group
/// is decided at `confidence` ([`judge`]) or `cap` seconds have been measured.
#[derive(Clone, Copy, Debug)]
pub struct Judging {
    pub warmup: Duration,
    pub chunk: Duration,
    pub cap: Duration,
    pub confidence: f64,
}

/// A run whose slowest query spent this long outside the queue and the
/// service (start late, dispatch or return) was stalled by the machine, not
/// scheduled: no queue policy makes a loopback send take 200 ms.
pub const STALL_NS: i64 = 200_000_000;

/// The longest non-scheduling part (start late, to send, dispatch, return) of any query in the run.
pub fn worst_stall_ns(r: &RunReport) -> i64 {
    r.groups
        .values()
        .flat_map(|g| g.traces.iter())
        .map(|t| t.start_late_ns.max(t.to_send_ns).max(t.slowest.dispatch_ns()).max(t.slowest.return_ns()))
        .max()
        .unwrap_or(0)
}

/// One run with the stall guard: a run with a stall ≥ [`STALL_NS`] is run
/// again (same seed, at most twice) and counted in `stalled_runs`.
pub(super) fn run_guarded(l: &Loaded, scheme: Scheme, load: f64, j: Judging) -> Result<Probe, tailor_fanout::Error> {
    let mut stalled = 0;
    loop {
        let mut p = run_real(l, scheme, load, None, j.warmup, j.chunk)?;
        let worst = worst_stall_ns(&p.report);
        if worst < STALL_NS || stalled >= 2 {
            p.stalled_runs = stalled;
            return Ok(p);
        }
        stalled += 1;
        tracing::warn!(
            "load {load:.3}, seed {}: a query stalled {:.0} ms outside queue and service; run again",
            l.cfg.seed,
            worst as f64 / 1e6
        );
    }
}

/// One judged probe: runs pooled until decided or capped.
pub fn run_judged(l: &Loaded, scheme: Scheme, load: f64, j: Judging) -> Result<Probe, tailor_fanout::Error> {
    let classes = l.slo_classes();
    let mut pooled = run_guarded(l, scheme, load, j)?;
    pooled.judge(&classes, j.confidence);
    while pooled.verdict == Verdict::Undecided
        && pooled.measured_s + j.chunk.as_secs_f64() <= j.cap.as_secs_f64() + 1e-9
    {
        let mut next = l.clone();
        next.cfg.seed = l.cfg.seed.wrapping_add(pooled.runs as u64);
        let more = run_guarded(&next, scheme, load, j)?;
        pooled.pool(more);
        pooled.judge(&classes, j.confidence);
    }
    Ok(pooled)
}

/// Max load under SLO on the real side: the highest load whose judged probe
/// meets, to within `tolerance`. Without a hint, bisection on
/// [min_load, max_load] from min_load; with one (the simulator's max load), the
/// search starts there and steps by 2 × tolerance until it has a load that
/// meets and one that misses, then bisects between them (fewer probes when
/// real and simulated agree; the result is the real probes' alone).
pub fn search_real(
    l: &Loaded,
    scheme: Scheme,
    j: Judging,
    hint: Option<f64>,
    mut log: impl FnMut(&Probe),
) -> Result<(f64, Vec<Probe>), tailor_fanout::Error> {
    let s = &l.cfg.search;
    let (min, max, tol) = (s.min_load, s.max_load, s.tolerance);
    let mut probes = Vec::new();
    let mut probe = |x: f64, probes: &mut Vec<Probe>| -> Result<bool, tailor_fanout::Error> {
        let x = on_grid(x, min, tol);
        let p = run_judged(l, scheme, x, j)?;
        log(&p);
        let met = p.met;
        probes.push(p);
        Ok(met)
    };
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    // Every probe falls on the grid min + i × tolerance (the start is snapped
    // to it, steps are 2 × tolerance, one bisection halves a 2-step bracket),
    // so two schemes' searches that visit a load run it on the same input:
    // the probe's seed is a function of the load ([`probe_seed`]).
    let start = match hint {
        Some(h) => on_grid(h, min, tol).clamp(min, max),
        None => min,
    };
    if probe(start, &mut probes)? {
        lo = Some(start);
    } else {
        hi = Some(start);
    }
    let step = 2.0 * tol;
    while hi.is_none() {
        let x = (lo.unwrap_or(min) + step).min(max);
        if probe(x, &mut probes)? {
            lo = Some(x);
            if x >= max {
                return Ok((max, probes));
            }
        } else {
            hi = Some(x);
        }
    }
    while lo.is_none() {
        let h = hi.unwrap_or(max);
        if h <= min {
            return Ok((0.0, probes));
        }
        let x = (h - step).max(min);
        if probe(x, &mut probes)? {
            lo = Some(x);
        } else {
            hi = Some(x);
        }
    }
    let (mut lo, mut hi) = (lo.unwrap_or(min), hi.unwrap_or(max));
    while hi - lo > tol + 1e-9 {
        let mid = (lo + hi) / 2.0;
        if probe(mid, &mut probes)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, probes))
}
