//! Record indices in the order of a `u64` key, for the run summary's arrival
//! order and ideal-completion ranks and the per-node path's response order: a
//! bucket sort of packed (key, index) words instead of a comparison sort of
//! pairs.
//!
//! Why: the summary sorts every record twice (400,000 on the TailGuard fan-out
//! case) and those comparison sorts were ~40% of its instructions. Keys are
//! nanosecond times spanning a run (~33 bits for seconds of simulated time)
//! and indices need ~19 bits, so (key − min, index) packs into one `u64`
//! whose order is exactly the (key, index) order; the words are sorted by
//! counting them into buckets of their top bits ([`bucket_sort`]). Keys
//! spanning too many bits fall back to the comparison sort.

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

/// Each index's dense rank by key, as [`dense_ranks`] gives, from `order`:
/// the indices in (key, index) order (see [`is_order`]).
pub(crate) fn dense_ranks_in(order: &[u32], key: impl Fn(usize) -> u64) -> (Vec<u32>, usize) {
    let mut rank = vec![0u32; order.len()];
    let mut r = 0u32;
    let mut prev = None;
    for &i in order {
        let k = key(i as usize);
        if prev.is_some_and(|p| p != k) {
            r += 1;
        }
        prev = Some(k);
        rank[i as usize] = r;
    }
    (rank, if order.is_empty() { 0 } else { r as usize + 1 })
}

/// Whether `order` is the indices `0..n` in (key, index) order: `n` of them,
/// each below `n` and strictly ascending in (key, index), so each once.
pub(crate) fn is_order(order: &[u32], n: usize, key: impl Fn(usize) -> u64) -> bool {
    order.len() == n
        && order.iter().all(|&i| (i as usize) < n)
        && order.windows(2).all(|w| (key(w[0] as usize), w[0]) < (key(w[1] as usize), w[1]))
}

/// Sorts each run of equal keys in `order` (already in key order) by `cmp`.
pub(crate) fn sort_ties(
    order: &mut [u32],
    key: impl Fn(u32) -> u64,
    mut cmp: impl FnMut(&u32, &u32) -> std::cmp::Ordering,
) {
    let mut from = 0;
    while from < order.len() {
        let k = key(order[from]);
        let mut to = from + 1;
        while to < order.len() && key(order[to]) == k {
            to += 1;
        }
        if to - from > 1 {
            order[from..to].sort_unstable_by(&mut cmp);
        }
        from = to;
    }
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
    let words: Vec<u64> = (0..n).map(|i| ((key(i) - lo) << index_bits) | i as u64).collect();
    Some((bucket_sort(words, index_bits + key_bits), index_bits))
}

/// Bits needed to hold `x` (0 for 0).
fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// `words` (each below `2^width`) sorted: counted into about one bucket per
/// four words by their top bits, then each bucket sorted on its own. Keys of
/// a run's records are spread over its span and come nearly in order, so the
/// buckets are small and the counts are read and written nearly in sequence:
/// three passes over the words where an LSD radix sort took seven.
fn bucket_sort(mut words: Vec<u64>, width: u32) -> Vec<u64> {
    let n = words.len();
    if n <= SMALL_BUCKET {
        insertion_sort(&mut words);
        return words;
    }
    let bucket_bits = bits(n as u64).saturating_sub(2).min(width);
    let shift = width - bucket_bits;
    // `end[b]`: first the start of bucket `b`, then (after the scatter) its end.
    let mut end = vec![0u32; (1 << bucket_bits) + 1];
    for &w in &words {
        end[(w >> shift) as usize + 1] += 1;
    }
    for b in 1..end.len() {
        end[b] += end[b - 1];
    }
    let mut sorted = vec![0u64; n];
    for &w in &words {
        let slot = &mut end[(w >> shift) as usize];
        sorted[*slot as usize] = w;
        *slot += 1;
    }
    drop(words);
    let mut from = 0;
    for &to in &end[..1 << bucket_bits] {
        let bucket = &mut sorted[from..to as usize];
        if bucket.len() <= SMALL_BUCKET {
            insertion_sort(bucket);
        } else {
            bucket.sort_unstable();
        }
        from = to as usize;
    }
    sorted
}

/// Buckets up to this size are insertion-sorted.
const SMALL_BUCKET: usize = 32;

fn insertion_sort(words: &mut [u64]) {
    for i in 1..words.len() {
        let w = words[i];
        let mut j = i;
        while j > 0 && words[j - 1] > w {
            words[j] = words[j - 1];
            j -= 1;
        }
        words[j] = w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::Rng;

    /// Spans that stand for other shapes of keys in the test below.
    const NEARLY_SORTED: u64 = 3;
    const OUTLIER: u64 = 5;

    /// Both functions against the comparison sort, for spans of keys from a
    /// handful of values (many ties) to the full `u64` range (the fallback),
    /// keys nearly in index order (a run's records), and keys crowded into a
    /// few buckets by one far outlier (buckets sorted on their own).
    #[test]
    fn match_the_comparison_sort() {
        let mut rng = Rng::new(5);
        for n in [0usize, 1, 2, 3, 17, 33, 1_000, 70_000] {
            for span in [1u64, 7, 1 << 12, 1 << 33, 1 << 46, u64::MAX, NEARLY_SORTED, OUTLIER] {
                let base = rng.below(1 << 40);
                let keys: Vec<u64> = (0..n)
                    .map(|i| match span {
                        u64::MAX => rng.next_u64(),
                        NEARLY_SORTED => base + 16 * i as u64 + rng.below(300),
                        OUTLIER if i == n / 2 => base + (1 << 40),
                        OUTLIER => base + rng.below(1 << 20),
                        _ => base + rng.below(span),
                    })
                    .collect();
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
