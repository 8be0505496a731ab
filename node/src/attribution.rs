//! Attribution: per measurement window, the PSI `cpu some` of each tier's cgroup and of the
//! node, a readback of the applied settings, and a protected / not-protected tag, so an
//! experiment never silently mixes arms (seed 002's PSI fingerprinting).

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::agent::{Agent, Readback};

/// `some` line of a PSI file.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Psi {
    pub avg10: f64,
    /// Total stall time in µs since boot (or cgroup creation).
    pub total_us: u64,
}

pub fn read_psi(path: &Path) -> Option<Psi> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let mut psi = Psi::default();
    for kv in line.split_whitespace().skip(1) {
        match kv.split_once('=') {
            Some(("avg10", v)) => psi.avg10 = v.parse().ok()?,
            Some(("total", v)) => psi.total_us = v.parse().ok()?,
            _ => {}
        }
    }
    Some(psi)
}

/// One tier's share of a window.
#[derive(Clone, Debug, Serialize)]
pub struct TierWindow {
    pub tier: String,
    /// avg10 at the end of the window (%).
    pub psi_some_avg10: Option<f64>,
    /// Stall time accumulated during the window, µs.
    pub psi_some_delta_us: Option<u64>,
    /// Share of the window in which some task of the tier was runnable but waiting (%).
    pub psi_some_pct: Option<f64>,
    pub members: usize,
}

/// One window's attribution record.
#[derive(Clone, Debug, Serialize)]
pub struct WindowRecord {
    pub start_unix_ms: u128,
    pub duration_ms: u64,
    /// The agent enforced at both ends, every setting read back as applied at both ends, and
    /// nothing had to be repaired in between.
    pub protected: bool,
    /// Why a window is not protected.
    pub reason: String,
    pub node_psi_some_pct: Option<f64>,
    pub tiers: Vec<TierWindow>,
    pub readback: Vec<Readback>,
    pub repairs_in_window: u64,
}

struct Snapshot {
    enforcing: bool,
    all_match: bool,
    repairs: u64,
    node: Option<Psi>,
    tiers: Vec<Option<Psi>>,
}

/// An open window; `finish` closes it.
pub struct Window {
    start_wall: SystemTime,
    start: Instant,
    start_snap: Snapshot,
    psi_files: Vec<Option<PathBuf>>,
}

fn snapshot(agent: &Agent, psi_files: &[Option<PathBuf>]) -> Snapshot {
    let readback = agent.readback();
    let s = &agent.stats;
    Snapshot {
        enforcing: agent.enforcing(),
        all_match: agent.enforcing() && readback.iter().all(|r| r.matches),
        repairs: s.settings_repaired + s.placements_repaired + s.policies_repaired,
        node: read_psi(Path::new("/proc/pressure/cpu")),
        tiers: psi_files.iter().map(|p| p.as_deref().and_then(read_psi)).collect(),
    }
}

impl Window {
    pub fn start(agent: &Agent) -> Window {
        let psi_files: Vec<Option<PathBuf>> =
            (0..agent.tiers.len()).map(|i| agent.psi_dir(i).map(|d| d.join("cpu.pressure"))).collect();
        let start_snap = snapshot(agent, &psi_files);
        Window { start_wall: SystemTime::now(), start: Instant::now(), start_snap, psi_files }
    }

    pub fn elapsed(&self) -> std::time::Duration {
        self.start.elapsed()
    }

    pub fn finish(self, agent: &Agent) -> WindowRecord {
        let end = snapshot(agent, &self.psi_files);
        let duration = self.start.elapsed();
        let dur_us = duration.as_micros().max(1) as f64;
        let repairs = end.repairs.saturating_sub(self.start_snap.repairs);
        let reason = if !self.start_snap.enforcing || !end.enforcing {
            "agent in safe mode (stock)".to_string()
        } else if !self.start_snap.all_match || !end.all_match {
            "a setting did not read back as applied".to_string()
        } else if repairs > 0 {
            format!("{repairs} repairs during the window")
        } else {
            String::new()
        };
        let pct = |a: Option<Psi>, b: Option<Psi>| match (a, b) {
            (Some(a), Some(b)) => Some(b.total_us.saturating_sub(a.total_us)),
            _ => None,
        };
        let tiers = agent
            .tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let delta = pct(self.start_snap.tiers[i], end.tiers[i]);
                TierWindow {
                    tier: t.name.clone(),
                    psi_some_avg10: end.tiers[i].map(|p| p.avg10),
                    psi_some_delta_us: delta,
                    psi_some_pct: delta.map(|d| 100.0 * d as f64 / dur_us),
                    members: agent.stats.members.get(i).copied().unwrap_or(0),
                }
            })
            .collect();
        WindowRecord {
            start_unix_ms: self.start_wall.duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
            duration_ms: duration.as_millis() as u64,
            protected: reason.is_empty(),
            reason,
            node_psi_some_pct: pct(self.start_snap.node, end.node).map(|d| 100.0 * d as f64 / dur_us),
            tiers,
            readback: if end.enforcing { agent.readback() } else { Vec::new() },
            repairs_in_window: repairs,
        }
    }
}
