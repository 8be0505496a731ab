//! Fault injection on real processes for Tailor's kernel-enforced scheduler (`tailor agent`
//! and the services on its table): each fault is injected into real child processes and
//! the node is read back afterwards (docs/failure-modes.md).
//!
//! - [`cases`]: the faults and what each measures;
//! - [`procs`]: the child processes (agent, supervisor, service) and their clean-up;
//! - [`child`]: what those children run (this crate's binary, re-executed);
//! - [`node`]: every thread's policy read back from the kernel, the table's slots;
//! - [`report`]: the table `tailor-faults --report` prints.

pub mod cases;
pub mod child;
pub mod node;
pub mod procs;
pub mod report;
