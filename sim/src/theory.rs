//! Closed-form queueing results, used as oracles for the simulator.
//!
//! Every function is pure `f64` arithmetic. Rates (`lambda`, `mu`) are per
//! unit of time and times (service sizes, results) are in that same unit, so
//! `lambda = 1.6` per ms with `mu = 1.0` per ms gives answers in ms.
//!
//! Conventions shared by all functions:
//! - an unstable system (utilisation ρ ≥ 1) has infinite mean response, so
//!   means and quantiles return `f64::INFINITY` rather than a meaningless
//!   negative number;
//! - nonsensical parameters (non-positive service rate, zero servers, a
//!   probability outside [0, 1]) are caller bugs and panic.
//!
//! References, cited by short name below:
//! - [Kleinrock I]: L. Kleinrock, *Queueing Systems, Vol. 1: Theory*, Wiley 1975.
//! - [Kleinrock II]: L. Kleinrock, *Queueing Systems, Vol. 2: Computer
//!   Applications*, Wiley 1976.
//! - [Gross & Harris]: D. Gross, J. Shortle, J. Thompson, C. Harris,
//!   *Fundamentals of Queueing Theory*, 4th ed., Wiley 2008.
//! - [Harchol-Balter]: M. Harchol-Balter, *Performance Modeling and Design of
//!   Computer Systems*, Cambridge University Press 2013.

// === M/M/1 ===

/// Mean response time (wait + service) of an M/M/1 FCFS queue: `1/(μ−λ)`.
///
/// Source: [Kleinrock I] §3.2; [Harchol-Balter] ch. 13.
pub fn mm1_mean_response(lambda: f64, mu: f64) -> f64 {
    check_rates(lambda, mu);
    if lambda >= mu {
        return f64::INFINITY;
    }
    1.0 / (mu - lambda)
}

/// The `p`-quantile of M/M/1 FCFS response time.
///
/// The response time is exponential with rate `μ−λ` ([Kleinrock I] §3.2,
/// [Gross & Harris] §2.2.4), so `t_p = −ln(1−p)/(μ−λ)`.
pub fn mm1_response_quantile(lambda: f64, mu: f64, p: f64) -> f64 {
    check_rates(lambda, mu);
    check_probability(p);
    if lambda >= mu || p == 1.0 {
        return f64::INFINITY;
    }
    // ln_1p keeps full precision for small p, where ln(1−p) would round.
    -(-p).ln_1p() / (mu - lambda)
}

// === M/M/1/K (a finite queue) ===

/// Blocking probability of an M/M/1/K queue (at most `k` requests in the system,
/// arrivals that find `k` are turned away) with `ρ = λ/μ`:
/// `P_K = (1−ρ)ρ^K / (1−ρ^{K+1})`, and `1/(K+1)` at ρ = 1. By PASTA it is also the
/// share of arrivals turned away.
///
/// Source: [Gross & Harris] §2.5; [Kleinrock I] §3.6.
pub fn mm1k_blocking(rho: f64, k: u32) -> f64 {
    assert!(rho > 0.0 && rho.is_finite(), "ρ must be finite and > 0, got {rho}");
    assert!(k >= 1, "the system must hold at least one request");
    if (rho - 1.0).abs() < 1e-12 {
        return 1.0 / (k as f64 + 1.0);
    }
    (1.0 - rho) * rho.powi(k as i32) / (1.0 - rho.powi(k as i32 + 1))
}

/// Mean response time of the requests an M/M/1/K queue admits: Little's law on the
/// mean number in system `L = ρ/(1−ρ) − (K+1)ρ^{K+1}/(1−ρ^{K+1})` and the admitted
/// rate `λ(1 − P_K)`.
///
/// Source: [Gross & Harris] §2.5.
pub fn mm1k_mean_response(lambda: f64, mu: f64, k: u32) -> f64 {
    check_rates(lambda, mu);
    let rho = lambda / mu;
    assert!((rho - 1.0).abs() > 1e-12, "ρ = 1 needs the limit L = K/2; not needed here");
    let l = rho / (1.0 - rho) - (k as f64 + 1.0) * rho.powi(k as i32 + 1) / (1.0 - rho.powi(k as i32 + 1));
    l / (lambda * (1.0 - mm1k_blocking(rho, k)))
}

// === M/M/c (Erlang C) ===

/// Erlang B: the blocking probability of an M/M/c/c loss system with offered
/// load `a = λ/μ` (in Erlangs).
///
/// Computed by the recursion `B(0) = 1`, `B(k) = a·B(k−1) / (k + a·B(k−1))`
/// ([Gross & Harris] §2.6), which never forms `a^c` or `c!` and so neither
/// overflows nor loses precision for large `c`.
pub fn erlang_b(c: u32, a: f64) -> f64 {
    assert!(a >= 0.0 && a.is_finite(), "offered load must be finite and >= 0, got {a}");
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (f64::from(k) + a * b);
    }
    b
}

/// Erlang C: the probability that an arriving job waits in an M/M/c queue with
/// offered load `a = λ/μ`.
///
/// From Erlang B by `C = c·B / (c − a·(1 − B))` ([Gross & Harris] §2.3,
/// [Harchol-Balter] ch. 14). Returns 1 when `a ≥ c` (every job waits).
pub fn erlang_c(c: u32, a: f64) -> f64 {
    assert!(c >= 1, "an M/M/c queue needs at least one server");
    let c_f = f64::from(c);
    if a >= c_f {
        return 1.0;
    }
    let b = erlang_b(c, a);
    c_f * b / (c_f - a * (1.0 - b))
}

/// Mean time in queue (excluding service) of an M/M/c FCFS queue:
/// `W_q = C(c, λ/μ) / (cμ − λ)`.
///
/// Source: [Gross & Harris] §2.3; [Harchol-Balter] ch. 14.
pub fn mmc_mean_wait(lambda: f64, mu: f64, c: u32) -> f64 {
    check_rates(lambda, mu);
    let theta = f64::from(c) * mu - lambda;
    if theta <= 0.0 {
        return f64::INFINITY;
    }
    erlang_c(c, lambda / mu) / theta
}

/// Mean response time of an M/M/c FCFS queue: `W_q + 1/μ`.
pub fn mmc_mean_response(lambda: f64, mu: f64, c: u32) -> f64 {
    mmc_mean_wait(lambda, mu, c) + 1.0 / mu
}

/// `P(T ≤ t)` for the response time `T` of an M/M/c FCFS queue.
///
/// `T = W + S` with `S ~ Exp(μ)` independent of the wait `W`, and `W = 0`
/// with probability `1 − C`, else `W ~ Exp(θ)` with `θ = cμ − λ`
/// ([Gross & Harris] §2.3.2). Conditioning on whether the job waits,
///
/// ```text
/// P(T > t) = (1 − C)·e^{−μt} + C·P(Exp(θ) + Exp(μ) > t)
/// P(Exp(θ) + Exp(μ) > t) = (θ·e^{−μt} − μ·e^{−θt}) / (θ − μ)    θ ≠ μ
///                        = (1 + μt)·e^{−μt}                     θ = μ
/// ```
///
/// The second line is the hypoexponential survival function; the `θ = μ`
/// case is its limit (an Erlang-2), which is what happens when
/// `λ = (c−1)μ`. Near that point the difference form cancels, so it is
/// evaluated as `e^{−μt}·(1 − μ·expm1(−(θ−μ)t)/(θ−μ))`, which is exact
/// algebra and tends smoothly to the Erlang-2 form.
pub fn mmc_response_cdf(lambda: f64, mu: f64, c: u32, t: f64) -> f64 {
    1.0 - mmc_response_survival(lambda, mu, c, t)
}

/// The `p`-quantile of M/M/c FCFS response time: the `t` with
/// [`mmc_response_cdf`]`(t) = p`, found by bisection (the CDF has no closed
/// inverse). Accurate to a few ulps of the answer.
pub fn mmc_response_quantile(lambda: f64, mu: f64, c: u32, p: f64) -> f64 {
    check_rates(lambda, mu);
    check_probability(p);
    if f64::from(c) * mu <= lambda || p == 1.0 {
        return f64::INFINITY;
    }
    if p == 0.0 {
        return 0.0;
    }
    // Comparing survival with 1 − p (rather than CDF with p) keeps precision
    // for p close to 1, where the CDF rounds to 1.
    let q = 1.0 - p;
    let mut lo = 0.0;
    let mut hi = mmc_mean_response(lambda, mu, c);
    while mmc_response_survival(lambda, mu, c, hi) > q {
        lo = hi;
        hi *= 2.0;
    }
    loop {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            return hi;
        }
        if mmc_response_survival(lambda, mu, c, mid) > q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
}

/// `P(T > t)`; see [`mmc_response_cdf`] for the derivation.
fn mmc_response_survival(lambda: f64, mu: f64, c: u32, t: f64) -> f64 {
    check_rates(lambda, mu);
    let theta = f64::from(c) * mu - lambda;
    if theta <= 0.0 {
        return 1.0;
    }
    if t <= 0.0 {
        return 1.0;
    }
    let wait_prob = erlang_c(c, lambda / mu);
    let no_wait = (-mu * t).exp();
    let d = theta - mu;
    let hypo = if (d * t).abs() < 1.0 {
        // expm1(−dt)/d → −t as d → 0: no cancellation, and d = 0 is Erlang-2.
        let ratio = if d == 0.0 { -t } else { (-d * t).exp_m1() / d };
        no_wait * (1.0 - mu * ratio)
    } else {
        // |d|·t ≥ 1: the two exponentials differ by at least a factor e, so
        // the difference loses at most a couple of bits, and this form cannot
        // overflow the way e^{|d|t} in the branch above would for large t.
        (theta * no_wait - mu * (-theta * t).exp()) / d
    };
    (1.0 - wait_prob) * no_wait + wait_prob * hypo
}

// === M/G/1 FCFS (Pollaczek–Khinchine) ===

/// Mean response time of an M/G/1 FCFS queue by the Pollaczek–Khinchine
/// formula: `W = λ·E[S²] / (2(1−ρ)) + E[S]` with `ρ = λ·E[S]`.
///
/// `second_moment` is `E[S²]` (for exponential service it is `2·E[S]²`, for
/// deterministic `E[S]²`). Source: [Kleinrock I] §5.5; [Harchol-Balter] ch. 23.
pub fn mg1_mean_response(lambda: f64, mean_service: f64, second_moment: f64) -> f64 {
    check_service(lambda, mean_service);
    assert!(
        second_moment >= mean_service * mean_service * (1.0 - 1e-12),
        "E[S^2] = {second_moment} is below E[S]^2 = {}",
        mean_service * mean_service
    );
    let rho = lambda * mean_service;
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    lambda * second_moment / (2.0 * (1.0 - rho)) + mean_service
}

/// Mean response time of an M/D/1 FCFS queue with constant service time
/// `service`: P-K with `E[S²] = S²`, i.e. `W = ρ·S / (2(1−ρ)) + S`.
///
/// Source: [Kleinrock I] §5.5; [Gross & Harris] §5.1.
pub fn md1_mean_response(lambda: f64, service: f64) -> f64 {
    check_service(lambda, service);
    let rho = lambda * service;
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    rho * service / (2.0 * (1.0 - rho)) + service
}

// === M/G/1 processor sharing ===

/// Mean response time, under M/G/1 processor sharing, of a job of size `x`:
/// `x / (1−ρ)` with `ρ = λ·E[S]`, for any service distribution.
///
/// Source: [Kleinrock II] ch. 4 (processor-sharing limit of round robin);
/// [Harchol-Balter] ch. 30.
pub fn mg1_ps_conditional_response(lambda: f64, mean_service: f64, x: f64) -> f64 {
    check_service(lambda, mean_service);
    assert!(x >= 0.0, "job size must be >= 0, got {x}");
    let rho = lambda * mean_service;
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    x / (1.0 - rho)
}

/// Mean response time of M/G/1 processor sharing: `E[S] / (1−ρ)`, the
/// conditional mean averaged over the size distribution. It depends on the
/// service distribution only through its mean (insensitivity).
pub fn mg1_ps_mean_response(lambda: f64, mean_service: f64) -> f64 {
    mg1_ps_conditional_response(lambda, mean_service, mean_service)
}

// === Fork-join of M/M/1 queues ===

/// Mean response time of a two-way fork-join of homogeneous M/M/1 FCFS
/// queues: every arrival (rate `λ`) forks one task to each of two servers
/// (rate `μ` each) and leaves when both tasks finish.
///
/// `R_2 = (12 − ρ)/8 · 1/(μ − λ)`, ρ = λ/μ; equivalently `(H_2 − ρ/8)/(μ−λ)`
/// with `H_2 = 3/2`. This is exact: derived by L. Flatto and S. Hahn,
/// "Two parallel queues created by arrivals with two demands I", SIAM J. Appl.
/// Math. 44(5), 1984, and stated in this form in R. Nelson and A. N. Tantawi,
/// "Approximate analysis of fork/join synchronization in parallel queues",
/// IEEE Trans. Computers 37(6):739–743, 1988. Survey: A. Thomasian, "Analysis
/// of fork/join and related queueing systems", ACM Comput. Surv. 47(2), 2014.
pub fn fork_join2_mean_response(lambda: f64, mu: f64) -> f64 {
    check_rates(lambda, mu);
    if lambda >= mu {
        return f64::INFINITY;
    }
    let rho = lambda / mu;
    (12.0 - rho) / 8.0 / (mu - lambda)
}

/// Nelson–Tantawi approximation of the mean response time of a `k`-way
/// fork-join of homogeneous M/M/1 FCFS queues:
///
/// ```text
/// R_k ≈ [H_k/H_2 + (4/11)·(1 − H_k/H_2)·ρ] · R_2
/// ```
///
/// with `R_2` from [`fork_join2_mean_response`] and `H_k` the k-th harmonic
/// number. Exact at `k = 2` and at ρ → 0 (where it is `H_k/μ`, the mean of
/// the maximum of `k` Exp(μ) service times); elsewhere an approximation that
/// Nelson & Tantawi (IEEE Trans. Computers 37(6), 1988) fitted to simulation
/// and validated for `2 ≤ k ≤ 32`, within a few percent.
pub fn fork_join_mean_response_approx(k: u32, lambda: f64, mu: f64) -> f64 {
    assert!(k >= 2, "the Nelson–Tantawi approximation needs k >= 2, got {k}");
    let r2 = fork_join2_mean_response(lambda, mu);
    if r2.is_infinite() {
        return r2;
    }
    let rho = lambda / mu;
    let scale = harmonic(k) / harmonic(2);
    (scale + 4.0 / 11.0 * (1.0 - scale) * rho) * r2
}

/// The harmonic number `H_k = Σ_{i=1..k} 1/i` (`H_0 = 0`).
pub fn harmonic(k: u32) -> f64 {
    // Summing smallest terms first loses the least precision.
    (1..=k).rev().map(|i| 1.0 / f64::from(i)).sum()
}

// === Non-preemptive priority M/G/1 (Cobham) ===

/// One class of a non-preemptive priority M/G/1 queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriorityClass {
    /// Poisson arrival rate of this class.
    pub lambda: f64,
    /// Mean service time `E[S_i]`.
    pub mean_service: f64,
    /// Second moment of service time `E[S_i²]`.
    pub second_moment: f64,
}

/// Mean time in queue per class of a non-preemptive priority M/G/1 queue,
/// FCFS within a class, `classes[0]` the highest priority:
///
/// ```text
/// W_i = W_0 / ((1 − σ_{i−1})·(1 − σ_i))
/// W_0 = Σ_j λ_j·E[S_j²] / 2          (mean residual work in service)
/// σ_i = Σ_{j≤i} ρ_j,  σ_{−1} = 0,  ρ_j = λ_j·E[S_j]
/// ```
///
/// Source: A. Cobham, "Priority assignment in waiting line problems",
/// J. Oper. Res. Soc. America 2(1):70–76, 1954; [Kleinrock II] ch. 3.
/// A class whose `σ_i ≥ 1` (and every class below it) gets `f64::INFINITY`.
pub fn cobham_mean_waits(classes: &[PriorityClass]) -> Vec<f64> {
    for class in classes {
        check_service(class.lambda, class.mean_service);
        assert!(class.second_moment >= 0.0, "E[S^2] must be >= 0");
    }
    let w0: f64 = classes.iter().map(|k| k.lambda * k.second_moment / 2.0).sum();
    let mut sigma_above = 0.0;
    classes
        .iter()
        .map(|class| {
            let sigma = sigma_above + class.lambda * class.mean_service;
            let wait = if sigma >= 1.0 { f64::INFINITY } else { w0 / ((1.0 - sigma_above) * (1.0 - sigma)) };
            sigma_above = sigma;
            wait
        })
        .collect()
}

/// Mean response time per class of a non-preemptive priority M/G/1 queue:
/// [`cobham_mean_waits`] plus each class's `E[S_i]`.
pub fn cobham_mean_responses(classes: &[PriorityClass]) -> Vec<f64> {
    cobham_mean_waits(classes).into_iter().zip(classes).map(|(wait, class)| wait + class.mean_service).collect()
}

// === Argument checks ===

fn check_rates(lambda: f64, mu: f64) {
    assert!(lambda >= 0.0 && lambda.is_finite(), "arrival rate must be finite and >= 0, got {lambda}");
    assert!(mu > 0.0 && mu.is_finite(), "service rate must be finite and > 0, got {mu}");
}

fn check_service(lambda: f64, mean_service: f64) {
    assert!(lambda >= 0.0 && lambda.is_finite(), "arrival rate must be finite and >= 0, got {lambda}");
    assert!(
        mean_service >= 0.0 && mean_service.is_finite(),
        "mean service time must be finite and >= 0, got {mean_service}"
    );
}

fn check_probability(p: f64) {
    assert!((0.0..=1.0).contains(&p), "probability must be in [0, 1], got {p}");
}

#[cfg(test)]
mod tests {
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
        for (lambda, mu, c) in [
            (1.6, 1.0, 2),
            (1.0, 1.0, 2),
            (1.0 + 1e-9, 1.0, 2),
            (0.5, 1.0, 2),
            (3.0, 1.0, 4),
            (3.9, 1.0, 4),
            (0.3, 2.0, 1),
        ] {
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
}
