//! The runtime's context middleware, written once: a layer is a [`RequestRule`] and the
//! service it makes is a [`RuleService`].
//!
//! Every Tailor layer over `http::Request` either edits a request on its way in (the
//! client's inject, the caller's `grpc-timeout`: the inner future is returned as is) or
//! decides the context a request is served in and makes it the task's
//! [`current`](crate::current) context for the inner service's whole future (the server's
//! context, the deadline from `grpc-timeout`: the future is scoped). The rule says which,
//! through the future it returns; readiness and everything else pass through.

use std::future::Future;
use std::task::{Context as TaskContext, Poll};

use http::Request;
use tower_service::Service;

/// What a layer does with each request on its way to the inner service.
pub trait RequestRule {
    /// The inner service's future `F` as this rule hands it back (`F` itself, or `F`
    /// scoped in a context).
    type Future<F: Future>: Future<Output = F::Output>;

    /// Passes `req`, after this rule's work, to `inner`.
    fn call<B, S: Service<Request<B>>>(&self, inner: &mut S, req: Request<B>) -> Self::Future<S::Future>;
}

/// The service a Tailor layer makes: `inner` behind the layer's [`RequestRule`].
#[derive(Clone, Debug)]
pub struct RuleService<S, R> {
    inner: S,
    rule: R,
}

impl<S, R> RuleService<S, R> {
    pub(crate) fn new(inner: S, rule: R) -> Self {
        RuleService { inner, rule }
    }
}

impl<S, R, B> Service<Request<B>> for RuleService<S, R>
where
    S: Service<Request<B>>,
    R: RequestRule,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = R::Future<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.rule.call(&mut self.inner, req)
    }
}
