//! A tower layer that runs an async service under the cooperative backend.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use http::Request;
use tailor_core::Context;
use tower_layer::Layer;
use tower_service::Service;

use crate::cpu::realtime_ns;
use crate::Scheduler;

/// At most `c` requests inside the inner service at once, admitted in the policy's
/// order by their [`Context`] (from [`ContextLayer`](super::ContextLayer), which must be
/// outside this layer; a request without one is stamped on arrival).
///
/// The scheduler's backend decides: `cooperative` as configured; `none` lets every
/// request in; `kernel` uses its cooperative fallback policy here, because async
/// handlers share tokio's threads and cannot get per-request thread priorities: to
/// have CPU-heavy work kernel-scheduled, run it with [`Scheduler::spawn`] instead.
/// A request is admitted when its future is first polled and leaves when the
/// response future completes or is dropped (client gone): cancellation frees the slot.
#[derive(Clone)]
pub struct ScheduleLayer {
    scheduler: Scheduler,
}

impl ScheduleLayer {
    pub fn new(scheduler: Scheduler) -> Self {
        ScheduleLayer { scheduler }
    }
}

impl<S> Layer<S> for ScheduleLayer {
    type Service = Schedule<S>;
    fn layer(&self, inner: S) -> Schedule<S> {
        Schedule { inner, scheduler: self.scheduler.clone() }
    }
}

/// The service [`ScheduleLayer`] makes.
#[derive(Clone)]
pub struct Schedule<S> {
    inner: S,
    scheduler: Scheduler,
}

impl<S, B> Service<Request<B>> for Schedule<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let ctx = req
            .extensions()
            .get::<Context>()
            .copied()
            .or_else(crate::current)
            .unwrap_or_else(|| Context::stamped(realtime_ns()));
        // The clone that was driven to readiness serves this request (tower's usual dance).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let scheduler = self.scheduler.clone();
        Box::pin(async move {
            let _admitted = scheduler.admit_async(&ctx).await;
            inner.call(req).await
        })
    }
}
