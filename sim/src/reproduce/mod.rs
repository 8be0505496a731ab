//! Reproducing the seeds' evaluations: runs every figure of a reproduction
//! manifest (`scenarios/seeds/reproduce.toml`) and writes a report with the
//! paper's claim and our number side by side (`docs/reproduction.md`).
//!
//! - [`manifest`]: the manifest's format (serde, unknown keys rejected);
//! - [`patch`]: per-figure and per-series changes to a scenario's TOML;
//! - [`exec`]: figures → deduplicated jobs → one thread pool;
//! - [`claims`]: selectors, expressions, assertions and cause sentences;
//! - [`render`]: the markdown report and its SVG plots.
//!
//! The report is generated, never edited: every number in it comes from a run
//! or from the manifest's record of what the paper says.

pub mod claims;
pub mod exec;
pub mod manifest;
pub mod patch;
pub mod render;

use std::path::Path;
use std::time::Instant;

use tailor_core::Progress;

pub use claims::ClaimResult;
pub use exec::{FigureError, FigurePlan, JobFailure, Options, Outcome};
pub use manifest::{LoadedManifest, Manifest, ManifestError};
pub use patch::PatchError;

/// A finished reproduction: the plan, every job's outcome, and when it ran.
pub struct Reproduction {
    pub manifest: LoadedManifest,
    pub options: Options,
    pub figures: Vec<FigurePlan>,
    pub outcomes: Vec<Outcome>,
    pub wall_seconds: f64,
    /// UTC date the reproduction ran, `YYYY-MM-DD`.
    pub date: String,
}

/// Why a reproduction could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReproduceError {
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    /// Scenario or figure problems, all of them.
    #[error("{file}: {} problem(s):\n  - {}", .problems.len(), .problems.join("\n  - "))]
    Plan { file: String, problems: Vec<String> },
    /// Jobs that failed, each by its label.
    #[error("a run failed:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Run(Vec<exec::JobFailure>),
}

/// Loads the manifest, runs every selected figure and evaluates its claims.
/// `progress` sees each job as it finishes.
pub fn run(manifest_path: &Path, options: &Options, progress: &dyn Progress) -> Result<Reproduction, ReproduceError> {
    let manifest = Manifest::load(manifest_path)?;
    let started = Instant::now();
    let plan = exec::plan(&manifest, options)
        .map_err(|problems| ReproduceError::Plan { file: manifest_path.display().to_string(), problems })?;
    let outcomes = exec::execute(&plan.jobs, options.threads, progress).map_err(ReproduceError::Run)?;
    Ok(Reproduction {
        manifest,
        options: options.clone(),
        figures: plan.figures,
        outcomes,
        wall_seconds: started.elapsed().as_secs_f64(),
        date: utc_date(std::time::SystemTime::now()),
    })
}

impl Reproduction {
    /// Every claim of every figure that ran, with the figure's id.
    pub fn claims(&self) -> Vec<(String, ClaimResult)> {
        let mut out = Vec::new();
        for f in &self.figures {
            let spec = &self.manifest.manifest.figures[f.index];
            for r in self.figure_claims(f) {
                out.push((spec.id.clone(), r));
            }
        }
        out
    }

    /// The claims of one figure: the manifest's, or Table II's rows.
    pub fn figure_claims(&self, f: &FigurePlan) -> Vec<ClaimResult> {
        let spec = &self.manifest.manifest.figures[f.index];
        let mut out: Vec<ClaimResult> = spec.claims.iter().map(|c| self.claim(f, c)).collect();
        if let Some(pl) = &spec.planner {
            out.extend(render::planner_claims(f, pl));
        }
        out
    }

    /// Simulation runs and events over all jobs.
    pub fn totals(&self) -> (usize, u64) {
        (self.outcomes.iter().map(Outcome::runs).sum(), self.outcomes.iter().map(Outcome::events).sum())
    }
}

/// `YYYY-MM-DD` (UTC) of a time, by the days-from-civil inverse (no time-zone database needed).
pub fn utc_date(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        let at = |s: u64| utc_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01");
        assert_eq!(at(951_782_400), "2000-02-29");
        assert_eq!(at(1_735_689_599), "2024-12-31");
    }
}
