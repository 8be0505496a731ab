//! One result of a check: which source of Tales' Table 1 it is about, what was seen, what it
//! costs, the fix, and whether the node agent (`tailor node`) can apply that fix.

use std::collections::BTreeMap;

use serde::Serialize;

/// The sources of excess tail latency (Tales of the Tail, Table 1), plus RT throttling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Other runnable work delaying the service's threads.
    BackgroundProcesses,
    /// CFS time-slices the service's threads, so requests are served out of order.
    NonFifoScheduling,
    /// Requests queue per worker instead of in one shared queue.
    ConcurrencyArchitecture,
    /// Interrupts handled on the service's CPUs.
    InterruptProcessing,
    /// Threads or memory spread over NUMA nodes.
    NumaEffects,
    /// CPU frequency scaling and idle states add wake-up time.
    PowerSaving,
    /// The kernel's cap on real-time CPU time.
    RtThrottling,
}

impl Source {
    pub fn title(self) -> &'static str {
        match self {
            Source::BackgroundProcesses => "background processes",
            Source::NonFifoScheduling => "non-FIFO scheduling",
            Source::ConcurrencyArchitecture => "concurrency architecture",
            Source::InterruptProcessing => "interrupt processing",
            Source::NumaEffects => "NUMA effects",
            Source::PowerSaving => "power saving",
            Source::RtThrottling => "RT throttling",
        }
    }
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Checked, nothing wrong.
    Ok,
    /// Could not be checked (not exposed here, or needs root); the evidence says why.
    Unknown,
    /// Worth knowing; may add to the tail.
    Warn,
    /// Adds to the tail now.
    Problem,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Unknown => "unknown",
            Severity::Warn => "warn",
            Severity::Problem => "PROBLEM",
        }
    }
}

/// Whether `tailor node` can apply the fix (journaled, undone by safe mode).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeFix {
    pub applicable: bool,
    /// How (a tier setting), or why not.
    pub how: String,
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Stable id of the check, e.g. `run_delay`.
    pub check: &'static str,
    pub source: Source,
    pub severity: Severity,
    /// One line: what was found.
    pub summary: String,
    /// What was read, with numbers.
    pub evidence: Vec<String>,
    /// Estimated effect on latency (empty when nothing is wrong).
    pub effect: String,
    /// The fix (empty when nothing is wrong).
    pub fix: String,
    pub node_fix: NodeFix,
    /// Facts this check could not read without root.
    pub needs_root: Vec<String>,
    /// The numbers behind the verdict, by name (e.g. `wait_share`), for scripts.
    pub metrics: BTreeMap<&'static str, f64>,
}

impl Finding {
    /// A finding with nothing wrong.
    pub fn ok(check: &'static str, source: Source, summary: impl Into<String>, evidence: Vec<String>) -> Self {
        Finding {
            check,
            source,
            severity: Severity::Ok,
            summary: summary.into(),
            evidence,
            effect: String::new(),
            fix: String::new(),
            node_fix: NodeFix { applicable: false, how: String::new() },
            needs_root: Vec::new(),
            metrics: BTreeMap::new(),
        }
    }

    /// A check that could not look (the summary says why).
    pub fn unknown(check: &'static str, source: Source, summary: impl Into<String>) -> Self {
        Finding { severity: Severity::Unknown, ..Finding::ok(check, source, summary, Vec::new()) }
    }

    /// Something that adds (or may add) to the tail.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        check: &'static str,
        source: Source,
        severity: Severity,
        summary: impl Into<String>,
        evidence: Vec<String>,
        effect: impl Into<String>,
        fix: impl Into<String>,
        node_fix: NodeFix,
    ) -> Self {
        Finding {
            check,
            source,
            severity,
            summary: summary.into(),
            evidence,
            effect: effect.into(),
            fix: fix.into(),
            node_fix,
            needs_root: Vec::new(),
            metrics: BTreeMap::new(),
        }
    }

    pub fn with_metrics(mut self, metrics: &[(&'static str, f64)]) -> Self {
        self.metrics.extend(metrics.iter().copied());
        self
    }

    pub fn with_needs_root(mut self, what: Vec<String>) -> Self {
        self.needs_root = what;
        self
    }
}

/// `tailor node` can apply it, this way.
pub fn node_can(how: impl Into<String>) -> NodeFix {
    NodeFix { applicable: true, how: how.into() }
}

/// `tailor node` cannot apply it, for this reason.
pub fn node_cannot(why: impl Into<String>) -> NodeFix {
    NodeFix { applicable: false, how: why.into() }
}
