//! The standard exponential by the ziggurat method (Marsaglia & Tsang 2000,
//! "The Ziggurat Method for Generating Random Variables", J. Stat. Softw. 5(8)),
//! 256 layers, in the form of Doornik's ZIGNOR and rand_distr: one 64-bit
//! draw gives the layer (low 8 bits) and a uniform (high 53 bits). About 98.9%
//! of draws are accepted at once with a table lookup, a multiply and a compare;
//! the rest take the exact wedge test against e^-x or, below layer 0, the tail
//! R + Exp(1) (memorylessness). The result is exactly exponential up to f64
//! rounding: no approximation of the density anywhere.

use super::ziggurat_tables::{F, X};
use crate::rng::{unit_f64, RandomSource};

/// Where layer 0's rectangle ends and the tail begins (`X[1]`).
const R: f64 = 7.697_117_470_131_05;

/// One draw of Exp(1).
#[inline(always)]
pub fn exp1<S: RandomSource + ?Sized>(rng: &mut S) -> f64 {
    let bits = rng.next_u64();
    let i = (bits & 0xff) as usize;
    let x = unit_f64(bits >> 11) * X[i];
    if x < X[i + 1] {
        x
    } else {
        exp1_slow(rng, i, x)
    }
}

/// The rare cases: `x` is in layer `i`'s wedge (or layer 0's tail).
#[cold]
#[inline(never)]
fn exp1_slow<S: RandomSource + ?Sized>(rng: &mut S, mut i: usize, mut x: f64) -> f64 {
    loop {
        if i == 0 {
            return R - rng.next_f64_open0().ln();
        }
        if F[i + 1] + (F[i] - F[i + 1]) * rng.next_f64() < (-x).exp() {
            return x;
        }
        let bits = rng.next_u64();
        i = (bits & 0xff) as usize;
        x = unit_f64(bits >> 11) * X[i];
        if x < X[i + 1] {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{CounterRng, Rng};

    #[test]
    fn ziggurat_tables_follow_the_recurrence() {
        const V: f64 = 0.003_949_659_822_581_557;
        assert_eq!(X[1], R);
        assert_eq!(X[256], 0.0);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-14 * a.abs().max(b.abs()).max(1e-300);
        assert!(close(X[0], V / (-R).exp()), "X[0] = {}", X[0]);
        for i in 2..256 {
            let want = -(V / X[i - 1] + (-X[i - 1]).exp()).ln();
            assert!(close(X[i], want), "X[{i}] = {} vs {want}", X[i]);
        }
        for i in 0..=256 {
            assert!(close(F[i], (-X[i]).exp()), "F[{i}]");
        }
        // Every layer has area V: layer i (1..=255) is X[i] wide and F[i+1] - F[i] high.
        for i in 1..256 {
            let area = X[i] * (F[i + 1] - F[i]);
            assert!((area - V).abs() < 1e-12, "layer {i}: area {area}");
        }
        // Layer 0: the rectangle under e^-R plus the tail.
        assert!((R * F[1] + (-R).exp() - V).abs() < 1e-15);
    }

    /// Exact CDF of Exp(1).
    fn cdf(x: f64) -> f64 {
        1.0 - (-x).exp()
    }

    /// Kolmogorov–Smirnov statistic of `xs` (sorted in place) against Exp(1).
    fn ks(xs: &mut [f64]) -> f64 {
        xs.sort_unstable_by(f64::total_cmp);
        let n = xs.len() as f64;
        xs.iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).max((i + 1) as f64 / n - f)
            })
            .fold(0.0, f64::max)
    }

    fn check(what: &str, mut xs: Vec<f64>) {
        let n = xs.len() as f64;
        assert!(xs.iter().all(|&x| x >= 0.0 && x.is_finite()), "{what}: a draw out of range");
        // Mean 1, SE 1/sqrt(n); 5 SE.
        let mean = xs.iter().sum::<f64>() / n;
        assert!((mean - 1.0).abs() < 5.0 / n.sqrt(), "{what}: mean {mean}");
        // Variance 1; the SE of the sample variance is sqrt((μ4 − σ⁴)/n) = sqrt(8/n); 5 SE.
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        assert!((var - 1.0).abs() < 5.0 * (8.0 / n).sqrt(), "{what}: variance {var}");
        // Quantiles, including deep in layer 0's tail (beyond R = 7.7): the
        // count above q is Binomial(n, e^-q); 5 SE.
        for q in [0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 6.0, 7.0, R, 8.0, 9.0] {
            let p = (-q).exp();
            let above = xs.iter().filter(|&&x| x > q).count() as f64;
            let se = (n * p * (1.0 - p)).sqrt();
            assert!((above - n * p).abs() < 5.0 * se + 1.0, "{what}: {above} above {q}, want {}", n * p);
        }
        // KS against the exact CDF: the 0.1% critical value is 1.95/sqrt(n).
        let d = ks(&mut xs);
        assert!(d * n.sqrt() < 1.95, "{what}: KS D = {d} (sqrt(n)·D = {})", d * n.sqrt());
    }

    #[test]
    fn ziggurat_exponential_has_the_exact_distribution() {
        let n = 2_000_000;
        let mut rng = Rng::new(42);
        check("xoshiro", (0..n).map(|_| exp1(&mut rng)).collect());
        // One draw per counter stream, as the simulator's requests take them.
        let key = Rng::new(7).next_u64();
        check("counter streams", (0..n as u64).map(|i| exp1(&mut CounterRng::stream(key, i))).collect());
    }

    #[test]
    fn ziggurat_wedges_and_tail_are_exact() {
        // Draws that fall in a wedge or the tail (≈ 1.1%) are the slow path;
        // make sure those alone have the right shape: conditioned on x > R the
        // excess over R is Exp(1).
        let mut rng = Rng::new(3);
        let mut tail = Vec::new();
        while tail.len() < 20_000 {
            let x = exp1(&mut rng);
            if x > R {
                tail.push(x - R);
            }
        }
        let n = tail.len() as f64;
        let mean = tail.iter().sum::<f64>() / n;
        assert!((mean - 1.0).abs() < 5.0 / n.sqrt(), "tail excess mean {mean}");
        let d = ks(&mut tail);
        assert!(d * n.sqrt() < 1.95, "tail KS D = {d}");
    }
}
