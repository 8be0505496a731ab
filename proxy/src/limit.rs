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
//!
//! Latency alone can hold the limit below what a service with widely spread latencies
//! could take; the gate then sees its own queue grow. [`Backlog`] lifts the limit while
//! that queue keeps growing, nothing is shed and the lift buys throughput; [`Adaptive`]
//! is the two together, what the gate runs.

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

/// The gate's adaptive limit: Vegas's, or [`Backlog`]'s floor when that is higher.
#[derive(Clone, Debug)]
pub struct Adaptive {
    vegas: Vegas,
    backlog: Backlog,
    max: usize,
}

impl Adaptive {
    /// Starts at `initial`, never above `max` (nor below 1).
    pub fn new(initial: usize, max: usize) -> Adaptive {
        Adaptive { vegas: Vegas::new(initial, max), backlog: Backlog::new(), max: max.max(1) }
    }

    pub fn limit(&self) -> usize {
        self.vegas.limit().max(self.backlog.floor()).min(self.max)
    }

    /// The backlog's floor under Vegas's limit (1: none).
    pub fn floor(&self) -> usize {
        self.backlog.floor()
    }

    /// Whether the backlog's raises were found to buy no throughput (until it ends).
    pub fn at_capacity(&self) -> bool {
        self.backlog.episode.as_ref().is_some_and(|e| e.at_capacity)
    }

    /// What Vegas alone would set.
    pub fn vegas(&self) -> usize {
        self.vegas.limit()
    }

    /// One completed request: it took `rtt` with `in_flight` requests in the service when
    /// it started; `waiting` are in the gate's queue now, and the gate has shed `sheds`
    /// so far. Returns the new limit.
    pub fn on_sample(&mut self, rtt: Nanos, in_flight: usize, waiting: usize, sheds: u64) -> usize {
        let limit = self.limit();
        let vegas = self.vegas.on_sample(rtt, in_flight);
        self.backlog.on_completion(rtt, in_flight, waiting, sheds, limit, vegas);
        self.limit()
    }
}

/// Completions per [`Backlog`] window: at least this many, and 16 turns of every slot. A
/// burst's queue, which a limit with throughput to spare drains, then empties within a
/// window; only a backlog the limit cannot drain stays through one. With windows of 32
/// completions (0.3 s at 100 requests/s) the floor rose on bursts and held the whole-chain
/// gate of `tailor bench proxy --effect` at 7–8 where Vegas's 6 sufficed (p99 420–480 ms).
const BACKLOG_WINDOW_MIN: u32 = 256;

/// A floor under Vegas's limit, raised while the gate's own queue keeps growing and the
/// raises buy throughput.
///
/// Vegas reads a queue inside the service from latency against its minimum. For a
/// service whose unqueued latency spreads widely (a chain of exponential demands: the
/// minimum is a request that drew tiny demands at every tier) nearly every request looks
/// queued, so Vegas holds the limit where its own thresholds balance (about 6) whatever
/// the capacity. When that limit lets through less than arrives, the backlog moves to the
/// gate and grows for as long as the load lasts: the whole-chain gate of `tailor bench
/// proxy --effect` did so in 4 of 18 runs at ρ 0.85 (25–44 waiting, p99 1.0–1.5 s, where
/// the same requests took 0.25–0.38 s in the other runs).
///
/// The gate sees that failure directly: every completion of a window finds requests
/// waiting, the mean backlog is above the last window's, and nothing was shed. After two
/// such windows in a row (one is often a burst) the floor rises by a step, and by another
/// for each further one. But a backlog also grows when the service is simply full, where
/// a higher limit only moves the queue into it: so the throughput the raises bought is
/// checked (Little's law: requests inside over their mean latency), and once four raises
/// have not lifted it 5% above the episode's start, the floor goes back to where it was
/// and stays until the queue empties. A backlog held by deadlines (the gate sheds what
/// cannot be met) or by `max_queue` is an overload too: a window with sheds takes the
/// floor down a step. The floor never goes past four times the limit Vegas had when the
/// backlog began, and it falls a step for each window in which most completions found
/// nobody waiting: the limit is not what holds requests back then.
#[derive(Clone, Debug)]
pub struct Backlog {
    floor: usize,
    /// The backlog now growing, if one is.
    episode: Option<Episode>,
    /// Windows in a row through which the backlog stayed and grew, nothing shed.
    growing_windows: u32,
    completions: u32,
    /// Completions that found requests waiting, and the waiting counts summed.
    queued: u32,
    waiting_sum: u64,
    /// In-flight counts and latencies summed: the service's throughput by Little's law.
    in_flight_sum: f64,
    rtt_sum: f64,
    sheds_at_start: u64,
    last_mean_waiting: f64,
}

/// A backlog from its first growing window until the gate's queue empties or sheds.
#[derive(Clone, Debug)]
struct Episode {
    /// Vegas's limit, the floor and the service's throughput (per ns) when it began.
    vegas: usize,
    floor: usize,
    throughput: f64,
    raises: u32,
    /// The raises bought no throughput: the service is at capacity, raise no more.
    at_capacity: bool,
}

/// Raises after which the throughput must have risen by [`GAIN_NEEDED`] over the
/// episode's start, or the floor goes back. In the windows of [`BACKLOG_WINDOW_MIN`]
/// completions the throughput is known within about ±6%, so one raise proves nothing;
/// four raise a limit of 6 by two thirds, which a service with idle capacity turns into
/// far more than the noise.
const RAISES_BEFORE_CHECK: u32 = 4;
const GAIN_NEEDED: f64 = 1.05;

impl Default for Backlog {
    fn default() -> Backlog {
        Backlog::new()
    }
}

impl Backlog {
    pub fn new() -> Backlog {
        Backlog {
            floor: 1,
            episode: None,
            growing_windows: 0,
            completions: 0,
            queued: 0,
            waiting_sum: 0,
            in_flight_sum: 0.0,
            rtt_sum: 0.0,
            sheds_at_start: 0,
            last_mean_waiting: 0.0,
        }
    }

    /// The floor for Vegas's limit (1: none).
    pub fn floor(&self) -> usize {
        self.floor
    }

    /// One completion that took `rtt` with `in_flight` requests inside when it started,
    /// with `waiting` requests in the gate's queue after it, `sheds` requests shed by the
    /// gate so far, `limit` the gate's limit now and `vegas` what Vegas alone would set.
    /// Returns the floor.
    pub fn on_completion(
        &mut self,
        rtt: Nanos,
        in_flight: usize,
        waiting: usize,
        sheds: u64,
        limit: usize,
        vegas: usize,
    ) -> usize {
        if self.completions == 0 {
            self.sheds_at_start = sheds;
        }
        self.completions += 1;
        self.queued += (waiting > 0) as u32;
        self.waiting_sum += waiting as u64;
        self.in_flight_sum += in_flight as f64;
        self.rtt_sum += rtt.max(1) as f64;
        if self.completions < BACKLOG_WINDOW_MIN.max(16 * limit as u32) {
            return self.floor;
        }
        let mean_waiting = self.waiting_sum as f64 / self.completions as f64;
        let throughput = self.in_flight_sum / self.rtt_sum;
        let step = (limit / 8).max(1);
        let held_throughout = self.queued == self.completions;
        let shed = sheds != self.sheds_at_start;
        let growing = held_throughout && mean_waiting > self.last_mean_waiting && !shed;
        self.growing_windows = if growing { self.growing_windows + 1 } else { 0 };
        if growing && self.episode.is_none() {
            self.episode =
                Some(Episode { vegas: vegas.max(1), floor: self.floor, throughput, raises: 0, at_capacity: false });
        }
        if shed || 2 * self.queued < self.completions {
            self.episode = None;
            self.floor = self.floor.saturating_sub(step).max(1);
        } else if !held_throughout {
            // The queue emptied now and then: whatever grows next is a new backlog.
            self.episode = None;
        } else if let Some(e) = self.episode.as_mut().filter(|e| self.growing_windows >= 2 && !e.at_capacity) {
            if e.raises >= RAISES_BEFORE_CHECK && throughput < GAIN_NEEDED * e.throughput {
                e.at_capacity = true;
                self.floor = e.floor;
            } else {
                let cap = (4 * e.vegas).max(e.vegas + 2);
                self.floor = (self.floor.max(limit) + step).min(cap).max(self.floor);
                e.raises += 1;
            }
        }
        self.last_mean_waiting = mean_waiting;
        self.completions = 0;
        self.queued = 0;
        self.waiting_sum = 0;
        self.in_flight_sum = 0.0;
        self.rtt_sum = 0.0;
        self.floor
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

    /// A gate in front of a modelled service, event by event: Poisson arrivals at `rate`
    /// (per ns) wait in the gate (FIFO), at most `limit` are inside; each waits `wait()`
    /// off the CPU, then needs Exp(`cpu`) on one of `cpus` CPUs (FCFS). A request that
    /// finds `shed_above` waiting is shed (the gate's sheds). Returns, per tenth of the
    /// run, the mean waiting count and the mean limit.
    struct GatedService {
        rate: f64,
        cpus: usize,
        cpu: f64,
        wait: fn(&mut tailor_core::Rng) -> f64,
        shed_above: usize,
    }

    struct Run {
        waiting: Vec<f64>,
        limit: Vec<f64>,
    }

    /// What the modelled gate asks of a limit: Vegas alone, or with the backlog floor.
    trait GateLimit {
        fn limit(&self) -> usize;
        fn on_sample(&mut self, rtt: Nanos, in_flight: usize, waiting: usize, sheds: u64);
    }

    impl GateLimit for Vegas {
        fn limit(&self) -> usize {
            Vegas::limit(self)
        }
        fn on_sample(&mut self, rtt: Nanos, in_flight: usize, _: usize, _: u64) {
            Vegas::on_sample(self, rtt, in_flight);
        }
    }

    impl GateLimit for Adaptive {
        fn limit(&self) -> usize {
            Adaptive::limit(self)
        }
        fn on_sample(&mut self, rtt: Nanos, in_flight: usize, waiting: usize, sheds: u64) {
            Adaptive::on_sample(self, rtt, in_flight, waiting, sheds);
        }
    }

    impl GatedService {
        fn run(&self, limit: &mut impl GateLimit, arrivals: usize, seed: u64) -> Run {
            use std::cmp::Reverse;
            use std::collections::{BinaryHeap, VecDeque};
            #[derive(PartialEq, Eq, PartialOrd, Ord)]
            enum Ev {
                Arrive,
                OffCpuDone(usize),
                CpuDone(usize),
            }
            let mut rng = tailor_core::Rng::new(seed);
            let mut events: BinaryHeap<Reverse<(u64, Ev)>> = BinaryHeap::new();
            events.push(Reverse((rng.exp(1.0 / self.rate) as u64, Ev::Arrive)));
            let (mut waiting, mut cpu_queue) = (VecDeque::new(), VecDeque::new());
            let (mut inside, mut busy_cpus, mut sheds, mut arrived) = (0usize, 0usize, 0u64, 0usize);
            // Per request: admitted at, in flight then.
            let mut admitted: Vec<(u64, usize)> = Vec::new();
            let (mut waiting_area, mut limit_area, mut last) = (0.0, 0.0, 0u64);
            let tenth = arrivals / 10;
            let mut out = Run { waiting: Vec::new(), limit: Vec::new() };
            let mut period_start = 0u64;
            while let Some(Reverse((now, ev))) = events.pop() {
                waiting_area += waiting.len() as f64 * (now - last) as f64;
                limit_area += limit.limit() as f64 * (now - last) as f64;
                last = now;
                let admit = |inside: &mut usize,
                             admitted: &mut Vec<(u64, usize)>,
                             events: &mut BinaryHeap<Reverse<(u64, Ev)>>,
                             rng: &mut tailor_core::Rng| {
                    *inside += 1;
                    admitted.push((now, *inside));
                    let off = (self.wait)(rng) as u64;
                    events.push(Reverse((now + off, Ev::OffCpuDone(admitted.len() - 1))));
                };
                match ev {
                    Ev::Arrive => {
                        arrived += 1;
                        if arrived < arrivals {
                            events.push(Reverse((now + rng.exp(1.0 / self.rate) as u64, Ev::Arrive)));
                        }
                        if arrived % tenth == 0 {
                            let span = (now - period_start) as f64;
                            out.waiting.push(waiting_area / span);
                            out.limit.push(limit_area / span);
                            (waiting_area, limit_area, period_start) = (0.0, 0.0, now);
                        }
                        if inside < limit.limit() {
                            admit(&mut inside, &mut admitted, &mut events, &mut rng);
                        } else if waiting.len() >= self.shed_above {
                            sheds += 1;
                        } else {
                            waiting.push_back(now);
                        }
                    }
                    Ev::OffCpuDone(r) => {
                        if busy_cpus < self.cpus {
                            busy_cpus += 1;
                            events.push(Reverse((now + rng.exp(self.cpu) as u64, Ev::CpuDone(r))));
                        } else {
                            cpu_queue.push_back(r);
                        }
                    }
                    Ev::CpuDone(r) => {
                        match cpu_queue.pop_front() {
                            Some(next) => events.push(Reverse((now + rng.exp(self.cpu) as u64, Ev::CpuDone(next)))),
                            None => busy_cpus -= 1,
                        }
                        inside -= 1;
                        let (start, in_flight) = admitted[r];
                        limit.on_sample(now - start, in_flight, waiting.len(), sheds);
                        while inside < limit.limit() && waiting.pop_front().is_some() {
                            admit(&mut inside, &mut admitted, &mut events, &mut rng);
                        }
                    }
                }
            }
            out
        }
    }

    /// The widely spread wait of a downstream call: exponential, mean 10 ms.
    fn downstream_call(rng: &mut tailor_core::Rng) -> f64 {
        rng.exp(10_000_000.0)
    }

    /// A service whose latency is mostly a downstream call of widely spread latency
    /// (exponential, 10 ms) and 1 ms on one of 2 CPUs, offered 0.8 requests per ms (40%
    /// of its CPUs): it needs about 9 requests inside (fixed limits in this model: 9 left
    /// 46–94 waiting, 10 left 4–6, 11 left 1–2). Against Vegas's minimum every request
    /// looks queued, so Vegas alone holds the limit near 6 and the gate's queue grows for
    /// as long as the load lasts; with the backlog floor the limit rises until the queue
    /// stops growing, and no further than the service needs.
    #[test]
    fn a_backlog_that_keeps_growing_raises_the_limit_until_it_drains() {
        let service =
            GatedService { rate: 0.8e-6, cpus: 2, cpu: 1_000_000.0, wait: downstream_call, shed_above: usize::MAX };
        for seed in 1..=3 {
            let alone = service.run(&mut Vegas::new(4, 256), 40_000, seed);
            assert!(
                alone.waiting[9] > 1_000.0,
                "seed {seed}, Vegas alone: waiting {:?}, limit {:?}",
                alone.waiting,
                alone.limit
            );
            let run = service.run(&mut Adaptive::new(4, 256), 40_000, seed);
            let second_half = |v: &[f64]| v[5..].iter().sum::<f64>() / 5.0;
            let (waiting, limit) = (second_half(&run.waiting), second_half(&run.limit));
            assert!(
                waiting < 60.0 && (9.0..=16.0).contains(&limit),
                "seed {seed}: waiting {:?}, limit {:?}",
                run.waiting,
                run.limit
            );
        }
    }

    /// A CPU-bound service (1 ms on one of 2 CPUs) offered twice its capacity: with
    /// deadlines the gate sheds what it cannot serve in time, and without them its queue
    /// grows for ever. Either way a higher limit only moves the queue into the service,
    /// and the floor must leave the limit to Vegas: sheds take it down, and raises that
    /// bought no throughput are undone.
    #[test]
    fn an_overload_leaves_the_limit_to_vegas() {
        let no_wait = |_: &mut tailor_core::Rng| 100_000.0;
        let shedding = GatedService { rate: 4e-6, cpus: 2, cpu: 1_000_000.0, wait: no_wait, shed_above: 50 };
        let unbounded = GatedService { shed_above: usize::MAX, ..shedding };
        let second_half = |r: &Run| r.limit[5..].iter().sum::<f64>() / 5.0;
        for seed in 1..=3 {
            for service in [&shedding, &unbounded] {
                let alone = second_half(&service.run(&mut Vegas::new(4, 256), 40_000, seed));
                let mut adaptive = Adaptive::new(4, 256);
                let with_floor = second_half(&service.run(&mut adaptive, 40_000, seed));
                assert!(
                    adaptive.floor() == 1 && with_floor <= alone + 1.0,
                    "seed {seed}, shed above {}: limit {with_floor:.1}, floor {}, Vegas alone {alone:.1}",
                    service.shed_above,
                    adaptive.floor()
                );
            }
        }
    }

    /// Windows of completions that found nobody waiting take the floor back down a step
    /// at a time; one that found a growing backlog, nothing shed, raises it.
    #[test]
    fn the_floor_rises_with_a_growing_backlog_and_falls_once_it_is_gone() {
        let mut b = Backlog::new();
        let window = BACKLOG_WINDOW_MIN as usize;
        for w in 1..=2 * window {
            b.on_completion(1_000_000, 8, w, 0, 8, 8);
        }
        assert_eq!(b.floor(), 9, "a backlog growing through two windows at limit 8: 8 + 1");
        for w in 1..=window {
            b.on_completion(1_000_000, 9, 2 * window + w, w as u64, 9, 8);
        }
        assert_eq!(b.floor(), 8, "sheds in the window: the deadlines hold the backlog");
        for w in 1..=2 * window {
            b.on_completion(1_000_000, 8, 3 * window + w, window as u64, 8, 8);
        }
        assert_eq!(b.floor(), 9, "growing again for two windows, nothing shed");
        for _ in 0..20 * window {
            b.on_completion(1_000_000, 8, 0, window as u64, b.floor(), 8);
        }
        assert_eq!(b.floor(), 1, "nobody waiting");
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
