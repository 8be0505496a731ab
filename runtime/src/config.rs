//! Which backend enforces the policy: the serde types of the runtime's configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tailor_core::PolicySpec;

/// The enforcement backend, as written in a config file
/// (`{"kind": "cooperative", "policy": {"kind": "orf"}, "c": 6}`) or built in code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields, from = "Raw")]
pub enum BackendSpec {
    /// The Linux default, for baselines: every request runs at once on its own thread.
    None,
    /// No privileges needed: at most `c` jobs admitted at a time, admitted in the policy's
    /// order (a policy instance with `c` CPUs: its `running()` is the admitted set); the
    /// OS time-slices among the admitted ones. `fifo` with `c` = cores is a local FIFO
    /// pool; `gfifo` with `c = 6` is "orf cooperative".
    Cooperative {
        policy: PolicySpec,
        /// Jobs admitted at once (≥ 1).
        c: usize,
    },
    /// Node-wide, kernel-enforced: jobs register in the agent's shared-memory table and
    /// the agent (`tailor agent`) runs the policy: the jobs it runs go into a SCHED_FIFO
    /// band, the others sleep in their admission wait (`park`); under `--enforce priority`
    /// each job thread takes the SCHED_FIFO level of its key itself. Needs CAP_SYS_NICE.
    Kernel {
        /// The agent's table, e.g. `/dev/shm/tailor-sched` (`tailor agent --table`).
        table: PathBuf,
        /// How long the agent's heartbeat may stand still before this process restores its
        /// threads and falls back to `fallback_policy` cooperatively (ms).
        #[serde(default = "default_watchdog_ms")]
        watchdog_ms: u64,
        /// The cooperative policy used when the agent is gone.
        #[serde(default = "default_fallback_policy")]
        fallback_policy: PolicySpec,
        /// `c` of the cooperative fallback; 0 = the number of CPUs this process may use.
        #[serde(default)]
        fallback_c: usize,
        /// Where a job the policy does not run yet waits (default `wait`).
        #[serde(default)]
        park: Park,
    },
}

/// Where a new job waits until the policy runs it (docs/runtime.md, "Why new jobs wait
/// blocked").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Park {
    /// Blocked in a futex until the agent admits it into the band.
    #[default]
    Wait,
    /// Runs at once above the band; the agent parks it at SCHED_IDLE (the earlier design,
    /// exposed to the kernel's fair server; kept for side-by-side measurement).
    Idle,
}

/// What is parsed: serde accepts unknown keys next to the tag of a *unit* variant
/// (`{"kind":"none","c":3}`), so `none` is parsed as an empty struct variant, which
/// rejects them like every other variant does.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum Raw {
    None {},
    Cooperative {
        policy: PolicySpec,
        c: usize,
    },
    Kernel {
        table: PathBuf,
        #[serde(default = "default_watchdog_ms")]
        watchdog_ms: u64,
        #[serde(default = "default_fallback_policy")]
        fallback_policy: PolicySpec,
        #[serde(default)]
        fallback_c: usize,
        #[serde(default)]
        park: Park,
    },
}

impl From<Raw> for BackendSpec {
    fn from(raw: Raw) -> Self {
        match raw {
            Raw::None {} => BackendSpec::None,
            Raw::Cooperative { policy, c } => BackendSpec::Cooperative { policy, c },
            Raw::Kernel { table, watchdog_ms, fallback_policy, fallback_c, park } => {
                BackendSpec::Kernel { table, watchdog_ms, fallback_policy, fallback_c, park }
            }
        }
    }
}

fn default_watchdog_ms() -> u64 {
    200
}

fn default_fallback_policy() -> PolicySpec {
    PolicySpec::Gfifo
}

impl BackendSpec {
    /// The kernel backend on `table` with the default watchdog and fallback.
    pub fn kernel(table: impl Into<PathBuf>) -> Self {
        BackendSpec::Kernel {
            table: table.into(),
            watchdog_ms: default_watchdog_ms(),
            fallback_policy: default_fallback_policy(),
            fallback_c: 0,
            park: Park::Wait,
        }
    }

    /// Short name: `none`, `cooperative`, `kernel`.
    pub fn name(&self) -> &'static str {
        match self {
            BackendSpec::None => "none",
            BackendSpec::Cooperative { .. } => "cooperative",
            BackendSpec::Kernel { .. } => "kernel",
        }
    }
}

/// CPUs this process may run on (its affinity mask), at least 1.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_backend_and_rejects_unknown_keys() {
        let none: BackendSpec = serde_json::from_str(r#"{"kind":"none"}"#).unwrap();
        assert_eq!(none, BackendSpec::None);
        let coop: BackendSpec =
            serde_json::from_str(r#"{"kind":"cooperative","policy":{"kind":"orf","c":6},"c":6}"#).unwrap();
        assert_eq!(coop, BackendSpec::Cooperative { policy: PolicySpec::Orf { c: 6, slice_us: 30.0 }, c: 6 });
        let kernel: BackendSpec = serde_json::from_str(r#"{"kind":"kernel","table":"/dev/shm/t"}"#).unwrap();
        assert_eq!(kernel, BackendSpec::kernel("/dev/shm/t"));
        let err = serde_json::from_str::<BackendSpec>(r#"{"kind":"none","c":3}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `c`"), "{err}");
        let err = serde_json::from_str::<BackendSpec>(r#"{"kind":"cooperative","policy":{"kind":"fifo"},"c":1,"x":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `x`"), "{err}");
        assert_eq!(serde_json::to_string(&BackendSpec::None).unwrap(), r#"{"kind":"none"}"#);
    }
}
