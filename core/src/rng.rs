//! A small, fast, seedable random number generator (xoshiro256++).
//!
//! Tailor ships its own generator instead of depending on `rand` so that a
//! scenario seed reproduces the same run on every platform and every future
//! version: `rand` reserves the right to change its value streams.

/// xoshiro256++ (Blackman & Vigna), seeded through SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole stream is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let mut next = || {
            sm = sm.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    /// An independent generator for sub-stream `stream` of `seed` (e.g. one per
    /// service, one per load point), so adding a stream never shifts another.
    pub fn derive(seed: u64, stream: u64) -> Self {
        Rng::new(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93).rotate_left(17))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform on [0, 1), 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        unit_f64(self.next_u64() >> 11)
    }

    /// Uniform on (0, 1]: safe to take the logarithm of.
    #[inline]
    pub fn next_f64_open0(&mut self) -> f64 {
        unit_f64((self.next_u64() >> 11) + 1)
    }

    /// Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-64 · n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Exponential with the given mean.
    #[inline]
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.next_f64_open0().ln()
    }

    /// Standard normal (Box–Muller; one value per call, kept simple and stateless).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64_open0();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `k · 2^-53` for `k ≤ 2^53`. Through `i64`, which is exact for such `k` and
/// one instruction on x86-64 (`u64 as f64` is a branchy sequence there).
#[inline(always)]
pub(crate) fn unit_f64(k: u64) -> f64 {
    debug_assert!(k <= 1 << 53);
    k as i64 as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A source of uniform random bits, and the draws every distribution builds
/// on. [`crate::Dist::sample_ns`] takes any source: the simulator gives each
/// request a [`CounterRng`], everything else uses [`Rng`]. The provided
/// methods compute exactly what [`Rng`]'s inherent methods of the same names do.
pub trait RandomSource {
    /// 64 uniform random bits.
    fn next_u64(&mut self) -> u64;

    /// Uniform on [0, 1), 53 bits of precision.
    #[inline]
    fn next_f64(&mut self) -> f64 {
        unit_f64(self.next_u64() >> 11)
    }

    /// Uniform on (0, 1]: safe to take the logarithm of.
    #[inline]
    fn next_f64_open0(&mut self) -> f64 {
        unit_f64((self.next_u64() >> 11) + 1)
    }

    /// Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-64 · n).
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box–Muller; one value per call, kept simple and stateless).
    fn normal(&mut self) -> f64 {
        let u1 = self.next_f64_open0();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with mean 1, by the ziggurat method ([`crate::dist::exp1`]):
    /// one 64-bit draw, a table lookup and a multiply almost every time, no `ln`.
    #[inline]
    fn exp1(&mut self) -> f64 {
        crate::dist::exp1(self)
    }
}

impl RandomSource for Rng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        Rng::next_u64(self)
    }
}

/// SplitMix64's output function (Stafford's "Mix13"): a bijection on u64 with
/// full avalanche.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A counter-based generator for many short streams, one per item (the
/// simulator's requests): draw `i` of stream `index` is
/// `mix64(start + (i + 1)·γ)` with `start = mix64(key + index·δ)`, i.e. a
/// SplitMix64 sequence (Steele, Lea & Flood 2014; passes BigCrush) entered at
/// a point hashed from the index. Opening a stream costs one mix, a draw one
/// add and one mix, the state is one word — against four SplitMix64 rounds to
/// seed a [`Rng`] and 32 bytes of state.
///
/// Streams are independent as long as they do not overlap on SplitMix64's
/// single cycle of 2^64: with n streams of at most d draws each, the chance
/// that any two overlap is below n²·d / 2^64 (10^-6 for 10^6 requests of 10
/// draws each).
#[derive(Clone, Copy, Debug)]
pub struct CounterRng {
    state: u64,
}

impl CounterRng {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    const DELTA: u64 = 0xD1B5_4A32_D192_ED03;

    /// Stream `index` of the family `key` (derive `key` from the run's seed,
    /// e.g. `Rng::derive(seed, stream).next_u64()`).
    #[inline]
    pub fn stream(key: u64, index: u64) -> Self {
        CounterRng { state: mix64(key.wrapping_add(index.wrapping_mul(Self::DELTA))) }
    }
}

impl RandomSource for CounterRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        mix64(self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(8);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn uniform_and_exponential_moments() {
        let mut r = Rng::new(1);
        let n = 200_000;
        let mean_u: f64 = (0..n).map(|_| r.next_f64()).sum::<f64>() / n as f64;
        // SE of a uniform mean is 0.289/sqrt(n) = 0.00065; 5 SE.
        assert!((mean_u - 0.5).abs() < 0.0033, "{mean_u}");
        let mean_e: f64 = (0..n).map(|_| r.exp(2.0)).sum::<f64>() / n as f64;
        // SE = 2/sqrt(n) = 0.0045; 5 SE.
        assert!((mean_e - 2.0).abs() < 0.023, "{mean_e}");
        let below: Vec<u64> = (0..n).map(|_| r.below(10)).collect();
        assert!(below.iter().all(|&x| x < 10));
        let zeros = below.iter().filter(|&&x| x == 0).count() as f64 / n as f64;
        assert!((zeros - 0.1).abs() < 0.0035, "{zeros}");
    }

    #[test]
    fn rng_through_the_trait_draws_what_its_inherent_methods_draw() {
        let (mut a, mut b) = (Rng::new(5), Rng::new(5));
        for _ in 0..100 {
            assert_eq!(a.next_f64().to_bits(), RandomSource::next_f64(&mut b).to_bits());
            assert_eq!(a.next_f64_open0().to_bits(), RandomSource::next_f64_open0(&mut b).to_bits());
            assert_eq!(a.below(7), RandomSource::below(&mut b, 7));
            assert_eq!(a.normal().to_bits(), RandomSource::normal(&mut b).to_bits());
        }
    }

    #[test]
    fn counter_streams_are_uniform_and_uncorrelated_across_neighbouring_indices() {
        let key = Rng::derive(1, 1 << 32).next_u64();
        let n = 200_000u64;
        // The first draw of consecutive streams (what the simulator's requests use most).
        let first: Vec<f64> = (0..n).map(|i| CounterRng::stream(key, i).next_f64()).collect();
        let mean = first.iter().sum::<f64>() / n as f64;
        // SE of a uniform mean is 0.289/sqrt(n) = 0.00065; 5 SE.
        assert!((mean - 0.5).abs() < 0.0033, "{mean}");
        let var = first.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        // Var of a uniform is 1/12; the SE of the sample variance is sqrt(1/180/n) = 0.00017; 5 SE.
        assert!((var - 1.0 / 12.0).abs() < 0.00085, "{var}");
        // Lag-1 correlation between neighbouring streams and between draws 1
        // and 2 of one stream: SE 1/sqrt(n) = 0.0022; 5 SE.
        let corr = |xs: &[f64], ys: &[f64]| {
            let (mx, my) = (xs.iter().sum::<f64>() / xs.len() as f64, ys.iter().sum::<f64>() / ys.len() as f64);
            let cov: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
            let vx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
            let vy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
            cov / (vx * vy).sqrt()
        };
        let c = corr(&first[..first.len() - 1], &first[1..]);
        assert!(c.abs() < 0.011, "neighbouring streams correlate: {c}");
        let second: Vec<f64> = (0..n)
            .map(|i| {
                let mut r = CounterRng::stream(key, i);
                r.next_u64();
                r.next_f64()
            })
            .collect();
        let c = corr(&first, &second);
        assert!(c.abs() < 0.011, "draws 1 and 2 correlate: {c}");
        // Same key and index, same stream; another key, another stream.
        let a: Vec<u64> = {
            let mut r = CounterRng::stream(key, 3);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = CounterRng::stream(key, 3);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = CounterRng::stream(key ^ 1, 3);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
