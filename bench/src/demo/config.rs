//! What a demo runs: the scheduling modes, the demo's configuration, and for each mode the
//! backend the chain runs and the policy the simulator predicts it with.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tailor_core::policy::{keyed, KeyField};
use tailor_core::PolicySpec;
use tailor_runtime::{BackendSpec, Park};
use tailor_sim::scenario::{AdmitOrder, AdmitSpec};

use crate::predict::ModeModel;
use crate::workload::Workload;

/// A way of scheduling the chain's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Linux default: every request on its own thread at once (backend `none`).
    Linux,
    /// A local FIFO pool per tier: at most `cores` jobs admitted, in local arrival order.
    Fifo,
    /// Kernel-enforced round-robin over every job, short slice (Shinjuku-like).
    Rr,
    /// ORF cooperatively: each tier admits at most `orf_c` jobs, oldest GAT first.
    OrfCoop,
    /// ORF kernel-enforced by key ordering: one node-wide `tailor agent --enforce
    /// priority` for all tiers; each job takes a SCHED_FIFO level from its GAT and the
    /// kernel runs the `orf_c` (= cores) oldest.
    Orf,
    /// ORF kernel-enforced through the agent's band (`--enforce band`: the agent runs the
    /// policy and moves jobs in and out of a SCHED_FIFO band). Not in the default set: the
    /// design before key ordering, for side-by-side runs.
    OrfBand,
    /// `orf-band` with the band's earlier parking (`park = "idle"`: a waiting job is
    /// parked at SCHED_IDLE, not blocked). Not in the default set: for side-by-side runs.
    OrfParkIdle,
    /// `orf-band` whose `c` the adaptive controller tunes (`tailor agent --policy
    /// orf-adaptive`, docs/policies.md "Adaptive c"). Not in the default set: for
    /// side-by-side runs against `orf-band`.
    OrfAdaptive,
}

impl Mode {
    pub const ALL: [Mode; 8] = [
        Mode::Linux,
        Mode::Fifo,
        Mode::Rr,
        Mode::OrfCoop,
        Mode::Orf,
        Mode::OrfBand,
        Mode::OrfParkIdle,
        Mode::OrfAdaptive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Linux => "linux",
            Mode::Fifo => "fifo",
            Mode::Rr => "rr",
            Mode::OrfCoop => "orf-coop",
            Mode::Orf => "orf",
            Mode::OrfParkIdle => "orf-park-idle",
            Mode::OrfBand => "orf-band",
            Mode::OrfAdaptive => "orf-adaptive",
        }
    }

    /// Needs the kernel backend (CAP_SYS_NICE and the agent).
    pub fn kernel_enforced(self) -> bool {
        matches!(self, Mode::Rr | Mode::Orf | Mode::OrfBand | Mode::OrfParkIdle | Mode::OrfAdaptive)
    }

    pub fn parse(s: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mode `{s}`; use one of {}", names.join(", "))
        })
    }
}

/// Everything `tailor demo` runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The `tailor` binary; tiers run as `<exe> <tier_args…>`, the agent as `<exe> <agent_args…>`.
    pub exe: PathBuf,
    pub tier_args: Vec<String>,
    pub agent_args: Vec<String>,
    /// Tiers in the chain.
    pub tiers: usize,
    /// CPUs the chain shares (the machine's): ρ and the ideal use it.
    pub cores: usize,
    /// Mean CPU demand per tier of the paper's 10 ms workloads, after scaling (ms).
    pub mean_ms: f64,
    pub workloads: Vec<Workload>,
    /// Utilizations ρ = λ · E[total demand] / cores.
    pub loads: Vec<f64>,
    pub modes: Vec<Mode>,
    /// Measured requests per run, after `warmup` unmeasured ones.
    pub requests: usize,
    pub warmup: usize,
    pub seed: u64,
    pub out: PathBuf,
    /// `c` of ORF (both modes).
    pub orf_c: usize,
    /// Time slice of the kernel-enforced modes (µs).
    pub slice_us: f64,
    /// `orf` (key ordering): the GAT span of one SCHED_FIFO level (µs).
    pub bucket_us: f64,
    /// Replay arrival times from this CSV (`arrival_ms` column), rescaled to each load.
    pub trace: Option<PathBuf>,
    /// Requests without a response after this long count as timeouts.
    pub timeout: Duration,
    /// The caller holds CPU idle states off for the whole demo (recorded, not applied here).
    pub idle_states_off: bool,
    /// The chain's own CPU per request (µs) that turns ρ into a rate; `None`: the
    /// calibration's. Pinning it (to a previous invocation's calibration) gives two
    /// invocations the same offered rates, which a fresh calibration moves by ±10%.
    pub overhead_us: Option<f64>,
}

impl DemoConfig {
    /// Mean total CPU demand of a request (ns).
    pub fn mean_total_demand_ns(&self, w: Workload) -> f64 {
        let d = w.dist(self.mean_ms).build(Path::new(".")).expect("built-in workloads are valid");
        d.mean_ns() * self.tiers as f64
    }

    /// Arrival rate for utilization `rho` of the shared CPUs:
    /// λ = ρ · cores / (E[total demand] + the chain's own CPU per request),
    /// so ρ is how busy the CPUs really are (docs/demo.md, "Workloads and load").
    pub fn rate_for(&self, w: Workload, rho: f64, overhead_ns: f64) -> f64 {
        rho * self.cores as f64 / ((self.mean_total_demand_ns(w) + overhead_ns) / 1e9)
    }

    /// The runtime backend of `mode` (`table`: the agent's table for kernel modes).
    pub fn backend(&self, mode: Mode, table: &Path) -> BackendSpec {
        match mode {
            Mode::Linux => BackendSpec::None,
            Mode::Fifo => BackendSpec::Cooperative { policy: PolicySpec::Fifo, c: self.cores },
            Mode::OrfCoop => BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: self.orf_c },
            Mode::Rr | Mode::Orf | Mode::OrfBand | Mode::OrfAdaptive => BackendSpec::kernel(table),
            Mode::OrfParkIdle => {
                let mut spec = BackendSpec::kernel(table);
                if let BackendSpec::Kernel { park, .. } = &mut spec {
                    *park = Park::Idle;
                }
                spec
            }
        }
    }

    /// `orf-adaptive` with its defaults (`c_max` 64, 2,000-job windows) and the kernel
    /// modes' slice: what the `orf-adaptive` mode's agent runs.
    pub fn adaptive_policy(&self) -> PolicySpec {
        let defaults = tailor_runtime::kernel::AdaptiveArgs::default();
        PolicySpec::OrfAdaptive { c_max: defaults.c_max, slice_us: self.slice_us, window_jobs: defaults.window_jobs }
    }

    /// How the simulator models `mode`. Linux's EEVDF is modelled as `fair`
    /// with its base slice, 0.75 ms · (1 + log2 CPUs) as the kernel scales it.
    pub fn model(&self, mode: Mode) -> ModeModel {
        let linux_slice_ms = 0.75 * (1.0 + (self.cores as f64).log2().floor());
        let linux = PolicySpec::Fair { min_granularity_ms: linux_slice_ms, latency_ms: linux_slice_ms };
        match mode {
            Mode::Linux => ModeModel { host_policy: linux, admit: None },
            Mode::Fifo => ModeModel { host_policy: linux, admit: Some(AdmitSpec::new(AdmitOrder::Fifo, self.cores)) },
            Mode::OrfCoop => {
                ModeModel { host_policy: linux, admit: Some(AdmitSpec::new(AdmitOrder::Gfifo, self.orf_c)) }
            }
            Mode::Rr => ModeModel { host_policy: PolicySpec::Rr { slice_us: self.slice_us }, admit: None },
            Mode::OrfBand | Mode::OrfParkIdle => {
                ModeModel { host_policy: PolicySpec::Orf { c: self.orf_c, slice_us: self.slice_us }, admit: None }
            }
            // What the agent enforces for `--policy orf --c orf_c --enforce priority
            // --bucket-us bucket_us` on these CPUs: core's key ordering by GAT, the same
            // bucket and level count. (An `orf_c` other than the CPU count makes the agent
            // refuse to start, so no run of this mode is ever predicted with that.)
            Mode::Orf => {
                let orf = PolicySpec::Orf { c: self.orf_c, slice_us: self.slice_us };
                let key = keyed::key_field_of(&orf, self.cores).unwrap_or(KeyField::Gat);
                ModeModel { host_policy: PolicySpec::Keyed { key, bucket_us: self.bucket_us }, admit: None }
            }
            Mode::OrfAdaptive => ModeModel { host_policy: self.adaptive_policy(), admit: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cores: usize) -> DemoConfig {
        DemoConfig {
            exe: PathBuf::from("tailor"),
            tier_args: vec![],
            agent_args: vec![],
            tiers: 3,
            cores,
            mean_ms: 1.0,
            workloads: vec![Workload::Exp],
            loads: vec![0.5],
            modes: Mode::ALL.to_vec(),
            requests: 1000,
            warmup: 100,
            seed: 1,
            out: PathBuf::from("out"),
            orf_c: cores,
            slice_us: 500.0,
            bucket_us: 2000.0,
            trace: None,
            timeout: Duration::from_secs(1),
            idle_states_off: false,
            overhead_us: None,
        }
    }

    /// Each mode is predicted by the policy it runs: `orf` by the key ordering its agent
    /// enforces (same key, bucket and level count), the band modes by the policy their
    /// agent runs, the cooperative ones by their gate's policy on Linux's scheduler.
    #[test]
    fn every_mode_is_predicted_by_the_policy_it_runs() {
        let cfg = config(2);
        let orf = cfg.model(Mode::Orf);
        assert_eq!(orf.host_policy, PolicySpec::Keyed { key: KeyField::Gat, bucket_us: 2000.0 });
        assert_eq!(orf.admit, None);
        // The agent decides the key the same way (`--policy orf --c 2 --cpus 2`).
        let agent_key = tailor_runtime::kernel::Enforce::key_of(&PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2);
        assert_eq!(agent_key, Ok(KeyField::Gat as u32));
        for mode in [Mode::OrfBand, Mode::OrfParkIdle] {
            assert_eq!(cfg.model(mode).host_policy, PolicySpec::Orf { c: 2, slice_us: 500.0 });
        }
        assert_eq!(cfg.model(Mode::Rr).host_policy, PolicySpec::Rr { slice_us: 500.0 });
        assert_eq!(cfg.model(Mode::OrfCoop).admit, Some(AdmitSpec::new(AdmitOrder::Gfifo, 2)));
        assert_eq!(cfg.model(Mode::Fifo).admit, Some(AdmitSpec::new(AdmitOrder::Fifo, 2)));
        // The cooperative gates are the backends those modes run.
        let table = Path::new("/dev/shm/unused");
        for mode in [Mode::OrfCoop, Mode::Fifo] {
            let BackendSpec::Cooperative { policy, c } = cfg.backend(mode, table) else { panic!("{mode:?}") };
            assert_eq!(cfg.model(mode).admit.map(|a| (a.kind.policy(), a.c)), Some((policy, c)), "{mode:?}");
        }
    }

    #[test]
    fn every_mode_parses_from_its_name_and_orf_adaptive_is_kernel_enforced() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Ok(m));
        }
        assert_eq!(Mode::parse("orf-adaptive"), Ok(Mode::OrfAdaptive));
        assert!(Mode::OrfAdaptive.kernel_enforced());
        assert!(Mode::parse("orf-adaptiv").unwrap_err().contains("orf-adaptive"));
    }
}
