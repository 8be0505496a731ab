//! The failure-modes table: one row per fault, as docs/failure-modes.md shows it.

use std::path::Path;

use crate::cases::{self, Row};

/// Every fault by a short name (`--only NAME`), in the order of the report.
pub fn all() -> Vec<(&'static str, fn(&Path) -> Row)> {
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
