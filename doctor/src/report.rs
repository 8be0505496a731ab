//! The human report of a diagnosis: one block per finding, worst first.

use std::fmt::Write;

use crate::cpulist::format_list;
use crate::finding::Severity;
use crate::inspect::Diagnosis;

pub fn human(d: &Diagnosis) -> String {
    let mut s = String::new();
    // The whole node has no threads of its own to count: say what was inspected instead.
    let scope = if d.target.is_node() {
        "the whole node (no service given: --pid, --service or --cgroup names one)".to_string()
    } else {
        format!("{} — {} threads", d.target.label, d.target.thread_count)
    };
    let _ = writeln!(
        s,
        "tailor doctor: {scope}, CPUs {}, sampled {} ms{}",
        format_list(&d.target.cpus),
        d.interval_ms,
        if d.privileged { "" } else { " (not root: some facts need root, listed below)" }
    );
    for f in &d.findings {
        let _ = writeln!(s, "\n[{}] {}: {}", f.severity.label(), f.source.title(), f.summary);
        for e in &f.evidence {
            let _ = writeln!(s, "    evidence: {e}");
        }
        if f.severity > Severity::Unknown {
            let _ = writeln!(s, "    effect:   {}", f.effect);
            let _ = writeln!(s, "    fix:      {}", f.fix);
            let _ = writeln!(s, "    tailor node: {}", f.node_fix.how);
        }
        for r in &f.needs_root {
            let _ = writeln!(s, "    needs root: {r}");
        }
    }
    let problems = d.findings.iter().filter(|f| f.severity >= Severity::Warn).count();
    let _ = writeln!(s, "\n{problems} finding(s) to act on; `-o json` for the machine-readable form.");
    s
}

#[cfg(test)]
mod tests {
    use crate::fixtures::diagnose_case;
    use crate::target::TargetSpec;

    #[test]
    fn the_report_puts_problems_first_with_their_fix() {
        let d = diagnose_case("contended", TargetSpec::Pid(100));
        let text = super::human(&d);
        let first = text.lines().nth(2).unwrap();
        assert!(first.starts_with("[PROBLEM]"), "{text}");
        assert!(text.contains("fix:") && text.contains("tailor node: yes"), "{text}");
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["findings"][0]["severity"], "problem");
        assert_eq!(json["target"]["cpus"], "0");
        assert!(text.starts_with("tailor doctor: pid 100"), "{text}");
    }

    #[test]
    fn a_node_wide_report_says_so_instead_of_counting_no_threads() {
        let d = diagnose_case("contended", TargetSpec::Node);
        let text = super::human(&d);
        let header = text.lines().next().unwrap();
        assert!(header.starts_with("tailor doctor: the whole node"), "{header}");
        assert!(!header.contains("0 threads"), "{header}");
        assert!(!text.contains("its threads"), "node-wide findings speak of the node:\n{text}");
    }
}
