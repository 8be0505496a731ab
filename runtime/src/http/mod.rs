//! HTTP integration: the request context in and out of hyper/tower services, and a
//! tower layer that schedules requests.
//!
//! - [`ContextLayer`] (server side): reads the context from `tailor-context` or the
//!   `tailor` member of `baggage` and clamps it (a hop), or strips whatever came in and
//!   stamps a fresh GAT (the edge); puts the [`Context`] in the request's extensions and
//!   makes it the task's [`current`](crate::current) context.
//! - [`inject`] / [`InjectLayer`] (client side): outgoing requests carry the current
//!   context one hop further (`ctx.child()`), in both carriers.
//! - [`ScheduleLayer`]: at most `c` requests inside the inner (async) service,
//!   admitted in the policy's order (the cooperative backend).
//!
//! All three are plain tower layers over `http::Request`, so they work with hyper 1
//! (HTTP/1.1 and HTTP/2, e.g. hyper-util's auto server through `TowerToHyperService`)
//! and with tonic, whose servers (`Server::builder().layer(...)`) and channels are tower
//! services over `http::Request` too; `tests/grpc.rs` runs them under tonic, and
//! [`crate::grpc`] maps the deadline to and from `grpc-timeout`.

mod client;
pub(crate) mod middleware;
mod schedule;
mod serve;
mod server;

pub use client::{inject, Inject, InjectLayer};
pub use middleware::{RequestRule, RuleService};
pub use schedule::{Schedule, ScheduleLayer};
pub use serve::serve;
pub use server::{write_encoded, ContextConfig, ContextLayer, ContextService};

pub use tailor_core::Context;
