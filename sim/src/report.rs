//! Turning runs into what people read: aligned text tables, CSV and an SVG
//! plot of p99 against load, one line per policy.

use std::fmt::Write as _;

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

/// A line series for [`line_plot`].
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

/// A self-contained SVG line plot; log-scale y when the values span more than 20×.
pub fn line_plot(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 440.0, 70.0, 190.0, 40.0, 50.0);
    let pts = series.iter().flat_map(|s| s.points.iter()).filter(|p| p.0.is_finite() && p.1.is_finite() && p.1 > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 1.0, 10.0);
    }
    if x1 == x0 {
        x1 = x0 + 1.0;
    }
    let log = y1 / y0 > 20.0;
    let (ty0, ty1) = if log {
        (y0.log10().floor(), y1.log10().ceil())
    } else {
        (0.0, nice_ticks(0.0, y1 * 1.05).last().copied().unwrap_or(y1).max(y1 * 1.05))
    };
    let ty = |y: f64| if log { y.log10() } else { y };
    let px = |x: f64| ml + (x - x0) / (x1 - x0) * (w - ml - mr);
    let py = |y: f64| mt + (1.0 - (ty(y) - ty0) / (ty1 - ty0).max(1e-12)) * (h - mt - mb);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        (ml + w - mr) / 2.0,
        xml(title)
    );
    // Axes and ticks.
    let _ = writeln!(s, r#"<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, h - mb, w - mr, h - mb);
    let _ = writeln!(s, r#"<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>"#, h - mb);
    for x in nice_ticks(x0, x1) {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text><line x1="{0}" y1="{}" x2="{0}" y2="{}" stroke="black"/>"#,
            px(x),
            h - mb + 16.0,
            trim_num(x),
            h - mb,
            h - mb + 4.0
        );
    }
    let yticks: Vec<f64> =
        if log { (ty0 as i32..=ty1 as i32).map(|e| 10f64.powi(e)).collect() } else { nice_ticks(0.0, ty1) };
    for y in yticks {
        let yy = if log { py(y) } else { mt + (1.0 - y / ty1) * (h - mt - mb) };
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{ml}" y1="{yy}" x2="{}" y2="{yy}" stroke="#ddd"/>"##,
            ml - 6.0,
            yy + 4.0,
            trim_num(y),
            w - mr
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (ml + w - mr) / 2.0,
        h - 10.0,
        xml(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {0})">{}{}</text>"#,
        (mt + h - mb) / 2.0,
        xml(y_label),
        if log { " (log)" } else { "" }
    );
    for (i, se) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.1 > 0.0 && p.1.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for p in &path {
            let (cx, cy) = p.split_once(',').unwrap();
            let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>"#);
        }
        let ly = mt + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            w - mr + 10.0,
            w - mr + 30.0,
            w - mr + 36.0,
            ly + 4.0,
            xml(&se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Round-numbered ticks (1, 2, 2.5 or 5 × 10^k apart) covering [lo, hi], about five of them.
fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = (hi - lo) / 5.0;
    if !(raw.is_finite() && raw > 0.0) {
        return vec![lo];
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..).map(|i| first + i as f64 * step).take_while(|&t| t <= hi + step * 1e-9).collect()
}

fn trim_num(x: f64) -> String {
    // Log axes go down to 1e-4 and below (latency CCDFs): "0" would hide them.
    if x != 0.0 && x.abs() < 0.001 {
        return format!("{x:e}");
    }
    let s = if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// p99 vs load (utilization, or rps when `by_rps`) per policy, from a sweep.
pub fn sweep_plot(title: &str, runs: &[RunOutput], by_rps: bool) -> String {
    let mut series: Vec<Series> = Vec::new();
    for r in runs {
        let x = if by_rps { r.offered_rps } else { r.utilization };
        match series.iter_mut().find(|s| s.label == r.policy) {
            Some(s) => s.points.push((x, r.summary.latency_ms.p99)),
            None => series.push(Series { label: r.policy.clone(), points: vec![(x, r.summary.latency_ms.p99)] }),
        }
    }
    line_plot(
        title,
        if by_rps { "offered load (requests/s)" } else { "utilization of the busiest service" },
        "p99 latency (ms)",
        &series,
    )
}
