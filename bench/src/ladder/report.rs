//! The ladder's report: the per-step table (Markdown), the plot (SVG) and the files they go to.

use std::path::{Path, PathBuf};

use super::{LadderReport, StepSummary};

/// Markdown table of the per-step medians.
pub fn table(report: &LadderReport) -> String {
    let mut s = String::from(
        "| spinners | stock p50 (µs) | stock p99 (µs) | enforcing p50 (µs) | enforcing p99 (µs) | best-effort CPU, enforcing (% of a CPU) |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    for &n in &report.options.steps {
        let get = |arm: &str| report.steps.iter().find(|s| s.arm == arm && s.spinners == n);
        let (Some(a), Some(b)) = (get("stock"), get("enforcing")) else { continue };
        let star = |s: &StepSummary| if s.windows_excluded > 0 { "*" } else { "" };
        s.push_str(&format!(
            "| {n} | {:.0} | {:.0}{} | {:.0} | {:.0}{} | {:.0} |\n",
            a.p50_us,
            a.p99_us,
            star(a),
            b.p50_us,
            b.p99_us,
            star(b),
            b.best_effort_cpu_pct
        ));
    }
    s.push_str(&format!(
        "\np99 growth 0→{} spinners: stock {:.2}×, enforcing {:.2}×; enforcing p50 change {:.2}×\n",
        report.options.steps.last().copied().unwrap_or(0),
        report.stock_p99_growth,
        report.enforcing_p99_growth,
        report.enforcing_p50_change
    ));
    if report.steps.iter().any(|s| s.windows_excluded > 0) {
        s.push_str("\n`*`: a window whose attribution tag disagreed with its arm was excluded (listed in the JSON).\n");
    }
    s
}

/// SVG: p50 and p99 per arm against the number of spinners.
pub fn plot(report: &LadderReport) -> String {
    use tailor_plot::{line_plot_styled, Line, Series};
    let mut series = Vec::new();
    for arm in ["stock", "enforcing"] {
        for (style, f) in
            [(Line::Solid, (|s: &StepSummary| s.p99_us) as fn(&StepSummary) -> f64), (Line::Dotted, |s| s.p50_us)]
        {
            let points =
                report.steps.iter().filter(|s| s.arm == arm).map(|s| (s.spinners as f64, f(s) / 1e3)).collect();
            series.push(Series::new(arm, points).styled(style));
        }
    }
    line_plot_styled(
        "Probe latency vs co-located spinners",
        "best-effort spinners",
        "latency (ms)",
        &series,
        &[(Line::Solid, "p99"), (Line::Dotted, "p50")],
    )
}

/// Writes ladder.json, ladder.md and ladder.svg into `dir`.
pub fn write_outputs(report: &LadderReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let files = [
        (dir.join("ladder.json"), serde_json::to_string_pretty(report).expect("serializes")),
        (dir.join("ladder.md"), table(report)),
        (dir.join("ladder.svg"), plot(report)),
    ];
    for (path, text) in &files {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
