//! The fan-out benchmark: max load under SLO per scheme on real sockets, the same in the simulator, admission at overload.
//!
//! One process hosts the handler and N task servers on separate loopback
//! ports, with one tokio runtime (2 worker threads) and one timer thread. On a
//! 2-core machine, 33 processes would each bring their own runtime threads and
//! fight the scheduler; one process keeps the CPU for the sockets, the HTTP
//! and the queues, which are what is being measured. (The integration tests
//! run the handler and the task servers as separate processes.)
//!
//! Each probe (one scheme, one load) builds fresh servers and a fresh handler,
//! drives it open-loop for `warmup + measure`, and passes if every
//! (class, fan-out) group's p-quantile is within its class SLO. Max load is a
//! bisection on load, as `tailor sim`'s `[search]`. The simulator then runs
//! the same configuration (`tailor_sim`: [`Scenario::builder`] + `max_load`).

pub mod judge;
pub mod loadgen;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tailor_core::dist::{Dist, DistSpec, Scaled};
use tailor_core::latency::LatencyHistogram;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::{AdmissionWindow, BudgetSplit, SharedCdf, SloClass};
use tailor_core::time::{from_millis_f64, Nanos};
use tailor_core::Progress;
use tailor_sim::model::{LoadOverride, Model, Overrides};
use tailor_sim::scenario::{
    AdmissionSpec, ClassSpec, DeadlineMode, FanoutSpec, LoadSpec, LoadedScenario, Returns, Scenario, SearchSpec,
    ServiceSpec, StageSpec,
};

use self::judge::{GroupJudgement, Verdict};
pub use self::loadgen::QueryTrace;
use self::loadgen::{Mix, RunReport, RunSpec};
use tailor_fanout::handler::{AdmissionConfig, Handler, HandlerConfig, Overhead, Queuing, Scheme};
use tailor_fanout::server::{TaskServer, TaskServerConfig};
use tailor_fanout::timer::PreciseTimer;

mod config;
mod schemes;
mod search;
mod simulated;
#[cfg(test)]
mod tests;

pub use config::*;
pub use schemes::*;
pub use search::*;
pub use simulated::*;
