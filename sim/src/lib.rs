//! Discrete-event simulator that drives Tailor's policies with virtual time.
//!
//! `scenario` parses the TOML a user writes (`builder` makes the same
//! scenario in code), `model` compiles it, `engine`
//! runs it (calling the same `tailor_core::Policy` objects the runtime uses),
//! `metrics` summarises, `sweep` runs many points in parallel and searches
//! for the max load under SLO, `report` prints tables, CSV and SVG,
//! `reproduce` regenerates the seeds' figures into a report, and `theory`
//! holds the closed-form results the tests pin the engine to.

pub mod adaptive_c;
pub mod builder;
pub mod engine;
mod key_order;
pub mod metrics;
pub mod model;
mod ranked;
// The SVG plots live in their own crate so the node agent can draw without the simulator.
pub use tailor_plot as plot;
pub mod report;
pub mod reproduce;
pub mod scenario;
pub mod sweep;
pub mod theory;
pub mod timers;
pub mod trace;
