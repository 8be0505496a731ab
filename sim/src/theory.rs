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
mod tests;
