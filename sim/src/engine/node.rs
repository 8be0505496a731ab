//! Tasks on nodes: delivery (through a gate if the service has one), the policy's
//! assignment of tasks to CPUs applied as it changes, completions, ticks and OS noise.

use tailor_core::rng::RandomSource;
use tailor_core::tailguard::AdmissionController;
use tailor_core::time::NEVER;
use tailor_core::{AnyPolicy, Job, JobId, Nanos, Policy};

use super::event::EvKind;
use super::Engine;
use crate::metrics::Recorder;

pub(super) struct Cpu {
    /// The task as last applied from `policy.running()`.
    pub(super) task: Option<JobId>,
    pub(super) since: Nanos,
    /// When the running task completes if nothing intervenes (`NEVER` when idle).
    pub(super) done_at: Nanos,
}

pub(super) struct Node {
    pub(super) policy: AnyPolicy,
    pub(super) cpus: Vec<Cpu>,
    pub(super) context_switch: Nanos,
    /// When the policy wants `tick` (`NEVER`: not needed).
    pub(super) tick_at: Nanos,
}

/// A cooperative admission gate in front of a node (the runtime's
/// cooperative backend): a non-preemptive policy with `c` "CPUs" whose running
/// set is the set of tasks admitted to the node.
pub(super) struct Gate {
    pub(super) policy: AnyPolicy,
    /// `policy.running()` as last applied.
    pub(super) admitted: Vec<Option<JobId>>,
    /// From admitting a task that waited to its arrival on the CPUs (the runtime's
    /// unpark of a parked thread); a task admitted on arrival enters at once.
    pub(super) handoff: Nanos,
}

/// `Task::gate` of a task whose service has no gate.
pub(super) const NO_GATE: u32 = u32::MAX;

#[derive(Clone, Copy)]
pub(super) struct Task {
    pub(super) act: u32,
    pub(super) node: u32,
    /// Index into `Engine::gates`, or `NO_GATE`.
    pub(super) gate: u32,
    pub(super) remaining: Nanos,
    /// The hop its answer takes back (0 unless answers return per task).
    pub(super) ret: Nanos,
    pub(super) deadline: Nanos,
    /// The request's GAT and class, copied here so that building the task's
    /// `Job` and its first dispatch need no lookup of the activation and request.
    pub(super) gat: Nanos,
    pub(super) class: u8,
    /// The task belongs to a measured request.
    pub(super) measured: bool,
    pub(super) started: bool,
    pub(super) preempted: bool,
}

impl Task {
    /// A task of activation `act` not sent yet: no node, demand or return hop
    /// (the caller sets them), never dispatched.
    #[inline]
    pub(super) fn unsent(act: u32, gate: u32, deadline: Nanos, gat: Nanos, class: u8, measured: bool) -> Task {
        Task {
            act,
            node: 0,
            gate,
            remaining: 0,
            ret: 0,
            deadline,
            gat,
            class,
            measured,
            started: false,
            preempted: false,
        }
    }
}

impl<'m> Engine<'m> {
    pub(super) fn on_deliver(&mut self, task: u32) {
        let t = self.tasks.get(task);
        let gate = t.gate;
        let job = self.job(task);
        if gate == NO_GATE {
            self.enter_node(job);
        } else {
            self.gates[gate as usize].policy.arrive(self.now, job);
            self.admit_from_gate(gate as usize, false);
        }
    }

    #[inline]
    pub(super) fn job(&self, task: u32) -> Job {
        let t = self.tasks.get(task);
        Job { id: task as u64, gat: t.gat, deadline: t.deadline, class: t.class }
    }

    /// The task is runnable on its node's CPUs.
    pub(super) fn enter_node(&mut self, job: Job) {
        let node = self.tasks.get(job.id as u32).node as usize;
        let n = &mut self.nodes[node];
        if let AnyPolicy::Queue(queue) = &mut n.policy {
            // A non-preemptive queue changes at most one CPU on `arrive`: the
            // lowest idle one, if any (`NonPreemptive` documents this). With
            // every CPU busy the job waits and nothing changes; otherwise
            // only that CPU needs syncing. (The queue is called directly, not
            // through `AnyPolicy`'s dispatch: the hot path of queue scenarios.)
            let idle = n.cpus.iter().position(|c| c.task.is_none());
            queue.arrive(self.now, job);
            if let Some(cpu) = idle {
                self.sync_cpu(node, cpu, false);
            }
            self.debug_check_synced(node);
        } else {
            n.policy.arrive(self.now, job);
            self.sync(node, false);
        }
    }

    /// Sends the tasks the gate newly admitted to their node. A gate policy is
    /// non-preemptive: an admitted task stays admitted until it completes.
    /// `handed_off`: a slot just freed, so who gets it waited and arrives after the
    /// gate's hand-off delay.
    pub(super) fn admit_from_gate(&mut self, gate: usize, handed_off: bool) {
        let g = &mut self.gates[gate];
        let mut newly = std::mem::take(&mut self.scratch);
        newly.clear();
        for (slot, &want) in g.admitted.iter_mut().zip(g.policy.running()) {
            if *slot != want {
                if let Some(id) = want {
                    newly.push(id as u32);
                }
                *slot = want;
            }
        }
        let handoff = if handed_off { g.handoff } else { 0 };
        for &task in &newly {
            if handoff > 0 {
                self.push(self.now + handoff, EvKind::Enter { task });
            } else {
                let job = self.job(task);
                self.enter_node(job);
            }
        }
        self.scratch = newly;
    }

    /// The node's timer fired: one completion (lowest CPU first) or, if no
    /// task completes now, the policy's tick. One event each.
    pub(super) fn on_node_timer(&mut self, node: usize) {
        let now = self.now;
        let n = &mut self.nodes[node];
        if let Some(cpu) = n.cpus.iter().position(|c| c.done_at <= now) {
            self.on_complete(node, cpu);
        } else {
            debug_assert!(n.tick_at <= now, "a node timer fired with nothing due");
            n.tick_at = NEVER;
            n.policy.tick(now);
            self.sync(node, true);
        }
    }

    pub(super) fn on_complete(&mut self, node: usize, cpu: usize) {
        let n = &mut self.nodes[node];
        let task = n.cpus[cpu].task.take().expect("completion on a busy CPU") as u32;
        n.cpus[cpu].done_at = NEVER;
        if let AnyPolicy::Queue(queue) = &mut n.policy {
            // A non-preemptive queue refills only the CPU the job left.
            queue.complete(self.now, task as u64);
            self.sync_cpu(node, cpu, true);
            self.debug_check_synced(node);
        } else {
            n.policy.complete(self.now, task as u64);
            self.sync(node, true);
        }
        let t = self.tasks.remove(task);
        if let Some(late) = &mut self.late {
            late.done(node, late.key(node, t.deadline, t.class));
        }
        if t.gate != NO_GATE {
            let g = &mut self.gates[t.gate as usize];
            g.policy.complete(self.now, task as u64);
            if let Some(slot) = g.admitted.iter_mut().find(|s| **s == Some(task as u64)) {
                *slot = None;
            }
            self.admit_from_gate(t.gate as usize, true);
        }
        if t.ret == 0 {
            self.on_return(t.act);
        } else {
            self.push(self.now + t.ret, EvKind::Return { act: t.act });
        }
    }

    pub(super) fn on_noise(&mut self, node: usize, cpu: usize) {
        let (rate, dur) = self.m.noise.as_ref().expect("noise events only when noise is on");
        let d = dur.sample_ns(&mut self.noise_rng);
        let next = self.now + (self.noise_rng.exp1() / rate) as Nanos + 1;
        self.push(next, EvKind::Noise { node: node as u32, cpu: cpu as u32 });
        let now = self.now;
        let n = &mut self.nodes[node];
        let c = &mut n.cpus[cpu];
        if let Some(task) = c.task.map(|id| id as u32) {
            // The interrupt steals `d` from the running task: charge what it ran,
            // then push its completion back.
            let t = self.tasks.get_mut(task);
            t.remaining = t.remaining.saturating_sub(now - c.since) + d;
            c.since = now;
            c.done_at = now + t.remaining;
            self.stats.noise_stolen += d;
            self.update_timer(node);
        }
    }

    /// Applies the policy's current assignment of `node`: charges CPU time to
    /// tasks that leave a CPU, starts tasks that get one, schedules completions
    /// and the next policy tick.
    /// `force_timer`: the caller changed a CPU's completion time itself.
    pub(super) fn sync(&mut self, node: usize, force_timer: bool) {
        let now = self.now;
        let n = &mut self.nodes[node];
        let running = n.policy.running();
        // Pass 1: tasks leaving a CPU (preempted or migrated) are charged first,
        // so a task that moves between CPUs is charged before it restarts.
        let mut changed = false;
        for (c, &want) in n.cpus.iter_mut().zip(running) {
            if c.task != want {
                changed = true;
                if let Some(old) = c.task.take() {
                    let t = self.tasks.get_mut(old as u32);
                    t.remaining = t.remaining.saturating_sub(now - c.since);
                    t.preempted = true;
                    self.stats.preemptions += 1;
                }
                c.done_at = NEVER;
            }
        }
        if changed {
            // Pass 2: start what the policy assigned to each CPU that is now empty.
            for (c, &want) in n.cpus.iter_mut().zip(running) {
                let Some(id) = want else { continue };
                if c.task.is_some() {
                    continue;
                }
                let t = self.tasks.get_mut(id as u32);
                c.done_at = dispatch(t, now, n.context_switch, &mut self.rec, &mut self.admission);
                c.task = Some(id);
                c.since = now;
            }
        }
        // A policy must move its next tick past `now` after a tick; clamping
        // keeps a policy bug from spinning the simulator at one instant.
        let tick_at = n.policy.next_tick().map_or(NEVER, |t| t.max(now + 1));
        if changed || force_timer || tick_at != n.tick_at {
            n.tick_at = tick_at;
            self.update_timer(node);
        }
    }

    /// `sync` for a policy that can only have changed `cpu`'s assignment
    /// (a non-preemptive queue): the same effects, without visiting the
    /// other CPUs. A queue never preempts and never ticks.
    pub(super) fn sync_cpu(&mut self, node: usize, cpu: usize, force_timer: bool) {
        let now = self.now;
        let timer = self.timers.get(node);
        let n = &mut self.nodes[node];
        let want = match &n.policy {
            AnyPolicy::Queue(queue) => queue.running()[cpu],
            other => other.running()[cpu],
        };
        let c = &mut n.cpus[cpu];
        if c.task == want {
            if force_timer {
                self.update_timer(node);
            }
            return;
        }
        debug_assert!(c.task.is_none(), "a non-preemptive policy took a CPU from a running task");
        debug_assert!(n.policy.next_tick().is_none(), "a non-preemptive policy asked for a tick");
        let Some(id) = want else {
            // Unreachable for a queue (an empty CPU stays empty unless given
            // a job); handled like `sync` would.
            c.task = None;
            c.done_at = NEVER;
            self.update_timer(node);
            return;
        };
        let t = self.tasks.get_mut(id as u32);
        let done = dispatch(t, now, n.context_switch, &mut self.rec, &mut self.admission);
        let c = &mut n.cpus[cpu];
        c.task = Some(id);
        c.since = now;
        c.done_at = done;
        if force_timer {
            self.update_timer(node);
        } else if done < timer {
            self.seq += 1;
            self.timers.set(node, done, self.seq);
        }
    }

    /// Debug builds: the fast path left the node exactly as `sync` would.
    #[inline]
    pub(super) fn debug_check_synced(&self, node: usize) {
        #[cfg(debug_assertions)]
        {
            let n = &self.nodes[node];
            let applied: Vec<Option<JobId>> = n.cpus.iter().map(|c| c.task).collect();
            assert_eq!(applied.as_slice(), n.policy.running(), "node {node}: fast sync missed a CPU change");
            let next = n.cpus.iter().fold(n.tick_at, |t, c| t.min(c.done_at));
            assert_eq!(self.timers.get(node), next, "node {node}: timer out of date");
        }
        let _ = node;
    }

    /// Points the node's timer at its earliest completion or tick.
    #[inline]
    pub(super) fn update_timer(&mut self, node: usize) {
        let n = &self.nodes[node];
        let next = n.cpus.iter().fold(n.tick_at, |t, c| t.min(c.done_at));
        if next != self.timers.get(node) {
            self.seq += 1;
            self.timers.set(node, next, self.seq);
        }
    }
}

/// A task gets a CPU: pays the context switch if it was preempted, counts its
/// first dispatch (deadline met or missed). Returns when it would complete.
#[inline]
fn dispatch(
    t: &mut Task,
    now: Nanos,
    context_switch: Nanos,
    rec: &mut Recorder,
    admission: &mut Option<AdmissionController>,
) -> Nanos {
    if t.preempted {
        t.remaining += context_switch;
        t.preempted = false;
    }
    if !t.started {
        t.started = true;
        let missed = now > t.deadline;
        if t.measured {
            rec.task_dequeued(missed);
        }
        if let Some(ac) = admission {
            ac.record_task(now, missed);
        }
    }
    now + t.remaining
}
