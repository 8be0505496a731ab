//! What a run of the effect benchmark prints and writes: the markdown table (per seed, the
//! median, the spread and the cut against no sidecars on the same requests), the verdict
//! against the targets and the p99-vs-load plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tailor_sim::plot::{line_plot_styled, Line, Series};

use super::{EffectReport, EffectRun, LimitSeen, SidecarC, Sidecars};
use crate::record::upper_median;
use crate::workload::Workload;

fn runs_of<'a>(r: &'a EffectReport, mode: Sidecars, w: &str, rho: f64) -> Vec<&'a EffectRun> {
    r.runs.iter().filter(|x| x.sidecars == mode && x.workload == w && x.rho == rho).collect()
}

/// (workload, ρ) points in the order they ran.
fn points(r: &EffectReport) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for x in &r.runs {
        if !out.iter().any(|(w, rho)| *w == x.workload && *rho == x.rho) {
            out.push((x.workload.clone(), x.rho));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    out
}

/// Each run's p99 over the p99 of the run without sidecars with the same seed (the same
/// requests), in `runs`' order; runs without such a partner are left out.
fn paired_ratios(r: &EffectReport, runs: &[&EffectRun]) -> Vec<f64> {
    runs.iter()
        .filter_map(|x| {
            let none = r.runs.iter().find(|n| {
                n.sidecars == Sidecars::None && n.workload == x.workload && n.rho == x.rho && n.seed == x.seed
            })?;
            Some(x.summary.latency_ms.p99 / none.summary.latency_ms.p99)
        })
        .collect()
}

/// The `c` column: fixed, or the adaptive limit's mean over the runs (lowest–highest seen).
fn c_cell(r: &EffectReport, runs: &[&EffectRun]) -> String {
    match r.c {
        SidecarC::Fixed(c) => c.to_string(),
        SidecarC::Adaptive => {
            let seen: Vec<LimitSeen> = runs.iter().filter_map(|x| x.limit).collect();
            if seen.is_empty() {
                return "adaptive".into();
            }
            let lo = seen.iter().map(|l| l.min).fold(f64::INFINITY, f64::min);
            let hi = seen.iter().map(|l| l.max).fold(f64::NEG_INFINITY, f64::max);
            format!("adaptive {:.1} ({lo:.0}–{hi:.0})", upper_median(&seen.iter().map(|l| l.mean).collect::<Vec<_>>()))
        }
    }
}

/// The markdown table: per workload, ρ and chain, the p99 of each seed, their median and
/// spread (highest ÷ lowest), the simulator's (median over seeds), the cut against no
/// sidecars (of the medians, and the median of each seed's ratio on the same requests),
/// reordering and errors.
pub fn table(r: &EffectReport) -> String {
    let mut s = String::from(
        "| workload | ρ | sidecars | c | p99 ms per seed | median p99 ms | spread | sim p99 ms | sim 80% of runs | seeds in it | measured ÷ sim | vs none | vs none per seed (median) | reordering % (sim) | errors | other jobs' CPUs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (w, rho) in points(r) {
        let none = upper_median(
            &runs_of(r, Sidecars::None, &w, rho).iter().map(|x| x.summary.latency_ms.p99).collect::<Vec<_>>(),
        );
        for mode in Sidecars::ALL {
            let runs = runs_of(r, mode, &w, rho);
            if runs.is_empty() {
                continue;
            }
            let p99: Vec<f64> = runs.iter().map(|x| x.summary.latency_ms.p99).collect();
            let spread = p99.iter().fold(0.0, |a: f64, &b| a.max(b)) / p99.iter().fold(f64::INFINITY, |a, &b| a.min(b));
            let (c, paired) = if mode == Sidecars::None {
                ("".to_string(), "".to_string())
            } else {
                let ratios = paired_ratios(r, &runs);
                let per: Vec<String> = ratios.iter().map(|x| format!("{:+.0}%", (x - 1.0) * 100.0)).collect();
                let paired = if ratios.is_empty() {
                    String::new()
                } else {
                    format!("{} ({:+.0}%)", per.join(" / "), (upper_median(&ratios) - 1.0) * 100.0)
                };
                (c_cell(r, &runs), paired)
            };
            let med = upper_median(&p99);
            let sim = upper_median(&runs.iter().filter_map(|x| x.predicted_p99_ms).collect::<Vec<_>>());
            let (band, in_band) = band_cells(&runs);
            let reord = upper_median(&runs.iter().map(|x| x.summary.reordering_pct).collect::<Vec<_>>());
            let sim_reord = upper_median(&runs.iter().filter_map(|x| x.predicted_reordering_pct).collect::<Vec<_>>());
            let errors: u64 = runs.iter().map(|x| x.summary.requests - x.summary.ok).sum();
            let cut = if mode == Sidecars::None || !none.is_finite() {
                "".into()
            } else {
                format!("{:+.0}%", (med / none - 1.0) * 100.0)
            };
            let per_seed: Vec<String> = p99.iter().map(|p| format!("{p:.1}")).collect();
            let _ = writeln!(
                s,
                "| {w} | {rho:.2} | {} | {c} | {} | {med:.1} | {spread:.2} | {sim:.1} | {band} | {in_band} | {:.2} | {cut} | {paired} | {reord:.1} ({sim_reord:.1}) | {errors} | {:.2} |",
                mode.name(),
                per_seed.join(" / "),
                med / sim,
                upper_median(&runs.iter().map(|x| x.cpu.background_cpus).collect::<Vec<_>>()),
            );
        }
    }
    s
}

/// The simulator's 10–90% band of runs like these (the medians of the runs' band ends) and
/// how many of the runs measured a p99 inside their own band.
fn band_cells(runs: &[&EffectRun]) -> (String, String) {
    let bands: Vec<[f64; 2]> = runs.iter().filter_map(|x| x.predicted_p99_band_ms).collect();
    if bands.is_empty() {
        return ("-".into(), "-".into());
    }
    let lo = upper_median(&bands.iter().map(|b| b[0]).collect::<Vec<_>>());
    let hi = upper_median(&bands.iter().map(|b| b[1]).collect::<Vec<_>>());
    let inside = runs.iter().filter(|x| in_band(x) == Some(true)).count();
    (format!("{lo:.0}–{hi:.0}"), format!("{inside} of {}", bands.len()))
}

/// Whether the run's measured p99 lies inside its simulated 10–90% band (None: no band).
fn in_band(x: &EffectRun) -> Option<bool> {
    x.predicted_p99_band_ms.map(|[lo, hi]| lo <= x.summary.latency_ms.p99 && x.summary.latency_ms.p99 <= hi)
}

/// Where each chain's own CPU goes: per process, µs per request beyond the demand (a tier's
/// service less the demand it burned), at zero demand (the calibration) and under load (the
/// median over each point's runs). The model charges the total; this says which process
/// grows with the load.
pub fn cpu_table(r: &EffectReport) -> String {
    let mut names: Vec<&str> = Vec::new();
    for p in
        r.calibrations.iter().flat_map(|c| &c.cpu_by_process_us).chain(r.runs.iter().flat_map(|x| &x.cpu_by_process_us))
    {
        if !names.contains(&p.process) {
            names.push(p.process);
        }
    }
    if names.is_empty() {
        return String::new();
    }
    // In the order a request meets them, then the generator (unknown names last).
    const PATH: [&str; 8] = ["edge", "sidecar0", "go-0", "sidecar1", "python", "sidecar2", "go-2", "generator"];
    names.sort_by_key(|n| PATH.iter().position(|p| p == n).unwrap_or(PATH.len()));
    let mut s = format!(
        "Each chain's own CPU per request beyond the demand, µs, by process (a tier's service less the demand it burned; `generator`: the benchmark's own process):\n\n| sidecars | at | {} | total |\n|---|---|{}---|\n",
        names.join(" | "),
        "---|".repeat(names.len())
    );
    let mut row = |mode: Sidecars, at: String, cells: Vec<Option<f64>>| {
        let total: f64 = cells.iter().flatten().sum();
        let cells: Vec<String> = cells.iter().map(|c| c.map_or("–".into(), |v| format!("{v:.0}"))).collect();
        let _ = writeln!(s, "| {} | {at} | {} | {total:.0} |", mode.name(), cells.join(" | "));
    };
    for mode in Sidecars::ALL {
        if let Some(c) = r.calibrations.iter().find(|c| c.sidecars == mode) {
            let cells =
                names.iter().map(|n| c.cpu_by_process_us.iter().find(|p| p.process == *n).map(|p| p.us)).collect();
            row(mode, "zero demand".into(), cells);
        }
        for (w, rho) in points(r) {
            let runs = runs_of(r, mode, &w, rho);
            if runs.is_empty() {
                continue;
            }
            let cells = names
                .iter()
                .map(|n| {
                    let beyond: Vec<f64> = runs
                        .iter()
                        .filter_map(|x| {
                            let p = x.cpu_by_process_us.iter().find(|p| p.process == *n)?;
                            Some(p.us - p.tier().map_or(0.0, |t| x.mean_demand_us[t]))
                        })
                        .collect();
                    (!beyond.is_empty()).then(|| upper_median(&beyond))
                })
                .collect();
            row(mode, format!("{w} ρ {rho:.2}"), cells);
        }
    }
    s
}

/// The targets: GAT-ordering sidecars' p99 (orf, orf-chain, orf-first) ≥ 30% below none's at the
/// highest load, and the simulator within 20% of every measured median p99.
pub fn verdict(r: &EffectReport) -> String {
    let mut s = String::new();
    let top = r.runs.iter().map(|x| x.rho).fold(0.0, f64::max);
    let mut within = (0, 0);
    let mut inside_band = (0, 0);
    for (w, rho) in points(r) {
        for mode in Sidecars::ALL {
            let runs = runs_of(r, mode, &w, rho);
            for inside in runs.iter().filter_map(|x| in_band(x)) {
                inside_band.1 += 1;
                inside_band.0 += usize::from(inside);
            }
            let m = upper_median(&runs.iter().map(|x| x.summary.latency_ms.p99).collect::<Vec<_>>());
            let sim = upper_median(&runs.iter().filter_map(|x| x.predicted_p99_ms).collect::<Vec<_>>());
            if m.is_finite() && sim.is_finite() {
                within.1 += 1;
                if (m / sim - 1.0).abs() <= 0.2 {
                    within.0 += 1;
                }
            }
        }
        if rho != top {
            continue;
        }
        let med = |mode| {
            upper_median(&runs_of(r, mode, &w, rho).iter().map(|x| x.summary.latency_ms.p99).collect::<Vec<_>>())
        };
        let (fifo, none) = (med(Sidecars::Fifo), med(Sidecars::None));
        for mode in [Sidecars::Orf, Sidecars::OrfChain, Sidecars::OrfFirst] {
            let p99 = med(mode);
            if p99.is_finite() && none.is_finite() {
                let change = (p99 / none - 1.0) * 100.0;
                // FIFO sidecars beside it only when that chain ran.
                let fifo = if fifo.is_finite() { format!("; fifo sidecars {fifo:.1} ms") } else { String::new() };
                let _ = writeln!(
                    s,
                    "- {w}, ρ {rho:.2}: {} sidecars' median p99 {p99:.1} ms vs none {none:.1} ms: {change:+.0}% (target ≤ −30%: {}){fifo}",
                    mode.name(),
                    if change <= -30.0 { "met" } else { "not met" }
                );
            }
        }
    }
    let _ = writeln!(s, "- simulator within 20% of the measured median p99 on {} of {} rows", within.0, within.1);
    if inside_band.1 > 0 {
        let _ = writeln!(
            s,
            "- measured p99 inside the simulator's 80% band of runs like it (10th–90th percentile of {} simulated runs of the same length) in {} of {} runs",
            crate::predict::PREDICTION_RUNS,
            inside_band.0,
            inside_band.1
        );
    }
    s
}

/// p99 against ρ per chain, measured (solid) and simulated (dashed), for `w`.
pub fn plot(r: &EffectReport, w: Workload) -> String {
    let mut series = Vec::new();
    for mode in Sidecars::ALL {
        let pts = |sim: bool| -> Vec<(f64, f64)> {
            points(r)
                .into_iter()
                .filter(|(pw, _)| pw == w.name())
                .filter_map(|(_, rho)| {
                    let runs = runs_of(r, mode, w.name(), rho);
                    let v: Vec<f64> = if sim {
                        runs.iter().filter_map(|x| x.predicted_p99_ms).collect()
                    } else {
                        runs.iter().map(|x| x.summary.latency_ms.p99).collect()
                    };
                    (!v.is_empty()).then(|| (rho, upper_median(&v)))
                })
                .collect()
        };
        let (m, s) = (pts(false), pts(true));
        if !m.is_empty() {
            series.push(Series::new(format!("sidecars: {}", mode.name()), m));
            series.push(Series::new(format!("sidecars: {} (sim)", mode.name()), s).styled(Line::Dashed));
        }
    }
    line_plot_styled(
        &format!("3-tier chain of plain Go/Python services, {w} demand: median p99 over seeds"),
        "utilization ρ",
        "p99 latency (ms)",
        &series,
        &[(Line::Solid, "measured"), (Line::Dashed, "simulated")],
    )
}

/// Writes `effect.json`, the table and one plot per workload into `out`; returns the files.
pub fn write(r: &EffectReport, workloads: &[Workload], out: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![
        ("effect.json".to_string(), serde_json::to_string_pretty(r).expect("serializes")),
        ("effect.md".to_string(), format!("{}\n{}\n{}", table(r), verdict(r), cpu_table(r))),
    ];
    files.extend(workloads.iter().map(|w| (format!("effect-p99-{w}.svg"), plot(r, *w))));
    super::super::write_files(out, files)
}
