//! Record indices in the order of a `u64` key, for the run summary's arrival
//! order and ideal-completion ranks: a radix sort of packed (key, index)
//! words instead of a comparison sort of pairs.
//!
//! Why: the summary sorts every record twice (400,000 on the TailGuard fan-out
//! case) and those comparison sorts were ~40% of its instructions. Keys are
//! nanosecond times spanning a run (~33 bits for seconds of simulated time)
//! and indices need ~19 bits, so (key − min, index) packs into one `u64`
//! whose order is exactly the (key, index) order; a stable LSD radix sort over
//! the key's bits alone (the words start in index order) takes 3 passes of
//! 11 bits. Keys spanning too many bits fall back to the comparison sort.

/// Radix digit width: 2,048 counters (16 KB) stay in L1.
const DIGIT_BITS: u32 = 11;

/// The indices `0..n` in (key, index) order.
pub(crate) fn sorted_indices(n: usize, key: impl Fn(usize) -> u64) -> Vec<u32> {
    match pack(n, &key) {
        Some((words, index_bits)) => {
            let mask = (1u64 << index_bits) - 1;
            words.into_iter().map(|w| (w & mask) as u32).collect()
        }
        None => sorted_pairs(n, &key).into_iter().map(|(_, i)| i).collect(),
    }
}

/// Each index's rank by key (equal keys share a rank; ranks are dense from 0)
/// and the number of distinct ranks.
pub(crate) fn dense_ranks(n: usize, key: impl Fn(usize) -> u64) -> (Vec<u32>, usize) {
    let mut rank = vec![0u32; n];
    let mut r = 0u32;
    let mut assign = |w: usize, k: u64, prev: u64, i: usize| {
        if w > 0 && k != prev {
            r += 1;
        }
        rank[i] = r;
    };
    match pack(n, &key) {
        Some((words, index_bits)) => {
            let mask = (1u64 << index_bits) - 1;
            let mut prev = 0;
            for (w, &word) in words.iter().enumerate() {
                // The key's offset from the minimum: equal exactly when the keys are.
                let k = word >> index_bits;
                assign(w, k, prev, (word & mask) as usize);
                prev = k;
            }
        }
        None => {
            let mut prev = 0;
            for (w, (k, i)) in sorted_pairs(n, &key).into_iter().enumerate() {
                assign(w, k, prev, i as usize);
                prev = k;
            }
        }
    }
    (rank, if n == 0 { 0 } else { r as usize + 1 })
}

/// The comparison-sort fallback: (key, index) pairs sorted.
fn sorted_pairs(n: usize, key: &impl Fn(usize) -> u64) -> Vec<(u64, u32)> {
    let mut pairs: Vec<(u64, u32)> = (0..n).map(|i| (key(i), i as u32)).collect();
    pairs.sort_unstable();
    pairs
}

/// Words `(key(i) − min) << index_bits | i` in (key, index) order and
/// `index_bits`, or `None` if they do not fit in 64 bits.
fn pack(n: usize, key: &impl Fn(usize) -> u64) -> Option<(Vec<u64>, u32)> {
    assert!(n as u64 <= 1 << 32, "record indices are u32");
    let (mut lo, mut hi) = (u64::MAX, 0);
    for i in 0..n {
        let k = key(i);
        lo = lo.min(k);
        hi = hi.max(k);
    }
    if n == 0 {
        return Some((Vec::new(), 0));
    }
    let index_bits = bits(n as u64 - 1);
    let key_bits = bits(hi - lo);
    if index_bits + key_bits > 64 {
        return None;
    }
    let mut words: Vec<u64> = (0..n).map(|i| ((key(i) - lo) << index_bits) | i as u64).collect();
    radix_sort(&mut words, index_bits, index_bits + key_bits);
    Some((words, index_bits))
}

/// Bits needed to hold `x` (0 for 0).
fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// Stable LSD radix sort of `words` by their bits `from..to`.
fn radix_sort(words: &mut Vec<u64>, from: u32, to: u32) {
    if from >= to {
        return;
    }
    let mut buf = vec![0u64; words.len()];
    let mut start = vec![0usize; 1 << DIGIT_BITS];
    let mut shift = from;
    while shift < to {
        let width = DIGIT_BITS.min(to - shift);
        let mask = (1u64 << width) - 1;
        let start = &mut start[..1 << width];
        start.fill(0);
        for &w in words.iter() {
            start[((w >> shift) & mask) as usize] += 1;
        }
        let mut sum = 0;
        for s in start.iter_mut() {
            let count = *s;
            *s = sum;
            sum += count;
        }
        for &w in words.iter() {
            let d = ((w >> shift) & mask) as usize;
            buf[start[d]] = w;
            start[d] += 1;
        }
        std::mem::swap(words, &mut buf);
        shift += width;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::Rng;

    /// Both functions against the comparison sort, for spans of keys from a
    /// handful of values (many ties) to the full `u64` range (the fallback).
    #[test]
    fn match_the_comparison_sort() {
        let mut rng = Rng::new(5);
        for n in [0usize, 1, 2, 3, 17, 1_000, 70_000] {
            for span in [1u64, 7, 1 << 12, 1 << 33, u64::MAX] {
                let base = rng.below(1 << 40);
                let keys: Vec<u64> =
                    (0..n).map(|_| if span == u64::MAX { rng.next_u64() } else { base + rng.below(span) }).collect();
                let pairs = sorted_pairs(n, &|i| keys[i]);
                let want: Vec<u32> = pairs.iter().map(|&(_, i)| i).collect();
                assert_eq!(sorted_indices(n, |i| keys[i]), want, "n={n} span={span}");
                let (rank, distinct) = dense_ranks(n, |i| keys[i]);
                let mut sorted = keys.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(distinct, sorted.len(), "n={n} span={span}");
                for i in 0..n {
                    assert_eq!(sorted[rank[i] as usize], keys[i], "n={n} span={span} i={i}");
                }
            }
        }
    }
}
