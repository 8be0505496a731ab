//! Power saving: the CPU frequency governor and the idle states of the service's CPUs
//! (`/sys/devices/system/cpu/cpuN/cpufreq`, `…/cpuidle`). Waking from a deep state or ramping
//! the frequency up adds to the latency of a request that arrives at an idle CPU.

use crate::checks::Context;
use crate::finding::{node_cannot, Finding, Severity, Source};

/// Idle states whose exit latency is at least this (µs) count as deep.
const DEEP_EXIT_US: u64 = 10;

pub fn check(ctx: &Context) -> Vec<Finding> {
    let root = ctx.root;
    let mut evidence = Vec::new();
    let mut governors = Vec::new();
    let mut deep = Vec::new();
    let mut exposed = false;
    for cpu in &ctx.target.cpus {
        let base = format!("sys/devices/system/cpu/cpu{cpu}");
        if let Some(g) = root.read_trimmed(&format!("{base}/cpufreq/scaling_governor")) {
            exposed = true;
            if g != "performance" {
                governors.push(format!("cpu{cpu}: {g}"));
            }
        }
        for state in root.list(&format!("{base}/cpuidle")).iter().filter(|s| s.starts_with("state")) {
            exposed = true;
            let read = |f: &str| root.read_trimmed(&format!("{base}/cpuidle/{state}/{f}"));
            let latency: u64 = read("latency").and_then(|l| l.parse().ok()).unwrap_or(0);
            let disabled = read("disable").as_deref() == Some("1");
            if latency >= DEEP_EXIT_US && !disabled {
                deep.push(format!("cpu{cpu} {} (exit {latency} µs)", read("name").unwrap_or_else(|| state.clone())));
            }
        }
    }
    if !exposed {
        let driver =
            root.read_trimmed("sys/devices/system/cpu/cpuidle/current_driver").unwrap_or_else(|| "none".into());
        return vec![Finding {
            evidence: vec![format!(
                "no cpufreq or cpuidle directories under /sys/devices/system/cpu/cpuN (cpuidle driver: {driver}); the hypervisor decides"
            )],
            ..Finding::unknown("power", Source::PowerSaving, "frequency scaling and idle states: not exposed on this VM")
        }];
    }
    if governors.is_empty() && deep.is_empty() {
        evidence.push("governor performance and no deep idle states enabled on its CPUs".into());
        return vec![Finding::ok("power", Source::PowerSaving, "no frequency scaling or deep idle states", evidence)];
    }
    if !governors.is_empty() {
        evidence.push(format!("frequency governors other than performance: {}", governors.join(", ")));
    }
    if !deep.is_empty() {
        evidence.push(format!("deep idle states enabled: {}", deep.join(", ")));
    }
    vec![Finding::issue(
        "power",
        Source::PowerSaving,
        Severity::Warn,
        "power saving can slow requests that arrive at an idle CPU",
        evidence,
        "a request arriving at an idle CPU first waits for its wake-up (the exit latency) and a lower clock; at low and moderate load this is in most requests, at high load in the tail after idle gaps",
        "`cpupower frequency-set -g performance` and disable deep idle states (`cpupower idle-set -D 10`, or hold /dev/cpu_dma_latency at 0)",
        node_cannot("no: the node agent does not manage cpufreq or cpuidle"),
    )
    .with_needs_root(vec!["changing the governor or idle states".into()])]
}

#[cfg(test)]
mod tests {
    use crate::finding::Severity;
    use crate::fixtures::finding;

    #[test]
    fn powersave_and_a_deep_c_state_are_found() {
        let f = finding("contended", "power");
        assert_eq!(f.severity, Severity::Warn, "{f:?}");
        assert!(f.evidence.iter().any(|e| e.contains("cpu0: powersave")));
        assert!(f.evidence.iter().any(|e| e.contains("C6 (exit 100 µs)")));
    }

    #[test]
    fn performance_with_shallow_states_is_fine_and_a_bare_vm_says_so() {
        assert_eq!(finding("healthy", "power").severity, Severity::Ok);
        let bare = finding("bare", "power");
        assert_eq!(bare.severity, Severity::Unknown);
        assert!(bare.summary.contains("not exposed on this VM"), "{bare:?}");
    }
}
