//! The demo proper: max load per scheme real and simulated side by side, admission at overload, R_th
//! calibration, and the table that reports them.

use super::*;

/// How long each probe runs, and how many.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub warmup: Duration,
    /// One run's measurement; a probe pools runs until decided or `cap`.
    pub measure: Duration,
    pub cap: Duration,
    /// One-sided confidence of each group's verdict.
    pub confidence: f64,
    /// Search tolerance (load fraction).
    pub tolerance: f64,
}

impl Pace {
    /// The config's own pace, or a short one for tests (`--quick`).
    pub fn of(l: &Loaded, quick: bool) -> Pace {
        let s = &l.cfg.search;
        if quick {
            Pace {
                warmup: Duration::from_millis(500),
                measure: Duration::from_secs(2),
                cap: Duration::from_secs(4),
                confidence: s.confidence,
                tolerance: 0.1,
            }
        } else {
            Pace {
                warmup: Duration::from_secs_f64(s.warmup_s),
                measure: Duration::from_secs_f64(s.measure_s),
                cap: Duration::from_secs_f64(s.measure_cap_s.unwrap_or(s.measure_s)),
                confidence: s.confidence,
                tolerance: s.tolerance,
            }
        }
    }

    pub fn judging(&self) -> Judging {
        Judging { warmup: self.warmup, chunk: self.measure, cap: self.cap, confidence: self.confidence }
    }
}

/// One scheme's line in the demo table.
#[derive(Clone, Debug)]
pub struct SchemeResult {
    pub scheme: Scheme,
    pub real_max_load: f64,
    pub sim_max_load: Option<f64>,
    /// Per-task overhead measured on the real run (what the simulated side adds).
    pub overhead: Overhead,
    pub probes: Vec<Probe>,
}

/// Admission control at overload.
#[derive(Clone, Debug)]
pub struct AdmissionResult {
    pub r_th: f64,
    pub offered_load: f64,
    pub accepted_load: f64,
    pub classes: Vec<ClassAtOverload>,
    /// The (class, fan-out) group farthest above (or closest to) its SLO among those
    /// with at least 100 completed queries: the max-load search judges every group,
    /// the overload check every class, and a rule could hold a class while its
    /// largest fan-out misses. Shown, not judged.
    pub worst_group: Option<(u32, ClassAtOverload)>,
    pub rejected_pct: f64,
    /// Per-task overhead measured on the real run (what [`sim_admission`] adds).
    pub overhead: Overhead,
    /// The same check in the simulator ([`sim_admission`]; [`run_admission`] runs it).
    pub simulated: Option<Box<AdmissionResult>>,
}

/// One class's share of an admission run.
#[derive(Clone, Debug)]
pub struct ClassAtOverload {
    pub name: String,
    /// The class's SLO percentile of its admitted queries' latency, and its SLO, ms.
    pub quantile_ms: f64,
    pub slo_ms: f64,
    /// Of the class's offered queries, the share admitted: a rule that holds the
    /// SLOs by turning one class away shows here. NaN where unknown (a simulated group).
    pub accepted: f64,
}

impl ClassAtOverload {
    /// The queries of `g` (completed and rejected) against `class`'s SLO.
    fn of(name: String, g: &loadgen::Group, class: &SloClass) -> Self {
        let offered = g.latencies_ns.len() as f64 + g.rejected as f64;
        ClassAtOverload {
            name,
            quantile_ms: g.quantile(class.p) as f64 / 1e6,
            slo_ms: class.slo_ns as f64 / 1e6,
            accepted: if offered > 0.0 { g.latencies_ns.len() as f64 / offered } else { 0.0 },
        }
    }
}

impl std::fmt::Display for ClassAtOverload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} p99 {:.2}/{:.1} ms", self.name, self.quantile_ms, self.slo_ms)?;
        if !self.accepted.is_nan() {
            write!(f, " ({:.0}% admitted)", 100.0 * self.accepted)?;
        }
        Ok(())
    }
}

/// Max load under SLO for every scheme, real and simulated.
pub fn run_schemes(
    l: &Loaded,
    pace: Pace,
    with_sim: bool,
    progress: &dyn Progress,
) -> Result<Vec<SchemeResult>, tailor_fanout::Error> {
    progress.start(l.cfg.schemes.len() as u64, &format!("{}: schemes", l.cfg.name));
    let mut lq = l.clone();
    lq.cfg.search.tolerance = pace.tolerance;
    lq.cfg.search.confidence = pace.confidence;
    let classes = l.slo_classes();
    let mut out: Vec<SchemeResult> = Vec::new();
    for &scheme in &l.cfg.schemes {
        // Where the real search starts: the simulator's max load (≤ 200,000
        // queries: a start point only) with the overhead measured for the
        // previous scheme (none for the first).
        let hint = if with_sim {
            let prev = out.last().map(|r| HopDelay::from_measured(&r.overhead));
            let mut quick = lq.clone();
            quick.cfg.search.sim_requests = quick.cfg.search.sim_requests.min(200_000);
            Some(search_sim(&quick, scheme, prev)?)
        } else {
            None
        };
        let (max, probes) = search_real(&lq, scheme, pace.judging(), hint, |p| {
            progress.line(&format!(
                "  {:<8} load {:.3}: {} — {} queries, task miss {:.2}%, timer p99 late {} µs",
                scheme.name(),
                p.load,
                p.describe(&classes, pace.confidence),
                p.report.completed(),
                p.tasks_missed_pct,
                p.timer_p99_late_ns / 1000
            ))
        })?;
        // The overhead the simulator adds: as measured on the real probe
        // nearest the max load (it grows with load: more HTTP per second on
        // the same two cores).
        let overhead = probes
            .iter()
            .filter(|p| p.overhead.tasks > 0.0)
            .min_by(|a, b| (a.load - max).abs().total_cmp(&(b.load - max).abs()))
            .map(|p| p.overhead.clone())
            .unwrap_or_default();
        progress.line(&format!(
            "  {}: per-task overhead at load {:.3}: dispatch mean {:.0} µs (p99 {} µs), after service mean {:.0} µs (p50 {} µs, p99 {} µs)",
            scheme.name(),
            max,
            overhead.dispatch_mean_ns / 1e3,
            overhead.dispatch_p99_ns / 1000,
            overhead.mean_ns / 1e3,
            overhead.p50_ns / 1000,
            overhead.p99_ns / 1000
        ));
        // Dispatch (handler → server, before the queue) and return (after the
        // service: the rest of the post-dequeue time), with their spread.
        let sim =
            if with_sim { Some(search_sim(&lq, scheme, Some(HopDelay::from_measured(&overhead)))?) } else { None };
        progress.line(&format!(
            "{}: real max load {:.3}{}",
            scheme.name(),
            max,
            sim.map_or(String::new(), |s| format!(", simulated {s:.3}"))
        ));
        out.push(SchemeResult { scheme, real_max_load: max, sim_max_load: sim, overhead, probes });
        progress.advance(out.len() as u64, scheme.name());
    }
    Ok(out)
}

/// Runs TF-EDFQ with admission control at `offered` load and R_th, then the same in
/// the simulator with the overhead the real run measured ([`sim_admission`]).
pub fn run_admission(l: &Loaded, pace: Pace, r_th: f64, offered: f64) -> Result<AdmissionResult, tailor_fanout::Error> {
    let a = l
        .cfg
        .admission
        .as_ref()
        .ok_or_else(|| tailor_fanout::Error::Config(format!("{}: needs an [admission] section", l.cfg.name)))?;
    let adm = AdmissionConfig {
        r_th,
        window: AdmissionWindow::OutcomesWithin(
            a.window_tasks,
            (Duration::from_secs_f64(a.window_ms * l.cfg.time_scale / 1e3).as_nanos() as Nanos).max(1),
        ),
        predict: a.predict,
        proportional: a.proportional,
        per_server: a.per_server,
        reject_late: a.reject_late,
    };
    let l = &l.for_admission();
    let p = run_real(l, Scheme::TfEdfq, offered, Some(adm), pace.warmup, pace.measure)?;
    let classes = l.slo_classes();
    let mut per_class = Vec::new();
    for (i, c) in l.cfg.classes.iter().enumerate() {
        let mut all = loadgen::Group::default();
        for (&(class, _), g) in &p.report.groups {
            if class as usize == i {
                all.latencies_ns.extend_from_slice(&g.latencies_ns);
                all.rejected += g.rejected;
            }
        }
        per_class.push(ClassAtOverload::of(c.name.clone(), &all, &classes[i]));
    }
    let worst_group = p
        .report
        .groups
        .iter()
        .filter(|(_, g)| g.latencies_ns.len() >= 100)
        .map(|(&(class, k), g)| {
            let c = class as usize;
            (k, ClassAtOverload::of(l.cfg.classes[c].name.clone(), g, &classes[c]))
        })
        .max_by(|a, b| (a.1.quantile_ms / a.1.slo_ms).total_cmp(&(b.1.quantile_ms / b.1.slo_ms)));
    let r = &p.report;
    let accepted = offered * r.tasks_admitted as f64 / r.tasks_offered.max(1) as f64;
    Ok(AdmissionResult {
        r_th,
        offered_load: offered,
        accepted_load: accepted,
        classes: per_class,
        worst_group,
        rejected_pct: 100.0 * r.rejected() as f64 / r.offered.max(1) as f64,
        overhead: p.overhead.clone(),
        simulated: Some(Box::new(sim_admission(l, r_th, offered, Some(HopDelay::from_measured(&p.overhead)))?)),
    })
}

impl AdmissionResult {
    /// Every class's p-quantile within its SLO (per class, over all fan-outs).
    pub fn holds(&self) -> bool {
        self.classes.iter().all(|c| c.quantile_ms <= c.slo_ms)
    }
}

/// `calibrate`: the largest R_th candidate that holds every class SLO at
/// `overload` × the max load, on the real testbed.
pub fn calibrate(
    l: &Loaded,
    pace: Pace,
    max_load: f64,
    progress: &dyn Progress,
) -> Result<(Option<f64>, Vec<AdmissionResult>), tailor_fanout::Error> {
    let a = l
        .cfg
        .admission
        .clone()
        .ok_or_else(|| tailor_fanout::Error::Config(format!("{}: needs an [admission] section", l.cfg.name)))?;
    let mut cands = a.r_th_candidates.clone();
    cands.sort_by(|x, y| y.total_cmp(x));
    let mut results = Vec::new();
    let mut best = None;
    progress.start(cands.len() as u64, "R_th candidates");
    for r_th in cands {
        let r = run_admission(l, pace, r_th, max_load * a.overload)?;
        progress.advance(results.len() as u64 + 1, &format!("R_th {r_th}"));
        progress.line(&format!(
            "  R_th {:.4}: offered {:.3}, accepted {:.3} ({:.1}% rejected), {}",
            r_th,
            r.offered_load,
            r.accepted_load,
            r.rejected_pct,
            r.classes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
        ));
        if let Some((k, g)) = &r.worst_group {
            progress.line(&format!("    worst group: {g} at fan-out {k}"));
        }
        if let Some(sim) = &r.simulated {
            progress.line(&format!(
                "    simulated (ratio{}): accepted {:.3} ({:.1}% rejected), {}{}",
                if a.reject_late { " + reject_late" } else { "" },
                sim.accepted_load,
                sim.rejected_pct,
                sim.classes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
                sim.worst_group.as_ref().map_or(String::new(), |(k, g)| format!("; worst group: {g} at fan-out {k}"))
            ));
        }
        let holds = r.holds();
        results.push(r);
        if holds {
            best = Some(r_th);
            break;
        }
    }
    Ok((best, results))
}

/// The side-by-side table.
pub fn format_table(l: &Loaded, results: &[SchemeResult]) -> String {
    let mut t = format!(
        "{} — {} task servers, fan-outs {:?}, {} class(es), queuing {:?}, time ×{}\n\n",
        l.cfg.name,
        l.cfg.servers,
        l.cfg.all_fanouts(),
        l.cfg.classes.len(),
        l.cfg.queuing,
        l.cfg.time_scale
    );
    t += "| scheme | real max load | next load probed (missed) | probes decided / at cap | simulated max load | real − sim | TF-EDFQ gain (real) | TF-EDFQ gain (sim) | overhead mean / p99 (µs) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let tf = results.iter().find(|r| r.scheme == Scheme::TfEdfq).map(|r| r.real_max_load);
    let tf_sim = results.iter().find(|r| r.scheme == Scheme::TfEdfq).and_then(|r| r.sim_max_load);
    for r in results {
        let sim = r.sim_max_load.map_or("—".into(), |s| format!("{s:.3}"));
        let diff = r.sim_max_load.map_or("—".into(), |s| format!("{:+.3}", r.real_max_load - s));
        let gain = match tf {
            Some(tf) if r.scheme != Scheme::TfEdfq && r.real_max_load > 0.0 => {
                format!("{:+.0}%", 100.0 * (tf / r.real_max_load - 1.0))
            }
            _ => "—".into(),
        };
        let gain_sim = match (tf_sim, r.sim_max_load) {
            (Some(tf), Some(x)) if r.scheme != Scheme::TfEdfq && x > 0.0 => format!("{:+.0}%", 100.0 * (tf / x - 1.0)),
            _ => "—".into(),
        };
        let next_missed = r
            .probes
            .iter()
            .filter(|p| !p.met && p.load > r.real_max_load)
            .map(|p| p.load)
            .fold(f64::INFINITY, f64::min);
        let decided = r.probes.iter().filter(|p| p.verdict != Verdict::Undecided).count();
        t += &format!(
            "| {} | {:.3} | {} | {} / {} | {} | {} | {} | {} | {:.0} / {} |\n",
            r.scheme.name(),
            r.real_max_load,
            if next_missed.is_finite() { format!("{next_missed:.3}") } else { "—".into() },
            decided,
            r.probes.len() - decided,
            sim,
            diff,
            gain,
            gain_sim,
            (r.overhead.mean_ns + r.overhead.dispatch_mean_ns) / 1e3,
            (r.overhead.p99_ns + r.overhead.dispatch_p99_ns) / 1000
        );
    }
    t
}
