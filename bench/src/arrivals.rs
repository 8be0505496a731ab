//! Intended send times of an open-loop run: Poisson from a seed, or replayed
//! from a CSV trace. Times are nanoseconds from the start of the run.

use std::path::Path;

use tailor_core::{Nanos, Rng};

/// `n` Poisson arrivals at `rate_per_sec`: exponential gaps from `Rng::derive(seed, 1)`
/// (stream 1 is the arrivals; the demands use stream 2, so changing one never shifts the other).
/// The first arrival is one gap after 0.
pub fn poisson(n: usize, rate_per_sec: f64, seed: u64) -> Vec<Nanos> {
    assert!(rate_per_sec > 0.0, "poisson: rate must be > 0");
    let mut rng = Rng::derive(seed, 1);
    let mean_gap_ns = 1e9 / rate_per_sec;
    let mut t = 0.0f64;
    (0..n)
        .map(|_| {
            t += rng.exp(mean_gap_ns);
            t.round() as Nanos
        })
        .collect()
}

/// Why a trace could not be read: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {source}")]
pub struct TraceError {
    pub file: String,
    pub source: tailor_sim::trace::TraceError,
}

/// Arrival times from a CSV file with an `arrival_ms` column (ascending), as
/// `tailor sim` reads traces. Times are shifted so the first arrival is at 0;
/// with `rate_per_sec`, gaps are rescaled to that mean rate. The trace repeats
/// (shifted by its own span plus one mean gap) until `n` arrivals.
pub fn from_trace(path: &Path, n: usize, rate_per_sec: Option<f64>) -> Result<Vec<Nanos>, TraceError> {
    let ms = tailor_sim::trace::read_arrival_ms(path)
        .map_err(|source| TraceError { file: path.display().to_string(), source })?;
    let first = ms[0];
    let mut ns: Vec<f64> = ms.iter().map(|m| (m - first) * 1e6).collect();
    let span = *ns.last().unwrap();
    let mean_gap = if ns.len() > 1 { span / (ns.len() - 1) as f64 } else { 1e6 };
    if let Some(rate) = rate_per_sec {
        let scale = (1e9 / rate) / mean_gap.max(1.0);
        ns.iter_mut().for_each(|t| *t *= scale);
    }
    let period = *ns.last().unwrap() + if let Some(rate) = rate_per_sec { 1e9 / rate } else { mean_gap };
    Ok((0..n).map(|i| (ns[i % ns.len()] + (i / ns.len()) as f64 * period).round() as Nanos).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_gaps_have_the_right_mean_and_unit_cv() {
        let n = 200_000;
        let t = poisson(n, 500.0, 7);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
        let gaps: Vec<f64> = std::iter::once(t[0]).chain(t.windows(2).map(|w| w[1] - w[0])).map(|g| g as f64).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        // Mean 2 ms; its standard error is 2 ms / sqrt(n) = 4.5 µs: 5 SE.
        assert!((mean - 2e6).abs() < 22_500.0, "mean gap {mean}");
        // CV of an exponential is 1; its standard error here is ~0.003.
        assert!((sd / mean - 1.0).abs() < 0.015, "cv {}", sd / mean);
        // Same seed, same arrivals; another seed, others.
        assert_eq!(poisson(100, 500.0, 7), t[..100]);
        assert_ne!(poisson(100, 500.0, 8), t[..100]);
    }

    #[test]
    fn trace_is_shifted_rescaled_and_repeated() {
        let dir = std::env::temp_dir().join(format!("tailor-bench-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.csv");
        std::fs::write(&f, "id,arrival_ms\n0,10\n1,11\n2,13\n").unwrap();
        assert_eq!(from_trace(&f, 5, None).unwrap(), vec![0, 1_000_000, 3_000_000, 4_500_000, 5_500_000]);
        // Mean gap 1.5 ms → 1000/s is a 1 ms gap: scale 2/3.
        let t = from_trace(&f, 3, Some(1000.0)).unwrap();
        assert_eq!(t, vec![0, 666_667, 2_000_000]);
        std::fs::write(&f, "id,arrival_ms\n0,10\n1,9\n").unwrap();
        let err = from_trace(&f, 3, None).unwrap_err().to_string();
        assert!(err.starts_with(&f.display().to_string()) && err.contains("line 3: arrival_ms 9"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
