//! The service's own threads under the kernel backend: I/O and domain-pool threads run above
//! the band (at [`IO_PRIORITY`]) so a job can always be started and a wake-up rung while the
//! band saturates the CPUs, and go back to their natural policy when they stop.

use super::*;

impl KernelBackend {
    pub fn io_thread_started(&self) -> Result<(), RuntimeError> {
        self.raise_io_thread(None)
    }

    /// A domain-pool thread was just created by the calling thread: raise it above the
    /// band now, before it runs. Created by an I/O thread (SCHED_FIFO, reset on fork) it
    /// starts at SCHED_OTHER, and while the band and the I/O threads keep both CPUs busy
    /// it would wait (for the band to drain, or for the kernel's fair-class reserve) before
    /// it could raise itself: measured as 100-400 ms latency spikes whenever the pool grew
    /// under load in `tailor demo`.
    pub fn pool_thread_spawned(&self, handle: &std::thread::JoinHandle<()>) {
        use std::os::unix::thread::JoinHandleExt;
        if self.fell_back() {
            return;
        }
        let Ok(spawner) = sys::get_policy(0) else { return };
        let thread = handle.as_pthread_t();
        // Under the lock: a fallback restores the threads in `spawned` by handle, and a
        // thread leaves the map (its first act) before it can end, so a handle in the map
        // names a live thread.
        let mut spawned = lock(&self.spawned);
        if sys::set_pthread_policy(thread, ThreadPolicy::fifo(IO_PRIORITY)).is_ok() {
            spawned.insert(thread, spawner.inherited_by_child());
        }
    }

    /// First thing a domain-pool thread does: above the band, remembering the policy it
    /// started with (before its spawner raised it) for the restore.
    pub fn pool_thread_started(&self) -> Result<(), RuntimeError> {
        // SAFETY: pthread_self has no preconditions.
        let natural = lock(&self.spawned).remove(&unsafe { libc::pthread_self() });
        self.raise_io_thread(natural)
    }

    /// Remembers the calling thread's natural policy (`natural`, or the one it has now)
    /// and raises it above the band unless this process has fallen back; a fallback or a
    /// re-attach racing with this finds the thread in `io_threads` or is seen by `settle`.
    fn raise_io_thread(&self, natural: Option<ThreadPolicy>) -> Result<(), RuntimeError> {
        let orig = match natural {
            Some(p) => p,
            None => {
                sys::get_policy(0).map_err(|e| RuntimeError::Io { what: "sched_getscheduler".into(), source: e })?
            }
        };
        let me = sys::ThreadIdentity::current();
        lock(&self.io_threads).insert(me.tid, (orig, me));
        if self.fell_back() {
            // Raised by the spawner after the watchdog restored everything: undo that.
            if natural.is_some() {
                let _ = sys::set_policy(0, orig);
            }
            return Ok(());
        }
        sys::set_policy(0, ThreadPolicy::fifo(IO_PRIORITY))
            .map_err(|e| RuntimeError::Io { what: format!("I/O thread to SCHED_FIFO/{IO_PRIORITY}"), source: e })?;
        self.settle(orig);
        Ok(())
    }

    pub fn io_thread_stopped(&self) {
        // Release the lock before the policy change: once below the band this thread may
        // not run again for a while, and a new pool thread needs the lock to start.
        let orig = lock(&self.io_threads).remove(&sys::gettid());
        if let Some((orig, _)) = orig {
            let _ = sys::set_policy(0, orig);
        }
    }
}
