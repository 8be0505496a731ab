//! A request's life: arrival at the edge, admission, each stage's activation (fan-out,
//! instances, deadline, demands), the join of its tasks' answers and the response.

use tailor_core::rng::{CounterRng, RandomSource};
use tailor_core::time::NEVER;
use tailor_core::Nanos;

use super::event::EvKind;
use super::node::Task;
use super::Engine;
use crate::model::{Model, ServiceModel};
use crate::scenario::Returns;

/// One activation of a stage: its tasks join here.
#[derive(Clone, Copy)]
pub(super) struct Activation {
    pub(super) req: u32,
    pub(super) stage: u32,
    pub(super) pending: u32,
    pub(super) ideal_end: Nanos,
}

pub(super) struct Request {
    pub(super) index: u64,
    pub(super) gat: Nanos,
    pub(super) class: u8,
    pub(super) fanout: u32,
    pub(super) outstanding: u32,
    pub(super) ideal_end: Nanos,
    pub(super) demand: Nanos,
    pub(super) rng: CounterRng,
}

/// A stage's activation, picked but not yet sent: its fan-out, instances and deadline.
pub(super) struct Picked {
    pub(super) k: u32,
    /// The instances (empty for a single-instance service).
    pub(super) chosen: Vec<u32>,
    pub(super) deadline: Nanos,
}

impl<'m> Engine<'m> {
    pub(super) fn on_arrival(&mut self) {
        let index = self.arrivals.next_index;
        self.arrivals.next_index += 1;
        let gap = self.arrivals.next_gap();
        self.schedule_arrival(self.now + gap);

        let mut rng = CounterRng::stream(self.request_key, index);
        let class = draw_class(self.m, &mut rng);
        let measured = self.measured.contains(&index);
        if let Some(ac) = &mut self.admission {
            if !ac.admit_query(self.now, self.refused_tasks[class as usize]) {
                if measured {
                    self.rec.rejected(class);
                    self.measured_left -= 1;
                }
                return;
            }
        }
        let req = self.reqs.insert(Request {
            index,
            gat: self.now,
            class,
            fanout: 1,
            outstanding: 0,
            ideal_end: self.now,
            demand: 0,
            rng,
        });
        if self.late.is_some() {
            // One root stage and no in-flight cap (checked when the model was built): pick
            // the root activation now, and send it only if no task of it would be late.
            let stage = self.m.roots[0];
            let picked = self.pick_activation(req, stage);
            if self.would_be_late(stage, class, &picked) {
                self.scratch = picked.chosen;
                self.reqs.free(req);
                self.stats.rejected_late += 1;
                if measured {
                    self.rec.rejected(class);
                    self.measured_left -= 1;
                }
                return;
            }
            if measured {
                self.rec.admitted();
            }
            self.in_flight += 1;
            let gat = self.now;
            self.send_activation(req, stage, gat, picked);
            return;
        }
        if measured {
            self.rec.admitted();
        }
        match self.m.in_flight_cap {
            Some(cap) if self.in_flight >= cap => self.edge_queue.push_back(req),
            _ => self.start(req),
        }
    }

    pub(super) fn start(&mut self, req: u32) {
        self.in_flight += 1;
        let gat = self.reqs.get(req).gat;
        for i in 0..self.m.roots.len() {
            let stage = self.m.roots[i];
            self.activate(req, stage, gat);
        }
    }

    /// Starts one activation of `stage` for `req`: picks the fanout and the
    /// instances, samples each task's demand and sends the tasks.
    pub(super) fn activate(&mut self, req: u32, stage: usize, ideal_start: Nanos) {
        let picked = self.pick_activation(req, stage);
        self.send_activation(req, stage, ideal_start, picked);
    }

    /// The fan-out, instances and deadline of `req`'s activation of `stage`.
    pub(super) fn pick_activation(&mut self, req: u32, stage: usize) -> Picked {
        let r = self.reqs.get_mut(req);
        let mut chosen = std::mem::take(&mut self.scratch);
        let (k, budget) = self.placement.pick(self.m, stage, r.class, &mut r.rng, &mut chosen);
        let deadline = match budget {
            Some(b) => self.now.saturating_add(b),
            None => NEVER,
        };
        Picked { k, chosen, deadline }
    }

    /// Samples each task's demand and sends the tasks of an activation picked by
    /// [`Engine::pick_activation`].
    pub(super) fn send_activation(&mut self, req: u32, stage: usize, ideal_start: Nanos, picked: Picked) {
        let m = self.m;
        let st = &m.stages[stage];
        let svc = &m.services[st.service];
        let Picked { k, chosen, deadline } = picked;
        let single = svc.instances == 1;
        let r = self.reqs.get_mut(req);
        r.fanout = r.fanout.max(k);
        r.outstanding += 1;
        let (gat, class, measured) = (r.gat, r.class, self.measured.contains(&r.index));
        let act = self.acts.insert(Activation { req, stage: stage as u32, pending: k, ideal_end: ideal_start });
        let gate = self.service_gate[st.service];
        let instances: &[u32] = if single { &[0] } else { &chosen };
        let unsent = Task::unsent(act, gate, deadline, gat, class, measured);
        for &inst in instances {
            let r = self.reqs.get_mut(req);
            let demand = task_demand(svc, inst, &mut r.rng);
            let delay = m.network.as_ref().map_or(0, |d| d.sample_ns(&mut r.rng));
            let ret = match (&m.network, m.returns) {
                (Some(d), Returns::PerTask) => d.sample_ns(&mut r.rng),
                _ => 0,
            };
            r.demand += demand;
            let a = self.acts.get_mut(act);
            a.ideal_end = a.ideal_end.max(ideal_start + delay + demand + ret);
            let node = (svc.first_node + inst as usize) as u32;
            self.send_task(Task { node, remaining: demand, ret, ..unsent }, delay);
        }
        self.scratch = chosen;
    }

    /// Sends one task of an activation to its node, now or after `delay`.
    #[inline]
    pub(super) fn send_task(&mut self, task: Task, delay: Nanos) {
        if let Some(late) = &mut self.late {
            let node = task.node as usize;
            late.sent(node, late.key(node, task.deadline, task.class));
        }
        let task = self.tasks.insert(task);
        if delay == 0 {
            self.on_deliver(task);
        } else {
            self.push(self.now + delay, EvKind::Deliver { task });
        }
    }

    /// A task's answer is back: the activation joins when the last one is.
    pub(super) fn on_return(&mut self, act: u32) {
        let a = self.acts.get_mut(act);
        a.pending -= 1;
        if a.pending == 0 {
            self.finish_activation(act);
        }
    }

    pub(super) fn finish_activation(&mut self, act: u32) {
        let a = self.acts.remove(act);
        let m = self.m;
        let st = &m.stages[a.stage as usize];
        let req = a.req;
        let mut spawned = false;
        for &(next, p) in &st.next {
            if p >= 1.0 || self.reqs.get_mut(req).rng.next_f64() < p {
                self.activate(req, next, a.ideal_end);
                spawned = true;
            }
        }
        if !st.choose.is_empty() {
            let u = self.reqs.get_mut(req).rng.next_f64();
            let next = st.choose.iter().find(|&&(_, c)| u < c).unwrap_or(st.choose.last().unwrap()).0;
            self.activate(req, next, a.ideal_end);
            spawned = true;
        }
        let r = self.reqs.get_mut(req);
        if !spawned {
            r.ideal_end = r.ideal_end.max(a.ideal_end);
        }
        r.outstanding -= 1;
        if r.outstanding == 0 {
            // Per-task answers are at the edge already.
            let delay = match m.returns {
                Returns::PerRequest => m.network.as_ref().map_or(0, |d| d.sample_ns(&mut r.rng)),
                Returns::PerTask => 0,
            };
            r.ideal_end += delay;
            if delay == 0 {
                self.on_respond(req);
            } else {
                self.push(self.now + delay, EvKind::Respond { req });
            }
        }
    }

    pub(super) fn on_respond(&mut self, req: u32) {
        let r = self.reqs.get(req);
        if self.measured.contains(&r.index) {
            self.rec.record(r.gat, self.now, r.ideal_end, r.class, r.fanout, r.demand);
            self.measured_left -= 1;
        }
        self.reqs.free(req);
        self.in_flight -= 1;
        if let Some(next) = self.edge_queue.pop_front() {
            self.start(next);
        }
    }
}

/// The request's class, drawn first from its stream (no draw with one class).
#[inline]
pub(super) fn draw_class(m: &Model, rng: &mut CounterRng) -> u8 {
    if m.classes.len() == 1 {
        0
    } else {
        let u = rng.next_f64();
        m.classes.iter().position(|c| u < c.cumulative_weight).unwrap_or(m.classes.len() - 1) as u8
    }
}

/// One task's CPU demand on instance `inst` of `svc`: a draw from the service's
/// distribution, scaled by the instance's speed.
#[inline]
pub(super) fn task_demand(svc: &ServiceModel, inst: u32, rng: &mut CounterRng) -> Nanos {
    let demand = svc.service_time.sample_ns(rng);
    match svc.instance_scale.get(inst as usize) {
        Some(&f) => (demand as f64 * f).round() as Nanos,
        None => demand,
    }
}
