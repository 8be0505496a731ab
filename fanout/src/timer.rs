//! A timer thread with sub-millisecond precision, for emulated service times.
//!
//! tokio's timer wheel rounds every sleep up to the next millisecond, which
//! would add up to 1 ms to a 4 ms emulated task. This thread keeps a heap of
//! deadlines and waits on a condvar with a timeout (a futex wait, i.e. an
//! hrtimer); its timer slack is set to 1 ns (`PR_SET_TIMERSLACK`) so the kernel
//! does not batch its wakeups by the default 50 µs. Callbacks run on the timer
//! thread and must be short (they move a task server's queue along and send on
//! a channel). Lateness (fire time − due time) is recorded in a
//! [`LatencyHistogram`] so every run can report its timing error.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tailor_core::latency::LatencyHistogram;
use tailor_core::time::Nanos;

type Action = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    /// (due, sequence): equal due times fire in scheduling order.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    actions: HashMap<u64, Action>,
    seq: u64,
    shutdown: bool,
}

struct Inner {
    /// Whether the thread runs SCHED_FIFO (see [`try_realtime`]).
    realtime: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    wake: Condvar,
    lateness: Mutex<LatencyHistogram>,
}

/// The timer thread; dropping it stops the thread (pending callbacks are dropped).
pub struct PreciseTimer {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

/// How late the timer fired, over every callback so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lateness {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
    pub max_ns: Nanos,
}

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn start() -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            realtime: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            lateness: Mutex::new(LatencyHistogram::new()),
        });
        let thread_inner = inner.clone();
        let thread = std::thread::Builder::new().name("fanout-timer".into()).spawn(move || run(&thread_inner))?;
        Ok(PreciseTimer { inner, thread: Some(thread) })
    }

    /// Runs `action` on the timer thread at `due` (at once if `due` has passed).
    pub fn at(&self, due: Instant, action: impl FnOnce() + Send + 'static) {
        let mut st = self.inner.state.lock().expect("timer state poisoned");
        let id = st.seq;
        st.seq += 1;
        st.heap.push(Reverse((due, id)));
        st.actions.insert(id, Box::new(action));
        drop(st);
        self.inner.wake.notify_one();
    }

    /// A future that completes at `due`, with the timer thread's precision.
    pub fn sleep_until(&self, due: Instant) -> impl std::future::Future<Output = ()> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.at(due, move || {
            let _ = tx.send(());
        });
        async move {
            let _ = rx.await;
        }
    }

    /// Lateness of every callback fired so far.
    pub fn lateness(&self) -> Lateness {
        let h = self.inner.lateness.lock().expect("lateness poisoned");
        Lateness {
            count: h.count() as u64,
            mean_ns: h.mean(),
            p50_ns: h.quantile(0.5),
            p99_ns: h.quantile(0.99),
            max_ns: h.quantile(1.0),
        }
    }

    /// Whether the timer thread got SCHED_FIFO (needs CAP_SYS_NICE); without it,
    /// other busy processes on the machine delay the timer (see [`Lateness`]).
    pub fn is_realtime(&self) -> bool {
        self.inner.realtime.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets the lateness recorded so far (between runs).
    pub fn reset_lateness(&self) {
        self.inner.lateness.lock().expect("lateness poisoned").clear();
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        self.inner.state.lock().map(|mut s| s.shutdown = true).ok();
        self.inner.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Puts the calling thread in SCHED_FIFO at a low RT priority, if allowed.
///
/// On a shared 2-core machine a compile job can keep a normal thread off the
/// CPU for milliseconds, which would stretch emulated service times. The timer
/// thread sleeps between callbacks and each callback is a few µs, so RT
/// priority cannot starve the machine. The policy dies with the thread; there
/// is nothing to restore. Without CAP_SYS_NICE this fails and the thread stays
/// SCHED_OTHER (the lateness report shows the cost).
fn try_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sets the scheduling policy of this thread only (pid 0 = caller).
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Raises the calling thread's CFS weight (nice −10) if allowed; see [`PreciseTimer`].
///
/// The timer's callbacks take the task server's lock, which a tokio worker
/// may hold; if a compile job has preempted that worker, the RT timer thread
/// waits behind it (priority inversion) and every later timer fires late. A
/// nice −10 worker is ~10× less likely to lose the CPU to nice-0 work, while
/// still unable to starve the machine. Per thread; dies with it. Returns
/// whether it took effect.
pub fn raise_thread_priority() -> bool {
    // SAFETY: gettid and setpriority on the calling thread only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, -10) == 0
    }
}

/// Back to SCHED_OTHER at nice 0, for work that must not compete with the
/// query path (the planner refresh on tokio's blocking pool, whose threads
/// start at the workers' raised priority).
pub fn normal_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: this thread only.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
    }
}

fn run(inner: &Inner) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    inner.realtime.store(try_realtime(), std::sync::atomic::Ordering::Relaxed);
    let mut st = inner.state.lock().expect("timer state poisoned");
    loop {
        if st.shutdown {
            return;
        }
        let Some(&Reverse((due, id))) = st.heap.peek() else {
            st = inner.wake.wait(st).expect("timer state poisoned");
            continue;
        };
        let now = Instant::now();
        if due > now {
            st = inner.wake.wait_timeout(st, due - now).expect("timer state poisoned").0;
            continue;
        }
        st.heap.pop();
        let action = st.actions.remove(&id);
        drop(st);
        let late = now.saturating_duration_since(due).as_nanos() as Nanos;
        inner.lateness.lock().expect("lateness poisoned").record(late);
        if let Some(action) = action {
            action();
        }
        st = inner.state.lock().expect("timer state poisoned");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fires_in_due_order_and_reports_lateness() {
        let timer = PreciseTimer::start().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t0 = Instant::now();
        for (i, ms) in [3u64, 1, 2].into_iter().enumerate() {
            let tx = tx.clone();
            timer.at(t0 + Duration::from_millis(ms), move || tx.send(i).unwrap());
        }
        let order: Vec<usize> = (0..3).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        assert_eq!(order, vec![1, 2, 0]);
        assert!(t0.elapsed() >= Duration::from_millis(3));
        assert_eq!(timer.lateness().count, 3);
    }
}
