//! The request context: what travels with a request from the edge down to the
//! thread that serves it.

use crate::time::{Nanos, NEVER};

/// {GAT, deadline, class, fanout, hop} (docs/design.md, "Concepts").
///
/// Only edge clocks are ever compared: `gat` is stamped once, at the edge, and
/// every later hop orders requests by it without needing clock sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context {
    /// Global arrival time: when the request entered the system (edge clock).
    pub gat: Nanos,
    /// Absolute time by which a task must leave its queue (TailGuard's `t_D`),
    /// or [`NEVER`].
    pub deadline: Nanos,
    /// SLO class; 0 is the most stringent.
    pub class: u8,
    /// Number of parallel tasks in the query this request belongs to (1 = none).
    pub fanout: u32,
    /// Hops travelled since the edge (the edge itself is hop 0).
    pub hop: u8,
}

impl Context {
    /// A context stamped at the edge at `gat`, with no deadline.
    pub fn stamped(gat: Nanos) -> Self {
        Context { gat, deadline: NEVER, class: 0, fanout: 1, hop: 0 }
    }

    /// Age of the request at `now` (0 if `now` precedes the GAT).
    pub fn age(&self, now: Nanos) -> Nanos {
        now.saturating_sub(self.gat)
    }

    /// The context a child call inherits: same GAT, deadline and class, one hop further.
    pub fn child(&self) -> Self {
        Context { hop: self.hop.saturating_add(1), ..*self }
    }
}
