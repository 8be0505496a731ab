//! `tailor fanout probe|sim|sequential`: one configuration examined on its own — a judged real
//! probe at one load, the simulated side alone, and the sequential-request budget split.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tailor_bench::fanout_demo;
use tailor_fanout::Scheme;

pub fn probe(config: &Path, scheme: Scheme, load: f64) -> Result<(), String> {
    let l = fanout_demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let pace = fanout_demo::Pace::of(&l, false);
    let p = fanout_demo::run_judged(&l, scheme, load, pace.judging()).map_err(|e| e.to_string())?;
    let classes = l.slo_classes();
    println!("{} load {:.3}: {}", scheme.name(), load, p.describe(&classes, pace.confidence));
    println!(
        "  offered {} completed {} errors {} dropped {} miss% {:.2} timer p99 late {} us overhead mean {:.0} p99 {} us dispatch mean {:.0} p99 {} us",
        p.report.offered,
        p.report.completed(),
        p.report.errors,
        p.report.dropped,
        p.tasks_missed_pct,
        p.timer_p99_late_ns / 1000,
        p.overhead.mean_ns / 1e3,
        p.overhead.p99_ns / 1000,
        p.overhead.dispatch_mean_ns / 1e3,
        p.overhead.dispatch_p99_ns / 1000
    );
    let ms = |x: Option<u64>| x.map_or("—".to_string(), |v| format!("{:.2}", v as f64 / 1e6));
    for ((c, k), j) in &p.groups {
        println!(
            "  class {c} k {k:>2}: n {:>6} p99 {:>6} ms, {:.0}% bounds [{}, {}] (SLO {:.1} ms, design effect {:.1}): {:?}",
            j.n,
            ms(Some(j.point_ns)),
            pace.confidence * 100.0,
            ms(j.lower_ns),
            ms(j.upper_ns),
            classes[*c as usize].slo_ns as f64 / 1e6,
            j.design_effect,
            j.verdict
        );
    }
    // The slowest queries of each class: where their time went (the slowest task's timeline).
    let ms = |ns: i64| ns as f64 / 1e6;
    for (ci, c) in classes.iter().enumerate() {
        let mut all: Vec<(u32, fanout_demo::QueryTrace)> = p
            .report
            .groups
            .iter()
            .filter(|(&(cl, _), _)| cl as usize == ci)
            .flat_map(|(&(_, k), g)| g.traces.iter().map(move |t| (k, *t)))
            .collect();
        all.sort_by_key(|(_, t)| std::cmp::Reverse(t.latency_ns));
        println!(
            "  class {ci} slowest (SLO {:.1} ms): latency = start late + to send + dispatch + queue + service + return + merge, ms",
            c.slo_ns as f64 / 1e6
        );
        for (k, t) in all.iter().take(6) {
            let s = &t.slowest;
            println!(
                "    k {k:>2} {:>6.2} = {:.2} + {:.2} + {:.2} + {:.2} + {:.2} (draw {:.3} ms unscaled, server {}) + {:.2} + {:.2}",
                ms(t.latency_ns as i64),
                ms(t.start_late_ns),
                ms(t.to_send_ns),
                ms(s.dispatch_ns()),
                ms(s.queue_ns()),
                ms(s.service_ns as i64),
                s.service_ns as f64 / 1e6 / l.cfg.time_scale,
                s.server,
                ms(s.return_ns()),
                ms(t.merge_ns)
            );
        }
    }
    Ok(())
}

/// `sim CONFIG SCHEME [OVERHEAD_US [OVERHEAD_P99_US]]`: the simulated side alone, optionally with a
/// per-task overhead (mean; with a p99, lognormal per hop as the demo's [`fanout_demo::HopDelay`], else fixed).
pub fn sim(config: &Path, scheme: Scheme, overhead_us: Option<f64>, extra_p99: Option<f64>) -> Result<(), String> {
    let l = fanout_demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let delay = match (overhead_us, extra_p99) {
        (Some(m), Some(p99)) => {
            // A lognormal per hop with half the given mean and p99 (Φ⁻¹(0.99) = 2.326), as a table.
            let (mean, q) = (m * 1e3 / 2.0, p99 * 1e3 / 2.0);
            let z = 2.326_347_874f64;
            let sigma = z - (z * z - 2.0 * (q / mean).max(1.0).ln()).max(0.0).sqrt();
            let mu = mean.ln() - sigma * sigma / 2.0;
            let mut h = tailor_core::latency::LatencyHistogram::new();
            let mut rng = tailor_core::rng::Rng::new(1);
            for _ in 0..200_000 {
                h.record((mu + sigma * rng.normal()).exp() as u64);
            }
            Some(fanout_demo::HopDelay::Measured(Arc::new(h)))
        }
        (Some(m), None) => Some(fanout_demo::HopDelay::fixed_total(m * 1e3)),
        _ => None,
    };
    let max = fanout_demo::search_sim(&l, scheme, delay).map_err(|e| e.to_string())?;
    println!("{} simulated max load {max:.3}", scheme.name());
    Ok(())
}

/// Requests of sequential queries (fan-outs e.g. `1,10,32`) at one load: the
/// proportional budget split against the equal one, side by side.
pub fn sequential(config: &Path, ks: Vec<u32>, load: f64) -> Result<(), String> {
    use tailor_core::tailguard::BudgetSplit;
    let l = fanout_demo::Loaded::load(config).map_err(|e| e.to_string())?;
    let s = &l.cfg.search;
    for split in [BudgetSplit::Equal, BudgetSplit::Proportional] {
        let p = fanout_demo::run_real_with(
            &l,
            Scheme::TfEdfq,
            load,
            None,
            Duration::from_secs_f64(s.warmup_s),
            Duration::from_secs_f64(s.measure_s),
            Some((ks.clone(), split)),
        )
        .map_err(|e| e.to_string())?;
        let classes = l.slo_classes();
        let per: Vec<String> = p
            .report
            .groups
            .iter()
            .map(|(&(c, _), g)| {
                let slo = classes[c as usize];
                format!(
                    "class {c}: n {} p99 {:.2} ms / SLO {:.1} ms",
                    g.latencies_ns.len(),
                    g.quantile(slo.p) as f64 / 1e6,
                    slo.slo_ns as f64 / 1e6
                )
            })
            .collect();
        println!(
            "{split:?} split, requests {ks:?} at load {load:.2}: {} | task miss {:.2}%",
            per.join(" | "),
            p.tasks_missed_pct
        );
    }
    Ok(())
}
