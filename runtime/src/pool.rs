//! The domain pool: bounded, reused worker threads for `Scheduler::spawn`.
//!
//! Async servers must not run CPU-bound handlers on their I/O threads, and
//! must not create a thread per request either. Workers are created on demand
//! up to `max_threads`, reused, and retire after `idle_retire` without work.
//! A task is queued only when an idle worker is waiting for it, so the queue
//! never holds more tasks than there are idle workers: beyond the bound,
//! `submit` fails at once and the caller sheds the request.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

type Task = Box<dyn FnOnce() + Send>;

struct State {
    tasks: VecDeque<Task>,
    idle: usize,
    threads: usize,
}

/// Runs on every new pool thread before its first task.
pub(crate) type OnStart = Box<dyn Fn() + Send + Sync>;
/// Runs on a pool thread as it retires (idle for the retire time), its last act.
pub(crate) type OnExit = Box<dyn Fn() + Send + Sync>;
/// Runs on the spawning thread right after it created a pool thread, before that
/// thread's [`OnStart`] (which waits for it): a thread that cannot get a CPU yet can
/// still be given one from outside.
pub(crate) type OnSpawn = Box<dyn Fn(&std::thread::JoinHandle<()>) + Send + Sync>;

pub(crate) struct Pool {
    state: Mutex<State>,
    on_start: std::sync::OnceLock<OnStart>,
    on_spawn: std::sync::OnceLock<OnSpawn>,
    on_exit: std::sync::OnceLock<OnExit>,
    /// How long a thread waits for work before it retires.
    idle_retire: Duration,
    /// Held across a spawn and its `on_spawn`; a new thread takes it before `on_start`,
    /// so it sees what its spawner did for it.
    spawning: Mutex<()>,
    work: Condvar,
    max_threads: usize,
    name: String,
}

impl Pool {
    pub fn new(max_threads: usize, name: String, idle_retire: Duration) -> Self {
        Pool {
            state: Mutex::new(State { tasks: VecDeque::new(), idle: 0, threads: 0 }),
            on_start: std::sync::OnceLock::new(),
            on_spawn: std::sync::OnceLock::new(),
            on_exit: std::sync::OnceLock::new(),
            idle_retire,
            spawning: Mutex::new(()),
            work: Condvar::new(),
            max_threads: max_threads.max(1),
            name,
        }
    }

    /// Runs `task` on a pool thread, or returns it if every thread is busy and the pool is full.
    pub fn submit(self: &std::sync::Arc<Self>, task: Task) -> Result<(), Task> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.idle > st.tasks.len() {
            st.tasks.push_back(task);
            drop(st);
            self.work.notify_one();
            return Ok(());
        }
        if st.threads >= self.max_threads {
            return Err(task);
        }
        st.threads += 1;
        drop(st);
        let pool = self.clone();
        let gate = self.spawning.lock().unwrap_or_else(|p| p.into_inner());
        let spawned = std::thread::Builder::new().name(self.name.clone()).spawn(move || pool.worker(task));
        if let (Ok(handle), Some(hook)) = (&spawned, self.on_spawn.get()) {
            hook(handle);
        }
        drop(gate);
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                // Out of threads (ulimit): shed rather than fail the whole process.
                tracing::warn!(error = %e, "cannot start a pool thread; the task is shed");
                self.state.lock().unwrap_or_else(|p| p.into_inner()).threads -= 1;
                // The task moved into the closure that failed to spawn; it is dropped.
                Err(Box::new(|| {}))
            }
        }
    }

    /// Sets the hook new threads run first (once; later calls are ignored).
    pub fn set_on_start(&self, hook: OnStart) {
        let _ = self.on_start.set(hook);
    }

    /// Sets the hook a retiring thread runs last (once; later calls are ignored).
    pub fn set_on_exit(&self, hook: OnExit) {
        let _ = self.on_exit.set(hook);
    }

    /// Sets the hook the spawning thread runs on each new thread (once; later calls are ignored).
    pub fn set_on_spawn(&self, hook: OnSpawn) {
        let _ = self.on_spawn.set(hook);
    }

    fn worker(&self, first: Task) {
        drop(self.spawning.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(hook) = self.on_start.get() {
            hook();
        }
        first();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            st.idle += 1;
            while st.tasks.is_empty() {
                let (guard, timeout) = self.work.wait_timeout(st, self.idle_retire).unwrap_or_else(|p| p.into_inner());
                st = guard;
                if timeout.timed_out() && st.tasks.is_empty() {
                    st.idle -= 1;
                    st.threads -= 1;
                    drop(st);
                    if let Some(hook) = self.on_exit.get() {
                        hook();
                    }
                    return;
                }
            }
            let task = st.tasks.pop_front().expect("non-empty");
            st.idle -= 1;
            drop(st);
            task();
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Threads alive (busy or idle).
    pub fn threads(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_retiring_thread_runs_the_exit_hook_once() {
        let pool = Arc::new(Pool::new(4, "test-pool".into(), Duration::from_millis(20)));
        let (started, exited) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let s = started.clone();
        pool.set_on_start(Box::new(move || {
            s.fetch_add(1, Ordering::SeqCst);
        }));
        let e = exited.clone();
        pool.set_on_exit(Box::new(move || {
            e.fetch_add(1, Ordering::SeqCst);
        }));
        for _ in 0..3 {
            assert!(pool.submit(Box::new(|| std::thread::sleep(Duration::from_millis(5)))).is_ok());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.threads() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.threads(), 0, "every thread retired");
        // `threads` drops before the hook runs: give the last hook a moment.
        while exited.load(Ordering::SeqCst) < started.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(started.load(Ordering::SeqCst) >= 1);
        assert_eq!(exited.load(Ordering::SeqCst), started.load(Ordering::SeqCst), "one exit per started thread");
    }
}
