//! gRPC's `grpc-timeout` and the context's deadline, as tower layers over `http::Request`.
//!
//! gRPC needs nothing else of its own: metadata is HTTP/2 headers, so
//! [`ContextLayer`], [`ScheduleLayer`](crate::http::ScheduleLayer)
//! (on a tonic `Server::builder().layer(..)`) and [`InjectLayer`](crate::http::InjectLayer)
//! (around a tonic `Channel`) carry the context as they do for hyper, and a tonic handler
//! finds it in `request.extensions()` or [`current`](crate::current).
//!
//! The deadline maps to `grpc-timeout` with core's codec (`docs/wire-format.md`,
//! "grpc-timeout"). Neither direction is on by default: a Tailor deadline is a queuing
//! deadline, and a gRPC peer cancels a call whose timeout passes.

use std::future::Future;
use std::sync::Arc;

use http::header::HeaderValue;
use http::Request;
use tailor_core::time::NEVER;
use tailor_core::wire::{self, grpc_timeout, WireStats};
use tailor_core::Context;
use tokio::task::futures::TaskLocalFuture;
use tower_layer::Layer;
use tower_service::Service;

use crate::cpu::realtime_ns;
use crate::http::middleware::{RequestRule, RuleService};
use crate::http::ContextLayer;

/// Server side, inside [`ContextLayer`]: a request that arrives at a hop with no Tailor
/// context but with a `grpc-timeout` gets `now + timeout` as its context's deadline (for
/// EDF-like policies). A malformed `grpc-timeout` is ignored and counted, by kind, in the
/// `ContextLayer`'s stats (that request was also counted there as `absent`).
///
/// A request that carries a context, even a malformed one, keeps what `ContextLayer`
/// made of it: the edge has rewritten the headers (a client's timeout must not buy it
/// urgency there), and a bad context is counted, not replaced by a second source.
#[derive(Clone)]
pub struct DeadlineFromTimeoutLayer {
    stats: Arc<WireStats>,
}

impl DeadlineFromTimeoutLayer {
    /// Counts malformed `grpc-timeout`s in `context_layer`'s stats.
    pub fn new(context_layer: &ContextLayer) -> Self {
        DeadlineFromTimeoutLayer { stats: context_layer.stats() }
    }
}

impl<S> Layer<S> for DeadlineFromTimeoutLayer {
    type Service = DeadlineFromTimeout<S>;
    fn layer(&self, inner: S) -> DeadlineFromTimeout<S> {
        RuleService::new(inner, self.clone())
    }
}

impl RequestRule for DeadlineFromTimeoutLayer {
    type Future<F: Future> = TaskLocalFuture<Context, F>;
    fn call<B, S: Service<Request<B>>>(&self, inner: &mut S, mut req: Request<B>) -> Self::Future<S::Future> {
        let now = realtime_ns();
        let mut ctx =
            req.extensions().get::<Context>().copied().or_else(crate::current).unwrap_or(Context::stamped(now));
        let headers = req.headers();
        if let Some(timeout) = headers.get(grpc_timeout::HEADER) {
            let no_context = matches!(wire::extract(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()))), Ok(None));
            if no_context {
                match grpc_timeout::to_deadline(timeout.as_bytes(), now) {
                    // The clamp's rule for deadlines (docs/wire-format.md, "Clamping"); the
                    // other rules concern the GAT, which ContextLayer has already clamped.
                    Ok(deadline) => ctx.deadline = deadline.max(ctx.gat),
                    Err(e) => self.stats.record_error(e),
                }
                req.extensions_mut().insert(ctx);
            }
        }
        // Re-scoped so that `current()` (and so `InjectLayer`) sees the deadline too.
        crate::current::scope_future(ctx, inner.call(req))
    }
}

/// The service [`DeadlineFromTimeoutLayer`] makes.
pub type DeadlineFromTimeout<S> = RuleService<S, DeadlineFromTimeoutLayer>;

/// Client side, opt-in: calls made while serving a request with a deadline carry the
/// time left as `grpc-timeout`, so the callee (and tonic's channel) gives up when the
/// deadline passes. A shorter timeout the caller set is kept; calls outside a request,
/// or whose context has no deadline, go out untouched.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimeoutFromDeadlineLayer;

impl<S> Layer<S> for TimeoutFromDeadlineLayer {
    type Service = TimeoutFromDeadline<S>;
    fn layer(&self, inner: S) -> TimeoutFromDeadline<S> {
        RuleService::new(inner, *self)
    }
}

impl RequestRule for TimeoutFromDeadlineLayer {
    type Future<F: Future> = F;
    fn call<B, S: Service<Request<B>>>(&self, inner: &mut S, mut req: Request<B>) -> S::Future {
        let deadline = crate::current().map_or(NEVER, |ctx| ctx.deadline);
        if deadline != NEVER {
            let remaining = deadline.saturating_sub(realtime_ns());
            let callers = req.headers().get(grpc_timeout::HEADER).and_then(|v| grpc_timeout::decode(v.as_bytes()).ok());
            if callers.is_none_or(|t| t > remaining) {
                let ours = grpc_timeout::encode(remaining);
                req.headers_mut()
                    .insert(grpc_timeout::HEADER, HeaderValue::from_str(&ours).expect("a grpc-timeout is ASCII"));
            }
        }
        inner.call(req)
    }
}

/// The service [`TimeoutFromDeadlineLayer`] makes.
pub type TimeoutFromDeadline<S> = RuleService<S, TimeoutFromDeadlineLayer>;
