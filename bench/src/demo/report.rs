//! A demo's report: the progress line per run, the results table, the verdict, report.md and
//! the p99 plot per workload.

use std::fmt::Write as _;

use tailor_sim::plot::{line_plot_styled, Line, Series};
use tailor_sim::report::table;

use super::{DemoConfig, DemoReport, RunResult};
use crate::record::RunSummary;
use crate::workload::Workload;

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// The simulated runs' 10–90% p99 band, e.g. `51.1–90.8`.
fn band(r: &RunResult) -> String {
    r.predicted_p99_band_ms.map_or("-".into(), |[lo, hi]| format!("{lo:.1}–{hi:.1}"))
}

fn errors(s: &RunSummary) -> u64 {
    s.http_errors + s.timeouts + s.transport_errors + s.dropped
}

pub(super) fn row_line(r: &RunResult) -> String {
    let s = &r.summary;
    format!(
        "{:<8} {:<9} ρ={:.2} (effective {:.2}) {:>5.0} req/s  p50 {:>7.2}  p99 {:>7.2} (sim {:>7}, 80% of simulated runs {})  p99.9 {:>7.2}  mean {:>6.2} ms  reorder {:>4.1}%  errors {}  background {:.1} CPUs{}  overhead {:.0} µs/req{}",
        r.mode_name,
        r.workload,
        r.load,
        r.effective_utilization,
        s.offered_rps,
        s.latency_ms.p50,
        s.latency_ms.p99,
        fmt_opt(r.predicted_p99_ms, 2),
        band(r),
        s.latency_ms.p999,
        s.latency_ms.mean,
        s.reordering_pct,
        errors(s),
        r.cpu.background_cpus,
        match r.disturbed_runs {
            0 => String::new(),
            n => format!(" (quietest of {} attempts)", n + 1),
        },
        r.overhead_per_request_us,
        match (r.handoff_us, r.handoff_wakeup_us) {
            (Some(all), Some(wake)) => format!(
                "  hand-offs {:.2}/req, {all:.0} µs each ({wake:.0} µs wake-up)",
                r.handoffs_per_request
            ),
            _ => String::new(),
        }
    )
}

/// The results table (plain text, one row per run).
pub fn results_table(report: &DemoReport) -> String {
    let header = [
        "mode",
        "workload",
        "ρ",
        "eff ρ",
        "req/s",
        "p50 ms",
        "p99 ms",
        "sim p99",
        "sim 10–90%",
        "p99/sim",
        "p99.9 ms",
        "mean ms",
        "thr req/s",
        "reorder %",
        "p99/ideal",
        "errors",
        "bg CPUs",
    ];
    let rows: Vec<Vec<String>> = report
        .runs
        .iter()
        .map(|r| {
            let s = &r.summary;
            vec![
                r.mode_name.to_string(),
                r.workload.clone(),
                format!("{:.2}", r.load),
                format!("{:.2}", r.effective_utilization),
                format!("{:.0}", s.offered_rps),
                format!("{:.2}", s.latency_ms.p50),
                format!("{:.2}", s.latency_ms.p99),
                fmt_opt(r.predicted_p99_ms, 2),
                band(r),
                fmt_opt(r.predicted_p99_ms.map(|p| s.latency_ms.p99 / p), 2),
                format!("{:.2}", s.latency_ms.p999),
                format!("{:.2}", s.latency_ms.mean),
                format!("{:.0}", s.throughput_rps),
                format!("{:.1}", s.reordering_pct),
                format!("{:.2}", s.ideal.ratio.p99),
                errors(s).to_string(),
                match r.disturbed_runs {
                    0 => format!("{:.2}", r.cpu.background_cpus),
                    n => format!("{:.2} ({n} rerun{})", r.cpu.background_cpus, if n == 1 { "" } else { "s" }),
                },
            ]
        })
        .collect();
    table(&header, &rows)
}

/// For each workload at the highest load: orf's p99 change versus linux and
/// fifo, and whether the project's goals are met (≥ 40% below linux, ≥ 25% below
/// fifo; docs/demo.md says where they come from).
pub fn verdict(report: &DemoReport) -> String {
    let mut s = String::new();
    let mut workloads: Vec<&str> = report.runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let top = report.runs.iter().filter(|r| r.workload == w).map(|r| r.load).fold(0.0, f64::max);
        let at = |m: &str| report.runs.iter().find(|r| r.workload == w && r.load == top && r.mode_name == m);
        let Some(orf) = at("orf").or_else(|| at("orf-coop")) else { continue };
        for base in ["linux", "fifo"] {
            let Some(b) = at(base) else { continue };
            let cut = 100.0 * (1.0 - orf.summary.latency_ms.p99 / b.summary.latency_ms.p99);
            let target = if base == "linux" { 40.0 } else { 25.0 };
            let _ = writeln!(
                s,
                "- {w}, ρ={top:.2}: {} p99 {:.2} ms vs {base} {:.2} ms: {} (goal ≥ {target:.0}% lower: {}); reordering {:.1}% vs {:.1}%; mean {:.2} vs {:.2} ms; throughput {:.0} vs {:.0} req/s",
                orf.mode_name,
                orf.summary.latency_ms.p99,
                b.summary.latency_ms.p99,
                if cut >= 0.0 { format!("{cut:.0}% lower") } else { format!("{:.0}% higher", -cut) },
                if cut >= target { "met" } else { "not met" },
                orf.summary.reordering_pct,
                b.summary.reordering_pct,
                orf.summary.latency_ms.mean,
                b.summary.latency_ms.mean,
                orf.summary.throughput_rps,
                b.summary.throughput_rps,
            );
        }
    }
    s
}

/// Per mode, how well the simulator predicted the runs: in how many the measured p99 is
/// within 20% of the simulated median, and in how many it lies inside the simulated runs'
/// 10–90% band (a perfect model puts 8 in 10 runs there; at high load one run's p99 can be
/// outside ±20% of a perfect prediction, which is what the band shows).
pub fn prediction_summary(report: &DemoReport) -> String {
    let mut s = String::new();
    for m in modes_in_run_order(report) {
        let runs: Vec<&RunResult> = report.runs.iter().filter(|r| r.mode_name == m).collect();
        let judged: Vec<(f64, [f64; 2], f64)> = runs
            .iter()
            .filter_map(|r| Some((r.predicted_p99_ms?, r.predicted_p99_band_ms?, r.summary.latency_ms.p99)))
            .collect();
        if judged.is_empty() {
            continue;
        }
        let within = judged.iter().filter(|(sim, _, p99)| (p99 / sim - 1.0).abs() <= 0.2).count();
        let inside = judged.iter().filter(|(_, [lo, hi], p99)| lo <= p99 && p99 <= hi).count();
        let (lo, hi) = judged
            .iter()
            .map(|(sim, _, p99)| p99 / sim)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let _ = writeln!(
            s,
            "- {m}: measured p99 within 20% of the simulated median in {within} of {n} runs ({lo:.2}–{hi:.2}×), inside the simulated runs' 10–90% band in {inside} of {n}",
            n = judged.len()
        );
    }
    s
}

/// Each mode once, in the order the runs came (they interleave across loads).
fn modes_in_run_order(report: &DemoReport) -> Vec<&'static str> {
    let mut modes: Vec<&'static str> = Vec::new();
    for r in &report.runs {
        if !modes.contains(&r.mode_name) {
            modes.push(r.mode_name);
        }
    }
    modes
}

pub(super) fn report_markdown(cfg: &DemoConfig, report: &DemoReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tailor demo\n");
    let _ = writeln!(
        s,
        "{} tiers on loopback sharing {} CPUs; per-tier demand = TailClipper §5.1's workloads scaled to a {} ms mean; seed {}; {} measured requests per run after {} warm-up. ρ = λ·(E[total demand] + the chain's own CPU per request)/CPUs: how busy the CPUs are. Latency from the intended send time (open loop). Reordering % as in docs/metrics.md. `sim p99`: the median p99 of {} simulated runs of the same chain at the measured rate and chain cost, each as long as the measured run (runs/*.toml is one of them), and `sim 10–90%` where 80% of those runs' p99 fall; `p99/ideal`: measured / the G/G/{} FIFO recursion fed with the measured arrivals and demands.\n",
        report.tiers, report.cores, report.mean_ms_per_tier, report.seed, cfg.requests, cfg.warmup, super::PREDICTION_RUNS, report.cores
    );
    let _ = writeln!(
        s,
        "Load generator alone: {:.0} req/s completed of {:.0} offered (p99 send lag {:.0} µs). The chain with zero demand, unloaded: p50 {:.0} µs, {:.0} µs of CPU per request (the simulator adds it as a CPU stage on the shared host), {:.0} µs per hop beyond it (the simulator's network delay); rates from {:.0} µs of overhead per request{}. `bg CPUs`: CPUs' worth used by other processes during the run (a quiet machine has ~0); a run during which they took ≥ {} is run again, up to {} times, and the quietest attempt kept (\"N reruns\"). CPU idle states: {}.\n",
        report.generator_max_rps, report.generator_offered_rps, report.generator_p99_lag_us, report.calibration.p50_us, report.calibration.overhead_us, report.calibration.hop_us,
        report.calibration.rate_overhead_us, if cfg.overhead_us.is_some() { " (--overhead-us)" } else { "" },
        super::DISTURBED_BACKGROUND_CPUS, super::RERUNS_WHEN_DISTURBED,
        if report.idle_states == "off" { "off (/dev/cpu_dma_latency held at 0: idle CPUs poll)" } else { "the machine's" }
    );
    let _ = writeln!(
        s,
        "ORF: c = {}. `orf` is kernel-enforced by key ordering (each job at a SCHED_FIFO level from its GAT, {} µs of GAT per level); `orf-band` and `rr` through the agent's band, slice {} µs; `orf-coop` cooperatively (docs/runtime.md).\n",
        report.orf_c, report.bucket_us, report.slice_us
    );
    let _ = writeln!(s, "```\n{}```\n", results_table(report));
    for sk in &report.skipped {
        let _ = writeln!(s, "Skipped `{}`: {}\n", sk.mode, sk.reason);
    }
    let p = prediction_summary(report);
    if !p.is_empty() {
        let _ = writeln!(s, "## The simulator's prediction of each mode\n\n{p}");
    }
    let v = verdict(report);
    if !v.is_empty() {
        let _ = writeln!(s, "## ORF against the Linux default and a FIFO pool (highest load)\n\n{v}");
    }
    for w in &cfg.workloads {
        let _ = writeln!(s, "![p99 vs load, {w}](p99-{w}.svg)\n");
    }
    let _ = writeln!(s, "Per run: `runs/<mode>-<workload>-rho<ρ>.{{json,csv,hgrm,toml}}`; all runs: `demo.json`; each run's tier and agent logs: `logs/<mode>-<workload>-rho<ρ>-*.log`. Took {:.0} s.", report.wall_seconds);
    s
}

pub(super) fn plot(report: &DemoReport, w: Workload) -> String {
    let mut series = Vec::new();
    for m in modes_in_run_order(report) {
        let pts = |f: &dyn Fn(&RunResult) -> Option<f64>| -> Vec<(f64, f64)> {
            report
                .runs
                .iter()
                .filter(|r| r.mode_name == m && r.workload == w.name())
                .filter_map(|r| f(r).map(|y| (r.load, y)))
                .collect()
        };
        series.push(Series::new(m, pts(&|r| Some(r.summary.latency_ms.p99))));
        series.push(Series::new(m, pts(&|r| r.predicted_p99_ms)).styled(Line::Dashed));
    }
    line_plot_styled(
        &format!("tailor demo: p99 vs load, {w}"),
        "utilization ρ",
        "p99 latency (ms)",
        &series,
        &[(Line::Solid, "measured"), (Line::Dashed, "simulated")],
    )
}
