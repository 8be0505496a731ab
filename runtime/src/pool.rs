//! The domain pool: bounded, reused worker threads for `Scheduler::spawn`.
//!
//! Async servers must not run CPU-bound handlers on their I/O threads, and
//! must not create a thread per request either. Workers are created on demand
//! up to `max_threads`, reused, and retire after `idle_retire` without work.
//! A task is handed straight to an idle worker (the most recently idle one), so
//! nothing queues here: with every thread busy and the pool at its bound,
//! `submit` fails at once and the caller sheds the request.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

type Task = Box<dyn FnOnce() + Send>;

/// What an idle worker is handed.
#[derive(Default)]
enum Mail {
    #[default]
    Empty,
    Task(Task),
    /// The pool closed: exit now (already uncounted by [`Pool::close`]).
    Retire,
}

/// One idle worker's mailbox: `submit` hands a task straight to it.
#[derive(Default)]
struct Handoff {
    mail: Mutex<Mail>,
    ready: Condvar,
}

struct State {
    /// Idle workers, most recently idle last. `submit` takes the last one (LIFO), so
    /// under a steady load the same few threads stay warm and a burst's surplus sits at
    /// the bottom until it retires; a FIFO wake-up would cycle through every thread and
    /// keep them all alive forever (the soak saw 3 -> 56 threads).
    idle: Vec<Arc<Handoff>>,
    threads: usize,
    /// Its owner is gone: threads exit instead of waiting for work.
    closed: bool,
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
    max_threads: usize,
    name: String,
}

impl Pool {
    pub fn new(max_threads: usize, name: String, idle_retire: Duration) -> Self {
        Pool {
            state: Mutex::new(State { idle: Vec::new(), threads: 0, closed: false }),
            on_start: std::sync::OnceLock::new(),
            on_spawn: std::sync::OnceLock::new(),
            on_exit: std::sync::OnceLock::new(),
            idle_retire,
            spawning: Mutex::new(()),
            max_threads: max_threads.max(1),
            name,
        }
    }

    /// Runs `task` on a pool thread, or returns it if every thread is busy and the pool is full.
    pub fn submit(self: &std::sync::Arc<Self>, task: Task) -> Result<(), Task> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(worker) = st.idle.pop() {
            drop(st);
            *worker.mail.lock().unwrap_or_else(|p| p.into_inner()) = Mail::Task(task);
            worker.ready.notify_one();
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
        let mailbox = Arc::new(Handoff::default());
        while let Some(task) = self.next_task(&mailbox) {
            task();
        }
        if let Some(hook) = self.on_exit.get() {
            hook();
        }
    }

    /// Waits idle for the next task; `None` once idle for the retire time or the pool
    /// closed (the thread is then no longer counted and must exit).
    fn next_task(&self, mailbox: &Arc<Handoff>) -> Option<Task> {
        {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.closed {
                st.threads -= 1;
                return None;
            }
            st.idle.push(mailbox.clone());
        }
        let mut mail = mailbox.mail.lock().unwrap_or_else(|p| p.into_inner());
        let mut retire_at = Some(std::time::Instant::now() + self.idle_retire);
        loop {
            match std::mem::take(&mut *mail) {
                Mail::Task(task) => return Some(task),
                Mail::Retire => return None,
                Mail::Empty => {}
            }
            match retire_at {
                None => mail = mailbox.ready.wait(mail).unwrap_or_else(|p| p.into_inner()),
                Some(at) => {
                    let left = at.saturating_duration_since(std::time::Instant::now());
                    if !left.is_zero() {
                        mail = mailbox.ready.wait_timeout(mail, left).unwrap_or_else(|p| p.into_inner()).0;
                        continue;
                    }
                    // Time to retire, unless a submitter took this mailbox off the idle
                    // stack: then mail is on its way and this thread must wait for it.
                    // The mailbox lock is let go first: no thread holds both locks at once.
                    drop(mail);
                    let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(i) = st.idle.iter().position(|m| Arc::ptr_eq(m, mailbox)) {
                        st.idle.remove(i);
                        st.threads -= 1;
                        return None;
                    }
                    drop(st);
                    mail = mailbox.mail.lock().unwrap_or_else(|p| p.into_inner());
                    retire_at = None;
                }
            }
        }
    }

    /// The owner is gone: idle threads exit now (running their exit hook) instead of
    /// after the retire time, and busy ones when their task ends.
    pub fn close(&self) {
        let idle = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.closed = true;
            st.threads -= st.idle.len();
            std::mem::take(&mut st.idle)
        };
        for mailbox in idle {
            *mailbox.mail.lock().unwrap_or_else(|p| p.into_inner()) = Mail::Retire;
            mailbox.ready.notify_one();
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
    use std::sync::{Arc, Barrier};
    use std::time::Instant;

    /// Polls `done` every millisecond for up to ten seconds.
    fn wait_until(done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A hook that counts its calls in `calls`.
    fn counting(calls: &Arc<AtomicUsize>) -> Box<dyn Fn() + Send + Sync> {
        let calls = calls.clone();
        Box::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// Runs `n` tasks at once and returns when all of them have started (so `n` threads
    /// exist); they finish right after.
    fn run_at_once(pool: &Arc<Pool>, n: usize) {
        let gate = Arc::new(Barrier::new(n + 1));
        for _ in 0..n {
            let g = gate.clone();
            assert!(pool
                .submit(Box::new(move || {
                    g.wait();
                }))
                .is_ok());
        }
        gate.wait();
    }

    #[test]
    fn a_retiring_thread_runs_the_exit_hook_once() {
        let pool = Arc::new(Pool::new(4, "test-pool".into(), Duration::from_millis(20)));
        let (started, exited) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        pool.set_on_start(counting(&started));
        pool.set_on_exit(counting(&exited));
        for _ in 0..3 {
            assert!(pool.submit(Box::new(|| std::thread::sleep(Duration::from_millis(5)))).is_ok());
        }
        wait_until(|| pool.threads() == 0);
        assert_eq!(pool.threads(), 0, "every thread retired");
        // `threads` drops before the hook runs: give the last hook a moment.
        wait_until(|| exited.load(Ordering::SeqCst) >= started.load(Ordering::SeqCst));
        assert!(started.load(Ordering::SeqCst) >= 1);
        assert_eq!(exited.load(Ordering::SeqCst), started.load(Ordering::SeqCst), "one exit per started thread");
    }

    #[test]
    fn a_steady_load_keeps_few_threads_and_the_burst_surplus_retires() {
        let pool = Arc::new(Pool::new(8, "test-pool".into(), Duration::from_millis(300)));
        // A burst: four tasks at once need four threads.
        run_at_once(&pool, 4);
        wait_until(|| pool.state.lock().unwrap().idle.len() >= 4);
        assert_eq!(pool.threads(), 4);
        // Then one short task at a time, far more often than the retire time: a FIFO
        // wake-up would rotate through all four threads and keep them alive.
        let done = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            let d = done.clone();
            let before = d.load(Ordering::SeqCst);
            assert!(pool
                .submit(Box::new(move || {
                    d.fetch_add(1, Ordering::SeqCst);
                }))
                .is_ok());
            while done.load(Ordering::SeqCst) == before {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            pool.threads() <= 2,
            "the burst's surplus threads retired under a steady load: {} left",
            pool.threads()
        );
    }

    #[test]
    fn closing_the_pool_ends_idle_threads_at_once() {
        let pool = Arc::new(Pool::new(4, "test-pool".into(), Duration::from_secs(3600)));
        let exited = Arc::new(AtomicUsize::new(0));
        pool.set_on_exit(counting(&exited));
        run_at_once(&pool, 3);
        pool.close();
        wait_until(|| exited.load(Ordering::SeqCst) >= 3);
        assert_eq!(exited.load(Ordering::SeqCst), 3, "every thread exited long before its hour-long retire time");
        assert_eq!(pool.threads(), 0);
    }
}
