//! The lone-request path ([`super::lone_path_applies`]): one node, one task per request,
//! no event heap and no request / activation / task records.

use tailor_core::rng::{CounterRng, RandomSource};
use tailor_core::tailguard::AdmissionController;
use tailor_core::time::NEVER;
use tailor_core::{AnyPolicy, Job, JobId, Nanos, Policy};

use super::node::Node;
use super::slab::Slab;
use super::{Engine, RunStats};
use crate::metrics::Recorder;

/// A request of the lone-request path: its own (only) task.
#[derive(Clone, Copy)]
struct Lone {
    gat: Nanos,
    /// CPU demand; a non-preemptive task runs it in one go.
    demand: Nanos,
    deadline: Nanos,
    class: u8,
    measured: bool,
}

impl<'m> Engine<'m> {
    /// The lone-request path (see [`lone_path_applies`]): the general loop
    /// specialised to one node whose only events are arrivals and the node's
    /// timer. Every step mirrors the general path's (same draws in the same
    /// order, same sequence numbers, so the same tie-breaks); only the
    /// request / activation / task records and the event heap are gone. Debug
    /// builds check after every event that the node is as the general path's
    /// full diff would leave it.
    pub(super) fn run_lone(mut self) -> (Recorder, RunStats) {
        let m = self.m;
        let stage = m.roots[0];
        let svc = &m.services[m.stages[stage].service];
        debug_assert_eq!(svc.first_node, 0);
        let service_time = &svc.service_time;
        let single_class = m.classes.len() == 1;
        let request_key = self.request_key;
        let measured_range = self.measured.clone();
        let mut measured_left = self.measured_left;
        // Sequence numbers as the general path hands them out (its tie-break).
        let mut seq = self.seq + 1;
        // The loop's state lives in locals (registers), not in `self`.
        let Engine { nodes, arrivals, admission, refused_tasks, rec, stats, .. } = &mut self;
        let Node { policy, cpus, .. } = &mut nodes[0];
        // The same policy object, called through the same `Policy` trait; only
        // the `AnyPolicy` dispatch is taken once here instead of on every call.
        let AnyPolicy::Queue(policy) = policy else { unreachable!("lone_path_applies checked the policy") };
        let mut lone: Slab<Lone> = Slab::new();
        let mut events = 0u64;
        let mut now: Nanos = 0;
        // Counted here, added to `rec` at the end: measured requests admitted,
        // measured tasks (dispatched, deadline missed).
        let mut admitted = 0u64;
        let mut dequeued = (0u64, 0u64);
        let mut next_arrival: (Nanos, u64) = (0, seq);
        // The node's timer (time, seq), as `NodeTimers` keeps it, and the
        // lowest CPU whose completion it is.
        let mut timer: (Nanos, u64) = (NEVER, 0);
        let mut timer_cpu = 0usize;
        // CPUs with no task: the arrival scan for the idle CPU is skipped when 0.
        let mut idle = cpus.len();
        while measured_left > 0 {
            if next_arrival < timer {
                debug_assert!(next_arrival.0 >= now, "time went backwards");
                now = next_arrival.0;
                events += 1;
                // As `on_arrival`, `start` and `activate` for a fanout of one on
                // a single instance with no network delay.
                let index = arrivals.next_index;
                arrivals.next_index += 1;
                let gap = arrivals.next_gap();
                seq += 1;
                next_arrival = (now + gap, seq);
                let mut rng = CounterRng::stream(request_key, index);
                let class = if single_class {
                    0
                } else {
                    let u = rng.next_f64();
                    m.classes.iter().position(|c| u < c.cumulative_weight).unwrap_or(m.classes.len() - 1) as u8
                };
                let measured = measured_range.contains(&index);
                if let Some(ac) = admission {
                    if !ac.admit_query(now, refused_tasks[class as usize]) {
                        if measured {
                            rec.rejected(class);
                            measured_left -= 1;
                        }
                        continue;
                    }
                }
                admitted += measured as u64;
                let deadline = match m.budgets.get(class, stage, 1) {
                    Some(b) => now.saturating_add(b),
                    None => NEVER,
                };
                let demand = service_time.sample_ns(&mut rng);
                let id = lone.insert(Lone { gat: now, demand, deadline, class, measured });
                let job = Job { id: id as JobId, gat: now, deadline, class };
                if idle == 0 {
                    policy.arrive(now, job);
                } else {
                    // A queue fills the lowest idle CPU (`NonPreemptive` documents it).
                    let cpu = cpus.iter().position(|c| c.task.is_none()).expect("an idle CPU");
                    policy.arrive(now, job);
                    debug_assert_eq!(policy.running()[cpu], Some(id as JobId), "the queue did not fill the idle CPU");
                    idle -= 1;
                    let done = lone_dispatch(&lone, id, now, &mut dequeued, admission);
                    let c = &mut cpus[cpu];
                    c.task = Some(id as JobId);
                    c.since = now;
                    c.done_at = done;
                    if done < timer.0 {
                        seq += 1;
                        timer = (done, seq);
                        timer_cpu = cpu;
                    }
                }
            } else {
                if timer.0 == NEVER {
                    break; // nothing pending anywhere
                }
                debug_assert!(timer.0 >= now, "time went backwards");
                now = timer.0;
                events += 1;
                // As `on_node_timer`, `on_complete`, `sync_cpu`, `finish_activation`
                // and `on_respond`: the lowest CPU due completes.
                // The timer is the earliest completion, so the CPUs due now are
                // those at the timer's time, and `timer_cpu` is the lowest of them.
                let cpu = timer_cpu;
                debug_assert_eq!(Some(cpu), cpus.iter().position(|c| c.done_at <= now), "timer_cpu");
                let id = cpus[cpu].task.take().expect("completion on a busy CPU");
                cpus[cpu].done_at = NEVER;
                policy.complete(now, id);
                // A non-preemptive queue refills only the CPU the job left.
                match policy.running()[cpu] {
                    Some(next) => {
                        let done = lone_dispatch(&lone, next as u32, now, &mut dequeued, admission);
                        let c = &mut cpus[cpu];
                        c.task = Some(next);
                        c.since = now;
                        c.done_at = done;
                    }
                    None => idle += 1,
                }
                // The earliest completion and the lowest CPU with it.
                let (mut next, mut next_cpu) = (NEVER, 0);
                for (i, c) in cpus.iter().enumerate() {
                    if c.done_at < next {
                        (next, next_cpu) = (c.done_at, i);
                    }
                }
                timer_cpu = next_cpu;
                if next != timer.0 {
                    seq += 1;
                    timer = (next, seq);
                }
                let r = lone.remove(id as u32);
                if r.measured {
                    // Ideal latency = demand, fanout 1: filled in by `finish_lone`.
                    rec.record_lone(r.gat, now, r.class, r.demand);
                    measured_left -= 1;
                }
            }
            #[cfg(debug_assertions)]
            {
                let applied: Vec<Option<JobId>> = cpus.iter().map(|c| c.task).collect();
                assert_eq!(applied.as_slice(), policy.running(), "lone path: a CPU change was missed");
                assert_eq!(policy.next_tick(), None, "lone path: a queue policy asked for a tick");
                assert_eq!(idle, applied.iter().filter(|t| t.is_none()).count(), "lone path: idle count");
                let next = cpus.iter().fold(NEVER, |t, c| t.min(c.done_at));
                assert_eq!(timer.0, next, "lone path: timer out of date");
            }
        }
        rec.admitted += admitted;
        rec.tasks_dequeued += dequeued.0;
        rec.tasks_missed += dequeued.1;
        rec.finish_lone();
        stats.events = events;
        stats.end_time = now;
        stats.arrivals = arrivals.next_index;
        stats.admission_phases = admission.as_ref().map_or(Vec::new(), |a| a.phases().copied().collect());
        self.now = now;
        self.seq = seq;
        self.measured_left = measured_left;
        (self.rec, self.stats)
    }
}

/// `dispatch` for the lone-request path: a task that was never preempted
/// gets a CPU for the first time; `dequeued` counts the measured ones
/// (dispatched, deadline missed) for `Recorder::task_dequeued`. Returns when
/// the task completes.
#[inline(always)]
fn lone_dispatch(
    lone: &Slab<Lone>,
    id: u32,
    now: Nanos,
    dequeued: &mut (u64, u64),
    admission: &mut Option<AdmissionController>,
) -> Nanos {
    let r = lone.get(id);
    let missed = now > r.deadline;
    if r.measured {
        dequeued.0 += 1;
        dequeued.1 += missed as u64;
    }
    if let Some(ac) = admission {
        ac.record_task(now, missed);
    }
    now + r.demand
}
