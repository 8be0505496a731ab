//! The failure-modes table: one row per fault, as docs/failure-modes.md shows it.

use std::path::Path;

use crate::cases::{self, Row};
use crate::proxy_cases::{self, Fault, ProxyRow};
use crate::proxyproc::Role;

/// A fault: it runs against the `tailor` binary at the path and returns its row.
pub type Case = fn(&Path) -> Row;

/// Every fault by a short name (`--only NAME`), in the order of the report.
pub fn all() -> Vec<(&'static str, Case)> {
    vec![
        ("kill9", cases::agent_kill9),
        ("sigstop", cases::agent_sigstop),
        ("midwrite", |exe| cases::agent_killed_mid_write(exe, 5)),
        ("supervised", cases::supervised_restart),
        ("two-agents", cases::two_agents),
        ("table-removed", cases::table_removed),
        ("table-truncated", cases::table_truncated),
        ("service-killed", cases::service_killed),
        ("thread-exits", cases::job_thread_exits),
        ("panics", cases::job_panics),
        ("pool", cases::pool_grows_and_shrinks),
    ]
}

fn cell(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| if v.is_finite() { format!("{v:.0}") } else { "never".into() })
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| fault | detect ms | restore ms | re-attach ms | ordering again ms | left changed | admitted | lost | p99 in window ms | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let left = if r.left.is_empty() { "nothing".to_string() } else { r.left.join("; ") };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.fault,
            cell(r.detect_ms),
            cell(r.restore_ms),
            cell(r.reattach_ms),
            cell(r.ordering_ms),
            left,
            r.admitted,
            r.lost,
            r.p99_ms.map_or("–".into(), |v| format!("{v:.1}")),
            r.note.trim()
        ));
    }
    out
}

/// Every proxy fault on both roles (or only the fault named `only`).
pub fn proxy_rows(exe: &Path, only: Option<&str>) -> Vec<ProxyRow> {
    let mut rows = Vec::new();
    for fault in Fault::ALL {
        if only.is_some_and(|o| o != fault.name()) {
            continue;
        }
        for role in [Role::Sidecar, Role::Edge] {
            eprintln!("tailor-faults: {} on the {} ...", fault.name(), role.name());
            rows.push(proxy_cases::run(exe, role, fault));
        }
    }
    rows
}

/// The proxy rows as a Markdown table.
pub fn proxy_markdown(rows: &[ProxyRow]) -> String {
    let mut out = String::from(
        "| fault | proxy | answered (expected) | detect ms | restore ms | back ms | lost | slots leaked | fds Δ | threads Δ | others served |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (status, reason) = r.fault.expected();
        out.push_str(&format!(
            "| {} | {} | {}/{} `{status} {reason}` | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.fault.name(),
            r.role.name(),
            r.as_expected,
            r.answers.len(),
            cell(r.detect_ms),
            cell(r.restore_ms),
            cell(r.back_ms),
            r.lost,
            r.slots_left,
            r.fds_delta,
            r.threads_delta,
            r.others_served.map_or("–", |s| if s { "yes" } else { "NO" }),
        ));
    }
    out
}
