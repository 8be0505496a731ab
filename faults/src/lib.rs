//! Fault injection on real processes for Tailor's kernel-enforced scheduler (`tailor agent`
//! and the services on its table): each fault is injected into real child processes and
//! the node is read back afterwards (docs/failure-modes.md).
//!
//! - [`cases`]: the faults and what each measures;
//! - [`procs`]: the child processes (agent, supervisor, service) and their clean-up;
//! - [`child`]: what those children run (this crate's binary, re-executed);
//! - [`node`]: every thread's policy read back from the kernel, the table's slots;
//! - [`report`]: the table `tailor-faults --report` prints.
//!
//! The proxy's faults (`tailor-faults --proxy`, no privileges needed):
//! - [`proxy_cases`]: upstream killed, hung, resetting; slow clients;
//! - [`overload`]: the sidecar at twice its upstream's capacity;
//! - [`proxyproc`]: the proxy and upstream processes and what is read back from them;
//! - [`upstream`]: the upstream those processes run; [`client`]: raw HTTP/1.1 clients.

pub mod cases;
pub mod child;
pub mod client;
pub mod node;
pub mod overload;
pub mod procs;
pub mod proxy_cases;
pub mod proxyproc;
pub mod report;
pub mod upstream;
