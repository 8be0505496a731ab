//! The agent's scan: the slots marked dirty since the last pass (or all of them) read, and
//! each job's arrival, block, wake and departure fed to the policy.

use super::*;

impl Agent<'_> {
    /// Feeds the changes of the slots marked dirty since the last scan to the policy.
    pub(super) fn scan(&mut self, now: Nanos) {
        for w in 0..self.table.dirty_words() {
            let word = self.table.dirty_word(w);
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // Clear before reading the slots: a change after this sets the bit again.
            let mut bits = word.swap(0, Ordering::SeqCst);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.scan_slot(now, w * 64 + b);
            }
        }
    }

    /// Every slot, dirty or not: a safety net run with the reaper (a process that died
    /// between writing its slot and setting the dirty bit).
    pub(super) fn scan_all(&mut self, now: Nanos) {
        for i in 0..self.table.slots() {
            self.scan_slot(now, i);
        }
    }

    pub(super) fn scan_slot(&mut self, now: Nanos, i: usize) {
        {
            let slot = self.table.slot(i);
            let (generation, state) = table::unpack(slot.word.load(Ordering::SeqCst));
            let wakes = slot.wakes.load(Ordering::SeqCst);
            let seen = self.registered[i];
            if let Some(r) = seen {
                if r.generation == generation && r.state == state {
                    if state == table::RUNNABLE && wakes != r.wakes {
                        // It blocked and woke since the last pass: tell the policy both, and
                        // forget where we put it (it moved itself, and may wait for admission).
                        let id = job_id(i, generation);
                        self.applied.remove(&id);
                        self.driver.block(now, id);
                        self.driver.wake(now, id);
                        self.registered[i] = Some(Registered { wakes, ..r });
                    }
                    return;
                }
                if r.generation != generation || state == table::FREE {
                    // The job finished (its thread restored itself); maybe a new one claimed the slot.
                    self.driver.complete(now, job_id(i, r.generation));
                    self.applied.remove(&job_id(i, r.generation));
                    self.registered[i] = None;
                    self.live.remove(&i);
                    self.report.completions += 1;
                } else {
                    let id = job_id(i, generation);
                    match state {
                        table::BLOCKED => {
                            self.applied.remove(&id);
                            self.driver.block(now, id)
                        }
                        table::RUNNABLE => self.driver.wake(now, id),
                        _ => {}
                    }
                    self.registered[i] = Some(Registered { state, wakes, ..r });
                    return;
                }
            }
            if state == table::RUNNABLE || state == table::BLOCKED {
                if self.unresolved.get(&i) == Some(&generation) {
                    return;
                }
                // Host ids: a job registered from a pod names its thread in the pod's PID
                // namespace (see `nspid`). One we cannot find is never written: let it run
                // at its own policy, unordered, and say so.
                let (pid, tid) = (slot.pid.load(Ordering::Relaxed) as i32, slot.tid.load(Ordering::Relaxed) as i32);
                let start = slot.start.load(Ordering::Relaxed);
                let ns = table::unpack_pid_ns(generation, slot.pid_ns.load(Ordering::Relaxed));
                let Some((pid, tid)) = self.resolver.resolve(ns, pid, tid, start) else {
                    self.report.unresolved += 1;
                    self.report.error(format!(
                        "slot {i}: no live thread is pid {pid} tid {tid} of PID namespace {ns:?}: it runs unordered. \
                         Fix: run the agent in the host's PID namespace (hostPID: true) with the host's /proc"
                    ));
                    self.unresolved.insert(i, generation);
                    self.admit(i);
                    return;
                };
                let r = Registered {
                    generation,
                    state,
                    wakes,
                    pid,
                    tid,
                    start,
                    orig: ThreadPolicy {
                        policy: slot.orig_policy.load(Ordering::Relaxed),
                        priority: slot.orig_priority.load(Ordering::Relaxed),
                    },
                };
                let id = job_id(i, generation);
                let job = Job {
                    id,
                    gat: slot.gat.load(Ordering::Relaxed),
                    deadline: slot.deadline.load(Ordering::Relaxed),
                    class: slot.class.load(Ordering::Relaxed) as u8,
                };
                // One that put itself in the band on the fast path: `apply` sees its `admitted`.
                self.driver.arrive(now, job);
                if self.trace {
                    tracing::trace!(
                        t = now,
                        job = ?job,
                        running = ?self.driver.running(),
                        next_tick = ?self.driver.next_tick(),
                        "arrive"
                    );
                }
                if state == table::BLOCKED {
                    self.driver.block(now, id);
                }
                self.registered[i] = Some(r);
                self.live.insert(i);
                self.report.arrivals += 1;
            }
        }
    }
}
