//! Turning runs into what people read: aligned text tables, CSV and an SVG
//! plot of p99 against load, one line per policy.

use std::fmt::Write as _;

pub use crate::plot::{line_plot, Line, Series};
use crate::sweep::{RunOutput, SearchResult};

/// A text table with right-aligned columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}{}", " ".repeat(width[i] - c.chars().count()), c))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(&mut out, header.to_vec());
    line(&mut out, width.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().iter().map(String::as_str).collect());
    for r in rows {
        line(&mut out, r.iter().map(String::as_str).collect());
    }
    out
}

fn f(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.4}")
    }
}

const RUN_HEADER: [&str; 14] = [
    "policy",
    "util",
    "rps",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p99.9_ms",
    "max_ms",
    "tput_rps",
    "reorder_%",
    "miss_%",
    "reject_%",
    "slo",
];

fn run_row(r: &RunOutput) -> Vec<String> {
    let s = &r.summary;
    let l = &s.latency_ms;
    vec![
        r.policy.clone(),
        format!("{:.3}", r.utilization),
        f(r.offered_rps),
        f(l.mean),
        f(l.p50),
        f(l.p90),
        f(l.p99),
        f(l.p999),
        f(l.max),
        f(s.throughput_rps),
        format!("{:.2}", s.reordering_pct),
        format!("{:.2}", s.deadline_miss_pct),
        format!("{:.2}", s.rejected_pct),
        match s.slo_met {
            Some(true) => "met".into(),
            Some(false) => "MISSED".into(),
            None => "-".into(),
        },
    ]
}

/// The table of one or more runs, plus per-class and per-fanout tails when
/// there is more than one class or fanout.
pub fn runs_table(runs: &[RunOutput]) -> String {
    let mut out = table(&RUN_HEADER, &runs.iter().map(run_row).collect::<Vec<_>>());
    let detailed = runs.iter().any(|r| r.summary.per_class_fanout.len() > 1 || r.summary.per_fanout.len() > 1);
    if detailed {
        let mut rows = Vec::new();
        for r in runs {
            for g in &r.summary.per_class_fanout {
                rows.push(vec![
                    r.policy.clone(),
                    format!("{:.3}", r.utilization),
                    g.class.clone(),
                    g.fanout.to_string(),
                    g.count.to_string(),
                    format!("p{}", g.percentile),
                    f(g.tail_ms),
                    f(g.slo_ms),
                    if g.met { "met".into() } else { "MISSED".into() },
                ]);
            }
            if r.summary.per_class_fanout.is_empty() {
                for k in &r.summary.per_fanout {
                    rows.push(vec![
                        r.policy.clone(),
                        format!("{:.3}", r.utilization),
                        "-".into(),
                        k.fanout.to_string(),
                        k.count.to_string(),
                        "p99".into(),
                        f(k.p99_ms),
                        "-".into(),
                        "-".into(),
                    ]);
                }
            }
        }
        out.push('\n');
        out.push_str(&table(&["policy", "util", "class", "fanout", "count", "pct", "tail_ms", "slo_ms", "slo"], &rows));
    }
    out
}

/// The max-load search results.
pub fn search_table(results: &[SearchResult]) -> String {
    let base = results.iter().find(|r| r.policy.starts_with("fifo")).map(|r| r.max_utilization);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                format!("{:.3}", r.max_utilization),
                f(r.max_rps),
                match base {
                    Some(b) if b > 0.0 => format!("{:+.1}%", 100.0 * (r.max_utilization / b - 1.0)),
                    _ => "-".into(),
                },
                r.probes.len().to_string(),
            ]
        })
        .collect();
    table(&["policy", "max_util", "max_rps", "vs_fifo", "probes"], &rows)
}

/// CSV, one row per run, stable column order.
pub fn runs_csv(runs: &[RunOutput]) -> String {
    let mut out = String::from(
        "scenario,policy,seed,utilization,offered_rps,requests,mean_ms,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,throughput_rps,reordering_pct,slowdown_p99,deadline_miss_pct,rejected_pct,slo_met,events,wall_seconds\n",
    );
    for r in runs {
        let s = &r.summary;
        let l = &s.latency_ms;
        let _ = writeln!(
            out,
            "{},{},{},{:.6},{:.6},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.4},{:.4},{:.4},{:.4},{},{},{:.4}",
            csv_field(&r.scenario),
            csv_field(&r.policy),
            r.seed,
            r.utilization,
            r.offered_rps,
            s.requests,
            l.mean,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            s.throughput_rps,
            s.reordering_pct,
            s.slowdown_p99,
            s.deadline_miss_pct,
            s.rejected_pct,
            s.slo_met.map_or(String::new(), |b| b.to_string()),
            r.events,
            r.wall_seconds
        );
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// p99 vs load (utilization, or rps when `by_rps`) per policy, from a sweep.
pub fn sweep_plot(title: &str, runs: &[RunOutput], by_rps: bool) -> String {
    let mut series: Vec<Series> = Vec::new();
    for r in runs {
        let x = if by_rps { r.offered_rps } else { r.utilization };
        match series.iter_mut().find(|s| s.label == r.policy) {
            Some(s) => s.points.push((x, r.summary.latency_ms.p99)),
            None => series.push(Series::new(r.policy.clone(), vec![(x, r.summary.latency_ms.p99)])),
        }
    }
    line_plot(
        title,
        if by_rps { "offered load (requests/s)" } else { "utilization of the busiest service" },
        "p99 latency (ms)",
        &series,
    )
}
