//! Tailor in front of any HTTP/1.1, h2c or gRPC service, unmodified: the edge stamps each
//! request's context, the sidecar queues a service's requests by the policy core.
//!
//! - `edge`: strips client contexts, stamps GAT/class/deadline from routes, signs,
//!   balances over health-checked upstreams;
//! - `sidecar`: verifies and clamps contexts, admits at most `c` requests in policy order
//!   (`gate`, with the adaptive `limit`), sheds what cannot meet its deadline; egress
//!   listeners carry the context on the service's own calls;
//! - `serve`: listeners, admin endpoint, SIGHUP reload, SIGTERM drain; `conn`: the
//!   bounds on client connections (count, header time and size), `timer` the header
//!   read timer hyper arms per request (tokio timers reused); `tls`: rustls from
//!   certificate files, inbound and towards upstreams; `forward` and `pool`: relaying to
//!   upstreams over kept-alive connections.
//!
//! How it works and what was measured: `docs/proxy.md`.

pub mod config;
pub mod conn;
pub mod edge;
pub mod example;
pub mod forward;
pub mod gate;
pub mod headers;
pub mod limit;
pub mod metrics;
pub mod pool;
pub mod serve;
pub mod sidecar;
pub mod timer;
pub mod tls;

use std::path::PathBuf;

/// Why the proxy could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A configuration problem, with the file and the field.
    #[error("{}: `{field}`: {problem}", file.display())]
    Config { file: PathBuf, field: String, problem: String },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}
