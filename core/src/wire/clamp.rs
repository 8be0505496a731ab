//! What every hop does to a context it receives (clamp), and what the edge
//! does instead (strip and re-stamp).
//!
//! Ordering by GAT rewards an old GAT and ordering by deadline an early
//! deadline, so a client that forges either jumps the queue. The edge never
//! trusts an incoming context; every later hop bounds what a bad or
//! buggy upstream can gain to `max_age`.

use crate::context::Context;
use crate::time::{Nanos, NEVER};

/// What [`clamp`] changed, in ns; all zero when the context was within bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clamped {
    /// How far the GAT was ahead of `now` (it was set to `now`). Edge clocks
    /// that disagree cause this; so does a forged young GAT, which only hurts its sender.
    pub gat_ahead: Nanos,
    /// How far the GAT was older than `now − max_age` (it was set to that).
    pub gat_stale: Nanos,
    /// How far the deadline was before the (clamped) GAT (it was set to the GAT).
    pub deadline_early: Nanos,
}

impl Clamped {
    /// Whether anything was changed.
    pub fn any(&self) -> bool {
        *self != Clamped::default()
    }
}

/// Bounds a received context at `now`:
///
/// - GAT not in the future: a GAT after `now` becomes `now`;
/// - GAT not older than `max_age`: a GAT before `now − max_age` becomes
///   `now − max_age` (saturating at 0);
/// - deadline not before the GAT: an earlier deadline becomes the clamped GAT.
///   Every deadline Tailor makes is at or after its GAT (`t0 + SLO` for
///   T-EDFQ; `t0 + budget`, with a negative budget clamped to `t0`, for
///   TailGuard), so only forged or corrupt deadlines move; a forged deadline
///   then gains no more than a forged GAT.
///
/// Class, fanout and hop are unchanged. Pure: `now` is passed in.
pub fn clamp(ctx: Context, now: Nanos, max_age: Nanos) -> (Context, Clamped) {
    let mut ctx = ctx;
    let mut clamped = Clamped::default();
    let oldest = now.saturating_sub(max_age);
    if ctx.gat > now {
        clamped.gat_ahead = ctx.gat - now;
        ctx.gat = now;
    } else if ctx.gat < oldest {
        clamped.gat_stale = oldest - ctx.gat;
        ctx.gat = oldest;
    }
    if ctx.deadline < ctx.gat {
        clamped.deadline_early = ctx.gat - ctx.deadline;
        ctx.deadline = ctx.gat;
    }
    (ctx, clamped)
}

/// What the edge knows about a route (from its configuration, never from the request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EdgeRoute {
    /// SLO class of requests on this route.
    pub class: u8,
    /// Deadline after arrival (`deadline = GAT + budget`), or `None` for no deadline.
    pub budget: Option<Nanos>,
}

impl EdgeRoute {
    /// The context the edge stamps on a request arriving at `now`: GAT `now`,
    /// hop 0, fanout 1, class and deadline from the route.
    ///
    /// The edge calls this for every request and discards whatever context
    /// came in (a client can claim any GAT). Stripping the incoming context is
    /// the carrier's part: set `tailor-context` to the new encoding (replacing
    /// every incoming value) and `baggage` to
    /// [`baggage::with`](super::baggage::with), which replaces any incoming
    /// `tailor` member. An incoming `grpc-timeout` is the client's own and is
    /// not turned into a deadline here, for the same reason.
    pub fn stamp(&self, now: Nanos) -> Context {
        let mut ctx = Context::stamped(now);
        ctx.class = self.class;
        if let Some(budget) = self.budget {
            // A finite budget never turns into "no deadline".
            ctx.deadline = now.saturating_add(budget).min(NEVER - 1);
        }
        ctx
    }
}
