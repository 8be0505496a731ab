//! Empirical service times from a tailbench quantile table, sampled exactly as the TailGuard authors do.
//!
//! A table holds q[0..9999], q[i] = F⁻¹(i/10⁴). The authors' sampler
//! (data/tailbench/README.md) draws U, ii = ⌊U·10⁴⌋ and then
//! - ii = 0: uniform on [q0/2, q0];
//! - 1 ≤ ii ≤ 9998: uniform on q[ii] ± (q[ii+1] − q[ii])/2;
//! - ii = 9999: q[9999] + Exp(mean q[9999]/2).
//!
//! So the sampled variable is a mixture of 10⁴ equally weighted pieces: 9,999
//! uniforms (some of zero width, i.e. point masses, where the table repeats a
//! value; neighbouring pieces may overlap or leave gaps, because both halves of
//! piece ii use the *forward* difference) and one shifted exponential. Its exact
//! CDF is therefore piecewise linear with jumps below q[9999] and exponential
//! above; we precompute it as sorted knots, so `cdf` and `quantile` are exact
//! for the sampling model (up to f64 rounding), which is what the planner needs
//! to reproduce the authors' x_p^u(k) tables.
//!
//! A piece whose lower end would be negative (only when q[ii+1] > 3·q[ii]) is
//! clamped at 0 by the conversion to [`Nanos`]; the CDF (evaluated only at
//! x ≥ 0) accounts for that automatically, the analytic mean and variance do
//! not (no real table is affected: it would need a 3× jump between neighbours).

use std::fmt;
use std::path::{Path, PathBuf};

use super::table::{read_table, TableError};
use crate::rng::RandomSource;
use crate::time::NANOS_PER_MILLI;

/// Lines in a tailbench quantile table.
pub const TABLE_LEN: usize = 10_000;
/// Probability weight of each table line.
const W: f64 = 1.0 / TABLE_LEN as f64;

/// A loaded quantile table, ready to sample. Values are in nanoseconds (f64).
pub struct EmpiricalTable {
    path: PathBuf,
    /// Pieces 0..=9998: (lower end, width). Piece 9999 is the exponential tail.
    pieces: Box<[(f64, f64)]>,
    tail_start: f64,
    tail_mean: f64,
    /// Exact CDF below `tail_start`: knots (x, F(x)), x non-decreasing. Two
    /// knots share an x where F jumps (left limit first, then the value).
    knot_x: Box<[f64]>,
    knot_f: Box<[f64]>,
    /// 1 − F at the last knot: the mass of the exponential tail (≈ 10⁻⁴).
    tail_mass: f64,
    mean: f64,
    variance: f64,
}

impl fmt::Debug for EmpiricalTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmpiricalTable")
            .field("path", &self.path)
            .field("mean_ns", &self.mean)
            .field("tail_start_ns", &self.tail_start)
            .finish_non_exhaustive()
    }
}

impl EmpiricalTable {
    /// Loads `path` (10,000 ascending, non-negative floats in ms) and multiplies every value by `scale`.
    pub fn load(path: &Path, scale: f64) -> Result<Self, TableError> {
        let q = read_table(path, Some((TABLE_LEN, "one quantile F^-1(i/10^4) per line, i = 0..9999, in ms")))?;
        Ok(Self::from_quantiles_ms(path.to_owned(), &q, scale))
    }

    /// Builds from already validated quantiles in ms (length [`TABLE_LEN`], ascending).
    pub(crate) fn from_quantiles_ms(path: PathBuf, q_ms: &[f64], scale: f64) -> Self {
        assert_eq!(q_ms.len(), TABLE_LEN);
        let q: Vec<f64> = q_ms.iter().map(|v| v * scale * NANOS_PER_MILLI as f64).collect();
        let n = TABLE_LEN;
        let mut pieces = Vec::with_capacity(n - 1);
        pieces.push((q[0] / 2.0, q[0] / 2.0));
        for i in 1..n - 1 {
            let d = q[i + 1] - q[i];
            pieces.push((q[i] - d / 2.0, d));
        }
        let tail_start = q[n - 1];
        let tail_mean = q[n - 1] / 2.0;

        // Moments of the sampling model (see module doc).
        let mut m1 = 0.75 * q[0];
        let mut m2 = (q[0] / 2.0).powi(2) / 12.0 + (0.75 * q[0]).powi(2);
        for i in 1..n - 1 {
            let d = q[i + 1] - q[i];
            m1 += q[i];
            m2 += q[i] * q[i] + d * d / 12.0;
        }
        m1 += tail_start + tail_mean;
        m2 += (tail_start + tail_mean).powi(2) + tail_mean * tail_mean;
        let mean = m1 * W;
        let variance = (m2 * W - mean * mean).max(0.0);

        let (knot_x, knot_f) = cdf_knots(&pieces);
        let tail_mass = (1.0 - knot_f.last().copied().unwrap_or(0.0)).max(0.0);
        EmpiricalTable {
            path,
            pieces: pieces.into_boxed_slice(),
            tail_start,
            tail_mean,
            knot_x: knot_x.into_boxed_slice(),
            knot_f: knot_f.into_boxed_slice(),
            tail_mass,
            mean,
            variance,
        }
    }

    /// The file this table came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One draw of the authors' sampler, in ns (f64, ≥ 0 only if the table is; see module doc).
    #[inline]
    pub fn sample<R: RandomSource + ?Sized>(&self, rng: &mut R) -> f64 {
        let ii = ((rng.next_f64() * TABLE_LEN as f64) as usize).min(TABLE_LEN - 1);
        if ii == TABLE_LEN - 1 {
            self.tail_start + self.tail_mean * super::exp1(rng)
        } else {
            let (lo, width) = self.pieces[ii];
            lo + width * rng.next_f64()
        }
    }

    /// Mean of the sampling model, ns.
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// Variance of the sampling model, ns².
    pub fn variance(&self) -> f64 {
        self.variance
    }

    /// P(X ≤ x) under the sampling model, x in ns.
    pub fn cdf(&self, x: f64) -> f64 {
        if x >= self.tail_start {
            return 1.0 - self.tail_mass * (-(x - self.tail_start) / self.tail_mean).exp();
        }
        // Knots with knot_x <= x; the last of them gives the right-continuous value.
        let j = self.knot_x.partition_point(|&k| k <= x);
        if j == 0 {
            return 0.0;
        }
        if j == self.knot_x.len() {
            return self.knot_f[j - 1];
        }
        let (x0, x1, f0, f1) = (self.knot_x[j - 1], self.knot_x[j], self.knot_f[j - 1], self.knot_f[j]);
        f0 + (f1 - f0) * (x - x0) / (x1 - x0)
    }

    /// Smallest x (ns) with P(X ≤ x) ≥ p under the sampling model; +∞ for p ≥ 1.
    pub fn quantile(&self, p: f64) -> f64 {
        if p >= 1.0 {
            return f64::INFINITY;
        }
        let f_last = 1.0 - self.tail_mass;
        if p > f_last {
            return self.tail_start + self.tail_mean * (self.tail_mass / (1.0 - p)).ln();
        }
        let j = self.knot_f.partition_point(|&f| f < p);
        if j == 0 {
            return self.knot_x[0].max(0.0);
        }
        let (x0, x1, f0, f1) = (self.knot_x[j - 1], self.knot_x[j], self.knot_f[j - 1], self.knot_f[j]);
        (x0 + (x1 - x0) * (p - f0) / (f1 - f0)).max(0.0)
    }
}

/// The exact CDF of the equally weighted uniform pieces, as knots, by a sweep
/// over the pieces' end points: between consecutive end points the CDF is
/// linear with a slope that changes by ±W/width at each end; zero-width pieces
/// are jumps of W.
fn cdf_knots(pieces: &[(f64, f64)]) -> (Vec<f64>, Vec<f64>) {
    // (x, slope change, jump)
    let mut events: Vec<(f64, f64, f64)> = Vec::with_capacity(2 * pieces.len());
    for &(lo, width) in pieces {
        if width > 0.0 {
            events.push((lo, W / width, 0.0));
            events.push((lo + width, -W / width, 0.0));
        } else {
            events.push((lo, 0.0, W));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut xs = Vec::with_capacity(events.len() + 8);
    let mut fs = Vec::with_capacity(events.len() + 8);
    let (mut f, mut slope) = (0.0f64, 0.0f64);
    let mut i = 0;
    while i < events.len() {
        let x = events[i].0;
        if let Some(&px) = xs.last() {
            f += slope * (x - px);
        }
        let (mut dslope, mut jump) = (0.0, 0.0);
        while i < events.len() && events[i].0 == x {
            dslope += events[i].1;
            jump += events[i].2;
            i += 1;
        }
        xs.push(x);
        fs.push(f);
        if jump > 0.0 {
            f += jump;
            xs.push(x);
            fs.push(f);
        }
        slope += dslope;
    }
    // Rounding can leave F a hair above 1 − W or make it dip; keep it a CDF.
    let cap = 1.0 - W * 0.5;
    let mut run = 0.0f64;
    for v in fs.iter_mut() {
        run = run.max(v.min(cap));
        *v = run;
    }
    (xs, fs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(q_ms: impl Fn(usize) -> f64) -> EmpiricalTable {
        let q: Vec<f64> = (0..TABLE_LEN).map(q_ms).collect();
        EmpiricalTable::from_quantiles_ms("toy".into(), &q, 1.0)
    }

    #[test]
    fn cdf_of_a_linear_table_is_uniform_inside() {
        // q[i] = i·10⁻⁴ ms (= 100 ns per line): piece 0 is a point mass at 0,
        // pieces i ≥ 1 tile [100i − 50, 100i + 50] ns exactly, so
        // F(x) = W + W·(x − 50)/100 = (x + 50)/10⁶ up to the last piece's end.
        let t = toy(|i| i as f64 * 1e-4);
        for &x in &[50_000.0, 123_456.0, 500_000.0, 999_000.0, 999_800.0] {
            let want = (x + 50.0) / 1e6;
            assert!((t.cdf(x) - want).abs() < 1e-9, "x = {x}: {}", t.cdf(x));
            assert!((t.quantile(want) - x).abs() < 1e-3, "x = {x}: {}", t.quantile(want));
        }
        // Flat from the last piece's end to the tail start at 999,900 ns.
        assert!((t.cdf(999_899.0) - (1.0 - W)).abs() < 1e-9);
        // The atom at 0 (piece 0 has zero width) and flat up to piece 1 at 50 ns.
        assert_eq!(t.cdf(0.0), W);
        assert_eq!(t.cdf(50.0), W);
        assert_eq!(t.quantile(W), 0.0);
    }

    #[test]
    fn point_masses_and_tail() {
        // All lines equal: pieces 1..=9998 are point masses at 1 ms (9,998·W),
        // piece 0 is uniform on [0.5, 1] ms, the tail is 1 ms + Exp(0.5 ms).
        let t = toy(|_| 1.0);
        let ms = 1e6;
        assert!((t.cdf(0.75 * ms) - 0.5 * W).abs() < 1e-12);
        assert!((t.cdf(ms - 1.0) - W * (1.0 - 2.0 / ms)).abs() < 1e-12);
        assert!((t.cdf(ms) - (1.0 - W)).abs() < 1e-12);
        assert!((t.cdf(1.5 * ms) - (1.0 - W * (-1.0f64).exp())).abs() < 1e-12);
        assert_eq!(t.quantile(0.5), ms);
        assert!((t.quantile(1.0 - W * (-1.0f64).exp()) - 1.5 * ms).abs() < 1e-3);
        // mean: W·(0.75 + 9998·1 + 1.5) ms
        assert!((t.mean() - W * (0.75 + 9998.0 + 1.5) * ms).abs() < 1e-6);
    }
}
