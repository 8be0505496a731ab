//! Pressure stall information: `/proc/pressure/cpu` or a cgroup's `cpu.pressure`.

use crate::root::SysRoot;
use crate::target::cgroup2_mount;

/// The `some` line: share of time at least one task waited for a CPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuPressure {
    pub some_avg10: f64,
    pub some_avg60: f64,
}

/// Parses the `some avg10=… avg60=…` line.
pub fn parse(text: &str) -> Option<CpuPressure> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let value = |key: &str| -> Option<f64> {
        line.split_whitespace().find_map(|f| f.strip_prefix(key)).and_then(|v| v.parse().ok())
    };
    Some(CpuPressure { some_avg10: value("avg10=")?, some_avg60: value("avg60=")? })
}

/// Why no CPU pressure could be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PressureError {
    /// None of the files holds a `some avg10=… avg60=…` line (or none exists).
    #[error("PSI not exposed (kernel without CONFIG_PSI or psi=0); read {}", .tried.join(", "))]
    NotExposed {
        /// The files tried, as absolute paths, in order.
        tried: Vec<String>,
    },
}

/// The cgroup's pressure when it has one, else the node's; with where it was read.
pub fn read(root: &SysRoot, cgroup: Option<&str>) -> Result<(CpuPressure, String), PressureError> {
    let mut candidates = Vec::new();
    if let (Some(cg), Some(mount)) = (cgroup, cgroup2_mount(root)) {
        let cg = cg.trim_matches('/');
        // The root cgroup has no cpu.pressure of its own: that is the node's.
        if !cg.is_empty() {
            candidates.push(format!("{mount}/{cg}/cpu.pressure"));
        }
    }
    candidates.push("proc/pressure/cpu".to_string());
    for file in &candidates {
        if let Ok(text) = root.read(file) {
            if let Some(p) = parse(&text) {
                return Ok((p, format!("/{file}")));
            }
        }
    }
    Err(PressureError::NotExposed { tried: candidates.iter().map(|f| format!("/{f}")).collect() })
}
