//! Where an activation's tasks go: its fan-out, the instances it picks and its
//! deadline budget, drawn from the request's own stream. The engine picks
//! through it on the general path; the request producer (`prepare`) owns one
//! of its own and picks the same instances, draw for draw.

use std::collections::HashMap;

use tailor_core::pick::DistinctPicker;
use tailor_core::rng::{CounterRng, RandomSource};
use tailor_core::Nanos;

use crate::model::{Fanout, Model};

/// Most instance sets whose budget is remembered ([`Model::placement_budget`]).
const PLACEMENT_MEMO: usize = 1 << 16;

pub(super) struct Placement {
    /// Per service, how a fan-out picks its instances.
    pickers: Vec<DistinctPicker>,
    /// Per stage and class, a class's own placement (`weights_by_class`), if it has one.
    class_pickers: Vec<Vec<Option<DistinctPicker>>>,
    /// Budgets of the placements seen so far, keyed [class, service, sorted instances...].
    budgets: HashMap<Vec<u32>, Option<Nanos>>,
}

impl Placement {
    pub(super) fn new(m: &Model) -> Self {
        Placement {
            pickers: m
                .services
                .iter()
                .map(|s| {
                    if s.instance_weight.is_empty() {
                        DistinctPicker::uniform(s.instances)
                    } else {
                        DistinctPicker::weighted(s.instance_weight.clone())
                    }
                })
                .collect(),
            class_pickers: m
                .stages
                .iter()
                .map(|st| {
                    st.class_weights
                        .iter()
                        .map(|w| (!w.is_empty()).then(|| DistinctPicker::weighted(w.clone())))
                        .collect()
                })
                .collect(),
            budgets: HashMap::new(),
        }
    }

    /// Draws the fan-out `k` of a `class` activation of `stage` and picks its
    /// instances into `chosen` (left empty for a single-instance service);
    /// returns `k` and the deadline budget (`None`: no deadline).
    #[inline]
    pub(super) fn pick(
        &mut self,
        m: &Model,
        stage: usize,
        class: u8,
        rng: &mut CounterRng,
        chosen: &mut Vec<u32>,
    ) -> (u32, Option<Nanos>) {
        let st = &m.stages[stage];
        let svc = &m.services[st.service];
        let k = match st.fanout_of(class) {
            Fanout::Fixed(k) => *k,
            Fanout::Table { values, cumulative } => {
                let u = rng.next_f64();
                values[cumulative.iter().position(|&c| u < c).unwrap_or(values.len() - 1)]
            }
        };
        // k distinct instances out of `instances`, as the fan-out handler picks
        // them; a single-instance service needs no list (the common case).
        let single = svc.instances == 1;
        chosen.clear();
        if !single {
            let picker = match self.class_pickers[stage].get_mut(class as usize) {
                Some(Some(p)) => p,
                _ => &mut self.pickers[st.service],
            };
            chosen.extend_from_slice(picker.pick(rng, k as usize));
        }
        let heterogeneous = m.instance_cdfs.get(st.service).is_some_and(|c| !c.is_empty());
        let budget = if single || !heterogeneous {
            m.budgets.get(class, stage, k)
        } else {
            // Eq. 1 over the instances this query picked. The same sets recur
            // (every instance at k = 1, all of them at k = N), so memoise them;
            // random k of many instances rarely repeat, hence the bound.
            // Key: [class, service, the instances sorted].
            let mut key = Vec::with_capacity(chosen.len() + 2);
            key.extend([class as u32, st.service as u32]);
            key.extend_from_slice(chosen);
            key[2..].sort_unstable();
            match self.budgets.get(key.as_slice()) {
                Some(&b) => b,
                None => {
                    let b = m.placement_budget(class, st.service, &key[2..]).or(m.budgets.get(class, stage, k));
                    if self.budgets.len() >= PLACEMENT_MEMO {
                        self.budgets.clear();
                    }
                    self.budgets.insert(key, b);
                    b
                }
            }
        };
        (k, budget)
    }
}
