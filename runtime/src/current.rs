//! The context of the request being served, where client calls can find it.
//!
//! Two places, because handlers run in two places: a tokio task-local for async
//! handlers (set by `http::ContextLayer`), and a thread-local for work running
//! under [`Scheduler::run`](crate::Scheduler::run) (including `spawn`ed work on
//! pool threads, where the task-local is not visible).

use std::cell::Cell;
use std::future::Future;

use tailor_core::Context;

tokio::task_local! {
    static TASK_CONTEXT: Context;
}

thread_local! {
    static THREAD_CONTEXT: Cell<Option<Context>> = const { Cell::new(None) };
}

/// The context of the request this task or thread is serving, if any.
pub fn current() -> Option<Context> {
    TASK_CONTEXT.try_with(|c| *c).ok().or_else(|| THREAD_CONTEXT.with(|c| c.get()))
}

/// Runs `fut` with `ctx` as the task's current context.
pub fn scope<F: Future>(ctx: Context, fut: F) -> impl Future<Output = F::Output> {
    TASK_CONTEXT.scope(ctx, fut)
}

/// Sets the thread's current context until the guard drops (then restores the previous one).
pub(crate) fn enter_thread(ctx: Context) -> ThreadScope {
    ThreadScope { previous: THREAD_CONTEXT.with(|c| c.replace(Some(ctx))) }
}

pub(crate) struct ThreadScope {
    previous: Option<Context>,
}

impl Drop for ThreadScope {
    fn drop(&mut self) {
        THREAD_CONTEXT.with(|c| c.set(self.previous));
    }
}

/// [`scope`] with a nameable type, for tower services.
pub(crate) fn scope_future<F: Future>(ctx: Context, fut: F) -> tokio::task::futures::TaskLocalFuture<Context, F> {
    TASK_CONTEXT.scope(ctx, fut)
}
