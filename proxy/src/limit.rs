//! The adaptive concurrency limit: Vegas, in the manner of Netflix's concurrency-limits.
//!
//! A service nobody profiled needs a `c` that works untuned. Vegas estimates the queue
//! inside the service from latency alone: with `rtt_noload` the latency of an unqueued
//! request, `limit × (1 − rtt_noload / rtt)` requests are waiting in it. Few waiting: the
//! service has idle capacity, raise the limit; many: it is queuing internally (where the
//! policy cannot order anything), lower it. The gate then holds the queue instead, in the
//! policy's order. `rtt_noload` is re-probed now and then (at half the limit, for one
//! sample), so it follows a service that got slower (a new release, a noisy neighbour)
//! instead of shrinking the limit for ever.

use tailor_core::Nanos;

/// Latency above `rtt_noload` that is not taken for a queue. A request that waited for
/// nothing still picks up the proxy's own event loop, loopback and the scheduler's wake-ups
/// on its way: through the sidecar on a 2-CPU VM an idle upstream answering at once
/// measured 0.1 ms at best and within 0.5 ms for 80–94% of requests (the cost benchmark). Read
/// as a ratio, that spread is a queue of 60% of the limit (0.1 ms floor, 0.25 ms sample),
/// and the limit was held at 4–12 with one or two requests inside on average, so bursts
/// waited in the gate at a tenth of the rate the upstream answers. Only the latency beyond this
/// margin counts; a queue inside a service of millisecond requests still shows at once.
pub const JITTER_NS: Nanos = 500_000;

/// Vegas limit state. Pure: latencies and in-flight counts are passed in.
#[derive(Clone, Debug)]
pub struct Vegas {
    limit: f64,
    max: usize,
    rtt_noload: Nanos,
    samples: u64,
    /// Samples until `rtt_noload` is re-probed.
    next_probe: u64,
}

fn log10_at_least_one(x: f64) -> f64 {
    x.max(1.0).log10().max(1.0)
}

impl Vegas {
    /// Starts at `initial`, never above `max` (nor below 1).
    pub fn new(initial: usize, max: usize) -> Vegas {
        let max = max.max(1);
        Vegas { limit: initial.clamp(1, max) as f64, max, rtt_noload: 0, samples: 0, next_probe: 1_000 }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// One completed request that took `rtt` with `in_flight` requests in the service
    /// when it started. Returns the new limit.
    pub fn on_sample(&mut self, rtt: Nanos, in_flight: usize) -> usize {
        self.samples += 1;
        if self.samples >= self.next_probe {
            // Re-measure the floor at half the concurrency: with the service saturated every
            // sample is queued, so a floor taken at the current limit would only ratchet up.
            self.next_probe = self.samples + 1_000 + 100 * self.limit() as u64;
            self.rtt_noload = 0;
            self.limit = (self.limit / 2.0).max(1.0);
            return self.limit();
        }
        let rtt = rtt.max(1);
        if self.rtt_noload == 0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
            return self.limit();
        }
        // Not using what it has: the latency says nothing about a higher limit.
        if (in_flight as f64) * 2.0 < self.limit {
            return self.limit();
        }
        let limit = self.limit;
        let queued = rtt.saturating_sub(self.rtt_noload + JITTER_NS);
        let queue = (limit * queued as f64 / rtt as f64).ceil();
        let step = log10_at_least_one(limit);
        let (alpha, beta) = (3.0 * step, 6.0 * step);
        let next = if queue <= step {
            limit + beta
        } else if queue < alpha {
            limit + step
        } else if queue > beta {
            limit - step
        } else {
            limit
        };
        self.limit = next.clamp(1.0, self.max as f64);
        self.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service with `cores` servers of service time `s`: latency grows once more than
    /// `cores` requests are inside. Vegas must settle near `cores`, not at either bound.
    #[test]
    fn settles_near_the_capacity_of_a_saturated_service() {
        let (cores, s) = (4usize, 1_000_000u64);
        let mut v = Vegas::new(1, 256);
        for _ in 0..5_000 {
            let inside = v.limit(); // saturated: every slot is used
            let rtt = s * inside.max(cores) as u64 / cores as u64;
            v.on_sample(rtt, inside);
        }
        let l = v.limit();
        assert!((cores..=cores * 3).contains(&l), "limit {l} for {cores} cores");
    }

    #[test]
    fn does_not_grow_when_the_service_is_not_busy() {
        let mut v = Vegas::new(8, 256);
        for _ in 0..900 {
            v.on_sample(1_000_000 + 10, 1);
        }
        assert_eq!(v.limit(), 8);
        // A probe halves it; with one request in flight it never needs more than 2.
        for _ in 0..10_000 {
            v.on_sample(1_000_000 + 10, 1);
        }
        assert!((2..=8).contains(&v.limit()), "{}", v.limit());
    }

    /// An idle sub-millisecond service: the latencies spread over a few hundred µs
    /// (event loop, loopback, wake-ups) with every slot in use in bursts. That spread is no
    /// queue; the limit must not be held down by it (with the ratio alone: 16 → 7).
    #[test]
    fn a_fast_service_s_latency_jitter_is_not_taken_for_a_queue() {
        let mut v = Vegas::new(16, 256);
        v.on_sample(100_000, 16);
        for i in 0..500u64 {
            let inside = v.limit();
            v.on_sample(100_000 + (i * 7_919) % 400_000, inside);
        }
        assert!(v.limit() >= 16, "limit {} for an idle service", v.limit());
    }

    /// A queue in a fast service still shows once it is longer than the jitter margin.
    #[test]
    fn a_fast_service_s_real_queue_still_lowers_the_limit() {
        let mut v = Vegas::new(64, 256);
        v.on_sample(100_000, 64);
        for _ in 0..200 {
            let inside = v.limit();
            // Each request waits behind the others: 0.1 ms per request inside.
            v.on_sample(100_000 * inside as u64, inside);
        }
        assert!(v.limit() < 20, "limit {}", v.limit());
    }

    #[test]
    fn shrinks_when_latency_grows_without_bound() {
        let mut v = Vegas::new(100, 256);
        v.on_sample(1_000_000, 100);
        for _ in 0..500 {
            v.on_sample(50_000_000, 100);
        }
        assert!(v.limit() < 20, "{}", v.limit());
    }
}
