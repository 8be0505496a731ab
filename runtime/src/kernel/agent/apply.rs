//! The agent's decisions made real: the band becomes exactly the policy's running set (the
//! others at SCHED_IDLE), the successors a leaving job hands its CPU to are published, and
//! admitted jobs are let out of their wait.

use super::*;

impl Agent<'_> {
    /// Makes the band exactly the policy's running set: runnable jobs the policy runs go
    /// to the band, the other runnable ones to SCHED_IDLE. Blocked jobs are left alone.
    pub(super) fn apply(&mut self) {
        let running: Vec<JobId> = self.driver.running().iter().flatten().copied().collect();
        let mut changes: Vec<(JobId, Level)> = Vec::new();
        self.handoff_in_flight = false;
        for &i in &self.live {
            let Some(r) = self.registered[i].filter(|r| r.state == table::RUNNABLE) else { continue };
            let id = job_id(i, r.generation);
            let want = if running.contains(&id) { Level::Band } else { Level::Idle };
            let have = self.applied.get(&id).copied();
            if matches!(have, None | Some(Level::Waiting)) {
                // Started without us: by a hand-off (Waiting), or on the fast path (None: a
                // new job, or one back from a block).
                match self.table.slot(i).admitted.load(Ordering::Acquire) {
                    table::HANDED => {
                        // Its own write to the band is in flight: no write of ours may race it.
                        self.handoff_in_flight = true;
                        continue;
                    }
                    table::SELF_ADMITTED => {
                        if have.is_none() {
                            self.report.self_admitted += 1;
                        }
                        self.applied.insert(id, Level::Band);
                        if want == Level::Idle {
                            // The job that made room for it may have left after this pass's
                            // scan (it marks its slot before it makes room, so the next scan
                            // has it): judge it then, not on a stale view.
                            self.handoff_in_flight = true;
                            continue;
                        }
                    }
                    _ => {}
                }
            }
            match self.applied.get(&id) {
                Some(&have) if have == want || (have, want) == (Level::Waiting, Level::Idle) => {}
                // A new job that must wait already sleeps in its admission wait: no syscall.
                None if want == Level::Idle
                    && self.table.slot(i).admitted.load(Ordering::Acquire) == table::WAITING =>
                {
                    self.applied.insert(id, Level::Waiting);
                }
                _ => changes.push((id, want)),
            }
        }
        if changes.is_empty() {
            return;
        }
        self.report.rotations += 1;
        // Promote first: the CPU goes to the new job the moment the old one is demoted.
        changes.sort_by_key(|(_, level)| *level != Level::Band);
        for (id, level) in changes {
            let policy = match level {
                Level::Band => ThreadPolicy::fifo(BAND_PRIORITY),
                Level::Idle => ThreadPolicy::IDLE,
                Level::Waiting => unreachable!("never a change"),
            };
            if self.set(id, policy).is_some() {
                self.applied.insert(id, level);
                match level {
                    Level::Band => {
                        self.report.promotions += 1;
                        // In the band now: a thread in its admission wait may start.
                        self.admit(slot_of(id));
                    }
                    Level::Idle => self.report.demotions += 1,
                    Level::Waiting => {}
                }
            }
        }
    }

    /// Sets the policy of job `id`'s thread if that job is still RUNNABLE, under the
    /// write fence (see `table`): announce the job in `agent_busy`, re-read its slot, and
    /// write only if it is still that job and runnable. A thread that blocked or finished
    /// meanwhile is not touched; the change is in its dirty bit for the next scan. A thread
    /// that died frees its slot.
    pub(super) fn set(&mut self, id: JobId, p: ThreadPolicy) -> Option<i32> {
        let i = slot_of(id);
        let r = self.registered[i].filter(|r| job_id(i, r.generation) == id)?;
        if !self.processes.alive(r.pid, r.tid, r.start) {
            self.free_dead(i, r);
            return None;
        }
        match self.table.set_policy_fenced(i, r.generation, r.tid, p, |state| state == table::RUNNABLE) {
            Ok(true) => Some(r.tid),
            Ok(false) => None,
            Err(e) => {
                if e.raw_os_error() == Some(libc::ESRCH) {
                    self.free_dead(i, r);
                } else {
                    let hint = sys::rt_group_problem(r.pid, r.tid).map(|p| format!(" ({p})")).unwrap_or_default();
                    self.report.error(format!("pid {} tid {}: cannot set {}: {e}{hint}", r.pid, r.tid, p.describe()));
                }
                None
            }
        }
    }

    /// Publishes in each running job's slot the job the policy runs next if it leaves
    /// (see `table`, "the hand-off"): only while jobs wait, and only a successor asleep in
    /// its admission wait, the one kind a leaving job can start by waking it.
    pub(super) fn publish_successors(&mut self, now: Nanos) {
        let mut next: HashMap<usize, u64> = HashMap::new();
        if self.driver.waiting() > 0 {
            for &id in self.driver.running().iter().flatten() {
                if self.applied.get(&id) != Some(&Level::Band) {
                    continue;
                }
                let Some(s) = self.driver.successor(now, id) else { continue };
                let i = slot_of(s);
                let asleep = self.applied.get(&s) == Some(&Level::Waiting)
                    && self.table.slot(i).admitted.load(Ordering::Acquire) == table::WAITING;
                if let (true, Some(r)) = (asleep, self.registered[i]) {
                    next.insert(slot_of(id), table::pack_successor(i, r.generation));
                }
            }
        }
        for (&slot, &old) in &self.published {
            if !next.contains_key(&slot) {
                // Only if still ours: the slot's next job clears it itself when it claims.
                let _ = self.table.slot(slot).successor.compare_exchange(old, 0, Ordering::SeqCst, Ordering::Relaxed);
            }
        }
        for (&slot, &value) in &next {
            if self.published.get(&slot) != Some(&value) {
                self.table.slot(slot).successor.store(value, Ordering::SeqCst);
            }
        }
        self.published = next;
    }

    /// Lets the thread of slot `i` out of its admission wait (a no-op once admitted).
    pub(super) fn admit(&self, i: usize) {
        let admitted = &self.table.slot(i).admitted;
        if admitted.swap(table::ADMITTED, Ordering::AcqRel) == table::WAITING {
            sys::futex_wake(admitted);
        }
    }
}
