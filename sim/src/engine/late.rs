//! `[admission] reject_late`: the query handler's check that no task of a new
//! query would wait past its deadline behind what its instance has been sent.

use std::collections::BTreeMap;

use tailor_core::tailguard::queue_wait_quantile;
use tailor_core::{Nanos, PolicySpec};

use super::request::Picked;
use super::Engine;
use crate::model::Model;

/// The query handler's `reject_late` in the model: per node, the tasks sent to it and
/// not yet completed, keyed by what its queue orders by, as the handler keeps them.
pub(super) struct LateCheck {
    /// Per node: queue key → tasks.
    pub(super) outstanding: Vec<BTreeMap<Nanos, u32>>,
    /// Per node: how its policy orders (what counts as ahead of a new task).
    pub(super) order: Vec<QueueOrder>,
    /// Per service: mean and variance of its service time, ns and ns².
    pub(super) moments: Vec<(f64, f64)>,
}

/// What a node's queue orders by, for counting the tasks ahead of a new one.
#[derive(Clone, Copy)]
pub(super) enum QueueOrder {
    Deadline,
    Class,
    /// Any other policy: every task sent there counts as ahead.
    Arrival,
}

impl LateCheck {
    pub(super) fn new(m: &Model) -> Self {
        LateCheck {
            outstanding: vec![BTreeMap::new(); m.nodes.len()],
            order: m
                .nodes
                .iter()
                .map(|n| match n.policy {
                    PolicySpec::Edf => QueueOrder::Deadline,
                    PolicySpec::Priq => QueueOrder::Class,
                    _ => QueueOrder::Arrival,
                })
                .collect(),
            moments: m
                .services
                .iter()
                .map(|s| {
                    let mean = s.service_time.mean_ns();
                    // An infinite variance (a Pareto with α ≤ 2) is taken as an exponential's.
                    (mean, s.service_time.variance_ns2().filter(|v| v.is_finite()).unwrap_or(mean * mean))
                })
                .collect(),
        }
    }

    pub(super) fn key(&self, node: usize, deadline: Nanos, class: u8) -> Nanos {
        match self.order[node] {
            QueueOrder::Deadline => deadline,
            QueueOrder::Class => class as Nanos,
            QueueOrder::Arrival => 0,
        }
    }

    pub(super) fn sent(&mut self, node: usize, key: Nanos) {
        *self.outstanding[node].entry(key).or_default() += 1;
    }

    pub(super) fn done(&mut self, node: usize, key: Nanos) {
        let out = &mut self.outstanding[node];
        if let Some(c) = out.get_mut(&key) {
            *c -= 1;
            if *c == 0 {
                out.remove(&key);
            }
        }
    }

    /// The p-quantile of the wait of a task keyed `key` at `node` (`cores` CPUs, service
    /// time moments `(mean, var)` × `scale`): core's `queue_wait_quantile`, as the query
    /// handler computes it.
    pub(super) fn wait(
        &self,
        node: usize,
        key: Nanos,
        cores: usize,
        (mean, var): (f64, f64),
        scale: f64,
        p: f64,
    ) -> Nanos {
        let ahead: u32 = self.outstanding[node].range(..=key).map(|(_, &c)| c).sum();
        queue_wait_quantile(ahead, cores, mean * scale, var * scale * scale, p)
    }
}

impl<'m> Engine<'m> {
    /// Whether a task of `picked` would, at its class's SLO percentile, wait past its
    /// deadline behind what its instance has been sent ([`LateCheck::wait`]).
    pub(super) fn would_be_late(&self, stage: usize, class: u8, picked: &Picked) -> bool {
        let (Some(late), m) = (&self.late, self.m) else { return false };
        let svc = &m.services[m.stages[stage].service];
        let p = m.classes[class as usize].percentile / 100.0;
        let slack = picked.deadline.saturating_sub(self.now);
        let instances: &[u32] = if picked.chosen.is_empty() { &[0] } else { &picked.chosen };
        instances.iter().any(|&inst| {
            let node = svc.first_node + inst as usize;
            let scale = svc.instance_scale.get(inst as usize).copied().unwrap_or(1.0);
            let key = late.key(node, picked.deadline, class);
            late.wait(node, key, m.nodes[node].cores, late.moments[m.stages[stage].service], scale, p) > slack
        })
    }
}
