//! Is a group's p-quantile within its SLO? A verdict with a confidence bound from order statistics.
//!
//! A probe measures n latencies of a (class, fan-out) group. Its p99 point
//! estimate is one order statistic, which with a few hundred samples is decided
//! by one or two draws (docs/fanout.md, "Pass criterion"). Instead, the true
//! p-quantile q_p is bracketed by two order statistics of the sorted sample
//! x_(1) ≤ … ≤ x_(n) (distribution-free; the count of samples below q_p is
//! Binomial(n, p)):
//!
//! * P(x_(u) ≥ q_p) = P(Bin(n, p) ≤ u − 1): the smallest u with this ≥ c makes
//!   x_(u) an upper confidence bound of level c. If x_(u) ≤ SLO, the group
//!   **meets** its SLO at confidence c.
//! * P(x_(l) ≤ q_p) = P(Bin(n, p) ≥ l): the largest l with this ≥ c makes x_(l)
//!   a lower confidence bound. If x_(l) > SLO, the group **misses** at
//!   confidence c.
//! * Otherwise the sample cannot tell yet (**undecided**): measure more.
//!
//! A probe judges several groups at once and misses if *any* group misses, so
//! the miss side is family-wise: with G groups each judged at confidence c, a
//! probe whose groups all sit exactly at their SLOs would be called a miss
//! with probability up to 1 − c^G (41% for G = 6 at c = 0.9), and one unlucky
//! draw in a rare group would stop the search. [`judge_probe`] therefore puts
//! the lower bound at 1 − (1 − c)/G (Bonferroni), which keeps a probe's false
//! miss below 1 − c whatever G. The meet side needs no correction: a probe
//! meets only if every group meets, and a group over its SLO falsely meets
//! with probability ≤ 1 − c on its own.
//!
//! With p = 0.99 and c = 0.9, an upper bound needs n ≥ 230 (x_(n), the
//! maximum, covers q_99 with probability 1 − 0.99^n), so a group of 41
//! queries can never be said to meet a p99 SLO, however fast they all were.
//!
//! **Busy periods.** The binomial count assumes independent latencies. Queries
//! that meet the same slow server's busy period are slow together, so the
//! exceedances of the quantile come in clusters, and n queries carry less
//! information than n independent ones: two seeds of the same probe then
//! "decide" opposite verdicts (docs/fanout.md, "The testbed's shape"). So the
//! bounds use an effective size n / D, with D the design effect of the
//! exceedance fraction measured by batch means over the queries in the order
//! they were recorded ([`design_effect`]): the variance of the fraction over
//! consecutive batches, against what independent queries would give, never
//! below 1. Independent rare exceedances fall in distinct batches and give
//! D = 1, the plain bounds; two busy periods of ten slow queries in 2,000 give
//! D ≈ 9. The estimate rests on few exceedances in a small group and is
//! noisy; being clamped at 1, its noise only ever widens the bounds.
//!
//! **Small groups.** Below [`MIN_OWN_TAIL`] expected exceedances (n < 1,000 at
//! p99) a group's own batches hold too few of them to see clustering: a group
//! of 48 fan-out-32 queries has half an exceedance expected, so its D is 1
//! whatever happened, and three slow queries from one busy period decided a
//! miss (the default demo's FIFO search, 25 Nov). Busy periods are shared: the
//! slow server that delays a fan-out-1 query delays every query that meets it.
//! So [`judge_probe`] also measures the design effect of the whole probe (every
//! query, all groups on one time line by send time, each marked by whether it
//! exceeds its own group's tail threshold), and a small group's bounds use the
//! larger of the two. That probe-wide D, measured on thousands of queries, is
//! an upper estimate for a sparse group (a busy period holds fewer of its
//! queries than of the probe's), so it errs towards "undecided".

use tailor_core::time::Nanos;

/// ln P(Bin(n, p) = i) for i = 0..=n, by the pmf's ratio recurrence in log space
/// (no underflow for large n: 0.99^100000 is far below f64's range).
fn ln_pmf_all(n: u64, p: f64) -> Vec<f64> {
    assert!((0.0..=1.0).contains(&p), "p = {p}");
    let mut out = Vec::with_capacity(n as usize + 1);
    if p == 0.0 || p == 1.0 {
        for i in 0..=n {
            let hit = (p == 0.0 && i == 0) || (p == 1.0 && i == n);
            out.push(if hit { 0.0 } else { f64::NEG_INFINITY });
        }
        return out;
    }
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    let mut cur = n as f64 * lq;
    out.push(cur);
    for i in 0..n {
        cur += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + lp - lq;
        out.push(cur);
    }
    out
}

/// P(Bin(n, p) ≤ k): the binomial CDF (1 for k ≥ n).
pub fn binom_cdf(n: u64, p: f64, k: u64) -> f64 {
    if k >= n {
        return 1.0;
    }
    let ln = ln_pmf_all(n, p);
    // Sum the smaller side for accuracy; both are sums of positive terms.
    let lower: f64 = ln[..=k as usize].iter().map(|l| l.exp()).sum();
    if lower < 0.5 {
        return lower.min(1.0);
    }
    let upper: f64 = ln[k as usize + 1..].iter().map(|l| l.exp()).sum();
    (1.0 - upper).clamp(0.0, 1.0)
}

/// The 1-based ranks (lower, upper) of the order statistics that bound the
/// p-quantile of n samples at confidence `conf` each (one-sided): x_(l) ≤ q_p
/// with probability ≥ conf, x_(u) ≥ q_p with probability ≥ conf. `None` where
/// n samples are too few for that side.
pub fn quantile_bound_ranks(n: u64, p: f64, conf: f64) -> (Option<u64>, Option<u64>) {
    if n == 0 {
        return (None, None);
    }
    let ln = ln_pmf_all(n, p);
    // cdf[i] = P(Bin ≤ i), accumulated once.
    let mut cdf = Vec::with_capacity(n as usize + 1);
    let mut acc = 0.0f64;
    for l in &ln {
        acc += l.exp();
        cdf.push(acc.min(1.0));
    }
    // Upper: smallest u in 1..=n with P(Bin ≤ u − 1) ≥ conf.
    let upper = (1..=n).find(|&u| cdf[u as usize - 1] >= conf);
    // Lower: largest l in 1..=n with P(Bin ≥ l) = 1 − P(Bin ≤ l − 1) ≥ conf.
    let lower = (1..=n).rev().find(|&l| 1.0 - cdf[l as usize - 1] >= conf);
    (lower, upper)
}

/// What a sample says about "p-quantile ≤ SLO".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Meets,
    Misses,
    Undecided,
}

/// One group's judgement.
#[derive(Clone, Copy, Debug)]
pub struct GroupJudgement {
    pub n: usize,
    pub verdict: Verdict,
    /// Nearest-rank point estimate of the p-quantile.
    pub point_ns: Nanos,
    /// The order-statistic bounds (None: too few samples for that side).
    pub lower_ns: Option<Nanos>,
    pub upper_ns: Option<Nanos>,
    /// The design effect the bounds allowed for ([`design_effect`]; 1: independent).
    pub design_effect: f64,
}

/// Batches for [`design_effect`] (as the simulator's oracle tests use).
pub const DESIGN_BATCHES: usize = 20;

/// The design effect of the fraction of `latencies_ns` (in the order recorded)
/// at or above `threshold_ns`: the variance of that fraction over
/// [`DESIGN_BATCHES`] consecutive batches, divided by the variance independent
/// samples would give it (q(1 − q) / batch size), clamped to [1, n] (Kish's
/// design effect, estimated by batch means). 1 when
/// there are too few samples for two per batch or no spread at all.
pub fn design_effect(latencies_ns: &[Nanos], threshold_ns: Nanos) -> f64 {
    let exceeds: Vec<bool> = latencies_ns.iter().map(|&x| x >= threshold_ns).collect();
    design_effect_of(&exceeds)
}

/// [`design_effect`] of a sequence of exceedance marks, in time order.
pub fn design_effect_of(exceeds: &[bool]) -> f64 {
    let n = exceeds.len();
    let m = n / DESIGN_BATCHES;
    if m < 2 {
        return 1.0;
    }
    let used = m * DESIGN_BATCHES;
    let fractions: Vec<f64> =
        exceeds[..used].chunks(m).map(|b| b.iter().filter(|&&x| x).count() as f64 / m as f64).collect();
    let q = fractions.iter().sum::<f64>() / DESIGN_BATCHES as f64;
    if q <= 0.0 || q >= 1.0 {
        return 1.0;
    }
    // Over B, not B − 1: exceedances that fall in distinct batches (what
    // independent rare ones do) then give D ≤ 1, so exactly 1 after the clamp;
    // the 5% this takes off a clustered D does not matter next to its size.
    let var = fractions.iter().map(|f| (f - q).powi(2)).sum::<f64>() / DESIGN_BATCHES as f64;
    (var / (q * (1.0 - q) / m as f64)).clamp(1.0, n as f64)
}

/// Judges one group's latencies against `slo_ns` on the p-quantile at confidence `conf`.
pub fn judge_group(latencies_ns: &[Nanos], p: f64, slo_ns: Nanos, conf: f64) -> GroupJudgement {
    judge_group_at(latencies_ns, p, slo_ns, conf, conf)
}

/// As [`judge_group`], with the upper bound (meets) at `meet_conf` and the lower
/// bound (misses) at `miss_conf`.
pub fn judge_group_at(latencies_ns: &[Nanos], p: f64, slo_ns: Nanos, meet_conf: f64, miss_conf: f64) -> GroupJudgement {
    judge_group_with(latencies_ns, p, slo_ns, meet_conf, miss_conf, 1.0)
}

/// Nearest-rank p-quantile of sorted `v` (0 if empty).
fn point_of(v: &[Nanos], p: f64) -> Nanos {
    let n = v.len();
    if n == 0 {
        0
    } else {
        v[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
    }
}

/// The threshold of the tail whose clustering D measures, from sorted `v`:
/// the samples at or above the point estimate, or strictly above it,
/// whichever count is nearer the (1 − p)·n expected (they differ when values
/// tie at the point). Samples `>=` the threshold are the tail.
fn tail_threshold(v: &[Nanos], p: f64) -> Nanos {
    let n = v.len();
    let point_ns = point_of(v, p);
    let at_or_above = n - v.partition_point(|&x| x < point_ns);
    let above = n - v.partition_point(|&x| x <= point_ns);
    let tail = (1.0 - p) * n as f64;
    let strictly = above > 0 && (above as f64 - tail).abs() < (at_or_above as f64 - tail).abs();
    if strictly {
        v[n - above]
    } else {
        point_ns
    }
}

/// [`judge_group_at`] with the design effect at least `min_design_effect`.
fn judge_group_with(
    latencies_ns: &[Nanos],
    p: f64,
    slo_ns: Nanos,
    meet_conf: f64,
    miss_conf: f64,
    min_design_effect: f64,
) -> GroupJudgement {
    let mut v = latencies_ns.to_vec();
    v.sort_unstable();
    let n = v.len();
    let point_ns = point_of(&v, p);
    let d = design_effect(latencies_ns, tail_threshold(&v, p)).max(min_design_effect).min(n.max(1) as f64);
    // Bounds on n / D effective samples, mapped back to the same quantile
    // levels of the whole sample: rank r of m samples sits at level r / (m + 1)
    // on average, so rank r of n_eff is rank r·(n + 1)/(n_eff + 1) of n. (Not
    // r·n/n_eff: that maps the largest of 4 effective samples, a 96% lower
    // bound of q_99, to the largest of all 36, a far higher level, and one
    // busy period's slow queries decided a miss.)
    let n_eff = ((n as f64 / d).round() as u64).clamp(1, n as u64);
    // Integer arithmetic, so n_eff = n maps every rank to itself exactly; the
    // upper bound rounds up, the lower one down (both outwards).
    let (nu, ne) = (n as u128 + 1, n_eff as u128 + 1);
    let up = |r: u64| v[(((r as u128 * nu).div_ceil(ne)) as usize).clamp(1, n) - 1];
    let down = |r: u64| v[((r as u128 * nu / ne) as usize).clamp(1, n) - 1];
    let upper_ns = quantile_bound_ranks(n_eff, p, meet_conf).1.map(up);
    let lower_ns = quantile_bound_ranks(n_eff, p, miss_conf).0.map(down);
    let verdict = if upper_ns.is_some_and(|u| u <= slo_ns) {
        Verdict::Meets
    } else if lower_ns.is_some_and(|l| l > slo_ns) {
        Verdict::Misses
    } else {
        Verdict::Undecided
    };
    GroupJudgement { n, verdict, point_ns, lower_ns, upper_ns, design_effect: d }
}

/// The confidence each group's lower bound needs so that a probe of `groups`
/// groups is falsely called a miss with probability at most 1 − `conf`
/// (Bonferroni; see the module docs).
pub fn family_miss_confidence(conf: f64, groups: usize) -> f64 {
    1.0 - (1.0 - conf) / groups.max(1) as f64
}

/// Expected exceedances of the p-quantile, (1 − p)·n, below which a group's
/// own design effect cannot see clustering and [`judge_probe`] floors it at
/// the probe-wide one.
pub const MIN_OWN_TAIL: f64 = 10.0;

/// One group of a probe: its latencies and their intended send times (same
/// order, same clock across groups), and its quantile and SLO.
#[derive(Clone, Copy, Debug)]
pub struct ProbeGroup<'a> {
    pub latencies_ns: &'a [Nanos],
    pub sent_ns: &'a [Nanos],
    pub p: f64,
    pub slo_ns: Nanos,
}

/// The design effect of a whole probe: every query of every group on one
/// time line by send time, marked by whether it is in its own group's tail.
pub fn probe_design_effect(groups: &[ProbeGroup]) -> f64 {
    let mut marks: Vec<(Nanos, bool)> = Vec::new();
    for g in groups {
        let mut v = g.latencies_ns.to_vec();
        v.sort_unstable();
        let Some(&fastest) = v.first() else { continue };
        let threshold = tail_threshold(&v, g.p);
        // All tied at the point (a group with no tail): mark none, not all.
        let tail = |x: Nanos| if threshold == fastest { x > threshold } else { x >= threshold };
        marks.extend(g.sent_ns.iter().zip(g.latencies_ns).map(|(&t, &x)| (t, tail(x))));
    }
    marks.sort_by_key(|m| m.0);
    design_effect_of(&marks.iter().map(|m| m.1).collect::<Vec<bool>>())
}

/// Judges a probe's groups: meets at `conf` per group, misses family-wise at
/// `conf` ([`family_miss_confidence`]); groups with fewer than [`MIN_OWN_TAIL`]
/// expected exceedances allow for at least the probe-wide design effect.
/// Panics if a group's `sent_ns` and `latencies_ns` differ in length.
pub fn judge_probe(groups: &[ProbeGroup], conf: f64) -> Vec<GroupJudgement> {
    for g in groups {
        assert_eq!(g.sent_ns.len(), g.latencies_ns.len(), "one send time per latency");
    }
    let miss_conf = family_miss_confidence(conf, groups.len());
    let probe_d = probe_design_effect(groups);
    groups
        .iter()
        .map(|g| {
            let small = (1.0 - g.p) * (g.latencies_ns.len() as f64) < MIN_OWN_TAIL;
            let floor = if small { probe_d } else { 1.0 };
            judge_group_with(g.latencies_ns, g.p, g.slo_ns, conf, miss_conf, floor)
        })
        .collect()
}

/// A probe's verdict from its groups': misses if any group misses, meets if
/// all meet, otherwise undecided.
pub fn combine(groups: impl IntoIterator<Item = Verdict>) -> Verdict {
    let mut all_meet = true;
    for v in groups {
        match v {
            Verdict::Misses => return Verdict::Misses,
            Verdict::Undecided => all_meet = false,
            Verdict::Meets => {}
        }
    }
    if all_meet {
        Verdict::Meets
    } else {
        Verdict::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact P(Bin(n, p) ≤ k) the long way, independently of the recurrence:
    /// C(n, i) as a product of ratios, p^i (1−p)^(n−i) by `powi`, summed
    /// directly (fine for n ≤ 1000, where nothing underflows at p = 0.99 or 0.01).
    fn direct_cdf(n: u64, p: f64, k: u64) -> f64 {
        (0..=k.min(n))
            .map(|i| {
                let mut c = 1.0f64;
                for j in 0..i {
                    c *= (n - j) as f64 / (j + 1) as f64;
                }
                c * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32)
            })
            .sum()
    }

    #[test]
    fn binomial_cdf_matches_direct_sums() {
        for &(n, p) in &[(1u64, 0.99), (10, 0.5), (41, 0.99), (192, 0.01), (192, 0.99), (300, 0.99), (1000, 0.99)] {
            for k in 0..=n {
                let (a, b) = (binom_cdf(n, p, k), direct_cdf(n, p, k));
                assert!((a - b).abs() < 1e-9, "n {n} p {p} k {k}: {a} vs {b}");
            }
        }
        // Hand-checkable values: P(Bin(2, ½) ≤ 0) = ¼, P(Bin(3, ½) ≤ 1) = ½.
        assert!((binom_cdf(2, 0.5, 0) - 0.25).abs() < 1e-12);
        assert!((binom_cdf(3, 0.5, 1) - 0.5).abs() < 1e-12);
        // Large n stays finite: Bin(100000, 0.01) has mean 1000, sd ≈ 31.5.
        let mid = binom_cdf(100_000, 0.01, 1000);
        assert!(mid > 0.5 && mid < 0.52, "{mid}");
        assert!(binom_cdf(100_000, 0.01, 900) < 1e-3);
    }

    #[test]
    fn the_maximum_bounds_the_p99_from_299_samples_at_95_percent() {
        // x_(n) ≥ q_99 with probability 1 − 0.99^n: 0.94997 at n = 298, 0.95047 at 299.
        assert_eq!(quantile_bound_ranks(298, 0.99, 0.95).1, None);
        assert_eq!(quantile_bound_ranks(299, 0.99, 0.95).1, Some(299));
        // At 90%: n ≥ 230 (1 − 0.99^229 = 0.89974, 1 − 0.99^230 = 0.90074).
        assert_eq!(quantile_bound_ranks(229, 0.99, 0.90).1, None);
        assert_eq!(quantile_bound_ranks(230, 0.99, 0.90).1, Some(230));
    }

    #[test]
    fn bound_ranks_agree_with_direct_binomial_sums() {
        for &n in &[50u64, 192, 230, 473, 1000] {
            for &conf in &[0.9, 0.95] {
                let (lo, up) = quantile_bound_ranks(n, 0.99, conf);
                // Upper: the smallest u with P(Bin(n, .99) ≤ u − 1) ≥ conf.
                let want_up = (1..=n).find(|&u| direct_cdf(n, 0.99, u - 1) >= conf);
                assert_eq!(up, want_up, "upper, n {n} conf {conf}");
                // Lower: the largest l with P(Bin(n, .99) ≥ l) ≥ conf.
                let want_lo = (1..=n).rev().find(|&l| 1.0 - direct_cdf(n, 0.99, l - 1) >= conf);
                assert_eq!(lo, want_lo, "lower, n {n} conf {conf}");
                if let (Some(l), Some(u)) = (lo, up) {
                    assert!(l < u);
                }
            }
        }
        // n = 1000 at 95%: the 990th is the point estimate; the bounds are a few ranks either side.
        let (lo, up) = quantile_bound_ranks(1000, 0.99, 0.95);
        assert!(lo.unwrap() < 990 && up.unwrap() > 990 && up.unwrap() <= 1000, "{lo:?} {up:?}");
    }

    #[test]
    fn the_bound_covers_the_quantile_as_often_as_stated() {
        // Uniform(0, 1) samples, q_99 = 0.99: the upper bound should lie below it
        // at most (1 − conf) of the time, the lower bound above it likewise.
        let mut rng = tailor_core::rng::Rng::new(7);
        let (n, conf, trials) = (500usize, 0.9, 2000);
        let (mut up_below, mut lo_above) = (0, 0);
        for _ in 0..trials {
            let v: Vec<Nanos> = (0..n).map(|_| (rng.next_f64() * 1e9) as Nanos).collect();
            // A missing bound (too few effective samples) is infinitely far out: it covers.
            let j = judge_group(&v, 0.99, 990_000_000, conf);
            if j.upper_ns.is_some_and(|u| u < 990_000_000) {
                up_below += 1;
            }
            if j.lower_ns.is_some_and(|l| l > 990_000_000) {
                lo_above += 1;
            }
        }
        let limit = (trials as f64 * (1.0 - conf) * 1.3) as usize;
        assert!(up_below <= limit && lo_above <= limit, "{up_below} {lo_above} of {trials}");
    }

    #[test]
    fn a_probe_of_many_groups_at_their_slo_is_rarely_called_a_miss() {
        // Six groups whose true p99 is exactly the SLO (Uniform(0, 1) samples, SLO =
        // q_99), 100 samples each (the rare fan-out groups of a short probe). Judged
        // group by group at 90%, the probe misses far more often than 10% of the time;
        // judged family-wise, at most 10%.
        let mut rng = tailor_core::rng::Rng::new(11);
        let (groups, n, conf, trials) = (6usize, 100usize, 0.9, 2000);
        let slo = 990_000_000;
        let (mut per_group_misses, mut family_misses) = (0, 0);
        for _ in 0..trials {
            let samples: Vec<Vec<Nanos>> =
                (0..groups).map(|_| (0..n).map(|_| (rng.next_f64() * 1e9) as Nanos).collect()).collect();
            let naive = samples.iter().map(|v| judge_group(v, 0.99, slo, conf).verdict);
            if combine(naive) == Verdict::Misses {
                per_group_misses += 1;
            }
            // Interleaved in time, as independent groups would be.
            let sent: Vec<Vec<Nanos>> =
                (0..groups).map(|g| (0..n).map(|i| (i * groups + g) as Nanos).collect()).collect();
            let probe: Vec<ProbeGroup> = samples
                .iter()
                .zip(&sent)
                .map(|(v, t)| ProbeGroup { latencies_ns: v, sent_ns: t, p: 0.99, slo_ns: slo })
                .collect();
            if combine(judge_probe(&probe, conf).iter().map(|j| j.verdict)) == Verdict::Misses {
                family_misses += 1;
            }
        }
        let limit = (trials as f64 * (1.0 - conf)) as usize;
        assert!(family_misses <= limit, "family-wise: {family_misses} false misses of {trials}");
        assert!(per_group_misses > 2 * limit, "per group: only {per_group_misses} false misses of {trials}");
    }

    #[test]
    fn the_family_wise_miss_still_catches_a_group_far_over_its_slo() {
        let ms = 1_000_000;
        let fast: Vec<Nanos> = vec![10 * ms; 300];
        // Ten slow ones spread through the hundred (not one busy period: see design_effect).
        let slow: Vec<Nanos> = (0..100).map(|i| if i % 10 == 3 { 30 * ms } else { 10 * ms }).collect();
        let (sent_fast, sent_slow): (Vec<Nanos>, Vec<Nanos>) = ((0..300).collect(), (0..100).map(|i| 3 * i).collect());
        let group = |v: &'static [Nanos], t| ProbeGroup { latencies_ns: v, sent_ns: t, p: 0.99, slo_ns: 20 * ms };
        let (fast, slow): (&'static [Nanos], &'static [Nanos]) = (fast.leak(), slow.leak());
        let probe = [group(fast, &sent_fast), group(slow, &sent_slow), group(fast, &sent_fast)];
        let j = judge_probe(&probe, 0.9);
        assert_eq!(j.iter().map(|j| j.verdict).collect::<Vec<_>>(), [Verdict::Meets, Verdict::Misses, Verdict::Meets]);
        assert!((family_miss_confidence(0.9, 6) - (1.0 - 0.1 / 6.0)).abs() < 1e-12);
    }

    #[test]
    fn exceedances_in_busy_periods_widen_the_bounds_and_independent_ones_do_not() {
        let ms = 1_000_000;
        let mut rng = tailor_core::rng::Rng::new(5);
        // 2,000 independent Exp(10 ms) latencies: D near 1.
        let iid: Vec<Nanos> = (0..2000).map(|_| rng.exp(10.0 * ms as f64) as Nanos).collect();
        let j = judge_group(&iid, 0.99, 1000 * ms, 0.9);
        assert!(j.design_effect < 2.0, "independent: D = {}", j.design_effect);
        // 2,000 queries, 20 of them slow: in two busy periods of ten, or spread
        // out. Clustered, the 1% above the quantile is 2 episodes, not 20
        // independent draws: D must say so (≈ 9), and the bounds widen.
        let mut clustered = vec![5 * ms; 2000];
        for start in [300, 1500] {
            for x in clustered.iter_mut().skip(start).take(10) {
                *x = 50 * ms;
            }
        }
        let mut spread = vec![5 * ms; 2000];
        for i in 0..20 {
            spread[50 + i * 97] = 50 * ms;
        }
        let (c, s) = (judge_group(&clustered, 0.99, 20 * ms, 0.9), judge_group(&spread, 0.99, 20 * ms, 0.9));
        assert!(c.design_effect > 5.0, "clustered: D = {}", c.design_effect);
        assert!(s.design_effect < 2.0, "spread: D = {}", s.design_effect);
        // Same multiset, so the same point estimate; only the spread one is a decided miss
        // (20 independent exceedances of 2,000 is 1%, right at p99: neither side is sure).
        assert_eq!(c.point_ns, s.point_ns);
        assert!(c.lower_ns.unwrap_or(0) <= s.lower_ns.unwrap_or(0));
        // With D = 1 the ranks are the plain order-statistic ones, exactly.
        let plain = quantile_bound_ranks(2000, 0.99, 0.9);
        let mut sorted = spread.clone();
        sorted.sort_unstable();
        if s.design_effect == 1.0 {
            assert_eq!(s.upper_ns, plain.1.map(|r| sorted[r as usize - 1]));
            assert_eq!(s.lower_ns, plain.0.map(|r| sorted[r as usize - 1]));
        }
    }

    #[test]
    fn a_busy_period_alone_does_not_decide_a_miss() {
        // 3,000 fast queries and one busy period of 40 slow ones (1.3%): as
        // independent draws 40 of 3,000 would be a clear miss of a p99 SLO
        // (Bin(3000, .01) ≥ 40 has probability ~4%), as one episode it is not.
        let ms = 1_000_000;
        let mut v = vec![5 * ms; 3000];
        for x in v.iter_mut().skip(1000).take(40) {
            *x = 50 * ms;
        }
        let j = judge_group(&v, 0.99, 20 * ms, 0.9);
        assert_ne!(j.verdict, Verdict::Misses, "{j:?}");
        let mut shuffled = v.clone();
        let mut rng = tailor_core::rng::Rng::new(9);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let k = judge_group(&shuffled, 0.99, 20 * ms, 0.9);
        assert!(k.design_effect < 3.0, "{k:?}");
    }

    /// A probe of a big fan-out-1 group (3,000 queries, one every ms) and a
    /// small fan-out-32 group (36 queries, one every 83 ms: fewer than two per
    /// design batch, so its own D is 1) whose slow queries are `small_slow`.
    fn two_group_probe(big_clustered: bool, small_slow: [usize; 3]) -> [(Vec<Nanos>, Vec<Nanos>); 2] {
        let ms = 1_000_000;
        let big_sent: Vec<Nanos> = (0..3000).map(|i| i * ms).collect();
        let mut big = vec![5 * ms; 3000];
        if big_clustered {
            // Three busy periods of ten slow queries each: 1% above the tail, in 3 episodes.
            for start in [500, 1500, 2500] {
                for x in big.iter_mut().skip(start).take(10) {
                    *x = 50 * ms;
                }
            }
        } else {
            for i in 0..30 {
                big[40 + i * 97] = 50 * ms;
            }
        }
        let small_sent: Vec<Nanos> = (0..36).map(|i| i * 3000 * ms / 36).collect();
        let mut small = vec![10 * ms; 36];
        for i in small_slow {
            small[i] = 40 * ms;
        }
        [(big, big_sent), (small, small_sent)]
    }

    #[test]
    fn a_small_group_allows_for_the_probes_busy_periods() {
        let ms = 1_000_000;
        let judge = |probe: &[(Vec<Nanos>, Vec<Nanos>); 2]| {
            let groups: Vec<ProbeGroup> = probe
                .iter()
                .map(|(v, t)| ProbeGroup { latencies_ns: v, sent_ns: t, p: 0.99, slo_ns: 20 * ms })
                .collect();
            (probe_design_effect(&groups), judge_probe(&groups, 0.9))
        };
        // Three consecutive slow fan-out-32 queries (sent 500–667 ms, the first
        // busy period): alone, 3 of 36 over a p99 SLO is a decided miss.
        let clustered = two_group_probe(true, [6, 7, 8]);
        let miss_conf = family_miss_confidence(0.9, 2);
        let alone = judge_group_at(&clustered[1].0, 0.99, 20 * ms, 0.9, miss_conf);
        assert_eq!(alone.verdict, Verdict::Misses, "{alone:?}");
        assert_eq!(alone.design_effect, 1.0, "36 queries: too few for the group's own batches");
        let (d, judged) = judge(&clustered);
        assert!(d > 3.0, "clustered probe: D = {d}");
        assert_eq!(judged[1].design_effect, d);
        assert_ne!(judged[1].verdict, Verdict::Misses, "{:?}", judged[1]);
        // The big group has 30 expected exceedances: it keeps its own D.
        let own = judge_group_at(&clustered[0].0, 0.99, 20 * ms, 0.9, miss_conf);
        assert_eq!(judged[0].design_effect, own.design_effect);

        // The same small group in a probe whose slow queries are independent:
        // D ≈ 1, and the miss stands, as the plain bounds say.
        let (d, judged) = judge(&two_group_probe(false, [6, 7, 8]));
        assert!(d < 1.5, "independent probe: D = {d}");
        assert_eq!(judged[1].verdict, Verdict::Misses, "{:?}", judged[1]);
    }

    #[test]
    fn verdicts() {
        let ms = 1_000_000;
        // 192 queries, two above a 20 ms SLO (the 24 Nov run): not a miss, not a pass.
        let mut v: Vec<Nanos> = (0..190).map(|i| (5 + i % 10) * ms).collect();
        v.extend([22 * ms, 23 * ms]);
        let j = judge_group(&v, 0.99, 20 * ms, 0.9);
        assert_eq!(j.verdict, Verdict::Undecided);
        assert_eq!(j.point_ns, 22 * ms, "the point estimate alone would call it a miss");
        // 300 fast ones: meets at 90% (n ≥ 230).
        let fast: Vec<Nanos> = vec![10 * ms; 300];
        assert_eq!(judge_group(&fast, 0.99, 20 * ms, 0.9).verdict, Verdict::Meets);
        // 100 with 10 above the SLO, spread out: misses (Bin(100, .01) ≥ 10 is ~1e-7).
        let slow: Vec<Nanos> = (0..100).map(|i| if i % 10 == 3 { 30 * ms } else { 10 * ms }).collect();
        assert_eq!(judge_group(&slow, 0.99, 20 * ms, 0.9).verdict, Verdict::Misses);
        assert_eq!(combine([Verdict::Meets, Verdict::Undecided]), Verdict::Undecided);
        assert_eq!(combine([Verdict::Undecided, Verdict::Misses]), Verdict::Misses);
        assert_eq!(combine([Verdict::Meets, Verdict::Meets]), Verdict::Meets);
    }
}
