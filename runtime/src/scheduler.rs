//! [`Scheduler`]: runs jobs of requests under the configured backend.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tailor_core::policy::JobId;
use tailor_core::Context;

use crate::config::BackendSpec;
use crate::cooperative::Cooperative;
use crate::kernel::{self, KernelBackend};
use crate::pool::Pool;
use crate::stats::{Counters, RuntimeStats};
use crate::RuntimeError;

/// Options that are not part of the backend's configuration.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Most threads of the domain pool that serves [`Scheduler::spawn`]; beyond it,
    /// `spawn` fails with [`RuntimeError::Overloaded`].
    pub max_threads: usize,
    /// Name of the pool's threads (shows in `top -H`).
    pub thread_name: String,
    /// Print the one-line description of the backend on stderr when created.
    pub log: bool,
    /// A domain-pool thread idle this long retires (the pool shrinks back after a burst).
    pub idle_retire_ms: u64,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions { max_threads: 512, thread_name: "tailor-job".into(), log: true, idle_retire_ms: 30_000 }
    }
}

// One per scheduler, inside an Arc: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    None,
    Cooperative(Cooperative),
    // Boxed: it is much larger than the others, and the enum lives in an Arc anyway.
    Kernel(Box<KernelBackend>),
}

pub(crate) struct Inner {
    pub backend: Backend,
    pub counters: Counters,
    pool: Arc<Pool>,
    description: String,
}

/// Schedules the jobs of requests under one backend. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

/// A job's right to run, handed to the work closure: call [`Permit::blocked`]
/// around anything that waits (a downstream call) so the job gives up its slot.
pub struct Permit {
    inner: Arc<Inner>,
    job: PermitJob,
}

pub(crate) enum PermitJob {
    None,
    Cooperative(JobId),
    Kernel(kernel::Registration),
}

impl Scheduler {
    /// A scheduler for `spec` with default options. Prints one line saying
    /// which backend is active and its parameters.
    pub fn new(spec: BackendSpec) -> Result<Scheduler, RuntimeError> {
        Scheduler::with_options(spec, SchedulerOptions::default())
    }

    /// A scheduler for `spec` with `options`.
    pub fn with_options(spec: BackendSpec, options: SchedulerOptions) -> Result<Scheduler, RuntimeError> {
        let (backend, description) = match &spec {
            BackendSpec::None => (
                Backend::None,
                "backend none (Linux default: every request runs at once on its own thread)".to_string(),
            ),
            BackendSpec::Cooperative { policy, c } => {
                let coop = Cooperative::new(policy, *c)?;
                let d = format!(
                    "backend cooperative (policy {policy:?}, at most c={c} jobs admitted at once in policy order; the OS time-slices among them)"
                );
                (Backend::Cooperative(coop), d)
            }
            BackendSpec::Kernel { .. } => {
                let k = KernelBackend::new(&spec)?;
                let d = k.describe();
                (Backend::Kernel(Box::new(k)), d)
            }
        };
        if options.log {
            tracing::info!("{description}");
        }
        let inner = Arc::new(Inner {
            backend,
            counters: Counters::default(),
            pool: Arc::new(Pool::new(
                options.max_threads,
                options.thread_name,
                std::time::Duration::from_millis(options.idle_retire_ms),
            )),
            description,
        });
        if let Backend::Kernel(k) = &inner.backend {
            k.start_watchdog(Arc::downgrade(&inner));
            // Pool threads take new jobs from above the band (see `kernel`), so a new,
            // possibly older, request gets registered while the band is saturated; the
            // spawner raises a new thread before it first runs, for the same reason.
            let weak = Arc::downgrade(&inner);
            inner.pool.set_on_spawn(Box::new(move |handle| {
                if let Some(inner) = weak.upgrade() {
                    if let Backend::Kernel(k) = &inner.backend {
                        k.pool_thread_spawned(handle);
                    }
                }
            }));
            let weak = Arc::downgrade(&inner);
            inner.pool.set_on_start(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    if let Backend::Kernel(k) = &inner.backend {
                        if let Err(e) = k.pool_thread_started() {
                            tracing::warn!(error = %e, "pool thread stays below the band");
                        }
                    }
                }
            }));
            // A retiring pool thread leaves the restore list (and the map would otherwise
            // grow by one dead thread id per retirement over a service's life).
            let weak = Arc::downgrade(&inner);
            inner.pool.set_on_exit(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    if let Backend::Kernel(k) = &inner.backend {
                        k.io_thread_stopped();
                    }
                }
            }));
        }
        Ok(Scheduler { inner })
    }

    /// The line logged at creation: which backend is active, with its parameters.
    pub fn describe(&self) -> &str {
        &self.inner.description
    }

    /// Runs `work` on the calling thread as one job of the request `ctx`: waits for
    /// admission (or priority), runs, and completes, also when `work` panics.
    pub fn run<R>(&self, ctx: &Context, work: impl FnOnce(&Permit) -> R) -> R {
        let permit = self.enter(ctx);
        let _current = crate::current::enter_thread(*ctx);
        let result = work(&permit);
        drop(permit); // completion; Drop also runs on unwind
        result
    }

    fn enter(&self, ctx: &Context) -> Permit {
        let inner = &self.inner;
        let job = match &inner.backend {
            Backend::None => PermitJob::None,
            Backend::Cooperative(coop) => {
                let (id, waited) = coop.enter(ctx.gat, ctx.deadline, ctx.class, &inner.counters);
                Counters::add(&inner.counters.waited_ns, waited);
                PermitJob::Cooperative(id)
            }
            Backend::Kernel(k) => k.enter(ctx, &inner.counters),
        };
        Counters::add(&inner.counters.admitted, 1);
        Permit { inner: inner.clone(), job }
    }

    /// Like [`Scheduler::run`], on a thread of this scheduler's domain pool (for
    /// async servers). Threads are reused and created on demand up to
    /// [`SchedulerOptions::max_threads`]; beyond it the call fails at once with
    /// [`RuntimeError::Overloaded`] (no unbounded queue). A panic in `work` is
    /// returned as [`RuntimeError::Panicked`].
    pub fn spawn<R: Send + 'static>(
        &self,
        ctx: Context,
        work: impl FnOnce(&Permit) -> R + Send + 'static,
    ) -> impl Future<Output = Result<R, RuntimeError>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sched = self.clone();
        let task = Box::new(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sched.run(&ctx, work)));
            let _ = tx.send(result.map_err(|_| RuntimeError::Panicked));
        });
        let submitted = self.inner.pool.submit(task);
        if submitted.is_err() {
            Counters::add(&self.inner.counters.overloaded, 1);
        }
        async move {
            submitted.map_err(|_| RuntimeError::Overloaded)?;
            rx.await.map_err(|_| RuntimeError::Overloaded)?
        }
    }

    /// Admits one job of an async request (cooperative policy order); the job leaves
    /// when the returned guard drops. `None` under the `none` backend.
    pub(crate) async fn admit_async(&self, ctx: &Context) -> Option<AsyncJob> {
        let inner = &self.inner;
        let coop = match &inner.backend {
            Backend::None => return None,
            Backend::Cooperative(c) => c,
            Backend::Kernel(k) => k.fallback(),
        };
        let admission = coop.enter_async(ctx.gat, ctx.deadline, ctx.class, &inner.counters);
        // The guard exists before the first await: a cancelled wait still leaves the policy.
        let mut job = AsyncJob { inner: inner.clone(), admission };
        let waited = job.admission.wait().await;
        Counters::add(&inner.counters.waited_ns, waited);
        Counters::add(&inner.counters.admitted, 1);
        Some(job)
    }

    /// Counters since creation.
    pub fn stats(&self) -> RuntimeStats {
        self.inner.counters.snapshot()
    }

    /// Threads in the domain pool right now.
    pub fn pool_threads(&self) -> usize {
        self.inner.pool.threads()
    }

    /// Call from every I/O thread (tokio's `on_thread_start`): under the kernel
    /// backend it puts the thread in an RT priority above the band, so requests
    /// are accepted and parsed (and an older request can preempt) while the band is
    /// saturated. A no-op for the other backends. Returns an error (also counted)
    /// if the priority could not be set; the thread then keeps its policy.
    pub fn io_thread_started(&self) -> Result<(), RuntimeError> {
        match &self.inner.backend {
            Backend::Kernel(k) => k.io_thread_started().inspect_err(|_| {
                Counters::add(&self.inner.counters.errors, 1);
            }),
            _ => Ok(()),
        }
    }

    /// Call from tokio's `on_thread_stop`: restores the I/O thread's original policy.
    pub fn io_thread_stopped(&self) {
        if let Backend::Kernel(k) = &self.inner.backend {
            k.io_thread_stopped();
        }
    }

    /// Whether the kernel backend has fallen back to cooperative (agent gone).
    pub fn fell_back(&self) -> bool {
        match &self.inner.backend {
            Backend::Kernel(k) => k.fell_back(),
            _ => false,
        }
    }

    /// Jobs waiting for admission in this process (cooperative backend and fallback).
    pub fn waiting(&self) -> usize {
        match &self.inner.backend {
            Backend::Cooperative(c) => c.waiting(),
            Backend::Kernel(k) => k.fallback().waiting(),
            Backend::None => 0,
        }
    }
}

/// An admitted (or waiting) async job; leaves the policy on drop.
pub(crate) struct AsyncJob {
    inner: Arc<Inner>,
    admission: crate::cooperative::AsyncAdmission,
}

impl Drop for AsyncJob {
    fn drop(&mut self) {
        let counters = &self.inner.counters;
        self.inner.cooperative().leave_async(self.admission.id, counters);
        Counters::add(&counters.completed, 1);
    }
}

impl Inner {
    pub(crate) fn cooperative(&self) -> &Cooperative {
        match &self.backend {
            Backend::Cooperative(c) => c,
            Backend::Kernel(k) => k.fallback(),
            Backend::None => unreachable!("no cooperative jobs under the `none` backend"),
        }
    }
}

impl Permit {
    /// Runs `f` while the job waits (e.g. for a downstream call): the job gives up
    /// its slot (cooperative) or its place in the band (kernel) and re-enters in
    /// policy order when `f` returns.
    pub fn blocked<R>(&self, f: impl FnOnce() -> R) -> R {
        let counters = &self.inner.counters;
        Counters::add(&counters.blocked, 1);
        match &self.job {
            PermitJob::None => f(),
            PermitJob::Cooperative(id) => {
                let coop = self.inner.cooperative();
                coop.block(*id, counters);
                // Re-enter even if `f` panics, so the slot accounting stays right
                // (the Permit's Drop then completes the job).
                struct Rewake<'a>(&'a Permit, JobId);
                impl Drop for Rewake<'_> {
                    fn drop(&mut self) {
                        let counters = &self.0.inner.counters;
                        let waited = self.0.inner.cooperative().wake(self.1, counters);
                        Counters::add(&counters.waited_ns, waited);
                    }
                }
                let _rewake = Rewake(self, *id);
                f()
            }
            PermitJob::Kernel(reg) => {
                let k = match &self.inner.backend {
                    Backend::Kernel(k) => k,
                    _ => unreachable!("kernel job under another backend"),
                };
                k.block(reg);
                struct Rewake<'a>(&'a KernelBackend, &'a kernel::Registration, &'a Counters);
                impl Drop for Rewake<'_> {
                    fn drop(&mut self) {
                        let waited = self.0.wake(self.1);
                        Counters::add(&self.2.waited_ns, waited);
                    }
                }
                let _rewake = Rewake(k, reg, counters);
                f()
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let counters = &self.inner.counters;
        if std::thread::panicking() {
            counters.panicked.fetch_add(1, Relaxed);
        }
        match &self.job {
            PermitJob::None => {}
            PermitJob::Cooperative(id) => self.inner.cooperative().leave(*id, counters),
            PermitJob::Kernel(reg) => {
                if let Backend::Kernel(k) = &self.inner.backend {
                    k.leave(reg, counters);
                }
            }
        }
        Counters::add(&counters.completed, 1);
    }
}
