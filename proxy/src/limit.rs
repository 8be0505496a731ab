//! The adaptive concurrency limit: Vegas, in the manner of Netflix's concurrency-limits.
//!
//! A service nobody profiled needs a `c` that works untuned. Vegas estimates the queue
//! inside the service from latency alone: with `rtt_noload` the latency of an unqueued
//! request, `limit × (1 − rtt_noload / rtt)` requests are waiting in it. Few waiting: the
//! service has idle capacity, raise the limit; many: it is queuing internally (where the
//! policy cannot order anything), lower it. "Few" and "many" are Vegas's counts or, for a
//! service that needs many requests inside (most of its latency spent off the CPU), a
//! quarter and a half of the limit. The gate then holds the queue instead, in the
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

/// Vegas's thresholds as a share of the limit, beside its own `3·log10(limit)` and
/// `6·log10(limit)` requests: the limit still grows while at most a quarter of it seems
/// queued, and falls only once more than half does (its latency past twice the no-load
/// latency). Vegas's counts suit a service whose latency is its CPU time, where a few
/// requests queued inside keep its CPUs busy; a service whose latency is mostly a wait off
/// the CPU (a database, another service) needs many requests inside, and its CPU queue
/// alone inflates their latency by more than those few before the CPUs are full. With the
/// counts alone the limit stayed at 17–26 on such a service (5 ms wait, 0.5 ms CPU, 2
/// CPUs) where fixed limits of 32–64 answered 10–25 points more of an overload in time;
/// with these shares it rose to 40–106 and was within 3.5 points of the best fixed limit
/// there, ahead of it at 4 of 6 points, while on a CPU-bound service, whose no-load
/// latency is a small part of a loaded one, the counts still decide (`tailor bench proxy
/// --limit`; docs/results/proxy.md, "Limit").
const GROW_WHILE_QUEUED_SHARE: f64 = 0.25;
const SHRINK_ONCE_QUEUED_SHARE: f64 = 0.5;

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
        let alpha = (3.0 * step).max(GROW_WHILE_QUEUED_SHARE * limit);
        let beta = (6.0 * step).max(SHRINK_ONCE_QUEUED_SHARE * limit);
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

    /// A service that waits `wait` off the CPU, then needs `cpu` of CPU time on `cpus` CPUs
    /// that other processes keep `busy` (the proxy, a load generator), with `inside`
    /// requests in it: its mean latency and throughput (per ns). The CPUs are one
    /// processor-sharing server, so the CPU part of the latency grows as `1 / (1 − load)`
    /// long before the CPUs are full, as on a real machine.
    fn shared_cpu_service(inside: usize, wait: f64, cpu: f64, cpus: f64, busy: f64) -> (f64, f64) {
        let demand = cpu / cpus;
        let latency = |throughput: f64| wait + demand / (1.0 - busy - throughput * demand);
        // Little's law, `inside = throughput × latency`, solved by bisection.
        let (mut lo, mut hi) = (0.0, (1.0 - busy) / demand);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if mid * latency(mid) < inside as f64 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (latency(lo), lo)
    }

    /// Vegas fed by a saturated `shared_cpu_service`, each latency drawn around its mean
    /// (the wait ±5%, the CPU part exponential): the mean limit over the second half.
    fn settled_limit(wait: f64, cpu: f64, cpus: f64, busy: f64) -> f64 {
        let mut rng = tailor_core::Rng::new(1);
        let mut v = Vegas::new(4, 256);
        let (mut sum, mut count) = (0.0, 0.0);
        for i in 0..40_000 {
            let inside = v.limit(); // saturated: every slot is used
            let (mean, _) = shared_cpu_service(inside, wait, cpu, cpus, busy);
            let waited = wait * (0.95 + 0.1 * rng.next_f64());
            let on_cpu = rng.exp(mean - wait);
            v.on_sample((waited + on_cpu) as Nanos, inside);
            if i >= 20_000 {
                sum += v.limit() as f64;
                count += 1.0;
            }
        }
        sum / count
    }

    /// A service whose latency is mostly a wait off the CPU (5 ms, then 0.5 ms on one of 2
    /// CPUs that others keep 30% busy): its CPU queue inflates the latency before the CPUs
    /// are full, and the latencies spread. The limit must let in enough requests to keep
    /// the CPUs near full; with Vegas's counts alone it settled at 29 for 94% of the peak.
    #[test]
    fn an_io_bound_service_gets_enough_requests_inside_to_keep_its_cpus_busy() {
        let (wait, cpu, cpus, busy) = (5_000_000.0, 500_000.0, 2.0, 0.3);
        let peak = (1.0 - busy) * cpus / cpu;
        let limit = settled_limit(wait, cpu, cpus, busy);
        let (latency, throughput) = shared_cpu_service(limit.round() as usize, wait, cpu, cpus, busy);
        assert!(throughput >= 0.96 * peak, "limit {limit:.1}: {:.1}% of the peak", 100.0 * throughput / peak);
        assert!(latency < 4.0 * (wait + cpu), "limit {limit:.1}: latency {:.1} ms", latency / 1e6);
    }

    /// The same machine with a CPU-bound service (0.1 ms wait, 1 ms of CPU): the shares
    /// must not raise its limit; Vegas's counts keep it within a few of the CPUs.
    #[test]
    fn a_cpu_bound_service_s_limit_stays_near_its_cpus() {
        let limit = settled_limit(100_000.0, 1_000_000.0, 2.0, 0.3);
        assert!((2.0..=12.0).contains(&limit), "limit {limit:.1}");
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
