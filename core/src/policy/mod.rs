//! Scheduling policies: which waiting jobs run on which CPUs, and for how long.
//!
//! Every policy is a deterministic state machine. Events come in with the
//! current time as an argument (`arrive`, `block`, `wake`, `complete`, `tick`);
//! the decision is read back out (`running`: the job on each CPU, `next_tick`:
//! when the policy next needs to look at the CPUs, e.g. for a slice expiry).
//! A policy never reads a clock, never does I/O and only draws random numbers
//! from a generator its caller seeded. The simulator drives it with virtual
//! time, the runtime with real threads.
//!
//! Contract for drivers:
//! - job ids are unique among the jobs a policy currently holds;
//! - `block` and `complete` name a job that is currently *running*; `wake`
//!   re-submits a job previously blocked (with its original [`Job`]);
//! - after every call, `running()` is the complete assignment; the driver
//!   diffs it against the previous one to learn about dispatches and preemptions;
//! - the driver calls `tick(now)` at (or after) `next_tick()`; calling it
//!   early or more often is harmless.

use serde::{Deserialize, Serialize};

use crate::time::{Nanos, NANOS_PER_MICRO, NANOS_PER_MILLI};

pub mod adaptive;
pub mod fair;
pub mod keyed;
pub mod orf;
pub mod queue;
pub mod rr;

pub use adaptive::AdaptiveC;
pub use fair::Fair;
pub use keyed::{KeyField, Keyed};
pub use orf::Orf;
pub use queue::{Discipline, NonPreemptive};
pub use rr::RoundRobin;

/// Identifies a job within one policy instance. Chosen by the driver.
pub type JobId = u64;

/// What a policy may know about a runnable job. Nothing here is the job's
/// service demand: real schedulers do not know it, and neither do ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    /// Global arrival time (edge clock), the `orf`/`gfifo` key.
    pub gat: Nanos,
    /// Absolute queuing deadline, the `edf` key ([`crate::time::NEVER`] if none).
    pub deadline: Nanos,
    /// SLO class, the `priq` key; 0 is served first.
    pub class: u8,
}

impl Job {
    /// A job known by its GAT alone: no deadline, class 0 (all `orf`, `gfifo`, `rr` and
    /// `fair` look at).
    pub fn with_gat(id: JobId, gat: Nanos) -> Job {
        Job { id, gat, deadline: crate::time::NEVER, class: 0 }
    }
}

/// A job that arrived at time 0: the unit tests of policies that order by arrival at the
/// node, not by GAT.
#[cfg(test)]
pub(crate) fn job_at_zero(id: JobId) -> Job {
    Job::with_gat(id, 0)
}

/// A scheduling discipline for `n` CPUs, driven by events with time passed in.
pub trait Policy: Send {
    /// Short name, e.g. `"orf"`.
    fn name(&self) -> &'static str;
    /// A new job becomes runnable at this node.
    fn arrive(&mut self, now: Nanos, job: Job);
    /// A running job stops being runnable (e.g. waits for I/O or a downstream call).
    fn block(&mut self, now: Nanos, id: JobId);
    /// A blocked job becomes runnable again.
    fn wake(&mut self, now: Nanos, job: Job);
    /// A running job finished and leaves the policy.
    fn complete(&mut self, now: Nanos, id: JobId);
    /// Time passes: the policy may preempt (slice expiry).
    fn tick(&mut self, now: Nanos);
    /// The job each CPU runs, indexed by CPU. Its length is the CPU count.
    fn running(&self) -> &[Option<JobId>];
    /// When the policy next wants `tick`, if ever (no pending preemption → `None`).
    fn next_tick(&self) -> Option<Nanos>;
    /// Runnable jobs not currently on a CPU.
    fn waiting(&self) -> usize;
}

// Keep `Policy` object-safe: drivers hold `Box<dyn Policy>`.
const _: Option<&dyn Policy> = None;

/// A policy and its parameters, as written in scenario and runtime config files
/// (`policy = { kind = "orf", c = 6, slice_us = 30 }`). Defaults are the
/// seeds' parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum PolicySpec {
    /// Oldest Request First: global FCFS by GAT + limited processor sharing
    /// among the `c` oldest (TailClipper §3.2, Algorithm 1).
    Orf {
        /// Jobs sharing the CPUs round-robin (TailClipper's default is 6).
        #[serde(default = "default_orf_c")]
        c: usize,
        /// Time slice in µs (TailClipper: 30 µs).
        #[serde(default = "default_short_slice_us")]
        slice_us: f64,
    },
    /// ORF whose `c` an online controller tunes (`orf::Orf::adaptive`, docs/policies.md):
    /// every `window_jobs` completed jobs it replays them under each `c` up to `c_max` and
    /// keeps the one with the lowest p99, with hysteresis.
    #[serde(rename = "orf-adaptive")]
    OrfAdaptive {
        /// The largest `c` it may choose.
        #[serde(default = "default_orf_c_max")]
        c_max: usize,
        /// Time slice in µs, as `orf`'s.
        #[serde(default = "default_short_slice_us")]
        slice_us: f64,
        /// Completed jobs per decision.
        #[serde(default = "default_orf_window_jobs")]
        window_jobs: usize,
    },
    /// Earliest deadline first, non-preemptive (TailGuard's EDFQ).
    Edf,
    /// First come first served by local arrival, non-preemptive.
    Fifo,
    /// First come first served by GAT, non-preemptive.
    Gfifo,
    /// Strict class priority (0 first), FIFO within a class, non-preemptive.
    Priq,
    /// Round-robin over every runnable job with a short slice; wakeups go to
    /// the front (the Shinjuku-like baseline, as in ghOSt's Shinjuku).
    Rr {
        #[serde(default = "default_short_slice_us")]
        slice_us: f64,
    },
    /// Processor sharing, approximated by round-robin with a slice much shorter
    /// than any service time (default 1 µs). Same code as `rr`.
    Ps {
        #[serde(default = "default_ps_slice_us")]
        slice_us: f64,
    },
    /// vruntime ordering with a minimum granularity and a latency target (CFS-like).
    Fair {
        #[serde(default = "default_min_granularity_ms")]
        min_granularity_ms: f64,
        #[serde(default = "default_latency_ms")]
        latency_ms: f64,
    },
    /// Last come first served, non-preemptive.
    Lifo,
    /// A uniformly random waiting job, non-preemptive; `seed` is mixed with the
    /// caller's seed.
    Random {
        #[serde(default)]
        seed: u64,
    },
    /// Key ordering, as the kernel enforces it under `tailor agent --enforce priority`
    /// ([`keyed`]): a level per job from its key, `bucket_us` of key per level, 40 levels
    /// from a base that moves forward; the highest levels run, FIFO within a level, an
    /// older level preempts at once, no time slices.
    Keyed {
        /// `gat` (orf with c = CPUs, gfifo) or `deadline` (edf).
        #[serde(default)]
        key: KeyField,
        /// Key span of one level, µs (`tailor agent --bucket-us`).
        #[serde(default = "default_bucket_us")]
        bucket_us: f64,
    },
}

fn default_orf_c() -> usize {
    6
}
fn default_orf_c_max() -> usize {
    64
}
fn default_orf_window_jobs() -> usize {
    2000
}
fn default_short_slice_us() -> f64 {
    30.0
}
fn default_bucket_us() -> f64 {
    1000.0
}
fn default_ps_slice_us() -> f64 {
    1.0
}
fn default_min_granularity_ms() -> f64 {
    1.0
}
fn default_latency_ms() -> f64 {
    10.0
}

/// Why a [`PolicySpec`] cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    /// Slices, granularities and latencies must be positive and finite.
    #[error("policy `{policy}`: `{field}` must be a positive number, got {value}")]
    NotPositive { policy: &'static str, field: &'static str, value: f64 },
    /// `orf` needs at least one job in its sharing pool.
    #[error("policy `orf`: `c` must be at least 1")]
    ZeroC,
    /// `orf-adaptive` needs room to choose and jobs to decide on.
    #[error("policy `orf-adaptive`: `{field}` must be at least 1, got 0")]
    ZeroAdaptive { field: &'static str },
    /// A policy needs at least one CPU.
    #[error("a policy needs at least one CPU")]
    NoCpus,
}

fn positive_nanos(policy: &'static str, field: &'static str, value: f64, unit: Nanos) -> Result<Nanos, PolicyError> {
    if value.is_finite() && value > 0.0 {
        Ok(((value * unit as f64).round() as Nanos).max(1))
    } else {
        Err(PolicyError::NotPositive { policy, field, value })
    }
}

impl PolicySpec {
    /// The policy's short name (`"orf"`, `"edf"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::Orf { .. } | PolicySpec::OrfAdaptive { .. } => "orf",
            PolicySpec::Edf => "edf",
            PolicySpec::Fifo => "fifo",
            PolicySpec::Gfifo => "gfifo",
            PolicySpec::Priq => "priq",
            PolicySpec::Rr { .. } => "rr",
            PolicySpec::Ps { .. } => "ps",
            PolicySpec::Fair { .. } => "fair",
            PolicySpec::Lifo => "lifo",
            PolicySpec::Random { .. } => "random",
            PolicySpec::Keyed { .. } => "keyed",
        }
    }

    /// While at most this many jobs are runnable, the policy on `cpus` CPUs runs every one
    /// of them, so a job may start without asking anyone (the kernel agent's fast path).
    /// `cpus` for every policy here: all are work-conserving, and orf's sharing pool holds
    /// `max(c, cpus)` jobs, so even with `c` below the CPU count it runs up to `cpus` at once.
    pub fn runs_every_job_up_to(&self, cpus: usize) -> usize {
        match self {
            // A policy that idled a CPU while jobs wait would get its own arm here.
            PolicySpec::Orf { .. }
            | PolicySpec::OrfAdaptive { .. }
            | PolicySpec::Edf
            | PolicySpec::Fifo
            | PolicySpec::Gfifo
            | PolicySpec::Priq
            | PolicySpec::Rr { .. }
            | PolicySpec::Ps { .. }
            | PolicySpec::Fair { .. }
            | PolicySpec::Lifo
            | PolicySpec::Random { .. }
            | PolicySpec::Keyed { .. } => cpus,
        }
    }

    /// A non-preemptive queue ([`NonPreemptive`]): a started job runs to its end,
    /// the waiting ones in the discipline's order. The simulator's fast paths
    /// cover these.
    pub fn is_non_preemptive_queue(&self) -> bool {
        matches!(
            self,
            PolicySpec::Fifo
                | PolicySpec::Gfifo
                | PolicySpec::Edf
                | PolicySpec::Priq
                | PolicySpec::Lifo
                | PolicySpec::Random { .. }
        )
    }

    /// Checks the parameters without building anything.
    pub fn validate(&self) -> Result<(), PolicyError> {
        self.build(1, 0).map(|_| ())
    }

    /// Builds the policy for `cpus` CPUs. `seed` feeds `random` (mixed with its own `seed`).
    pub fn build(&self, cpus: usize, seed: u64) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.build_any(cpus, seed)?))
    }

    /// Like [`PolicySpec::build`], as an [`AnyPolicy`] (static dispatch).
    pub fn build_any(&self, cpus: usize, seed: u64) -> Result<AnyPolicy, PolicyError> {
        if cpus == 0 {
            return Err(PolicyError::NoCpus);
        }
        Ok(match *self {
            PolicySpec::Orf { c, slice_us } => {
                if c == 0 {
                    return Err(PolicyError::ZeroC);
                }
                AnyPolicy::Orf(Orf::new(cpus, c, positive_nanos("orf", "slice_us", slice_us, NANOS_PER_MICRO)?))
            }
            PolicySpec::OrfAdaptive { c_max, slice_us, window_jobs } => {
                for (field, v) in [("c_max", c_max), ("window_jobs", window_jobs)] {
                    if v == 0 {
                        return Err(PolicyError::ZeroAdaptive { field });
                    }
                }
                let slice = positive_nanos("orf-adaptive", "slice_us", slice_us, NANOS_PER_MICRO)?;
                AnyPolicy::Orf(Orf::adaptive(cpus, c_max, slice, window_jobs))
            }
            PolicySpec::Rr { slice_us } => {
                AnyPolicy::Rr(RoundRobin::new(cpus, positive_nanos("rr", "slice_us", slice_us, NANOS_PER_MICRO)?))
            }
            PolicySpec::Ps { slice_us } => AnyPolicy::Rr(
                RoundRobin::new(cpus, positive_nanos("ps", "slice_us", slice_us, NANOS_PER_MICRO)?).named("ps"),
            ),
            PolicySpec::Fair { min_granularity_ms, latency_ms } => AnyPolicy::Fair(Fair::new(
                cpus,
                positive_nanos("fair", "min_granularity_ms", min_granularity_ms, NANOS_PER_MILLI)?,
                positive_nanos("fair", "latency_ms", latency_ms, NANOS_PER_MILLI)?,
            )),
            PolicySpec::Edf => AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Edf)),
            PolicySpec::Fifo => AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Fifo)),
            PolicySpec::Gfifo => AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Gfifo)),
            PolicySpec::Priq => AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Priq)),
            PolicySpec::Lifo => AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Lifo)),
            PolicySpec::Random { seed: own } => {
                AnyPolicy::Queue(NonPreemptive::new(cpus, Discipline::Random { seed: seed ^ own.rotate_left(32) }))
            }
            PolicySpec::Keyed { key, bucket_us } => AnyPolicy::Keyed(Keyed::new(
                cpus,
                key,
                positive_nanos("keyed", "bucket_us", bucket_us, NANOS_PER_MICRO)?,
            )),
        })
    }
}

/// Any built-in policy, dispatched by `match` rather than a vtable: the
/// simulator calls its policies several times per event, and a `match` lets
/// the compiler inline those calls. Behaviour is exactly the wrapped policy's.
/// `Clone` lets a caller ask "what would the policy do if…" on a copy (the kernel
/// backend's agent does, to publish each running job's successor).
#[derive(Clone)]
pub enum AnyPolicy {
    Orf(Orf),
    Rr(RoundRobin),
    Fair(Fair),
    Queue(NonPreemptive),
    Keyed(Keyed),
}

macro_rules! each_policy {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyPolicy::Orf($p) => $e,
            AnyPolicy::Rr($p) => $e,
            AnyPolicy::Fair($p) => $e,
            AnyPolicy::Queue($p) => $e,
            AnyPolicy::Keyed($p) => $e,
        }
    };
}

impl Policy for AnyPolicy {
    fn name(&self) -> &'static str {
        each_policy!(self, p => p.name())
    }
    #[inline]
    fn arrive(&mut self, now: Nanos, job: Job) {
        each_policy!(self, p => p.arrive(now, job))
    }
    #[inline]
    fn block(&mut self, now: Nanos, id: JobId) {
        each_policy!(self, p => p.block(now, id))
    }
    #[inline]
    fn wake(&mut self, now: Nanos, job: Job) {
        each_policy!(self, p => p.wake(now, job))
    }
    #[inline]
    fn complete(&mut self, now: Nanos, id: JobId) {
        each_policy!(self, p => p.complete(now, id))
    }
    #[inline]
    fn tick(&mut self, now: Nanos) {
        each_policy!(self, p => p.tick(now))
    }
    #[inline]
    fn running(&self) -> &[Option<JobId>] {
        each_policy!(self, p => p.running())
    }
    #[inline]
    fn next_tick(&self) -> Option<Nanos> {
        each_policy!(self, p => p.next_tick())
    }
    #[inline]
    fn waiting(&self) -> usize {
        each_policy!(self, p => p.waiting())
    }
}
