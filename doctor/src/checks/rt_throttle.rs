//! RT throttling: `kernel.sched_rt_runtime_us` / `sched_rt_period_us`. Real-time threads get
//! at most runtime per period; a saturated FIFO service then stalls for the rest of the period.
//! Unlimited (-1) lets a runaway RT thread starve everything else.

use crate::checks::Context;
use crate::finding::{node_can, Finding, Severity, Source};
use crate::task::is_fair_class;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let read = |f: &str| ctx.root.read_trimmed(&format!("proc/sys/kernel/{f}")).and_then(|v| v.parse::<i64>().ok());
    let (Some(runtime), Some(period)) = (read("sched_rt_runtime_us"), read("sched_rt_period_us")) else {
        return vec![Finding::unknown("rt_throttle", Source::RtThrottling, "/proc/sys/kernel/sched_rt_* not readable")];
    };
    if ctx.target.is_node() {
        // No service to judge the budget against: report it, as the node's setting.
        return vec![Finding::ok(
            "rt_throttle",
            Source::RtThrottling,
            "node-wide: real-time threads get at most the RT budget; name a service to judge it",
            vec![format!("sched_rt_runtime_us={runtime} sched_rt_period_us={period} [/proc/sys/kernel]")],
        )];
    }
    let rt_threads = ctx.after.tasks.values().filter(|t| ctx.is_target(t.pid) && !is_fair_class(t.stat.policy)).count();
    let evidence = vec![
        format!("sched_rt_runtime_us={runtime} sched_rt_period_us={period} [/proc/sys/kernel]"),
        format!("{rt_threads} of its threads run in a real-time class"),
    ];
    if rt_threads == 0 {
        return vec![Finding::ok(
            "rt_throttle",
            Source::RtThrottling,
            "its threads are not real-time: the RT budget does not apply",
            evidence,
        )];
    }
    let (severity, summary, effect) = if runtime < 0 {
        (
            Severity::Warn,
            "RT time unlimited: a busy real-time thread can starve every other thread on its CPU".to_string(),
            "no stall for the service, but kernel threads and daemons on its CPUs can be starved under overload"
                .to_string(),
        )
    } else if runtime < period {
        let stall_ms = (period - runtime) as f64 / 1e3;
        (
            Severity::Warn,
            format!("real-time threads are throttled after {runtime} µs of every {period} µs"),
            format!("if its RT threads saturate a CPU, they stop for up to {stall_ms:.0} ms each period: requests in flight then wait that long"),
        )
    } else {
        return vec![Finding::ok("rt_throttle", Source::RtThrottling, "RT budget covers the whole period", evidence)];
    };
    vec![Finding::issue(
        "rt_throttle",
        Source::RtThrottling,
        severity,
        summary,
        evidence,
        effect,
        "keep the service below its RT budget (leave CPU for the rest), or give its cgroup an explicit budget",
        node_can("yes: the critical tier's `rt_runtime_us` sets the service's RT budget per period"),
    )]
}

#[cfg(test)]
mod tests {
    use crate::finding::Severity;
    use crate::fixtures::finding;

    #[test]
    fn rt_threads_under_a_partial_budget_or_unlimited_are_flagged() {
        let f = finding("contended", "rt_throttle");
        assert_eq!(f.severity, Severity::Warn, "{f:?}");
        assert!(f.effect.contains("50 ms"), "{}", f.effect);
        let unlimited = finding("bare", "rt_throttle");
        assert_eq!(unlimited.severity, Severity::Warn);
        assert!(unlimited.summary.contains("unlimited"));
    }

    #[test]
    fn no_rt_threads_is_fine() {
        assert_eq!(finding("healthy", "rt_throttle").severity, Severity::Ok);
    }
}
