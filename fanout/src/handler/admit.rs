//! Admission: the deadline-miss ratio per server or pooled, and the predicted waits that reject late tasks at once.

use super::*;

/// The tasks this handler has at a server (`outstanding`: queue key → count)
/// that a new task keyed `key` would queue behind: ties count as ahead. One
/// count for the dispatch-time prediction and for `reject_late`.
pub(super) fn tasks_ahead(outstanding: &BTreeMap<Nanos, u32>, key: Nanos) -> u32 {
    outstanding.range(..=key).map(|(_, &c)| c).sum()
}

/// The admission controllers: one for the handler, or one per server.
pub(super) struct Admission {
    pub(super) controllers: Vec<Mutex<AdmissionController>>,
}

impl Admission {
    /// The controller that counts server `s`'s tasks.
    pub(super) fn of(&self, s: usize) -> std::sync::MutexGuard<'_, AdmissionController> {
        let i = if self.controllers.len() == 1 { 0 } else { s };
        self.controllers[i].lock().expect("admission poisoned")
    }

    /// Admits a query touching `servers` (every server when `None`) at `now`, or returns
    /// the miss ratio that refused it and R_th. Per server, every server the query
    /// touches must admit it (each by its own ratio and, with `proportional`, its own
    /// share): a query's slowest task decides its latency. Measured against two looser
    /// rules (docs/fanout.md, "Per-server admission").
    /// A query refused by a count window moves it by its `tasks` (per server: by the one
    /// task the refusing server would have run).
    pub(super) fn admit(&self, now: Nanos, servers: Option<&[usize]>, tasks: u64) -> Result<(), (f64, f64)> {
        let n = self.controllers.len();
        let tasks_each = if n > 1 { 1 } else { tasks };
        let check = |s: usize| {
            let mut a = self.of(s);
            if a.admit_query(now, tasks_each) {
                Ok(())
            } else {
                Err((a.miss_ratio(now), a.threshold()))
            }
        };
        match servers {
            Some(list) if n > 1 => list.iter().try_for_each(|&s| check(s)),
            _ => (0..n).try_for_each(check),
        }
    }
}

impl Handler {
    /// The miss ratio the admission controller sees now (0 without admission control;
    /// per server, the highest).
    pub fn miss_ratio(&self) -> f64 {
        let Some(a) = &self.admission else { return 0.0 };
        let now = wall_ns();
        (0..a.controllers.len()).map(|s| a.of(s).miss_ratio(now)).fold(0.0, f64::max)
    }

    /// Tasks announced to admission control and not yet dequeued.
    pub fn admission_queued(&self) -> u64 {
        self.admission.as_ref().map_or(0, |a| {
            (0..a.controllers.len()).map(|s| a.controllers[s].lock().expect("admission poisoned").queued()).sum()
        })
    }

    /// Mean and variance of server `s`'s post-dequeue time (ns, ns²): its own learned
    /// CDF's, the pool's or the offline one's, as the planner picks.
    pub(super) fn service_moments(&self, s: usize) -> (f64, f64) {
        let h = self.learned[s].lock().expect("histogram poisoned");
        let pooled = f64::from_bits(self.pooled_moments.0.load(Ordering::Relaxed));
        if h.count() >= self.cfg.min_samples {
            (h.mean(), h.variance())
        } else if pooled > 0.0 {
            (pooled, f64::from_bits(self.pooled_moments.1.load(Ordering::Relaxed)))
        } else {
            self.offline_moments[s]
        }
    }

    /// Expected wait of a task that has `ahead` tasks before it at server `s`
    /// (the one in service among them, half done on average): (ahead − ½) ×
    /// the server's mean post-dequeue time (its own, the pool's or the offline
    /// one, as the planner picks). A lower bound under EDF (a later task with an
    /// earlier deadline can still overtake), so a predicted miss is one that
    /// will almost surely happen.
    pub fn expected_wait(&self, s: usize, ahead: u32) -> Nanos {
        if ahead == 0 {
            return 0;
        }
        ((ahead as f64 - 0.5) * self.service_moments(s).0) as Nanos
    }

    /// The p-quantile of the wait of a task that has `ahead` tasks before it at
    /// server `s` (one task in service at a time), from the server's post-dequeue
    /// mean and variance: core's `queue_wait_quantile`, as the simulator computes it.
    /// `reject_late` uses it at the class's SLO percentile.
    pub fn wait_quantile(&self, s: usize, ahead: u32, p: f64) -> Nanos {
        let (mean, var) = self.service_moments(s);
        queue_wait_quantile(ahead, 1, mean, var, p)
    }

    /// The first of `servers` at which a task keyed `key` with deadline `deadline`
    /// would, at the p-quantile of its wait ([`Handler::wait_quantile`]), leave the
    /// queue after the deadline: (server, wait, time left to the deadline).
    pub(super) fn late_server(
        &self,
        servers: &[usize],
        key: Nanos,
        now: Nanos,
        deadline: Nanos,
        p: f64,
    ) -> Option<(usize, Nanos, Nanos)> {
        let slack = deadline.saturating_sub(now);
        servers.iter().find_map(|&s| {
            let ahead = tasks_ahead(&self.outstanding[s].lock().expect("outstanding poisoned"), key);
            let wait = self.wait_quantile(s, ahead, p);
            (wait > slack).then_some((s, wait, slack))
        })
    }
}
