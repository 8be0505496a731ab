//! Non-FIFO scheduling: the scheduling class of the service's threads. Under CFS/EEVDF the
//! runnable threads share the CPU in time slices, so a request that arrived first can finish
//! after later ones; a FIFO class (SCHED_FIFO, or SCHED_RR at one level) keeps arrival order.

use std::collections::BTreeMap;

use crate::checks::Context;
use crate::finding::{node_can, Finding, Severity, Source};
use crate::task::{is_fair_class, policy_name};

pub fn check(ctx: &Context) -> Vec<Finding> {
    if ctx.target.is_node() {
        return Vec::new();
    }
    let deltas = ctx.deltas();
    // Threads of the service that ran during the sample (workers), by class.
    let mut classes: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut fair_workers = 0usize;
    let mut workers = 0usize;
    for d in deltas.iter().filter(|d| ctx.is_target(d.pid)) {
        *classes.entry(policy_name(d.policy)).or_default() += 1;
        if d.cpu_ns > 0 {
            workers += 1;
            if is_fair_class(d.policy) {
                fair_workers += 1;
            }
        }
    }
    let by_class: Vec<String> = classes.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let evidence = vec![
        format!("threads by class: {} [/proc/PID/task/*/stat field 41]", by_class.join(", ")),
        format!("{workers} threads ran during the sample, {fair_workers} of them under CFS"),
    ];
    let cpus = ctx.target.cpus.len();
    if fair_workers <= 1 {
        let summary = if fair_workers == 0 && workers > 0 {
            "its busy threads run in a FIFO-ordered class".to_string()
        } else {
            "at most one busy CFS thread: the kernel cannot reorder its requests".to_string()
        };
        return vec![Finding::ok("sched_class", Source::NonFifoScheduling, summary, evidence)];
    }
    let severity = if fair_workers > cpus { Severity::Problem } else { Severity::Warn };
    vec![Finding::issue(
        "sched_class",
        Source::NonFifoScheduling,
        severity,
        format!("{fair_workers} busy threads under CFS on {cpus} CPUs: the kernel time-slices them, so requests can overtake each other"),
        evidence,
        "requests served out of arrival order: under load the oldest request can wait behind younger ones in a time slice; Tales measured the tail well above the FIFO ideal from this alone",
        "run the worker threads in a FIFO class: `chrt -f -a -p 1 PID`, or Tailor's kernel scheduler (`tailor scheduler`) to order them by arrival",
        node_can("yes: a critical tier matching the service with `rt_priority = 1` (SCHED_RR band at one level: FIFO among its threads) and an `rt_runtime_us` budget"),
    )]
}

#[cfg(test)]
mod tests {
    use crate::finding::Severity;
    use crate::fixtures::finding;

    #[test]
    fn busy_cfs_workers_beyond_the_cpus_are_a_problem() {
        let f = finding("contended", "sched_class");
        assert_eq!(f.severity, Severity::Problem, "{f:?}");
        assert!(f.evidence[0].contains("3 SCHED_OTHER") && f.evidence[0].contains("1 SCHED_FIFO"), "{f:?}");
    }

    #[test]
    fn one_busy_thread_or_a_fifo_thread_is_fine() {
        assert_eq!(finding("healthy", "sched_class").severity, Severity::Ok);
        let fifo = finding("bare", "sched_class");
        assert_eq!(fifo.severity, Severity::Ok);
        assert!(fifo.summary.contains("FIFO-ordered"), "{fifo:?}");
    }
}
