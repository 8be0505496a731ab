//! Open-loop load generation and analysis for real services, and the
//! `tailor demo` chain.
//!
//! `loadgen` sends requests at their intended times (Poisson or a trace, from
//! `arrivals`) and records each one (`record`); `record` summarises a run with
//! the simulator's own metric functions, `ideal` computes the G/G/c FIFO
//! yardstick from the measured arrivals, `hgrm` writes HdrHistogram's text
//! format. `tier` is one service of the demo chain, `chain` starts N of them
//! as processes, and `demo` runs every mode at several loads side by side and
//! compares each with the simulator's prediction (`predict`). `fanout_demo` is
//! TailGuard's fan-out benchmark (`tailor fanout demo`): the handler and task
//! servers of `tailor-fanout` under open-loop load, judged against their SLOs
//! and compared with the simulator. `ladder` is the node tier agent's benchmark (`tailor bench
//! ladder`): a probe server or Redis under best-effort spinners, stock vs enforcing.

pub mod arrivals;
pub mod chain;
pub mod clock;
pub mod cpuacct;
pub mod demo;
pub mod fanout_demo;
pub mod hgrm;
pub mod ladder;
pub use tailor_doctor::ideal;
pub mod loadgen;
pub mod memcache_load;
pub mod polyglot;
pub mod predict;
pub mod proxybench;
pub mod record;
pub mod soak;
pub mod tier;
pub mod workload;
