//! The process's watchdog: while attached it falls back to the cooperative backend when the
//! agent's heartbeat stops (every raised thread back to its natural policy); fallen back, it
//! watches the table path and re-attaches once a live agent serves it again.

use super::*;

impl KernelBackend {
    /// Starts this process's watchdog thread; it ends when the scheduler is dropped.
    /// Attached, it falls back when the agent's heartbeat stops; fallen back, it watches
    /// the table path and re-attaches once a live agent serves it again.
    pub fn start_watchdog(&self, inner: Weak<Inner>) {
        let spawned = std::thread::Builder::new().name("tailor-watchdog".into()).spawn(move || {
            // Above the band while attached: a saturated band must not stop us from noticing
            // a dead agent. Fallen back, nothing here runs at an RT priority, this thread too.
            let natural = sys::get_policy(0).unwrap_or(ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 });
            if let Err(e) = sys::set_policy(0, ThreadPolicy::fifo(WATCHDOG_PRIORITY)) {
                tracing::warn!(error = %e, "watchdog stays SCHED_OTHER; it may react late while the band is busy");
            }
            let mut last = (u64::MAX, Instant::now());
            // Fallen back: the agent we last saw, and the heartbeat seen on the table at the
            // path (a re-attach needs it to move: the agent there is alive and serving).
            let mut candidate: Option<(Arc<Attachment>, u64)> = None;
            loop {
                std::thread::sleep(Duration::from_millis(10));
                let Some(inner) = inner.upgrade() else { return };
                let crate::scheduler::Backend::Kernel(k) = &inner.backend else { return };
                if k.fell_back() {
                    candidate = k.try_reattach(candidate.take(), &inner.counters);
                    if !k.fell_back() {
                        last = (u64::MAX, Instant::now());
                    }
                    continue;
                }
                let att = k.attachment();
                let h = att.table.header();
                let beat = h.heartbeat.load(Ordering::Acquire);
                if beat != last.0 {
                    last = (beat, Instant::now());
                }
                let stopped = h.agent_state.load(Ordering::Acquire) == table::AGENT_STOPPED || att.table.truncated();
                if stopped || last.1.elapsed() >= k.watchdog {
                    k.fall_back(&inner.counters, last.1.elapsed(), stopped);
                    let _ = sys::set_policy(0, natural);
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the watchdog thread; falling back to cooperative now");
            self.fell_back.store(true, Ordering::SeqCst);
        }
    }

    /// The agent is gone: every thread of this process back to its natural policy, and
    /// new jobs go through the cooperative fallback. A thread id is written only while it
    /// names the thread we remembered (same start time), and under the lock its thread
    /// needs to leave the map, so it cannot end and be replaced meanwhile.
    fn fall_back(&self, counters: &Counters, silent_for: Duration, stopped: bool) {
        let restored = self.restore_all();
        Counters::add(&counters.fallbacks, 1);
        Counters::add(&counters.priority_changes, restored);
        let why = if stopped {
            "the agent stopped".to_string()
        } else {
            format!("the agent's heartbeat stopped for {} ms", silent_for.as_millis())
        };
        tracing::warn!(
            "{why} ({}): restored {restored} threads to their original policy; falling back to \
             the cooperative backend until an agent serves the table again",
            self.table_path.display()
        );
    }

    /// The scheduler is gone (its last clone dropped): every thread it raised goes back to
    /// its natural policy now, not when its pool thread retires, and nothing raises again.
    pub fn release(&self) {
        let restored = self.restore_all();
        tracing::debug!(restored, "scheduler dropped: threads back to their original policy");
    }

    /// Marks this process fallen back and puts every thread it raised back to its natural
    /// policy; returns how many were changed.
    fn restore_all(&self) -> u64 {
        self.fell_back.store(true, Ordering::SeqCst);
        let mut restored = 0;
        // Pool threads raised by their spawner that have not run yet.
        for (&thread, natural) in lock(&self.spawned).iter() {
            if sys::set_pthread_policy(thread, *natural).is_ok() {
                restored += 1;
            }
        }
        let io_threads = lock(&self.io_threads);
        for (&tid, (orig, me)) in lock(&self.job_threads).iter() {
            let natural = io_threads.get(&tid).map_or(*orig, |(natural, _)| *natural);
            if me.alive() && sys::set_policy(tid, natural).is_ok() {
                restored += 1;
            }
        }
        for (&tid, (natural, me)) in io_threads.iter() {
            if me.alive() && sys::set_policy(tid, *natural).is_ok() {
                restored += 1;
            }
        }
        drop(io_threads);
        restored
    }

    /// Fallen back: re-attaches once a live agent serves the table path again, the one we
    /// left (it resumed after a stop) or a new one (a new table file at the path), seen
    /// serving on two looks in a row (its heartbeat moved). Returns the attachment being
    /// watched, for the next look.
    fn try_reattach(
        &self,
        candidate: Option<(Arc<Attachment>, u64)>,
        counters: &Counters,
    ) -> Option<(Arc<Attachment>, u64)> {
        let current = self.attachment();
        let (att, seen) = match candidate {
            Some((att, seen)) if Table::file_id(&self.table_path) == Some(att.table.mapped_file_id()) => (att, seen),
            _ if Table::file_id(&self.table_path) == Some(current.table.mapped_file_id()) => {
                (current.clone(), u64::MAX)
            }
            _ => match Attachment::open(&self.table_path) {
                Ok(att) => (Arc::new(att), u64::MAX),
                Err(_) => return None,
            },
        };
        let h = att.table.header();
        let beat = h.heartbeat.load(Ordering::Acquire);
        let pid = h.agent_pid.load(Ordering::Acquire) as i32;
        let serving = h.agent_state.load(Ordering::Acquire) == table::AGENT_RUNNING && sys::process_alive(pid);
        if !serving || beat == seen || seen == u64::MAX {
            return Some((att, beat));
        }
        // The watchdog above the band first (it is this thread), then the I/O and pool
        // threads, then new jobs register.
        let _ = sys::set_policy(0, ThreadPolicy::fifo(WATCHDOG_PRIORITY));
        let mut raised = 0;
        {
            *self.attached.write().unwrap_or_else(|p| p.into_inner()) = att.clone();
            let io_threads = lock(&self.io_threads);
            self.fell_back.store(false, Ordering::SeqCst);
            for (&tid, (_, me)) in io_threads.iter() {
                if me.alive() && sys::set_policy(tid, ThreadPolicy::fifo(IO_PRIORITY)).is_ok() {
                    raised += 1;
                }
            }
        }
        Counters::add(&counters.reattached, 1);
        tracing::info!(
            "the agent (pid {pid}) serves {} again: re-attached, {raised} I/O and pool threads above \
             the band again; jobs are kernel-ordered again",
            self.table_path.display()
        );
        None
    }
}
