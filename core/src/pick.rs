//! Which `k` of `n` servers a fan-out query goes to: uniformly, or by weight
//! (heterogeneous servers, some picked more often, as TailGuard's SaS testbed
//! sent 80% of one class to one cluster). The fan-out handler and the
//! simulator both pick through [`DistinctPicker`], so a simulated query spreads
//! over its servers exactly as a real one does, draw for draw.

use crate::rng::RandomSource;

/// Picks `k` distinct indices out of `0..n`.
///
/// Uniform: a partial Fisher–Yates shuffle of `0..n` (refilled every pick, so
/// a pick's result depends only on the generator, not on earlier picks).
/// Weighted: one draw at a time, each index with probability proportional to
/// its weight among those not picked yet (successive sampling without
/// replacement; for `k = 1` exactly proportional to the weights).
#[derive(Clone, Debug)]
pub struct DistinctPicker {
    n: usize,
    /// Empty: uniform.
    weights: Vec<f64>,
    /// The weights not yet picked in the current pick (weighted only).
    left: Vec<f64>,
    picked: Vec<u32>,
    /// Uniform picks of a few: the positions of `0..n` the shuffle moved and
    /// what they hold now, latest last.
    moved: Vec<(u32, u32)>,
}

/// Uniform picks of at most this many keep only the moved positions.
const FEW: usize = 16;

impl DistinctPicker {
    /// Every index equally likely.
    pub fn uniform(n: usize) -> Self {
        DistinctPicker { n, weights: Vec::new(), left: Vec::new(), picked: Vec::with_capacity(n), moved: Vec::new() }
    }

    /// Index `i` picked with weight `weights[i]`; all-equal weights pick
    /// uniformly (through the uniform path, so the draws match [`Self::uniform`]).
    ///
    /// # Panics
    /// If a weight is not finite and positive: callers validate their
    /// configuration first and name the field.
    pub fn weighted(weights: Vec<f64>) -> Self {
        assert!(weights.iter().all(|w| w.is_finite() && *w > 0.0), "weights must be finite and positive: {weights:?}");
        let n = weights.len();
        if weights.windows(2).all(|w| w[0] == w[1]) {
            return Self::uniform(n);
        }
        DistinctPicker { n, left: Vec::with_capacity(n), weights, picked: Vec::with_capacity(n), moved: Vec::new() }
    }

    /// How many indices there are to pick from.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `k` distinct indices (`k ≤ n`), in the order drawn.
    pub fn pick<R: RandomSource>(&mut self, rng: &mut R, k: usize) -> &[u32] {
        assert!(k <= self.n, "cannot pick {k} distinct of {}", self.n);
        self.picked.clear();
        if self.weights.is_empty() && k <= FEW {
            // The same shuffle without writing `0..n` out first (a query of
            // fan-out 1 out of 100 servers wrote 100 indices for one): step
            // `i` picks what position `j` holds and moves what `i` held there.
            let moved = &mut self.moved;
            moved.clear();
            for i in 0..k {
                let j = i + rng.below((self.n - i) as u64) as usize;
                let holds = |x: usize| moved.iter().rev().find(|m| m.0 == x as u32).map_or(x as u32, |m| m.1);
                let (at_i, at_j) = (holds(i), holds(j));
                self.picked.push(at_j);
                moved.push((j as u32, at_i));
            }
            return &self.picked;
        }
        if self.weights.is_empty() {
            self.picked.extend(0..self.n as u32);
            for i in 0..k {
                let j = i + rng.below((self.n - i) as u64) as usize;
                self.picked.swap(i, j);
            }
            self.picked.truncate(k);
            return &self.picked;
        }
        self.left.clear();
        self.left.extend_from_slice(&self.weights);
        for _ in 0..k {
            let total: f64 = self.left.iter().sum();
            let mut u = rng.next_f64() * total;
            // Rounding can leave `u` just above the last weight: take the last one left.
            let mut pick = self.left.iter().rposition(|&x| x > 0.0).unwrap_or(0);
            for (i, &x) in self.left.iter().enumerate() {
                if x > 0.0 && u < x {
                    pick = i;
                    break;
                }
                u -= x;
            }
            self.picked.push(pick as u32);
            self.left[pick] = 0.0;
        }
        &self.picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn distinct(v: &[u32]) -> bool {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.windows(2).all(|w| w[0] != w[1])
    }

    #[test]
    fn uniform_picks_are_distinct_and_every_index_is_equally_likely() {
        let mut p = DistinctPicker::uniform(10);
        let mut rng = Rng::new(1);
        let mut count = [0u32; 10];
        for _ in 0..100_000 {
            let v = p.pick(&mut rng, 3);
            assert_eq!(v.len(), 3);
            assert!(distinct(v), "{v:?}");
            for &i in v {
                count[i as usize] += 1;
            }
        }
        // Each index is in a pick with probability 3/10: 30,000 ± 5σ (σ ≈ 145).
        for (i, &c) in count.iter().enumerate() {
            assert!((c as f64 - 30_000.0).abs() < 725.0, "index {i}: {c}");
        }
        assert_eq!(p.pick(&mut rng, 10).len(), 10);
        assert!(p.pick(&mut rng, 0).is_empty());
    }

    #[test]
    fn a_single_weighted_pick_follows_the_weights_and_a_full_pick_takes_all() {
        let w = vec![1.0, 2.0, 4.0, 1.0];
        let mut p = DistinctPicker::weighted(w.clone());
        let mut rng = Rng::new(2);
        let mut count = [0u32; 4];
        let n = 80_000;
        for _ in 0..n {
            count[p.pick(&mut rng, 1)[0] as usize] += 1;
        }
        for i in 0..4 {
            let expect = n as f64 * w[i] / 8.0;
            let sd = (n as f64 * w[i] / 8.0 * (1.0 - w[i] / 8.0)).sqrt();
            assert!((count[i] as f64 - expect).abs() < 5.0 * sd, "index {i}: {} vs {expect}", count[i]);
        }
        for _ in 0..1000 {
            let v = p.pick(&mut rng, 4);
            assert!(distinct(v) && v.len() == 4, "{v:?}");
        }
        // Two of four: the heaviest (4 of 8) is in a pair with probability
        // 1/2 + Σ_{j≠2} (w_j/8)·(4/(8 − w_j)) = 1/2 + 2·(1/8)(4/7) + (2/8)(4/6).
        let mut heavy = 0;
        for _ in 0..n {
            heavy += p.pick(&mut rng, 2).contains(&2) as u32;
        }
        let expect = 0.5 + 2.0 * (1.0 / 8.0) * (4.0 / 7.0) + (2.0 / 8.0) * (4.0 / 6.0);
        let sd = (expect * (1.0 - expect) / n as f64).sqrt();
        assert!((heavy as f64 / n as f64 - expect).abs() < 5.0 * sd, "{heavy} of {n} vs {expect}");
    }

    #[test]
    fn a_pick_of_a_few_equals_the_full_shuffle() {
        // The partial Fisher–Yates shuffle over all of `0..n`, as larger picks run it.
        fn shuffled(n: usize, k: usize, rng: &mut Rng) -> Vec<u32> {
            let mut all: Vec<u32> = (0..n as u32).collect();
            for i in 0..k {
                let j = i + rng.below((n - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(k);
            all
        }
        for n in [1, 2, 5, 16, 17, 100] {
            let mut p = DistinctPicker::uniform(n);
            let (mut ra, mut rb) = (Rng::new(n as u64), Rng::new(n as u64));
            for round in 0..2_000 {
                let k = round % (n.min(FEW) + 1);
                assert_eq!(p.pick(&mut ra, k).to_vec(), shuffled(n, k, &mut rb), "n={n} k={k}");
            }
        }
    }

    #[test]
    fn equal_weights_draw_exactly_as_the_uniform_picker() {
        let mut a = DistinctPicker::uniform(7);
        let mut b = DistinctPicker::weighted(vec![2.5; 7]);
        let (mut ra, mut rb) = (Rng::new(3), Rng::new(3));
        for k in [1, 3, 7, 2] {
            assert_eq!(a.pick(&mut ra, k).to_vec(), b.pick(&mut rb, k).to_vec());
        }
    }
}
