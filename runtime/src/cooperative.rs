//! The cooperative backend: at most `c` jobs admitted, in the policy's order.
//!
//! A policy instance with `c` CPUs decides; its `running()` is the set of jobs
//! allowed to run. Nobody is preempted (we cannot stop a thread without the
//! kernel's help), so the policy is never ticked: slices only matter to the
//! kernel backend. Waiting threads park; the thread that frees a slot admits
//! the next job and unparks it, so admission costs one lock and one unpark.
//!
//! That unpark is a wake-up of a thread that may sit on another CPU, and the
//! job holds its slot from the moment it is admitted. Each such hand-off is
//! timed (admission to the parked thread running again) and split into the
//! time the thread waited on a run queue for a CPU and the rest, the wake-up
//! itself (`RuntimeStats::handoff_ns`, `handoff_run_queue_ns`): the simulator
//! models the run-queue wait and needs the rest measured.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;

use tailor_core::policy::{Job, JobId};
use tailor_core::{Nanos, PolicySpec};

use tokio::sync::oneshot;

use crate::cpu::monotonic_ns;
use crate::driver::Driver;
use crate::stats::Counters;
use crate::RuntimeError;

/// How to tell a waiting job it was admitted.
enum Waiter {
    /// A thread parked in [`Cooperative::enter`] or [`Cooperative::wake`]; `admitted_at`
    /// is 0 until the job is admitted, then the monotonic time of its admission.
    Thread { thread: Thread, admitted_at: Arc<AtomicU64> },
    /// An async request waiting in [`Cooperative::enter_async`].
    Task(oneshot::Sender<()>),
}

struct State {
    driver: Driver,
    /// Threads waiting for (re-)admission, by job.
    waiters: HashMap<JobId, Waiter>,
    /// Jobs admitted and not blocked or done: the ones allowed to use a CPU.
    active: usize,
    next_id: JobId,
}

pub(crate) struct Cooperative {
    state: Mutex<State>,
    c: usize,
}

impl Cooperative {
    pub fn new(policy: &PolicySpec, c: usize) -> Result<Self, RuntimeError> {
        if c == 0 {
            return Err(RuntimeError::Config("cooperative backend: `c` must be at least 1".into()));
        }
        let built = policy.build_any(c, 0).map_err(|e| RuntimeError::Config(format!("cooperative backend: {e}")))?;
        let driver = Driver::new(built);
        Ok(Cooperative { state: Mutex::new(State { driver, waiters: HashMap::new(), active: 0, next_id: 1 }), c })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic never happens while the lock is held (policies do not panic on
        // legal input); recover the data anyway rather than poisoning every request.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits every job the policy has dispatched, while fewer than `c` are active.
    fn dispatch(&self, st: &mut State, counters: &Counters) {
        let State { driver, waiters, active, .. } = st;
        for id in driver.running().iter().flatten() {
            if *active >= self.c {
                break;
            }
            if let Some(w) = waiters.remove(id) {
                // Counted active even if an async waiter was cancelled meanwhile:
                // its drop guard then calls `leave`, which gives the slot back.
                *active += 1;
                match w {
                    Waiter::Thread { thread, admitted_at } => {
                        admitted_at.store(monotonic_ns().max(1), Ordering::Release);
                        thread.unpark();
                    }
                    Waiter::Task(tx) => {
                        let _ = tx.send(());
                    }
                }
            }
        }
        counters.max_running.fetch_max(*active as u64, Ordering::Relaxed);
    }

    /// Waits until the job may run; returns the time waited.
    fn wait(&self, mut st: MutexGuard<'_, State>, id: JobId, counters: &Counters, start: Nanos) -> Nanos {
        let admitted_at = Arc::new(AtomicU64::new(0));
        st.waiters.insert(id, Waiter::Thread { thread: std::thread::current(), admitted_at: admitted_at.clone() });
        self.dispatch(&mut st, counters);
        drop(st);
        if admitted_at.load(Ordering::Acquire) != 0 {
            return 0;
        }
        // Run-queue delay so far: the thread is running now, so what it adds from here
        // on is time spent runnable after the unpark, waiting for a CPU.
        let queued_before = run_queue_delay_ns();
        let mut admitted = admitted_at.load(Ordering::Acquire);
        while admitted == 0 {
            std::thread::park();
            admitted = admitted_at.load(Ordering::Acquire);
        }
        let now = monotonic_ns();
        let queued = match (queued_before, run_queue_delay_ns()) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => 0,
        };
        Counters::add(&counters.handoffs, 1);
        Counters::add(&counters.handoff_ns, now.saturating_sub(admitted));
        Counters::add(&counters.handoff_run_queue_ns, queued);
        now.saturating_sub(start)
    }

    /// A new job: waits for admission. Returns its id and the time waited.
    pub fn enter(&self, gat: Nanos, deadline: Nanos, class: u8, counters: &Counters) -> (JobId, Nanos) {
        let now = monotonic_ns();
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.driver.arrive(now, Job { id, gat, deadline, class });
        (id, self.wait(st, id, counters, now))
    }

    /// The job stops using its slot until [`Cooperative::wake`].
    pub fn block(&self, id: JobId, counters: &Counters) {
        let now = monotonic_ns();
        let mut st = self.lock();
        st.active -= 1;
        st.driver.block(now, id);
        self.dispatch(&mut st, counters);
    }

    /// The job wants its slot back: waits for re-admission; returns the time waited.
    pub fn wake(&self, id: JobId, counters: &Counters) -> Nanos {
        let now = monotonic_ns();
        let mut st = self.lock();
        st.driver.wake(now, id);
        self.wait(st, id, counters, now)
    }

    /// The job is done and frees its slot.
    pub fn leave(&self, id: JobId, counters: &Counters) {
        let now = monotonic_ns();
        let mut st = self.lock();
        st.active -= 1;
        st.driver.complete(now, id);
        self.dispatch(&mut st, counters);
    }

    /// A new job of an async request: resolves when admitted. Drop the returned
    /// [`AsyncAdmission`] when the request is done (or cancelled while waiting).
    pub fn enter_async(&self, gat: Nanos, deadline: Nanos, class: u8, counters: &Counters) -> AsyncAdmission {
        let now = monotonic_ns();
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.driver.arrive(now, Job { id, gat, deadline, class });
        st.waiters.insert(id, Waiter::Task(tx));
        self.dispatch(&mut st, counters);
        AsyncAdmission { id, admitted: rx, start: now }
    }

    /// An async job leaves: done, or cancelled before or after its admission.
    pub fn leave_async(&self, id: JobId, counters: &Counters) {
        let now = monotonic_ns();
        let mut st = self.lock();
        if st.waiters.remove(&id).is_none() {
            st.active -= 1; // it was admitted
        }
        st.driver.complete(now, id);
        self.dispatch(&mut st, counters);
    }

    /// Jobs waiting for admission right now.
    pub fn waiting(&self) -> usize {
        self.lock().driver.waiting()
    }
}

thread_local! {
    /// This thread's `/proc/thread-self/schedstat`, opened once (None: not readable here).
    static SCHEDSTAT: Option<std::fs::File> = std::fs::File::open("/proc/thread-self/schedstat").ok();
}

/// Time this thread has spent runnable but waiting for a CPU, ns (the second field of
/// its schedstat); None where the kernel does not provide it (then a hand-off is not
/// split and counts whole as wake-up).
fn run_queue_delay_ns() -> Option<Nanos> {
    use std::os::unix::fs::FileExt;
    SCHEDSTAT.with(|f| {
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()
    })
}

/// An async job's place in line; `wait` resolves at admission.
pub(crate) struct AsyncAdmission {
    pub id: JobId,
    admitted: oneshot::Receiver<()>,
    start: Nanos,
}

impl AsyncAdmission {
    /// Waits for admission; returns the time waited.
    pub async fn wait(&mut self) -> Nanos {
        // The sender is only dropped after a send (dispatch) or with the whole
        // scheduler, which the caller keeps alive: either way, go ahead.
        let _ = (&mut self.admitted).await;
        monotonic_ns().saturating_sub(self.start)
    }
}
