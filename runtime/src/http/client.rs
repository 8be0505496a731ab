//! Client side: outgoing calls carry the context of the request being served, one hop further.

use std::future::Future;

use http::header::HeaderMap;
use http::Request;
use tailor_core::Context;
use tower_layer::Layer;
use tower_service::Service;

use super::middleware::{RequestRule, RuleService};
use super::server::write_headers;

/// Sets the context of a call made while serving `parent`: `parent.child()` (same GAT,
/// deadline and class, hop + 1) in `tailor-context` and in the `tailor` member of
/// `baggage`, replacing any value already there.
pub fn inject(headers: &mut HeaderMap, parent: &Context) {
    write_headers(headers, &parent.child());
}

/// A tower layer for clients: every request made while serving a request (the
/// task's or thread's [`current`](crate::current) context) carries its child context.
/// Requests made outside any request go out untouched.
#[derive(Clone, Copy, Debug, Default)]
pub struct InjectLayer;

impl<S> Layer<S> for InjectLayer {
    type Service = Inject<S>;
    fn layer(&self, inner: S) -> Inject<S> {
        RuleService::new(inner, *self)
    }
}

impl RequestRule for InjectLayer {
    type Future<F: Future> = F;
    fn call<B, S: Service<Request<B>>>(&self, inner: &mut S, mut req: Request<B>) -> S::Future {
        if let Some(parent) = crate::current() {
            inject(req.headers_mut(), &parent);
        }
        inner.call(req)
    }
}

/// The service [`InjectLayer`] makes.
pub type Inject<S> = RuleService<S, InjectLayer>;
