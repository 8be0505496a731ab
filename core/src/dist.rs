//! Service-time and inter-arrival distributions: TOML specs, validated sampling-ready forms, exact CDFs.
//!
//! A [`DistSpec`] is what a config file says (`{ kind = "exp", mean_ms = 10 }`);
//! [`DistSpec::build`] validates it, loads any table and precomputes everything
//! sampling needs, giving a [`Dist`]. [`Dist::sample_ns`] sits in the
//! simulator's hot loop: one `match`, no allocation, no string handling.
//! Every `Dist` also knows its mean, variance, CDF and quantile function, which
//! tests use as oracles and the TailGuard planner uses to compute x_p^u(k).
//!
//! Every parameter is in milliseconds (f64) and says so in its name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::rng::RandomSource;
use crate::time::{Nanos, NANOS_PER_MILLI, NEVER};

mod empirical;
pub mod special;
mod table;
mod ziggurat;
mod ziggurat_tables;

pub use empirical::{EmpiricalTable, TABLE_LEN};
pub(crate) use table::read_table;
pub use table::TableError;
pub use ziggurat::exp1;

/// A CDF we can evaluate and invert: a service-time [`Dist`], an online
/// latency histogram, or a derived distribution (e.g. the max of k tasks).
///
/// `cdf` must be non-decreasing. `quantile` should be the smallest `x` with
/// `cdf(x) ≥ p`; callers that need that exactly (the planner) use it only as a
/// starting guess and finish with a bisection on `cdf`, so an approximate
/// quantile costs time, not correctness.
pub trait Cdf {
    /// P(X ≤ x).
    fn cdf(&self, x: Nanos) -> f64;
    /// (Approximately) the smallest x with P(X ≤ x) ≥ p; [`NEVER`] if no such x.
    fn quantile(&self, p: f64) -> Nanos;
}

// Keep `Cdf` object-safe: the planner holds `dyn Cdf`.
const _: Option<&dyn Cdf> = None;

/// A distribution stretched by a factor, as a CDF: a server `factor`× slower
/// than `dist` (the TailGuard planner's offline estimate of a server whose
/// speed is known; the fan-out demo and the simulator build the same ones).
#[derive(Clone, Debug)]
pub struct Scaled {
    pub dist: Dist,
    pub factor: f64,
}

impl Cdf for Scaled {
    fn cdf(&self, x: Nanos) -> f64 {
        self.dist.cdf_f64(x as f64 / self.factor)
    }
    fn quantile(&self, p: f64) -> Nanos {
        (self.dist.quantile_f64(p) * self.factor).round() as Nanos
    }
}

impl<T: Cdf + ?Sized> Cdf for &T {
    fn cdf(&self, x: Nanos) -> f64 {
        (**self).cdf(x)
    }
    fn quantile(&self, p: f64) -> Nanos {
        (**self).quantile(p)
    }
}

impl<T: Cdf + ?Sized> Cdf for Box<T> {
    fn cdf(&self, x: Nanos) -> f64 {
        (**self).cdf(x)
    }
    fn quantile(&self, p: f64) -> Nanos {
        (**self).quantile(p)
    }
}

impl<T: Cdf + ?Sized> Cdf for Arc<T> {
    fn cdf(&self, x: Nanos) -> f64 {
        (**self).cdf(x)
    }
    fn quantile(&self, p: f64) -> Nanos {
        (**self).quantile(p)
    }
}

// === spec ===

/// A distribution as written in a config file. Times in milliseconds.
///
/// ```toml
/// service_time = { kind = "lognormal", mean_ms = 10, sd_ms = 100 }
/// service_time = { kind = "mixture", parts = [
///     { weight = 0.90, dist = { kind = "fixed", value_ms = 5 } },
///     { weight = 0.09, dist = { kind = "fixed", value_ms = 50 } },
///     { weight = 0.01, dist = { kind = "fixed", value_ms = 100 } },
/// ] }
/// service_time = { kind = "empirical", file = "data/tailbench/Mastree_cdf" }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum DistSpec {
    /// Always `value_ms`.
    Fixed {
        /// The value, ≥ 0.
        value_ms: f64,
    },
    /// Exponential (memoryless; Poisson arrivals when used for gaps).
    Exp {
        /// Mean, > 0.
        mean_ms: f64,
    },
    /// Lognormal given by its own mean and standard deviation (not those of the
    /// underlying normal): σ² = ln(1 + sd²/mean²), μ = ln(mean) − σ²/2.
    #[serde(rename = "lognormal")]
    LogNormal {
        /// Mean of the lognormal, > 0.
        mean_ms: f64,
        /// Standard deviation of the lognormal, > 0.
        sd_ms: f64,
    },
    /// Pareto (type I) with the given mean and shape: heavy-tailed, for bursty
    /// arrivals. Scale x_m = mean·(α−1)/α. Variance is infinite for α ≤ 2.
    Pareto {
        /// Mean, > 0.
        mean_ms: f64,
        /// Shape α, > 1 (the mean is infinite otherwise).
        alpha: f64,
    },
    /// Uniform on [min_ms, max_ms].
    Uniform {
        /// Lower end, ≥ 0.
        min_ms: f64,
        /// Upper end, > min_ms.
        max_ms: f64,
    },
    /// A weighted mixture; weights are normalised to sum to 1.
    /// TailClipper's Trimodal(90-5, 9-50, 1-100) is fixed 5/50/100 ms with
    /// weights .90/.09/.01 (mean 10 ms); the Bimodal of its Fig. 2 is
    /// 99% Exp(4 ms) + 1% Exp(100 ms).
    Mixture {
        /// The components, at least one.
        parts: Vec<MixturePart>,
    },
    /// A tailbench quantile table (10,000 ascending values in ms, line i =
    /// F⁻¹(i/10⁴)), sampled exactly as the TailGuard authors do (see
    /// [`EmpiricalTable`]).
    Empirical {
        /// The table; a relative path is resolved against the base directory
        /// given to [`DistSpec::build`] (the directory of the config file).
        file: PathBuf,
        /// Multiplies every value (e.g. 2.0 for a server twice as slow).
        #[serde(default = "one")]
        scale: f64,
    },
}

fn one() -> f64 {
    1.0
}

/// `s` as a TOML basic string (quotes, backslashes and control characters escaped).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One component of a [`DistSpec::Mixture`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixturePart {
    /// Relative weight, > 0.
    pub weight: f64,
    /// The component.
    pub dist: DistSpec,
}

/// What is wrong with a [`DistSpec`]. `field` is the path inside the spec
/// (e.g. `parts[1].dist.mean_ms`); callers prefix where the spec came from.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A parameter is out of range.
    #[error("{field} = {value}: {problem}; {fix}")]
    Invalid { field: String, value: f64, problem: &'static str, fix: String },
    /// A mixture with no parts.
    #[error("{field}: a mixture needs at least one part, e.g. parts = [{{ weight = 1, dist = {{ kind = \"exp\", mean_ms = 1 }} }}]")]
    EmptyMixture { field: String },
    /// The empirical table could not be loaded.
    #[error("{field}: {source}")]
    Table {
        field: String,
        #[source]
        source: TableError,
    },
}

impl DistSpec {
    /// The same distribution with every time multiplied by `f` (a table's
    /// `scale` too): what a config's `time_scale` does to its service time.
    pub fn scaled(&self, f: f64) -> DistSpec {
        match self {
            DistSpec::Fixed { value_ms } => DistSpec::Fixed { value_ms: value_ms * f },
            DistSpec::Exp { mean_ms } => DistSpec::Exp { mean_ms: mean_ms * f },
            DistSpec::LogNormal { mean_ms, sd_ms } => DistSpec::LogNormal { mean_ms: mean_ms * f, sd_ms: sd_ms * f },
            DistSpec::Pareto { mean_ms, alpha } => DistSpec::Pareto { mean_ms: mean_ms * f, alpha: *alpha },
            DistSpec::Uniform { min_ms, max_ms } => DistSpec::Uniform { min_ms: min_ms * f, max_ms: max_ms * f },
            DistSpec::Mixture { parts } => DistSpec::Mixture {
                parts: parts.iter().map(|p| MixturePart { weight: p.weight, dist: p.dist.scaled(f) }).collect(),
            },
            DistSpec::Empirical { file, scale } => DistSpec::Empirical { file: file.clone(), scale: scale * f },
        }
    }

    /// The spec as a TOML inline table, as a config file would write it (so a
    /// generated scenario can carry any distribution a config can).
    pub fn to_inline_toml(&self) -> String {
        match self {
            DistSpec::Fixed { value_ms } => format!("{{ kind = \"fixed\", value_ms = {value_ms:?} }}"),
            DistSpec::Exp { mean_ms } => format!("{{ kind = \"exp\", mean_ms = {mean_ms:?} }}"),
            DistSpec::LogNormal { mean_ms, sd_ms } => {
                format!("{{ kind = \"lognormal\", mean_ms = {mean_ms:?}, sd_ms = {sd_ms:?} }}")
            }
            DistSpec::Pareto { mean_ms, alpha } => {
                format!("{{ kind = \"pareto\", mean_ms = {mean_ms:?}, alpha = {alpha:?} }}")
            }
            DistSpec::Uniform { min_ms, max_ms } => {
                format!("{{ kind = \"uniform\", min_ms = {min_ms:?}, max_ms = {max_ms:?} }}")
            }
            DistSpec::Mixture { parts } => {
                let parts: Vec<String> = parts
                    .iter()
                    .map(|p| format!("{{ weight = {:?}, dist = {} }}", p.weight, p.dist.to_inline_toml()))
                    .collect();
                format!("{{ kind = \"mixture\", parts = [{}] }}", parts.join(", "))
            }
            DistSpec::Empirical { file, scale } => {
                // TOML's escapes, not Rust's Debug ones (which write \u{..}).
                let path = toml_string(&file.display().to_string());
                format!("{{ kind = \"empirical\", file = {path}, scale = {scale:?} }}")
            }
        }
    }

    /// Validates the spec, loads tables (relative paths against `base_dir`)
    /// and precomputes what sampling needs.
    pub fn build(&self, base_dir: &Path) -> Result<Dist, DistError> {
        self.build_at(base_dir, "")
    }

    fn build_at(&self, base_dir: &Path, at: &str) -> Result<Dist, DistError> {
        let field = |name: &str| if at.is_empty() { name.to_owned() } else { format!("{at}.{name}") };
        let positive = |name: &str, v: f64| -> Result<f64, DistError> {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(DistError::Invalid {
                    field: field(name),
                    value: v,
                    problem: "must be positive and finite",
                    fix: format!("set {name} to a number > 0"),
                })
            }
        };
        let non_negative = |name: &str, v: f64| -> Result<f64, DistError> {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(DistError::Invalid {
                    field: field(name),
                    value: v,
                    problem: "must be non-negative and finite",
                    fix: format!("set {name} to a number >= 0"),
                })
            }
        };
        let ms = NANOS_PER_MILLI as f64;
        Ok(match self {
            DistSpec::Fixed { value_ms } => Dist::fixed_ns(non_negative("value_ms", *value_ms)? * ms),
            DistSpec::Exp { mean_ms } => Dist::exp_ns(positive("mean_ms", *mean_ms)? * ms),
            DistSpec::LogNormal { mean_ms, sd_ms } => {
                Dist::lognormal_ns(positive("mean_ms", *mean_ms)? * ms, positive("sd_ms", *sd_ms)? * ms)
            }
            DistSpec::Pareto { mean_ms, alpha } => {
                let mean = positive("mean_ms", *mean_ms)? * ms;
                if !(alpha.is_finite() && *alpha > 1.0) {
                    return Err(DistError::Invalid {
                        field: field("alpha"),
                        value: *alpha,
                        problem: "must be finite and > 1 (the mean is infinite otherwise)",
                        fix: "set alpha > 1; 1.5 is a common bursty choice".into(),
                    });
                }
                Dist::pareto_ns(mean, *alpha)
            }
            DistSpec::Uniform { min_ms, max_ms } => {
                let min = non_negative("min_ms", *min_ms)?;
                let max = non_negative("max_ms", *max_ms)?;
                if max <= min {
                    return Err(DistError::Invalid {
                        field: field("max_ms"),
                        value: max,
                        problem: "must be greater than min_ms",
                        fix: format!("set max_ms > {min} (use kind = \"fixed\" for a constant)"),
                    });
                }
                Dist::uniform_ns(min * ms, max * ms)
            }
            DistSpec::Mixture { parts } => {
                if parts.is_empty() {
                    return Err(DistError::EmptyMixture { field: field("parts") });
                }
                let mut built = Vec::with_capacity(parts.len());
                for (i, part) in parts.iter().enumerate() {
                    let here = field(&format!("parts[{i}]"));
                    let w = part.weight;
                    if !(w.is_finite() && w > 0.0) {
                        return Err(DistError::Invalid {
                            field: format!("{here}.weight"),
                            value: w,
                            problem: "must be positive and finite",
                            fix: "set weight > 0 (weights are normalised; drop a part instead of giving it 0)".into(),
                        });
                    }
                    built.push((w, part.dist.build_at(base_dir, &format!("{here}.dist"))?));
                }
                Dist::mixture(built)
            }
            DistSpec::Empirical { file, scale } => {
                let scale = positive("scale", *scale)?;
                let path = base_dir.join(file);
                let table = EmpiricalTable::load(&path, scale)
                    .map_err(|source| DistError::Table { field: field("file"), source })?;
                Dist { kind: Kind::Empirical(Arc::new(table)) }
            }
        })
    }
}

// === impl Dist ===

/// A validated, sampling-ready distribution over non-negative times in ns.
/// Cheap to clone (tables are shared).
#[derive(Clone, Debug)]
pub struct Dist {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Fixed {
        ns: f64,
        rounded: Nanos,
    },
    Exp {
        mean: f64,
    },
    LogNormal {
        mu: f64,
        sigma: f64,
        mean: f64,
        sd: f64,
    },
    Pareto {
        scale: f64,
        alpha: f64,
        inv_alpha: f64,
    },
    Uniform {
        min: f64,
        width: f64,
    },
    /// `cum[i]` = normalised weight of parts 0..=i; the last is exactly 1.
    Mixture {
        cum: Box<[f64]>,
        weights: Box<[f64]>,
        parts: Box<[Dist]>,
    },
    Empirical(Arc<EmpiricalTable>),
}

/// f64 ns → Nanos, rounding to nearest; negative and NaN → 0, huge → [`NEVER`].
#[inline]
fn to_nanos(x: f64) -> Nanos {
    let y = x + 0.5;
    if (0.0..9.0e18).contains(&y) {
        // The common case, with the same value as below in one instruction on
        // x86-64 (`as` to an integer is a saturating, branchy sequence there).
        // SAFETY: `y` is finite and in [0, 9e18), so it truncates to an i64.
        unsafe { y.to_int_unchecked::<i64>() as Nanos }
    } else {
        saturating_nanos(y)
    }
}

/// `y as Nanos`: saturates, maps NaN to 0. Out of line, so that the compiler
/// does not compute it next to the common case and select (which it does).
#[cold]
#[inline(never)]
fn saturating_nanos(y: f64) -> Nanos {
    y as Nanos
}

impl Dist {
    /// Always `ns` (≥ 0).
    pub fn fixed_ns(ns: f64) -> Dist {
        Dist { kind: Kind::Fixed { ns, rounded: to_nanos(ns) } }
    }

    /// Exponential with mean `mean` ns (> 0).
    pub fn exp_ns(mean: f64) -> Dist {
        Dist { kind: Kind::Exp { mean } }
    }

    /// Lognormal with its own mean and standard deviation, in ns.
    pub fn lognormal_ns(mean: f64, sd: f64) -> Dist {
        let s2 = (1.0 + (sd / mean).powi(2)).ln();
        Dist { kind: Kind::LogNormal { mu: mean.ln() - s2 / 2.0, sigma: s2.sqrt(), mean, sd } }
    }

    /// Pareto with mean `mean` ns and shape `alpha` > 1.
    pub fn pareto_ns(mean: f64, alpha: f64) -> Dist {
        Dist { kind: Kind::Pareto { scale: mean * (alpha - 1.0) / alpha, alpha, inv_alpha: 1.0 / alpha } }
    }

    /// Uniform on [min, max] ns.
    pub fn uniform_ns(min: f64, max: f64) -> Dist {
        Dist { kind: Kind::Uniform { min, width: max - min } }
    }

    /// A mixture of (weight, part); weights > 0, normalised here.
    pub fn mixture(parts: Vec<(f64, Dist)>) -> Dist {
        assert!(!parts.is_empty(), "a mixture needs at least one part");
        let total: f64 = parts.iter().map(|(w, _)| w).sum();
        let weights: Box<[f64]> = parts.iter().map(|(w, _)| w / total).collect();
        let mut acc = 0.0;
        let mut cum: Box<[f64]> = weights
            .iter()
            .map(|w| {
                acc += w;
                acc
            })
            .collect();
        // No rounding gap at the top: every u < 1 must land in some part.
        *cum.last_mut().unwrap() = 1.0;
        Dist { kind: Kind::Mixture { cum, weights, parts: parts.into_iter().map(|(_, d)| d).collect() } }
    }

    /// The empirical table, if this is one.
    pub fn table(&self) -> Option<&EmpiricalTable> {
        match &self.kind {
            Kind::Empirical(t) => Some(t),
            _ => None,
        }
    }

    /// One draw, in ns.
    #[inline(always)]
    pub fn sample_ns<R: RandomSource + ?Sized>(&self, rng: &mut R) -> Nanos {
        // The simulator's most common case, inlined into its loop; the rest
        // behind a call.
        if let Kind::Exp { mean } = self.kind {
            return to_nanos(mean * exp1(rng));
        }
        self.sample_ns_other(rng)
    }

    fn sample_ns_other<R: RandomSource + ?Sized>(&self, rng: &mut R) -> Nanos {
        match &self.kind {
            Kind::Fixed { rounded, .. } => *rounded,
            // Ziggurat, not -mean·ln(U): same distribution, no `ln` (see `dist::exp1`).
            Kind::Exp { mean } => to_nanos(mean * exp1(rng)),
            Kind::LogNormal { mu, sigma, .. } => to_nanos((mu + sigma * rng.normal()).exp()),
            // Inversion: x_m · U^(−1/α), U in (0, 1].
            Kind::Pareto { scale, inv_alpha, .. } => to_nanos(scale / rng.next_f64_open0().powf(*inv_alpha)),
            Kind::Uniform { min, width } => to_nanos(min + width * rng.next_f64()),
            Kind::Mixture { cum, parts, .. } => {
                let u = rng.next_f64();
                // Mixtures are small: a linear scan beats a binary search.
                let i = cum.iter().position(|&c| u < c).unwrap_or(cum.len() - 1);
                parts[i].sample_ns(rng)
            }
            Kind::Empirical(t) => to_nanos(t.sample(rng)),
        }
    }

    /// Mean, ns.
    pub fn mean_ns(&self) -> f64 {
        match &self.kind {
            Kind::Fixed { ns, .. } => *ns,
            Kind::Exp { mean } => *mean,
            Kind::LogNormal { mean, .. } => *mean,
            Kind::Pareto { scale, alpha, .. } => alpha * scale / (alpha - 1.0),
            Kind::Uniform { min, width } => min + width / 2.0,
            Kind::Mixture { weights, parts, .. } => {
                weights.iter().zip(parts.iter()).map(|(w, d)| w * d.mean_ns()).sum()
            }
            Kind::Empirical(t) => t.mean(),
        }
    }

    /// Variance, ns²; `None` where it is infinite (Pareto with α ≤ 2, or a
    /// mixture containing one).
    pub fn variance_ns2(&self) -> Option<f64> {
        Some(match &self.kind {
            Kind::Fixed { .. } => 0.0,
            Kind::Exp { mean } => mean * mean,
            Kind::LogNormal { sd, .. } => sd * sd,
            Kind::Pareto { scale, alpha, .. } => {
                if *alpha <= 2.0 {
                    return None;
                }
                scale * scale * alpha / ((alpha - 1.0).powi(2) * (alpha - 2.0))
            }
            Kind::Uniform { width, .. } => width * width / 12.0,
            Kind::Mixture { weights, parts, .. } => {
                // E[X²] − E[X]², with E[X²] = Σ w_i (Var_i + mean_i²).
                let mut m2 = 0.0;
                for (w, d) in weights.iter().zip(parts.iter()) {
                    let m = d.mean_ns();
                    m2 += w * (d.variance_ns2()? + m * m);
                }
                let mean = self.mean_ns();
                (m2 - mean * mean).max(0.0)
            }
            Kind::Empirical(t) => t.variance(),
        })
    }

    /// P(X ≤ x) of the continuous variable behind [`Dist::sample_ns`] (which
    /// rounds to whole ns; the difference is at most half a nanosecond).
    pub fn cdf_f64(&self, x: f64) -> f64 {
        match &self.kind {
            Kind::Fixed { ns, .. } => {
                if x >= *ns {
                    1.0
                } else {
                    0.0
                }
            }
            Kind::Exp { mean } => {
                if x <= 0.0 {
                    0.0
                } else {
                    -(-x / mean).exp_m1()
                }
            }
            Kind::LogNormal { mu, sigma, .. } => {
                if x <= 0.0 {
                    0.0
                } else {
                    special::normal_cdf((x.ln() - mu) / sigma)
                }
            }
            Kind::Pareto { scale, alpha, .. } => {
                if x <= *scale {
                    0.0
                } else {
                    1.0 - (scale / x).powf(*alpha)
                }
            }
            Kind::Uniform { min, width } => ((x - min) / width).clamp(0.0, 1.0),
            Kind::Mixture { weights, parts, .. } => {
                weights.iter().zip(parts.iter()).map(|(w, d)| w * d.cdf_f64(x)).sum::<f64>().min(1.0)
            }
            Kind::Empirical(t) => t.cdf(x),
        }
    }

    /// The smallest x (ns, f64) with P(X ≤ x) ≥ p; +∞ if none (p = 1 for an unbounded distribution).
    pub fn quantile_f64(&self, p: f64) -> f64 {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        match &self.kind {
            Kind::Fixed { ns, .. } => *ns,
            Kind::Exp { mean } => -mean * (-p).ln_1p(),
            Kind::LogNormal { mu, sigma, .. } => {
                if p <= 0.0 {
                    0.0
                } else {
                    (mu + sigma * special::normal_quantile(p)).exp()
                }
            }
            Kind::Pareto { scale, inv_alpha, .. } => scale / (1.0 - p).powf(*inv_alpha),
            Kind::Uniform { min, width } => min + width * p,
            Kind::Mixture { parts, .. } if p >= 1.0 => parts.iter().map(|d| d.quantile_f64(1.0)).fold(0.0, f64::max),
            Kind::Mixture { parts, .. } => {
                // The answer lies between the parts' own quantiles: below the
                // smallest every part's CDF is < p, at the largest all are ≥ p.
                let mut lo = f64::INFINITY;
                let mut hi: f64 = 0.0;
                for d in parts.iter() {
                    let q = d.quantile_f64(p);
                    lo = lo.min(q);
                    hi = hi.max(q);
                }
                if !hi.is_finite() {
                    // Some part is unbounded at this p: find a finite upper end, if any.
                    hi = lo.max(1.0);
                    while self.cdf_f64(hi) < p {
                        hi *= 2.0;
                        if !hi.is_finite() {
                            return f64::INFINITY;
                        }
                    }
                }
                if self.cdf_f64(lo) >= p {
                    return lo;
                }
                // Bisection to ~1e-3 ns or 200 halvings: exact to well below a Nanos.
                for _ in 0..200 {
                    if hi - lo <= 1e-3 {
                        break;
                    }
                    let mid = 0.5 * (lo + hi);
                    if self.cdf_f64(mid) >= p {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                hi
            }
            Kind::Empirical(t) => t.quantile(p),
        }
    }

    /// P(X ≤ x) (see [`Dist::cdf_f64`]).
    pub fn cdf(&self, x: Nanos) -> f64 {
        self.cdf_f64(x as f64)
    }

    /// The smallest whole ns with `cdf ≥ p`: the real quantile rounded up,
    /// one lower if that already reaches p (a jump at an integer, or a
    /// bisected mixture quantile a hair above one). [`NEVER`] if no finite
    /// value reaches p (p = 1 for an unbounded distribution).
    pub fn quantile(&self, p: f64) -> Nanos {
        let q = self.quantile_f64(p);
        if !q.is_finite() {
            return NEVER;
        }
        let c = q.max(0.0).ceil();
        if c >= 1.0 && self.cdf_f64(c - 1.0) >= p {
            (c - 1.0) as Nanos
        } else {
            c as Nanos
        }
    }
}

impl Cdf for Dist {
    fn cdf(&self, x: Nanos) -> f64 {
        Dist::cdf(self, x)
    }
    fn quantile(&self, p: f64) -> Nanos {
        Dist::quantile(self, p)
    }
}

#[cfg(test)]
mod tests;
