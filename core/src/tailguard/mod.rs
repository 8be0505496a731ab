//! TailGuard (seed 003): fanout- and SLO-aware task queuing deadlines, and admission control.
//!
//! - [`planner`]: x_p^u(k_f) from per-server latency CDFs (Eq. 1–2) and the
//!   deadline t_D = t0 + x_p^SLO − x_p^u(k_f) (Eq. 6), cached per (class, fanout).
//! - [`sequential`]: budgets for requests of M sequential queries (Eq. 7 remark).
//! - [`admission`]: reject queries while the task deadline-miss ratio over a
//!   moving window exceeds R_th (§III.C).
//!
//! The deadlines feed the `edf` policy (TF-EDFQ); with t_D = t0 + SLO instead
//! it is T-EDFQ.

pub mod admission;
pub mod planner;
pub mod sequential;

pub use admission::{
    queue_wait_quantile, AdmissionController, AdmissionError, AdmissionPhase, AdmissionWindow, RefusedTasks,
};
pub use planner::{
    read_rut_table, unloaded_quantile, unloaded_quantile_homogeneous, ClassId, Deadline, MaxOf, Planner, PlannerError,
    RutTable, SharedCdf, SloClass, TailModel, WorstCaseMax,
};
pub use sequential::{sum_quantile, BudgetSplit, SequentialPlan};

#[cfg(test)]
mod tests;
