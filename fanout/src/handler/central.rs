//! Central queuing (the paper's testbed): one policy-ordered queue per server at the handler, released one task at a time.

use super::*;

/// One server's queue in the handler (central queuing).
pub(super) struct CentralQueue {
    pub(super) policy: AnyPolicy,
    pub(super) waiting: HashMap<JobId, oneshot::Sender<()>>,
    pub(super) released: Option<JobId>,
    pub(super) next_id: JobId,
}

/// A task's count in [`Handler::outstanding`], removed when the task ends however it ends.
pub(super) struct Outstanding {
    pub(super) handler: Arc<Handler>,
    pub(super) server: usize,
    pub(super) key: Nanos,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        let mut out = self.handler.outstanding[self.server].lock().expect("outstanding poisoned");
        if let Some(c) = out.get_mut(&self.key) {
            *c -= 1;
            if *c == 0 {
                out.remove(&self.key);
            }
        }
    }
}

/// A task's place in a central queue while it waits or runs. Dropped before its result came
/// back (its query timed out or was dropped), it takes the task out: a waiting one leaves the
/// queue and admission control's count of announced tasks (with no outcome: it never ran; a
/// miss if its deadline had passed, counted then), a released one frees its server for the
/// next. Without this a task aborted after its release would hold its server's queue forever.
/// `id` is `JobId::MAX` once the task has completed normally.
pub(super) struct CentralSlot {
    pub(super) handler: Arc<Handler>,
    pub(super) server: usize,
    pub(super) id: JobId,
    pub(super) deadline: Nanos,
    /// Announced to admission control (`task_queued`) and not yet reported dequeued.
    pub(super) announced: bool,
    pub(super) released: bool,
}

impl Drop for CentralSlot {
    fn drop(&mut self) {
        let h = &self.handler;
        if self.announced {
            if let Some(a) = &h.admission {
                // Not an on-time outcome: counting the tasks of failed queries as met deadlines
                // diluted the miss ratio (a dead server fails its queries at once and their
                // siblings leave the queues here), and a burst on the healthy servers could
                // then go unrejected (docs/failure-modes.md, "Soak").
                a.of(self.server).task_withdrawn(wall_ns(), self.deadline);
            }
        }
        if self.id == JobId::MAX {
            return;
        }
        let mut q = h.central[self.server].lock().expect("central queue poisoned");
        if self.released || q.released == Some(self.id) {
            q.policy.complete(wall_ns(), self.id);
            q.released = None;
            h.release_next(&mut q);
        } else {
            // Still waiting: drop its sender; `release_next` completes it when its turn comes.
            q.waiting.remove(&self.id);
        }
    }
}

impl Handler {
    /// Tasks waiting in the handler's central queues (0 when queuing at the servers).
    pub fn central_waiting(&self) -> u64 {
        self.central.iter().map(|q| q.lock().expect("central queue poisoned").waiting.len() as u64).sum()
    }

    /// Releases the job the queue's policy runs next, if it is not out already. A job whose
    /// task was dropped while it waited (its sender is gone from `waiting`) completes at once.
    pub(super) fn release_next(&self, q: &mut CentralQueue) {
        while let Some(id) = q.policy.running().first().copied().flatten() {
            if q.released == Some(id) {
                return;
            }
            if let Some(tx) = q.waiting.remove(&id) {
                q.released = Some(id);
                let _ = tx.send(());
                return;
            }
            q.policy.complete(wall_ns(), id);
        }
    }
}
