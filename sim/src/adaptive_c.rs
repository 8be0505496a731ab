//! The adaptive-`c` sweep: ORF with every fixed `c` against `orf-adaptive` on TailClipper's
//! service-time distributions and loads, over several seeds, and which fixed `c` is best.
//!
//! Each setting is a TailClipper tier (3 cores, 30 µs slices, 1 µs per re-dispatch, OS noise
//! of 1,000 interrupts/s of Exp(20 µs) per core, as in `scenarios/tailclipper-chain-*.toml`),
//! alone (`Topology::Node`) or as the paper's chain of three (`Topology::Chain`, entry cap 200).
//! Every policy of a seed sees the same arrivals and demands (the model draws them from the
//! seed, not from the schedule), so the ratio adaptive / best fixed is paired per seed.

use std::path::Path;

use serde::Serialize;
use tailor_core::PolicySpec;

use crate::model::{LoadOverride, Model, ModelError, Overrides};
use crate::scenario::{Scenario, ScenarioError};
use crate::sweep::{parallel_map, run_model};

/// TailClipper's service-time distributions (§2.3, §5.1), as scenario `service_time` values.
pub const WORKLOADS: [(&str, &str); 5] = [
    ("Fixed", r#"{ kind = "fixed", value_ms = 10 }"#),
    ("Exp", r#"{ kind = "exp", mean_ms = 10 }"#),
    ("Lognormal", r#"{ kind = "lognormal", mean_ms = 10, sd_ms = 100 }"#),
    (
        "Trimodal",
        r#"{ kind = "mixture", parts = [ { weight = 0.90, dist = { kind = "fixed", value_ms = 5 } }, { weight = 0.09, dist = { kind = "fixed", value_ms = 50 } }, { weight = 0.01, dist = { kind = "fixed", value_ms = 100 } } ] }"#,
    ),
    (
        "Bimodal",
        r#"{ kind = "mixture", parts = [ { weight = 0.99, dist = { kind = "exp", mean_ms = 4 } }, { weight = 0.01, dist = { kind = "exp", mean_ms = 100 } } ] }"#,
    ),
];

/// The fixed `c` values compared (TailClipper Fig. 12's range, 1 to 64).
pub const FIXED_C: [usize; 12] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];

/// Where the distributions are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// One TailClipper tier.
    Node,
    /// TailClipper's chain of three tiers.
    Chain,
}

/// What to sweep.
#[derive(Clone, Debug)]
pub struct Plan {
    pub topology: Topology,
    /// `(name, service_time)` pairs, e.g. from [`WORKLOADS`].
    pub workloads: Vec<(String, String)>,
    pub utilizations: Vec<f64>,
    pub fixed_c: Vec<usize>,
    /// The adaptive policy compared (its `c_max`, window and slice).
    pub adaptive: PolicySpec,
    pub seeds: Vec<u64>,
    pub requests: u64,
    pub warmup: u64,
}

impl Plan {
    /// The full sweep: every workload, ρ 0.5–0.9, every fixed `c`, the default adaptive policy.
    pub fn full(topology: Topology, seeds: u64, requests: u64) -> Plan {
        Plan {
            topology,
            workloads: WORKLOADS.iter().map(|(n, d)| (n.to_string(), d.to_string())).collect(),
            utilizations: vec![0.5, 0.6, 0.7, 0.8, 0.9],
            fixed_c: FIXED_C.to_vec(),
            adaptive: default_adaptive(),
            seeds: (1..=seeds).collect(),
            requests,
            warmup: requests / 10,
        }
    }
}

/// `orf-adaptive` with its defaults and TailClipper's 30 µs slice.
pub fn default_adaptive() -> PolicySpec {
    toml::from_str::<Wrap>("p = { kind = \"orf-adaptive\" }").expect("the defaults parse").p
}

#[derive(serde::Deserialize)]
struct Wrap {
    p: PolicySpec,
}

/// The scenario text of one setting.
pub fn scenario_text(topology: Topology, service_time: &str) -> String {
    let tiers = match topology {
        Topology::Node => 1,
        Topology::Chain => 3,
    };
    let mut s = String::from(
        "name = \"adaptive-c\"\nrequests = 1000\n\n[load]\nutilization = 0.5\nin_flight_cap = 200\n\n\
         [noise]\nrate_per_sec = 1000\nduration = { kind = \"exp\", mean_ms = 0.02 }\n",
    );
    for t in 1..=tiers {
        s.push_str(&format!(
            "\n[[service]]\nname = \"tier{t}\"\ncores = 3\npolicy = {{ kind = \"orf\", c = 1, slice_us = 30 }}\n\
             service_time = {service_time}\ncontext_switch_us = 1\n"
        ));
    }
    s
}

/// One (workload, load, policy, seed) run's result.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub workload: String,
    pub utilization: f64,
    /// `Some(c)` for fixed `c`, `None` for adaptive.
    pub c: Option<usize>,
    pub seed: u64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

/// Runs every point of `plan` on `threads` threads.
pub fn run(plan: &Plan, threads: usize) -> Result<Vec<Point>, SweepError> {
    let slice_us = match plan.adaptive {
        PolicySpec::OrfAdaptive { slice_us, .. } => slice_us,
        _ => 30.0,
    };
    let mut jobs = Vec::new();
    for (name, dist) in &plan.workloads {
        let loaded = Scenario::from_toml(&scenario_text(plan.topology, dist), Path::new(&format!("adaptive-c/{name}")))
            .map_err(SweepError::Scenario)?;
        for &u in &plan.utilizations {
            let policies = plan
                .fixed_c
                .iter()
                .map(|&c| (Some(c), PolicySpec::Orf { c, slice_us }))
                .chain([(None, plan.adaptive.clone())]);
            for (c, policy) in policies {
                for &seed in &plan.seeds {
                    let ov = Overrides {
                        load: Some(LoadOverride::Utilization(u)),
                        policy: Some(policy.clone()),
                        requests: Some(plan.requests),
                        warmup: Some(plan.warmup),
                        seed: Some(seed),
                    };
                    let model = Model::build(&loaded, &ov).map_err(SweepError::Model)?;
                    jobs.push((name.clone(), u, c, seed, model));
                }
            }
        }
    }
    // Longest first (high load, sharing policies), so the last jobs are short ones.
    jobs.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.2.unwrap_or(usize::MAX).cmp(&a.2.unwrap_or(usize::MAX))));
    let mut points = parallel_map(&jobs, threads, |(name, u, c, seed, model)| {
        let r = run_model(model);
        Point {
            workload: name.clone(),
            utilization: *u,
            c: *c,
            seed: *seed,
            p99_ms: r.summary.latency_ms.p99,
            mean_ms: r.summary.latency_ms.mean,
        }
    });
    let order = |w: &str| plan.workloads.iter().position(|(n, _)| n == w);
    points.sort_by(|a, b| {
        order(&a.workload)
            .cmp(&order(&b.workload))
            .then(a.utilization.total_cmp(&b.utilization))
            .then(a.c.unwrap_or(usize::MAX).cmp(&b.c.unwrap_or(usize::MAX)))
            .then(a.seed.cmp(&b.seed))
    });
    Ok(points)
}

/// Why the sweep could not run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{0}")]
    Scenario(ScenarioError),
    #[error("{0}")]
    Model(ModelError),
}

/// One setting's verdict: the best fixed `c` by mean p99 over the seeds, and adaptive's.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub workload: String,
    pub utilization: f64,
    pub best_c: usize,
    /// Mean over seeds of the best fixed `c`'s p99.
    pub best_p99_ms: f64,
    /// The fixed `c` values whose mean p99 is within 5% of the best.
    pub near_best: Vec<usize>,
    pub adaptive_p99_ms: f64,
    /// Mean adaptive p99 / mean best p99.
    pub ratio: f64,
    /// Per seed, adaptive p99 / the best fixed `c`'s p99 (the same seed): min and max.
    pub ratio_seed_min: f64,
    pub ratio_seed_max: f64,
    /// Mean p99 per fixed `c`, in `Plan::fixed_c` order.
    pub fixed_p99_ms: Vec<(usize, f64)>,
}

impl Verdict {
    /// Adaptive's mean p99 is within 5% of the best fixed `c`'s.
    pub fn met(&self) -> bool {
        self.ratio <= 1.05
    }
}

/// Groups the points by setting and judges each.
pub fn verdicts(points: &[Point]) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = Vec::new();
    let mut settings: Vec<(String, f64)> = Vec::new();
    for p in points {
        if !settings.iter().any(|(w, u)| *w == p.workload && *u == p.utilization) {
            settings.push((p.workload.clone(), p.utilization));
        }
    }
    for (w, u) in settings {
        let at: Vec<&Point> = points.iter().filter(|p| p.workload == w && p.utilization == u).collect();
        let mean_of = |c: Option<usize>| {
            let v: Vec<f64> = at.iter().filter(|p| p.c == c).map(|p| p.p99_ms).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        let mut cs: Vec<usize> = at.iter().filter_map(|p| p.c).collect();
        cs.sort_unstable();
        cs.dedup();
        let fixed: Vec<(usize, f64)> = cs.iter().map(|&c| (c, mean_of(Some(c)))).collect();
        let &(best_c, best) = fixed.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("fixed c points");
        let adaptive = mean_of(None);
        let per_seed: Vec<f64> = at
            .iter()
            .filter(|p| p.c.is_none())
            .filter_map(|a| at.iter().find(|p| p.c == Some(best_c) && p.seed == a.seed).map(|b| a.p99_ms / b.p99_ms))
            .collect();
        out.push(Verdict {
            workload: w,
            utilization: u,
            best_c,
            best_p99_ms: best,
            near_best: fixed.iter().filter(|(_, p)| *p <= 1.05 * best).map(|(c, _)| *c).collect(),
            adaptive_p99_ms: adaptive,
            ratio: adaptive / best,
            ratio_seed_min: per_seed.iter().copied().fold(f64::INFINITY, f64::min),
            ratio_seed_max: per_seed.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            fixed_p99_ms: fixed,
        });
    }
    out
}

/// The verdicts as a Markdown table: per setting, the mean p99 of each fixed `c`, the best,
/// adaptive and their ratio with its per-seed range.
pub fn table(verdicts: &[Verdict]) -> String {
    let Some(first) = verdicts.first() else { return String::new() };
    let mut s = String::from("| workload | ρ |");
    for (c, _) in &first.fixed_p99_ms {
        s.push_str(&format!(" c={c} |"));
    }
    s.push_str(" best c (within 5%) | adaptive | adaptive / best (per-seed range) | ≤ 5% |\n|---|---:|");
    for _ in &first.fixed_p99_ms {
        s.push_str("---:|");
    }
    s.push_str("---|---:|---:|---|\n");
    for v in verdicts {
        s.push_str(&format!("| {} | {:.1} |", v.workload, v.utilization));
        for (c, p) in &v.fixed_p99_ms {
            let cell = format!("{p:.1}");
            s.push_str(&if *c == v.best_c { format!(" **{cell}** |") } else { format!(" {cell} |") });
        }
        let near: Vec<String> = v.near_best.iter().map(|c| c.to_string()).collect();
        s.push_str(&format!(
            " {} ({}) | {:.1} | {:.3} ({:.3}–{:.3}) | {} |\n",
            v.best_c,
            near.join(","),
            v.adaptive_p99_ms,
            v.ratio,
            v.ratio_seed_min,
            v.ratio_seed_max,
            if v.met() { "yes" } else { "**no**" }
        ));
    }
    s
}
