//! Server side: the context of an incoming request.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Request;
use tailor_core::time::NANOS_PER_SEC;
use tailor_core::wire::{self, baggage, EdgeRoute, WireStats};
use tailor_core::{Context, Nanos};
use tokio::task::futures::TaskLocalFuture;
use tower_layer::Layer;
use tower_service::Service;

use super::middleware::{RequestRule, RuleService};
use crate::cpu::realtime_ns;

/// How a service treats the context of incoming requests.
#[derive(Clone, Copy, Debug)]
pub struct ContextConfig {
    /// `Some`: this service is the edge. Any incoming context is stripped (a client
    /// can claim any GAT) and a new one stamped from the route; `None`: a hop, which
    /// trusts and clamps the incoming context.
    pub edge: Option<EdgeRoute>,
    /// A hop clamps GATs older than this (ns), so a forged or buggy upstream gains at
    /// most this much.
    pub max_age_ns: Nanos,
}

impl ContextConfig {
    /// The edge of a chain, with `route`'s class and deadline budget.
    pub fn edge(route: EdgeRoute) -> Self {
        ContextConfig { edge: Some(route), max_age_ns: 10 * NANOS_PER_SEC }
    }

    /// A hop behind the edge; GATs older than 10 s are clamped.
    pub fn hop() -> Self {
        ContextConfig { edge: None, max_age_ns: 10 * NANOS_PER_SEC }
    }

    /// The context of a request with `headers` arriving at `now` (edge clock, ns),
    /// counted in `stats`. A hop serves a request with a missing or malformed
    /// context as if it arrived now; the edge rewrites the headers to the new context.
    pub fn extract(&self, headers: &mut HeaderMap, now: Nanos, stats: &WireStats) -> Context {
        if let Some(route) = self.edge {
            let ctx = route.stamp(now);
            write_headers(headers, &ctx);
            return ctx;
        }
        let outcome = wire::extract(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
        stats.record(&outcome);
        match outcome {
            Ok(Some(decoded)) => {
                let (ctx, clamped) = wire::clamp(decoded.context, now, self.max_age_ns);
                stats.record_clamp(&clamped);
                ctx
            }
            Ok(None) | Err(_) => Context::stamped(now),
        }
    }
}

/// Replaces every carrier of the context in `headers` with `ctx`'s encoding.
pub(crate) fn write_headers(headers: &mut HeaderMap, ctx: &Context) {
    write_encoded(headers, &wire::encode(ctx));
}

/// Replaces every carrier of the context in `headers` (`tailor-context` and the `tailor`
/// member of `baggage`) with `encoded`, e.g. a signed encoding ([`wire::encode_signed`]).
pub fn write_encoded(headers: &mut HeaderMap, encoded: &wire::Encoded) {
    let value = HeaderValue::from_str(encoded.as_str()).expect("the codec emits header-safe bytes");
    headers.insert(CONTEXT_HEADER.clone(), value);
    // Several `baggage` lines are one list: join them, then put ours in (replacing any `tailor` member).
    let joined: Vec<&str> = headers.get_all(baggage::HEADER).iter().filter_map(|v| v.to_str().ok()).collect();
    let existing = (!joined.is_empty()).then(|| joined.join(","));
    let merged = baggage::with(existing.as_deref(), encoded.as_str());
    // The string's buffer becomes the value's (`from_str` would copy it into another).
    match HeaderValue::from_maybe_shared(Bytes::from(merged.into_bytes())) {
        Ok(v) => {
            headers.insert(BAGGAGE_HEADER.clone(), v);
        }
        // Not reachable with header-safe input; never fail a request over baggage.
        Err(_) => {
            headers.remove(baggage::HEADER);
        }
    }
}

/// The carriers' names, made once: inserting under a `&str` name that is not one of
/// `http`'s standard headers copies the name into a new allocation every time.
static CONTEXT_HEADER: HeaderName = HeaderName::from_static(wire::HEADER);
static BAGGAGE_HEADER: HeaderName = HeaderName::from_static(baggage::HEADER);

/// A tower layer that gives every request its [`Context`] (see [`ContextConfig`]).
#[derive(Clone)]
pub struct ContextLayer {
    config: ContextConfig,
    stats: Arc<WireStats>,
}

impl ContextLayer {
    pub fn new(config: ContextConfig) -> Self {
        ContextLayer { config, stats: Arc::new(WireStats::new()) }
    }

    /// Counters of contexts accepted, absent, rejected and clamped (shared with the services).
    pub fn stats(&self) -> Arc<WireStats> {
        self.stats.clone()
    }
}

impl<S> Layer<S> for ContextLayer {
    type Service = ContextService<S>;
    fn layer(&self, inner: S) -> ContextService<S> {
        RuleService::new(inner, self.clone())
    }
}

impl RequestRule for ContextLayer {
    type Future<F: Future> = TaskLocalFuture<Context, F>;
    fn call<B, S: Service<Request<B>>>(&self, inner: &mut S, mut req: Request<B>) -> Self::Future<S::Future> {
        let ctx = self.config.extract(req.headers_mut(), realtime_ns(), &self.stats);
        req.extensions_mut().insert(ctx);
        crate::current::scope_future(ctx, inner.call(req))
    }
}

/// The service [`ContextLayer`] makes.
pub type ContextService<S> = RuleService<S, ContextLayer>;
