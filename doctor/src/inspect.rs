//! One inspection: resolve the target, sample the node over an interval, run every check.

use std::time::Duration;

use serde::Serialize;

use crate::checks::{run_all, Context};
use crate::finding::{Finding, Severity};
use crate::root::SysRoot;
use crate::sample::{sample, Snapshot};
use crate::target::{resolve, Target, TargetError, TargetSpec};

/// What to inspect and how long to sample.
#[derive(Clone, Debug)]
pub struct InspectOptions {
    pub root: SysRoot,
    pub target: TargetSpec,
    /// Between the two snapshots of run-queue delay and interrupt counts.
    pub interval: Duration,
}

/// Every finding for one target.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub target: Target,
    pub interval_ms: u64,
    /// Whether the doctor ran as root (some facts need it).
    pub privileged: bool,
    pub findings: Vec<Finding>,
}

impl Diagnosis {
    /// The worst severity found.
    pub fn worst(&self) -> Severity {
        self.findings.iter().map(|f| f.severity).max().unwrap_or(Severity::Ok)
    }

    /// The finding of one check, if it ran.
    pub fn finding(&self, check: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }
}

/// Inspects the live node (or `opts.root`), sampling for `opts.interval`.
pub fn inspect(opts: &InspectOptions) -> Result<Diagnosis, TargetError> {
    let target = resolve(&opts.root, &opts.target)?;
    let (before, after, elapsed) = sample(&opts.root, opts.interval);
    Ok(diagnose(&opts.root, &target, &before, &after, elapsed))
}

/// Runs the checks on two snapshots taken `interval` apart (recorded fixtures in tests).
pub fn diagnose(root: &SysRoot, target: &Target, before: &Snapshot, after: &Snapshot, interval: Duration) -> Diagnosis {
    let ctx = Context {
        root,
        target,
        before,
        after,
        interval_ns: interval.as_nanos() as u64,
        ignore_pids: vec![std::process::id()],
    };
    let mut findings = run_all(&ctx);
    // Worst first, stable within a severity (the order of Table 1).
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    tracing::debug!(target = %target.label, findings = findings.len(), "doctor: inspected");
    // SAFETY: geteuid has no preconditions.
    let privileged = unsafe { libc::geteuid() } == 0;
    Diagnosis { target: target.clone(), interval_ms: interval.as_millis() as u64, privileged, findings }
}
