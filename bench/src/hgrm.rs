//! HdrHistogram's percentile-distribution text (`.hgrm`), the format Java
//! HdrHistogram's `outputPercentileDistribution` and wrk2 print, so the
//! HdrHistogram plotter (hdrhistogram.github.io/HdrHistogram/plotFiles.html)
//! and existing scripts read our runs.

use std::fmt::Write;

use hdrhistogram::Histogram;
use tailor_core::Nanos;

/// Significant decimal digits every histogram here keeps (0.1% value error).
pub const SIGFIG: u8 = 3;

/// A latency histogram in microseconds (1 µs .. 1 hour), from nanosecond samples.
pub fn histogram_us(latencies: &[Nanos]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, SIGFIG).expect("static bounds are valid");
    for &ns in latencies {
        h.saturating_record((ns / 1_000).max(1));
    }
    h
}

/// The percentile distribution of `h` (values in µs) printed in milliseconds,
/// exactly as Java's `outputPercentileDistribution(out, 5, 1000.0)` does:
/// five ticks per half distance, a header, one line per percentile step
/// (value, percentile, cumulative count, 1/(1−percentile)), the 100% line
/// without the last column, and the mean/max/bucket footer.
pub fn percentile_distribution(h: &Histogram<u64>) -> String {
    const SCALE: f64 = 1000.0; // µs recorded, ms printed
    let p = SIGFIG as usize;
    let mut out = String::new();
    let _ = write!(out, "{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / SCALE;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(out, "{value:12.p$} {q:2.12} {total:10} {:14.2}", 1.0 / (1.0 - q));
            } else {
                let _ = writeln!(out, "{value:12.p$} {q:2.12} {total:10}");
            }
        }
    }
    let _ = writeln!(out, "#[Mean    = {:12.p$}, StdDeviation   = {:12.p$}]", h.mean() / SCALE, h.stdev() / SCALE);
    let _ = writeln!(out, "#[Max     = {:12.p$}, Total count    = {:12}]", h.max() as f64 / SCALE, h.len());
    let _ = writeln!(out, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), sub_bucket_count(SIGFIG));
    out
}

/// HdrHistogram's sub-bucket count: the power of two holding 2·10^sigfig.
fn sub_bucket_count(sigfig: u8) -> u64 {
    let single_unit = 2 * 10u64.pow(sigfig as u32);
    single_unit.next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_matches_hdrhistogram_java() {
        // 1..=1000 ms, one each.
        let lat: Vec<Nanos> = (1..=1000u64).map(|ms| ms * 1_000_000).collect();
        let h = histogram_us(&lat);
        let text = percentile_distribution(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "       Value     Percentile TotalCount 1/(1-Percentile)");
        assert_eq!(lines[1], "");
        // First line: the minimum at percentile 0, count 1.
        assert_eq!(lines[2], "       1.000 0.000000000000          1           1.00");
        // Median: 500 ms (within 0.1%), half the count, 1/(1-0.5) = 2.
        let median = lines.iter().find(|l| l.contains(" 0.500000000000 ")).unwrap();
        let cols: Vec<&str> = median.split_whitespace().collect();
        assert!((cols[0].parse::<f64>().unwrap() - 500.0).abs() <= 0.5, "{median}");
        assert_eq!(cols[2], "500");
        assert_eq!(cols[3], "2.00");
        // The 100% line has three columns and the total count.
        let last = lines.iter().rev().find(|l| !l.starts_with('#')).unwrap();
        let cols: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(cols.len(), 3, "{last}");
        assert_eq!(cols[1], "1.000000000000");
        assert_eq!(cols[2], "1000");
        // Cumulative counts never decrease; percentiles ascend.
        let rows: Vec<(f64, u64)> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                (c[1].parse().unwrap(), c[2].parse().unwrap())
            })
            .collect();
        assert!(rows.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let n = lines.len();
        assert!(
            lines[n - 3].starts_with("#[Mean    =      500.") && lines[n - 3].contains("StdDeviation   =      288.")
        );
        assert!(
            lines[n - 2].starts_with("#[Max     =     1000.")
                && lines[n - 2].ends_with("Total count    =         1000]")
        );
        assert_eq!(lines[n - 1], format!("#[Buckets = {:12}, SubBuckets     =         2048]", h.buckets()));
    }

    #[test]
    fn empty_histogram_still_has_header_and_footer() {
        let text = percentile_distribution(&histogram_us(&[]));
        assert!(text.starts_with("       Value"));
        assert!(text.contains("Total count    =            0]"));
    }
}
