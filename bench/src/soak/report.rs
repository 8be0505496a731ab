//! A soak's analysis: each sampled series, its least-squares slope and growth flag, whether
//! what should come back after the load did, the per-window p99, and the report's text and CSV.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One sampled quantity over the run.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// (minutes since the run started, value).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// Least-squares slope per minute over the points at or after `from_min` (None with < 3).
    pub fn slope_per_min(&self, from_min: f64) -> Option<f64> {
        let pts: Vec<&(f64, f64)> = self.points.iter().filter(|p| p.0 >= from_min).collect();
        if pts.len() < 3 {
            return None;
        }
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }

    pub fn mean(&self) -> f64 {
        self.points.iter().map(|p| p.1).sum::<f64>() / self.points.len().max(1) as f64
    }

    pub fn first(&self) -> f64 {
        self.points.first().map_or(0.0, |p| p.1)
    }

    pub fn last(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.1)
    }

    pub fn max(&self) -> f64 {
        self.points.iter().map(|p| p.1).fold(f64::MIN, f64::max)
    }
}

/// How much fitted change over a run counts as growth, per kind of series: a leak of one
/// descriptor or thread a minute, or of a few MB over a soak, shows; allocator warm-up and the
/// jobs in flight at a sampling instant do not.
pub(super) fn growth_bound(name: &str, mean: f64) -> f64 {
    let (floor, share): (f64, f64) = if name.ends_with("rss_kb") {
        (8192.0, 0.10)
    } else if name.ends_with("fds") || name.ends_with("threads") {
        (4.0, 0.10)
    } else {
        (8.0, 0.25)
    };
    floor.max(share * mean.abs())
}

/// The p99 of one window of requests.
#[derive(Clone, Debug)]
pub struct Window {
    pub index: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One series' verdict.
#[derive(Clone, Debug)]
pub struct Trend {
    pub name: String,
    pub first: f64,
    pub last: f64,
    pub max: f64,
    pub slope_per_min: f64,
    /// Slope × the fitted span: how much the series grew over the run by the fit.
    pub fitted_change: f64,
    pub bound: f64,
    /// Slope over the second half of the fitted span: what the series does at the end.
    pub late_slope_per_min: f64,
    /// The fitted change exceeds the bound and the second half still rises at a rate that
    /// would: growth that goes on. A step that then holds (the allocator keeping what a
    /// stall's burst of connections took) exceeds the first test only, and is reported as
    /// such (`step`), not as growth.
    pub grows: bool,
    /// The last sample after the load stopped and the processes sat idle (None without a
    /// settling phase, or for RSS, which an allocator keeps).
    pub settled: Option<f64>,
}

impl Trend {
    /// Grew past the bound at some point but no longer rises: bounded.
    pub fn stepped(&self) -> bool {
        self.fitted_change > self.bound && !self.grows
    }

    /// Still above its starting level by more than the bound once the load has stopped and
    /// every idle timer has fired: what a burst took (connections, pool threads, slots) is
    /// given back; a leak is not. The verdict a short run can give — its fitted slope moves
    /// with the peak concurrency a stall happened to cause.
    pub fn kept_after_the_load(&self) -> bool {
        self.settled.is_some_and(|v| v > self.first + self.bound)
    }
}

/// Series that must come back to their starting level after the load: everything but RSS
/// (an allocator keeps freed memory; RSS is judged by its slope).
pub(super) fn comes_back(name: &str) -> bool {
    !name.ends_with("rss_kb")
}

/// A finished soak.
#[derive(Clone, Debug)]
pub struct SoakReport {
    pub what: String,
    pub minutes: f64,
    pub sample_every_s: f64,
    /// Slopes are fitted from here (minutes): the first window is warm-up (pools, allocator).
    pub fit_from_min: f64,
    pub trends: Vec<Trend>,
    pub windows: Vec<Window>,
    /// The samples the trends were fitted to.
    pub series: BTreeMap<String, Series>,
    /// How long the processes sat idle after the load before the settled samples (0: none).
    pub settle_s: f64,
}

impl SoakReport {
    /// A report without a settling phase (the unit tests' shorthand).
    #[cfg(test)]
    fn new(what: String, minutes: f64, every: Duration, fit_from_min: f64, series: &BTreeMap<String, Series>) -> Self {
        Self::with_settled(what, minutes, every, fit_from_min, series, &BTreeMap::new(), 0.0)
    }

    /// `series` sampled under load, `settled` the last sample of each after `settle_s` idle.
    pub(super) fn with_settled(
        what: String,
        minutes: f64,
        every: Duration,
        fit_from_min: f64,
        series: &BTreeMap<String, Series>,
        settled: &BTreeMap<String, f64>,
        settle_s: f64,
    ) -> Self {
        let trends = series
            .iter()
            .map(|(name, s)| {
                let slope = s.slope_per_min(fit_from_min).unwrap_or(0.0);
                let span =
                    s.points.last().map_or(0.0, |p| p.0) - fit_from_min.min(s.points.last().map_or(0.0, |p| p.0));
                let fitted_change = slope * span.max(0.0);
                let bound = growth_bound(name, s.mean());
                let late_from = s.points.last().map_or(0.0, |p| p.0) - span.max(0.0) / 2.0;
                let late_slope = s.slope_per_min(late_from).unwrap_or(slope);
                Trend {
                    name: name.clone(),
                    first: s.first(),
                    last: s.last(),
                    max: s.max(),
                    slope_per_min: slope,
                    fitted_change,
                    bound,
                    late_slope_per_min: late_slope,
                    grows: fitted_change > bound && late_slope * span.max(0.0) > bound,
                    settled: settled.get(name).copied().filter(|_| comes_back(name)),
                }
            })
            .collect();
        SoakReport {
            what,
            minutes,
            sample_every_s: every.as_secs_f64(),
            fit_from_min,
            trends,
            windows: Vec::new(),
            series: series.clone(),
            settle_s,
        }
    }

    /// Series still above their starting level after the load (see [`Trend::kept_after_the_load`]).
    pub fn kept_after_the_load(&self) -> Vec<&Trend> {
        self.trends.iter().filter(|t| t.kept_after_the_load()).collect()
    }

    /// Every sample: one row per sampling instant (minutes since the start), one column per
    /// series, so a growth verdict can be looked at in the run's own numbers.
    pub fn samples_csv(&self) -> String {
        let names: Vec<&String> = self.series.keys().collect();
        let mut out = String::from("minutes");
        for n in &names {
            let _ = write!(out, ",{n}");
        }
        out.push('\n');
        let rows = self.series.values().map(|s| s.points.len()).max().unwrap_or(0);
        for i in 0..rows {
            let t = self.series.values().find_map(|s| s.points.get(i)).map_or(0.0, |p| p.0);
            let _ = write!(out, "{t:.3}");
            for n in &names {
                match self.series[*n].points.get(i) {
                    Some(p) => {
                        let _ = write!(out, ",{}", p.1);
                    }
                    None => out.push(','),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Series that grew beyond their bound.
    pub fn growing(&self) -> Vec<&Trend> {
        self.trends.iter().filter(|t| t.grows).collect()
    }

    /// Markdown tables: one row per series, one per window.
    pub fn markdown(&self) -> String {
        let settling = self.settle_s > 0.0;
        let mut s = format!(
            "{}: {:.1} min, sampled every {:.0} s, slopes fitted from minute {:.0}{}\n\n\
             | series | first | last | max | slope / min | fitted change | bound | slope / min, 2nd half |{} growth? |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|{}---|\n",
            self.what,
            self.minutes,
            self.sample_every_s,
            self.fit_from_min,
            if settling { format!("; then {:.0} s idle", self.settle_s) } else { String::new() },
            if settling { " after the load |" } else { "" },
            if settling { "---:|" } else { "" },
        );
        for t in &self.trends {
            let after = match (settling, t.settled) {
                (false, _) => String::new(),
                (true, Some(v)) => format!(" {v:.0} |"),
                (true, None) => " — |".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0} | {:.0} | {:+.3} | {:+.1} | {:.0} | {:+.3} |{after} {} |",
                t.name,
                t.first,
                t.last,
                t.max,
                t.slope_per_min,
                t.fitted_change,
                t.bound,
                t.late_slope_per_min,
                if t.kept_after_the_load() {
                    "**KEPT AFTER THE LOAD**"
                } else if t.grows {
                    "**GROWS**"
                } else if t.stepped() {
                    "step, then flat"
                } else {
                    "flat"
                }
            );
        }
        s.push_str("\n| window (min) | requests | errors | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|\n");
        for w in &self.windows {
            let _ =
                writeln!(s, "| {} | {} | {} | {:.2} | {:.2} |", w.index + 1, w.requests, w.errors, w.p50_ms, w.p99_ms);
        }
        let p99s: Vec<f64> = self.windows.iter().skip(1).map(|w| w.p99_ms).collect();
        if p99s.len() >= 3 {
            let series = Series { points: p99s.iter().enumerate().map(|(i, &v)| (i as f64, v)).collect() };
            let _ = writeln!(
                s,
                "\nwindow p99 after the first: min {:.2} ms, max {:.2} ms, slope {:+.3} ms per window",
                p99s.iter().cloned().fold(f64::MAX, f64::min),
                p99s.iter().cloned().fold(f64::MIN, f64::max),
                series.slope_per_min(0.0).unwrap_or(0.0)
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_a_flat_series() {
        let line = Series { points: (0..20).map(|i| (i as f64 * 0.5, 100.0 + 3.0 * i as f64 * 0.5)).collect() };
        assert!((line.slope_per_min(0.0).unwrap() - 3.0).abs() < 1e-9);
        let flat = Series { points: (0..20).map(|i| (i as f64, 7.0 + (i % 2) as f64)).collect() };
        assert!(flat.slope_per_min(1.0).unwrap().abs() < 0.05);
        let mut m = BTreeMap::new();
        m.insert("x.fds".to_string(), line);
        m.insert("y.fds".to_string(), flat);
        let r = SoakReport::new("t".into(), 10.0, Duration::from_secs(5), 0.0, &m);
        assert_eq!(r.growing().len(), 1);
        assert_eq!(r.growing()[0].name, "x.fds");
        let csv = r.samples_csv();
        assert_eq!(csv.lines().next(), Some("minutes,x.fds,y.fds"));
        assert_eq!(csv.lines().count(), 21);
        assert_eq!(csv.lines().nth(2), Some("0.500,101.5,8"));
    }

    #[test]
    fn a_step_that_then_holds_is_not_growth_and_a_late_leak_is() {
        // 20 MB taken at minute 4 (a stall's connections) and kept: bounded.
        let step =
            Series { points: (0..60).map(|i| (i as f64 * 0.5, if i < 8 { 7_000.0 } else { 27_000.0 })).collect() };
        // Flat for the first half, then 2 MB a minute: unbounded.
        let late = Series {
            points: (0..60).map(|i| (i as f64 * 0.5, 7_000.0 + (i as f64 * 0.5 - 15.0).max(0.0) * 2_000.0)).collect(),
        };
        let mut m = BTreeMap::new();
        m.insert("step.rss_kb".to_string(), step);
        m.insert("late.rss_kb".to_string(), late);
        let r = SoakReport::new("t".into(), 30.0, Duration::from_secs(30), 1.0, &m);
        let trend = |n: &str| r.trends.iter().find(|t| t.name == n).unwrap().clone();
        assert!(trend("step.rss_kb").stepped() && !trend("step.rss_kb").grows, "{:?}", trend("step.rss_kb"));
        assert!(trend("late.rss_kb").grows, "{:?}", trend("late.rss_kb"));
        assert!(r.markdown().contains("step, then flat"));
    }

    #[test]
    fn what_a_burst_took_and_gave_back_is_no_leak_and_what_it_kept_is() {
        // Descriptors that follow a stall's burst up and down: a fit over one minute reads growth.
        let burst = Series {
            points: (0..60).map(|i| (i as f64 / 60.0, if (40..55).contains(&i) { 160.0 } else { 10.0 })).collect(),
        };
        let mut m = BTreeMap::new();
        m.insert("burst.fds".to_string(), burst.clone());
        m.insert("leak.fds".to_string(), burst);
        m.insert("x.rss_kb".to_string(), Series { points: (0..60).map(|i| (i as f64 / 60.0, 5000.0)).collect() });
        let settled: BTreeMap<String, f64> =
            [("burst.fds".to_string(), 11.0), ("leak.fds".to_string(), 60.0), ("x.rss_kb".to_string(), 9000.0)].into();
        let r = SoakReport::with_settled("t".into(), 1.0, Duration::from_secs(1), 0.0, &m, &settled, 21.0);
        let trend = |n: &str| r.trends.iter().find(|t| t.name == n).unwrap().clone();
        assert!(trend("burst.fds").fitted_change > trend("burst.fds").bound, "the slope alone would call it growth");
        assert!(!trend("burst.fds").kept_after_the_load());
        assert!(trend("leak.fds").kept_after_the_load());
        assert_eq!(trend("x.rss_kb").settled, None, "RSS is judged by its slope, not by coming back");
        assert_eq!(r.kept_after_the_load().len(), 1);
        let md = r.markdown();
        assert!(
            md.contains("then 21 s idle") && md.contains("after the load") && md.contains("KEPT AFTER THE LOAD"),
            "{md}"
        );
    }
}
