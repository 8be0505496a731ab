//! Counters of what arrived on the wire, for metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::codec::Decoded;
use super::{Clamped, WireError};

/// Counts of contexts accepted, absent, rejected (by [`WireError::kind`]) and
/// clamped. Shared by reference across threads (relaxed atomics: each counter
/// is exact, a read of several is not a snapshot). Export with
/// [`WireStats::rejected`], which lists every kind, zeros included, so a
/// dashboard sees a stable label set.
#[derive(Debug, Default)]
pub struct WireStats {
    accepted: AtomicU64,
    absent: AtomicU64,
    rejected: [AtomicU64; WireError::ALL.len()],
    gat_ahead: AtomicU64,
    gat_stale: AtomicU64,
    deadline_early: AtomicU64,
}

impl WireStats {
    /// All counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts the outcome of [`extract`](super::extract) (or of any decode
    /// whose "absent" is `Ok(None)`).
    pub fn record(&self, outcome: &Result<Option<Decoded>, WireError>) {
        match outcome {
            Ok(Some(_)) => self.accepted.fetch_add(1, Relaxed),
            Ok(None) => self.absent.fetch_add(1, Relaxed),
            Err(e) => self.rejected[e.index()].fetch_add(1, Relaxed),
        };
    }

    /// Counts one rejection, e.g. a failed [`Decoded::verify`] after the
    /// decode itself was recorded as accepted.
    pub fn record_error(&self, e: WireError) {
        self.rejected[e.index()].fetch_add(1, Relaxed);
    }

    /// Counts what [`clamp`](super::clamp) changed (one per clamped field).
    pub fn record_clamp(&self, c: &Clamped) {
        for (n, counter) in
            [(c.gat_ahead, &self.gat_ahead), (c.gat_stale, &self.gat_stale), (c.deadline_early, &self.deadline_early)]
        {
            if n > 0 {
                counter.fetch_add(1, Relaxed);
            }
        }
    }

    /// Contexts decoded.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Relaxed)
    }

    /// Requests that carried no context.
    pub fn absent(&self) -> u64 {
        self.absent.load(Relaxed)
    }

    /// Rejections of kind `e`.
    pub fn rejected_of(&self, e: WireError) -> u64 {
        self.rejected[e.index()].load(Relaxed)
    }

    /// `(kind, count)` for every kind in [`WireError::ALL`] order, zeros included.
    pub fn rejected(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        WireError::ALL.into_iter().map(|e| (e.kind(), self.rejected_of(e)))
    }

    /// `(field, count)` of clamps: `gat_ahead`, `gat_stale`, `deadline_early`.
    pub fn clamped(&self) -> [(&'static str, u64); 3] {
        [
            ("gat_ahead", self.gat_ahead.load(Relaxed)),
            ("gat_stale", self.gat_stale.load(Relaxed)),
            ("deadline_early", self.deadline_early.load(Relaxed)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::decode;

    #[test]
    fn counts_by_kind_and_lists_every_kind() {
        let stats = WireStats::new();
        stats.record(&decode("1.g1.c0.k1.h0").map(Some));
        stats.record(&Ok(None));
        stats.record(&decode("2.x").map(Some));
        stats.record(&decode("2.x").map(Some));
        stats.record_error(WireError::BadMac);
        stats.record_clamp(&Clamped { gat_ahead: 0, gat_stale: 5, deadline_early: 1 });
        assert_eq!((stats.accepted(), stats.absent()), (1, 1));
        assert_eq!(stats.rejected_of(WireError::UnsupportedVersion), 2);
        let all: Vec<_> = stats.rejected().collect();
        assert_eq!(all.len(), WireError::ALL.len());
        assert_eq!(all.iter().map(|(_, n)| n).sum::<u64>(), 3);
        assert!(all.contains(&("bad_mac", 1)));
        assert_eq!(stats.clamped(), [("gat_ahead", 0), ("gat_stale", 1), ("deadline_early", 1)]);
    }
}
