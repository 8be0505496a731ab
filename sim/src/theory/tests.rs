//! Tests of `theory`.

//! Each formula is checked against something computed independently of
//! it: a hand-worked textbook number (exact rationals where possible), a
//! different formula it must reduce to in a limiting case, or a numerical
//! identity (the survival function integrates to the mean). None of these
//! is a golden value produced by running the code under test.

use super::*;

fn assert_close(actual: f64, expected: f64, rel: f64) {
    let err = (actual - expected).abs() / expected.abs().max(f64::MIN_POSITIVE);
    assert!(err <= rel, "got {actual}, expected {expected} (relative error {err:e} > {rel:e})");
}

// --- M/M/1/K: against the M/M/1/1 loss system and the M/M/1 limit ---

#[test]
fn mm1k_reduces_to_a_loss_system_at_one_and_to_mm1_for_large_k() {
    // K = 1 is M/M/1/1 = Erlang B with one server: ρ/(1+ρ); an admitted request only
    // ever meets an empty system, so its response is one service time.
    assert_close(mm1k_blocking(0.8, 1), erlang_b(1, 0.8), 1e-14);
    assert_close(mm1k_mean_response(0.8, 1.0, 1), 1.0, 1e-12);
    // K = 2, ρ = 1/2: P = (1/2)(1/4)/(1 − 1/8) = 1/7, L = (0·4 + 1·2 + 2·1)/7 = 4/7.
    assert_close(mm1k_blocking(0.5, 2), 1.0 / 7.0, 1e-14);
    assert_close(mm1k_mean_response(0.5, 1.0, 2), (4.0 / 7.0) / (0.5 * 6.0 / 7.0), 1e-12);
    // K → ∞: nothing is blocked and the response is M/M/1's.
    assert!(mm1k_blocking(0.8, 400) < 1e-30);
    assert_close(mm1k_mean_response(0.8, 1.0, 400), mm1_mean_response(0.8, 1.0), 1e-12);
    assert_close(mm1k_blocking(1.0, 4), 0.2, 1e-14);
}

// --- Erlang B / C: hand-computed from the textbook sums ---
//
// C(c, a) = [a^c/c! · c/(c−a)] / [Σ_{k<c} a^k/k! + a^c/c! · c/(c−a)]

#[test]
fn erlang_c_matches_hand_computed_values() {
    // c = 2, a = 1.6: 6.4 / (1 + 1.6 + 6.4) = 32/45.
    assert_close(erlang_c(2, 1.6), 32.0 / 45.0, 1e-14);
    // c = 4, a = 3: 13.5 / (13 + 13.5) = 27/53.
    assert_close(erlang_c(4, 3.0), 27.0 / 53.0, 1e-14);
    // c = 4, a = 2: (4/3) / (19/3 + 4/3) = 4/23.
    assert_close(erlang_c(4, 2.0), 4.0 / 23.0, 1e-14);
}

#[test]
fn erlang_b_matches_hand_computed_values() {
    // B(c, a) = (a^c/c!) / Σ_{k≤c} a^k/k!. c = 2, a = 1.6: 1.28 / 3.88.
    assert_close(erlang_b(2, 1.6), 1.28 / 3.88, 1e-14);
    // c = 4, a = 3: 3.375 / 16.375.
    assert_close(erlang_b(4, 3.0), 3.375 / 16.375, 1e-14);
}

#[test]
fn erlang_c_with_one_server_is_utilisation() {
    for a in [0.0, 0.1, 0.5, 0.9, 0.999] {
        assert!((erlang_c(1, a) - a).abs() < 1e-15, "C(1, {a}) = {}", erlang_c(1, a));
    }
}

#[test]
fn erlang_c_is_stable_for_many_servers() {
    // a^c / c! overflows f64 long before c = 1000; the recursion does not.
    let c = erlang_c(1000, 950.0);
    assert!(c.is_finite() && c > 0.0 && c < 1.0, "C = {c}");
    assert_eq!(erlang_c(3, 3.0), 1.0);
    assert_eq!(erlang_c(3, 7.0), 1.0);
}

#[test]
fn erlang_c_rises_with_load_and_falls_with_servers() {
    let mut prev = 0.0;
    for i in 1..40 {
        let now = erlang_c(4, 0.1 * f64::from(i));
        assert!(now > prev, "C(4, {}) = {now} not above {prev}", 0.1 * f64::from(i));
        prev = now;
    }
    for c in 3..12 {
        assert!(erlang_c(c + 1, 2.5) < erlang_c(c, 2.5));
    }
}

// --- M/M/1 and M/M/c ---

#[test]
fn mm1_matches_hand_computed_values() {
    assert_close(mm1_mean_response(0.5, 1.0), 2.0, 1e-15);
    // Median of Exp(0.5) is ln 2 / 0.5; p99 is ln 100 / 0.5.
    assert_close(mm1_response_quantile(0.5, 1.0, 0.5), 2.0 * 2f64.ln(), 1e-15);
    assert_close(mm1_response_quantile(0.5, 1.0, 0.99), 2.0 * 100f64.ln(), 1e-14);
    assert_eq!(mm1_mean_response(1.0, 1.0), f64::INFINITY);
    assert_eq!(mm1_response_quantile(0.5, 1.0, 0.0), 0.0);
}

#[test]
fn mmc_matches_hand_computed_values() {
    // λ = 1.6, μ = 1, c = 2: W_q = (32/45) / 0.4 = 16/9, W = 25/9.
    assert_close(mmc_mean_wait(1.6, 1.0, 2), 16.0 / 9.0, 1e-14);
    assert_close(mmc_mean_response(1.6, 1.0, 2), 25.0 / 9.0, 1e-14);
    // λ = 3, μ = 1, c = 4: W_q = (27/53) / 1.
    assert_close(mmc_mean_wait(3.0, 1.0, 4), 27.0 / 53.0, 1e-14);
    assert_eq!(mmc_mean_response(2.0, 1.0, 2), f64::INFINITY);
}

#[test]
fn mmc_with_one_server_is_mm1() {
    for (lambda, mu) in [(0.1, 1.0), (0.5, 1.0), (0.9, 1.0), (3.0, 4.0)] {
        assert_close(mmc_mean_response(lambda, mu, 1), mm1_mean_response(lambda, mu), 1e-13);
        for p in [0.01, 0.5, 0.9, 0.99, 0.9999] {
            let q = mmc_response_quantile(lambda, mu, 1, p);
            assert_close(q, mm1_response_quantile(lambda, mu, p), 1e-12);
            // The whole distribution, not just quantiles: T ~ Exp(μ−λ).
            let t = 0.7 * q;
            assert_close(mmc_response_cdf(lambda, mu, 1, t), 1.0 - (-(mu - lambda) * t).exp(), 1e-12);
        }
    }
}

/// ∫₀^∞ P(T > t) dt = E[T], by composite Simpson on [0, t_max], with
/// t_max far enough out that the tail beyond is below 1e-15 of the mean.
fn integrated_survival(lambda: f64, mu: f64, c: u32) -> f64 {
    let slowest = mu.min(f64::from(c) * mu - lambda);
    let t_max = 40.0 / slowest;
    let n = 20_000;
    let h = t_max / f64::from(n);
    let f = |i: u32| mmc_response_survival(lambda, mu, c, h * f64::from(i));
    let inner: f64 = (1..n).map(|i| if i % 2 == 1 { 4.0 } else { 2.0 } * f(i)).sum();
    (f(0) + inner + f(n)) * h / 3.0
}

#[test]
fn mmc_response_cdf_integrates_to_the_mean() {
    // Includes λ = (c−1)μ, where cμ − λ = μ and the CDF takes its
    // Erlang-2 branch, and points on both sides of it.
    for (lambda, mu, c) in
        [(1.6, 1.0, 2), (1.0, 1.0, 2), (1.0 + 1e-9, 1.0, 2), (0.5, 1.0, 2), (3.0, 1.0, 4), (3.9, 1.0, 4), (0.3, 2.0, 1)]
    {
        let mean = mmc_mean_response(lambda, mu, c);
        assert_close(integrated_survival(lambda, mu, c), mean, 1e-9);
    }
}

#[test]
fn mmc_response_cdf_is_continuous_across_the_erlang2_case() {
    // λ = (c−1)μ switches formulas; nudging λ must barely move the CDF.
    for t in [0.01, 0.5, 1.0, 3.0, 10.0, 50.0] {
        let at = mmc_response_cdf(1.0, 1.0, 2, t);
        for eps in [1e-12, 1e-9, 1e-6] {
            assert!((mmc_response_cdf(1.0 + eps, 1.0, 2, t) - at).abs() < 10.0 * eps);
            assert!((mmc_response_cdf(1.0 - eps, 1.0, 2, t) - at).abs() < 10.0 * eps);
        }
    }
    // Hand value at the special point: C(2, 1) = 1/3, so
    // P(T > t) = (2/3)e^{−t} + (1/3)(1 + t)e^{−t}.
    let t: f64 = 2.0;
    let survival = (2.0 / 3.0 + (1.0 + t) / 3.0) * (-t).exp();
    assert_close(1.0 - mmc_response_cdf(1.0, 1.0, 2, t), survival, 1e-14);
}

#[test]
fn mmc_quantile_inverts_the_cdf_and_is_monotone() {
    let mut prev = 0.0;
    for p in [0.1, 0.5, 0.9, 0.99, 0.999, 0.999_999] {
        let t = mmc_response_quantile(1.6, 1.0, 2, p);
        assert!(t > prev);
        assert_close(1.0 - mmc_response_cdf(1.6, 1.0, 2, t), 1.0 - p, 1e-9);
        prev = t;
    }
    assert_eq!(mmc_response_quantile(1.6, 1.0, 2, 0.0), 0.0);
    assert_eq!(mmc_response_quantile(1.6, 1.0, 2, 1.0), f64::INFINITY);
}

#[test]
fn mmc_response_rises_with_load() {
    let mut prev_mean = 0.0;
    let mut prev_p99 = 0.0;
    for i in 1..20 {
        let lambda = 0.1 * f64::from(i);
        let mean = mmc_mean_response(lambda, 1.0, 2);
        let p99 = mmc_response_quantile(lambda, 1.0, 2, 0.99);
        assert!(mean > prev_mean && p99 > prev_p99, "at λ = {lambda}");
        prev_mean = mean;
        prev_p99 = p99;
    }
}

// --- M/G/1 FCFS ---

#[test]
fn md1_matches_hand_computed_value() {
    // λ = 0.5, S = 1: ρ = 0.5, W = 0.5 / (2·0.5) + 1 = 1.5.
    assert_close(md1_mean_response(0.5, 1.0), 1.5, 1e-15);
    // λ = 0.8, S = 1: W = 0.8 / 0.4 + 1 = 3.
    assert_close(md1_mean_response(0.8, 1.0), 3.0, 1e-14);
    assert_eq!(md1_mean_response(1.0, 1.0), f64::INFINITY);
}

#[test]
fn md1_is_mg1_with_zero_variance() {
    for (lambda, s) in [(0.1, 1.0), (0.5, 1.0), (0.95, 1.0), (200.0, 0.004)] {
        assert_close(md1_mean_response(lambda, s), mg1_mean_response(lambda, s, s * s), 1e-14);
    }
}

#[test]
fn mg1_with_exponential_service_is_mm1() {
    // Exp(μ) has E[S²] = 2/μ².
    for (lambda, mu) in [(0.1, 1.0), (0.5, 1.0), (0.9, 1.0), (3.0, 4.0)] {
        let pk = mg1_mean_response(lambda, 1.0 / mu, 2.0 / (mu * mu));
        assert_close(pk, mm1_mean_response(lambda, mu), 1e-14);
    }
}

#[test]
fn mg1_response_rises_with_variance() {
    let mut prev = 0.0;
    for scv in [0.0, 0.5, 1.0, 4.0, 16.0] {
        let w = mg1_mean_response(0.7, 1.0, 1.0 + scv);
        assert!(w > prev);
        prev = w;
    }
}

// --- M/G/1 processor sharing ---

#[test]
fn ps_matches_hand_computed_values_and_mm1() {
    // λ = 0.5, E[S] = 1: ρ = 0.5, a job of size 3 takes 6 on average.
    assert_close(mg1_ps_conditional_response(0.5, 1.0, 3.0), 6.0, 1e-15);
    // With exponential sizes PS has the M/M/1 FCFS mean.
    for (lambda, mu) in [(0.1, 1.0), (0.5, 1.0), (0.9, 1.0), (3.0, 4.0)] {
        assert_close(mg1_ps_mean_response(lambda, 1.0 / mu), mm1_mean_response(lambda, mu), 1e-14);
    }
    assert_eq!(mg1_ps_mean_response(2.0, 0.5), f64::INFINITY);
}

// --- Fork-join ---

#[test]
fn fork_join2_matches_hand_computed_value() {
    // λ = 0.5, μ = 1: (12 − 0.5)/8 / 0.5 = 2.875.
    assert_close(fork_join2_mean_response(0.5, 1.0), 2.875, 1e-15);
}

#[test]
fn fork_join_at_light_load_is_mean_of_max_of_exponentials() {
    // With no queueing the join waits for the slower of k Exp(μ) services,
    // whose mean is H_k/μ (H_2 = 3/2, H_4 = 25/12).
    let (lambda, mu) = (1e-12, 2.0);
    assert_close(fork_join2_mean_response(lambda, mu), 1.5 / mu, 1e-10);
    assert_close(fork_join_mean_response_approx(4, lambda, mu), 25.0 / 12.0 / mu, 1e-10);
    for k in 2..=32 {
        assert_close(fork_join_mean_response_approx(k, lambda, mu), harmonic(k) / mu, 1e-10);
    }
}

#[test]
fn fork_join_approx_is_exact_at_two_and_bounded() {
    for i in 1..20 {
        let lambda = 0.05 * f64::from(i);
        let r2 = fork_join2_mean_response(lambda, 1.0);
        assert_close(fork_join_mean_response_approx(2, lambda, 1.0), r2, 1e-14);
        // The max of two dependent M/M/1 responses lies between one of
        // them and their sum.
        let single = mm1_mean_response(lambda, 1.0);
        assert!(single < r2 && r2 < 2.0 * single);
        // More branches, longer wait for the slowest.
        let mut prev = r2;
        for k in 3..=32 {
            let rk = fork_join_mean_response_approx(k, lambda, 1.0);
            assert!(rk > prev, "k = {k}, λ = {lambda}");
            prev = rk;
        }
    }
}

#[test]
fn harmonic_matches_hand_values() {
    assert_eq!(harmonic(0), 0.0);
    assert_eq!(harmonic(1), 1.0);
    assert_close(harmonic(2), 1.5, 1e-15);
    assert_close(harmonic(4), 25.0 / 12.0, 1e-15);
}

// --- Cobham priority ---

fn exp_class(lambda: f64, mean: f64) -> PriorityClass {
    PriorityClass { lambda, mean_service: mean, second_moment: 2.0 * mean * mean }
}

#[test]
fn cobham_with_one_class_is_pollaczek_khinchine() {
    for (lambda, mean, m2) in [(0.5, 1.0, 1.0), (0.5, 1.0, 2.0), (0.9, 1.0, 5.0)] {
        let class = PriorityClass { lambda, mean_service: mean, second_moment: m2 };
        assert_close(cobham_mean_responses(&[class])[0], mg1_mean_response(lambda, mean, m2), 1e-14);
    }
}

#[test]
fn cobham_matches_hand_computed_two_class_values() {
    // Two classes, λ = 0.3 each, Exp(1) service: ρ = 0.3 each, E[S²] = 2.
    // W0 = 2·(0.3·2/2) = 0.6; W_0 = 0.6/(1·0.7) = 6/7; W_1 = 0.6/(0.7·0.4) = 15/7.
    let classes = [exp_class(0.3, 1.0), exp_class(0.3, 1.0)];
    let waits = cobham_mean_waits(&classes);
    assert_close(waits[0], 6.0 / 7.0, 1e-14);
    assert_close(waits[1], 15.0 / 7.0, 1e-14);
    assert_close(cobham_mean_responses(&classes)[1], 22.0 / 7.0, 1e-14);
}

#[test]
fn cobham_obeys_kleinrock_conservation_law() {
    // Any work-conserving non-preemptive order keeps Σ ρ_i·W_i equal to
    // FCFS's ρ·W_FCFS = ρ·W0/(1−ρ) ([Kleinrock II] ch. 3): an identity
    // independent of Cobham's per-class formula.
    let classes = [
        PriorityClass { lambda: 0.2, mean_service: 0.5, second_moment: 0.25 },
        exp_class(0.4, 1.0),
        PriorityClass { lambda: 0.1, mean_service: 2.0, second_moment: 20.0 },
    ];
    let waits = cobham_mean_waits(&classes);
    let rho: f64 = classes.iter().map(|k| k.lambda * k.mean_service).sum();
    let w0: f64 = classes.iter().map(|k| k.lambda * k.second_moment / 2.0).sum();
    let weighted: f64 = classes.iter().zip(&waits).map(|(k, w)| k.lambda * k.mean_service * w).sum();
    assert_close(weighted, rho * w0 / (1.0 - rho), 1e-13);
    // Lower priority waits longer.
    assert!(waits[0] < waits[1] && waits[1] < waits[2]);
}

#[test]
fn cobham_overload_starves_only_the_lower_classes() {
    let waits = cobham_mean_waits(&[exp_class(0.5, 1.0), exp_class(0.6, 1.0), exp_class(0.1, 1.0)]);
    assert!(waits[0].is_finite());
    assert_eq!(waits[1], f64::INFINITY);
    assert_eq!(waits[2], f64::INFINITY);
}
