//! TailGuard query admission control: reject new queries while the task deadline-miss ratio is too high (§III.C).
//!
//! The paper found the SLOs still hold when a small share of tasks (< 2% in
//! its tests) miss their queuing deadlines, so the query handler tracks the
//! ratio of tasks that missed over a moving time window and rejects new
//! queries while it exceeds R_th. The window is a ring of
//! [`SUB_WINDOWS`] time buckets: memory is fixed, and the window moves in
//! steps of window/[`SUB_WINDOWS`] (it covers between 19/20 and all of the
//! last `window_ns`). Time is passed in; nothing reads a clock.

use crate::time::Nanos;

/// Buckets in the ring: the window's time resolution is 1/20 of its length.
pub const SUB_WINDOWS: usize = 20;

/// Invalid admission parameters.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// R_th must be a ratio.
    #[error("r_th = {0}: must be a ratio in [0, 1], e.g. 0.02 to reject queries while more than 2% of tasks miss their deadlines")]
    BadThreshold(f64),
    /// The window must be positive.
    #[error("window = {0} ns: must be positive; the paper suggests the period over which the SLO must hold")]
    BadWindow(Nanos),
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    tasks: u64,
    missed: u64,
}

/// Admission control on the task deadline-miss ratio over a moving window.
#[derive(Clone, Debug)]
pub struct AdmissionController {
    r_th: f64,
    min_tasks: u64,
    sub_ns: Nanos,
    ring: [Bucket; SUB_WINDOWS],
    head: usize,
    /// Start of the head bucket (a multiple of `sub_ns`).
    head_start: Nanos,
    /// Sums over the ring.
    tasks: u64,
    missed: u64,
    admitted: u64,
    rejected: u64,
}

impl AdmissionController {
    /// Rejects while the miss ratio over the last `window_ns` exceeds `r_th`.
    /// Windows shorter than [`SUB_WINDOWS`] ns are rounded up to that.
    pub fn new(r_th: f64, window_ns: Nanos) -> Result<Self, AdmissionError> {
        if !(0.0..=1.0).contains(&r_th) {
            return Err(AdmissionError::BadThreshold(r_th));
        }
        if window_ns == 0 {
            return Err(AdmissionError::BadWindow(window_ns));
        }
        Ok(AdmissionController {
            r_th,
            min_tasks: 0,
            sub_ns: (window_ns / SUB_WINDOWS as Nanos).max(1),
            ring: [Bucket::default(); SUB_WINDOWS],
            head: 0,
            head_start: 0,
            tasks: 0,
            missed: 0,
            admitted: 0,
            rejected: 0,
        })
    }

    /// Never reject on fewer than `n` tasks in the window (default 0, the
    /// paper's rule): one early miss out of one task is a 100% ratio.
    pub fn with_min_tasks(mut self, n: u64) -> Self {
        self.min_tasks = n;
        self
    }

    /// Drops buckets that fell out of the window at `now`. An earlier `now`
    /// than already seen is treated as the latest one.
    fn advance(&mut self, now: Nanos) {
        if now < self.head_start.saturating_add(self.sub_ns) {
            return;
        }
        let steps = (now - self.head_start) / self.sub_ns;
        if steps >= SUB_WINDOWS as Nanos {
            self.ring = [Bucket::default(); SUB_WINDOWS];
            self.tasks = 0;
            self.missed = 0;
            self.head_start = now - now % self.sub_ns;
            return;
        }
        for _ in 0..steps {
            self.head = (self.head + 1) % SUB_WINDOWS;
            let old = std::mem::take(&mut self.ring[self.head]);
            self.tasks -= old.tasks;
            self.missed -= old.missed;
            self.head_start += self.sub_ns;
        }
    }

    /// A task was dequeued at `now`; `missed` if that was after its deadline.
    pub fn record_task(&mut self, now: Nanos, missed: bool) {
        self.advance(now);
        let b = &mut self.ring[self.head];
        b.tasks += 1;
        self.tasks += 1;
        if missed {
            b.missed += 1;
            self.missed += 1;
        }
    }

    /// Whether to admit a query arriving at `now`: false while the miss ratio
    /// over the window exceeds R_th. Counts the decision.
    pub fn admit(&mut self, now: Nanos) -> bool {
        self.advance(now);
        let ok = self.tasks == 0 || self.tasks < self.min_tasks || self.ratio() <= self.r_th;
        if ok {
            self.admitted += 1;
        } else {
            self.rejected += 1;
        }
        ok
    }

    fn ratio(&self) -> f64 {
        if self.tasks == 0 {
            0.0
        } else {
            self.missed as f64 / self.tasks as f64
        }
    }

    /// The miss ratio over the window at `now` (0 with no tasks).
    pub fn miss_ratio(&mut self, now: Nanos) -> f64 {
        self.advance(now);
        self.ratio()
    }

    /// Queries admitted so far.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Queries rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    pub fn threshold(&self) -> f64 {
        self.r_th
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_MILLI;

    #[test]
    fn rejects_while_ratio_exceeds_threshold_and_recovers_after_the_window() {
        let window = 1000 * NANOS_PER_MILLI; // 1 s, 50 ms buckets
        let mut ac = AdmissionController::new(0.02, window).unwrap();
        assert!(ac.admit(0));
        // 100 tasks, 2 missed: 2% is not above R_th.
        for i in 0..100u64 {
            ac.record_task(i * NANOS_PER_MILLI, i < 2);
        }
        assert!(ac.admit(100 * NANOS_PER_MILLI));
        // A third miss: 3/101 > 2%.
        ac.record_task(101 * NANOS_PER_MILLI, true);
        assert!(!ac.admit(102 * NANOS_PER_MILLI));
        assert!(!ac.admit(500 * NANOS_PER_MILLI));
        // Enough good tasks dilute it back under the threshold: 3/150 = 2%.
        for i in 0..49u64 {
            ac.record_task((600 + i) * NANOS_PER_MILLI, false);
        }
        assert!((ac.miss_ratio(650 * NANOS_PER_MILLI) - 0.02).abs() < 1e-12);
        assert!(ac.admit(650 * NANOS_PER_MILLI));
        // A burst of misses, then nothing: rejected until the burst leaves the window.
        for _ in 0..10 {
            ac.record_task(700 * NANOS_PER_MILLI, true);
        }
        assert!(!ac.admit(701 * NANOS_PER_MILLI));
        // At 1.0 s the first bucket [0, 50 ms) (2 misses, 50 tasks) has left,
        // the rest is still in: 11/110 = 10%.
        assert!(!ac.admit(1000 * NANOS_PER_MILLI));
        assert!((ac.miss_ratio(1000 * NANOS_PER_MILLI) - 11.0 / 110.0).abs() < 1e-12);
        // By 1.7 s everything up to 700 ms has gone.
        assert!(ac.admit(1750 * NANOS_PER_MILLI));
        assert_eq!(ac.miss_ratio(1750 * NANOS_PER_MILLI), 0.0);
        assert_eq!((ac.admitted(), ac.rejected()), (4, 4));
    }

    #[test]
    fn min_tasks_and_validation() {
        let mut ac = AdmissionController::new(0.1, 20_000).unwrap().with_min_tasks(10);
        ac.record_task(0, true);
        assert!(ac.admit(1), "one miss out of one task is below min_tasks");
        assert!(AdmissionController::new(1.5, 1000).unwrap_err().to_string().contains("r_th = 1.5"));
        assert!(AdmissionController::new(-0.1, 1000).is_err());
        assert!(AdmissionController::new(f64::NAN, 1000).is_err());
        assert!(AdmissionController::new(0.1, 0).unwrap_err().to_string().contains("window = 0 ns"));
        assert!(AdmissionController::new(0.1, 5).is_ok());
    }

    #[test]
    fn many_tasks_and_long_gaps() {
        let mut ac = AdmissionController::new(0.0, 1_000_000).unwrap();
        for i in 0..1_000_000u64 {
            ac.record_task(i * 7, i % 1000 == 0);
        }
        assert!(!ac.admit(7_000_000));
        assert!(ac.admit(u64::MAX / 2));
    }
}
