//! The demo's per-tier CPU demand distributions: TailClipper §5.1's synthetic
//! workloads (mean 10 ms per tier) scaled so a run fits a small machine.
//!
//! Scaling multiplies every time by `mean_ms / 10`, so the shapes (and the
//! coefficients of variation) are the paper's: Trimodal(90-5, 9-50, 1-100)
//! with a 1 ms mean per tier is 0.5 / 5 / 10 ms with weights .90 / .09 / .01.

use std::fmt;
use std::str::FromStr;

use tailor_core::dist::{DistSpec, MixturePart};

/// One of TailClipper's synthetic service-time distributions (§5.1, Fig. 2, Fig. 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Fixed(10): every task the same.
    Fixed,
    /// Exp(10): light-tailed.
    Exp,
    /// Log-normal(10, 100): heavy-tailed (sd ten times the mean).
    Lognormal,
    /// Trimodal(90-5, 9-50, 1-100): mean 10.
    Trimodal,
    /// Bimodal of Fig. 2: 99% Exp(4) + 1% Exp(100) (mean 4.96).
    Bimodal,
}

impl Workload {
    pub const ALL: [Workload; 5] =
        [Workload::Fixed, Workload::Exp, Workload::Lognormal, Workload::Trimodal, Workload::Bimodal];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Fixed => "fixed",
            Workload::Exp => "exp",
            Workload::Lognormal => "lognormal",
            Workload::Trimodal => "trimodal",
            Workload::Bimodal => "bimodal",
        }
    }

    /// The per-tier demand distribution with TailClipper's times multiplied by
    /// `mean_ms / 10` (the paper's workloads have a 10 ms mean, Bimodal 4.96 ms).
    pub fn dist(self, mean_ms: f64) -> DistSpec {
        let s = mean_ms / 10.0;
        let fixed = |v: f64| DistSpec::Fixed { value_ms: v * s };
        let exp = |m: f64| DistSpec::Exp { mean_ms: m * s };
        let part = |weight: f64, dist: DistSpec| MixturePart { weight, dist };
        match self {
            Workload::Fixed => fixed(10.0),
            Workload::Exp => exp(10.0),
            Workload::Lognormal => DistSpec::LogNormal { mean_ms: 10.0 * s, sd_ms: 100.0 * s },
            Workload::Trimodal => DistSpec::Mixture {
                parts: vec![part(0.90, fixed(5.0)), part(0.09, fixed(50.0)), part(0.01, fixed(100.0))],
            },
            Workload::Bimodal => DistSpec::Mixture { parts: vec![part(0.99, exp(4.0)), part(0.01, exp(100.0))] },
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL.into_iter().find(|w| w.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
            let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown workload `{s}`; use one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn scaled_means_match_the_paper_shapes() {
        for w in Workload::ALL {
            let d = w.dist(1.0).build(Path::new(".")).unwrap();
            let expected = if w == Workload::Bimodal { 0.496e6 } else { 1e6 };
            assert!((d.mean_ns() - expected).abs() / expected < 1e-9, "{w}: {}", d.mean_ns());
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        assert!("nope".parse::<Workload>().unwrap_err().contains("trimodal"));
    }
}
