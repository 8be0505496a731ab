//! Interrupt processing: device interrupts handled on the service's CPUs (the per-CPU counts of
//! `/proc/interrupts`, sampled), the affinity of those IRQs (`/proc/irq/N/smp_affinity_list`)
//! and whether irqbalance moves them around.

use std::collections::BTreeMap;

use crate::checks::Context;
use crate::cpulist::format_list;
use crate::finding::{node_cannot, Finding, Severity, Source};
use crate::root::numeric_entries;
use crate::task::parse_stat;

/// Device interrupts per second on the service's CPUs above which they are a problem.
const PROBLEM_RATE: f64 = 10_000.0;
const WARN_RATE: f64 = 1_000.0;

/// One numbered IRQ line of `/proc/interrupts`: counts per CPU column and the description.
#[derive(Clone, Debug, PartialEq)]
pub struct IrqLine {
    pub irq: u32,
    pub per_cpu: Vec<u64>,
    pub description: String,
}

/// Numbered IRQs of `/proc/interrupts` (the named ones — LOC, RES, … — are the kernel's own).
pub fn parse(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cpus = lines.next().map(|h| h.split_whitespace().count()).unwrap_or(0);
    lines
        .filter_map(|l| {
            let (irq, rest) = l.trim_start().split_once(':')?;
            let irq: u32 = irq.parse().ok()?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let per_cpu: Vec<u64> = fields.iter().take(cpus).map_while(|f| f.parse().ok()).collect();
            let description = fields[per_cpu.len()..].join(" ");
            Some(IrqLine { irq, per_cpu, description })
        })
        .collect()
}

pub fn check(ctx: &Context) -> Vec<Finding> {
    let before: BTreeMap<u32, IrqLine> = parse(&ctx.before.interrupts).into_iter().map(|l| (l.irq, l)).collect();
    let after = parse(&ctx.after.interrupts);
    if after.is_empty() {
        return vec![Finding::unknown("irq_affinity", Source::InterruptProcessing, "/proc/interrupts not readable")];
    }
    let seconds = ctx.interval_ns.max(1) as f64 / 1e9;
    let cpus = &ctx.target.cpus;
    // (rate on the service's CPUs, irq line) for IRQs that fired there.
    let mut hits: Vec<(f64, &IrqLine)> = after
        .iter()
        .filter_map(|l| {
            let b = before.get(&l.irq)?;
            let n: u64 = l
                .per_cpu
                .iter()
                .enumerate()
                .filter(|(cpu, _)| cpus.contains(&(*cpu as u32)))
                .map(|(cpu, &c)| c.saturating_sub(b.per_cpu.get(cpu).copied().unwrap_or(0)))
                .sum();
            (n > 0).then_some((n as f64 / seconds, l))
        })
        .collect();
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    // fold, not sum: an empty f64 sum is -0.0, which prints as "-0".
    let rate = hits.iter().fold(0.0, |acc, h| acc + h.0);
    let irqbalance = numeric_entries(ctx.root, "proc").into_iter().find(|pid| {
        ctx.root
            .read(&format!("proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
            .is_some_and(|s| s.comm == "irqbalance")
    });
    let mut evidence = vec![format!(
        "{rate:.0} device interrupts/s on CPUs {} over {seconds:.1} s [/proc/interrupts]",
        format_list(cpus)
    )];
    for (r, l) in hits.iter().take(5) {
        let affinity =
            ctx.root.read_trimmed(&format!("proc/irq/{}/smp_affinity_list", l.irq)).unwrap_or_else(|| "?".into());
        evidence.push(format!("IRQ {} ({}): {r:.0}/s there, smp_affinity_list {affinity}", l.irq, l.description));
    }
    evidence.push(match irqbalance {
        Some(pid) => format!("irqbalance runs (pid {pid}): it may move IRQs back onto the service's CPUs"),
        None => "irqbalance is not running".to_string(),
    });
    // Which affinities could be changed: writing smp_affinity needs root.
    let needs_root = vec!["changing /proc/irq/N/smp_affinity (reading works without)".to_string()];
    let severity = if rate >= PROBLEM_RATE {
        Severity::Problem
    } else if rate >= WARN_RATE {
        Severity::Warn
    } else {
        Severity::Ok
    };
    if severity == Severity::Ok {
        return vec![Finding::ok(
            "irq_affinity",
            Source::InterruptProcessing,
            format!("{rate:.0} device interrupts/s on its CPUs"),
            evidence,
        )];
    }
    let top = hits.first().map(|(_, l)| l.irq).unwrap_or(0);
    vec![Finding::issue(
        "irq_affinity",
        Source::InterruptProcessing,
        severity,
        format!("{rate:.0} device interrupts/s land on the service's CPUs (most: IRQ {top})"),
        evidence,
        "each interrupt preempts a request and runs softirq work before it (context switches, lost FIFO order); Tales cut the tail by moving interrupts to a core of their own",
        format!(
            "route the NIC's IRQs to a CPU the service does not use: `echo CPU > /proc/irq/{top}/smp_affinity_list`, and stop irqbalance or set IRQBALANCE_BANNED_CPULIST to the service's CPUs"
        ),
        node_cannot("no: the node agent does not manage IRQ affinity"),
    )
    .with_needs_root(needs_root)]
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::finding::Severity;
    use crate::fixtures::finding;

    #[test]
    fn a_busy_nic_irq_on_the_service_cpu_is_found_with_irqbalance() {
        let f = finding("contended", "irq_affinity");
        assert_eq!(f.severity, Severity::Problem, "{f:?}");
        assert!(f.summary.contains("20000 device interrupts/s") && f.summary.contains("IRQ 30"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.contains("irqbalance runs (pid 300)")), "{f:?}");
        assert!(f.fix.contains("/proc/irq/30/smp_affinity_list"));
    }

    #[test]
    fn few_interrupts_are_fine() {
        let f = finding("healthy", "irq_affinity");
        assert_eq!(f.severity, Severity::Ok, "{f:?}");
        assert!(f.evidence.iter().any(|e| e.contains("irqbalance is not running")));
    }

    #[test]
    fn named_lines_are_skipped() {
        let lines = parse("   CPU0 CPU1\n 24: 1 2 IO-APIC 5-edge ACPI:Ged\nLOC: 5 6 Local timer\n");
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (lines[0].irq, lines[0].per_cpu.clone(), lines[0].description.as_str()),
            (24, vec![1, 2], "IO-APIC 5-edge ACPI:Ged")
        );
    }
}
