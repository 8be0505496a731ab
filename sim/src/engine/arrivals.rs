//! The edge's arrival process: the gap to the next request, from the scenario's arrival model.

use tailor_core::rng::{CounterRng, RandomSource};
use tailor_core::{Nanos, Rng};

use super::STREAM_ARRIVALS;
use crate::model::{ArrivalModel, Model};

pub(super) struct Arrivals {
    pub(super) model: ArrivalModel,
    /// The mean gap if `model` is Poisson, else 0.
    pub(super) poisson_mean: f64,
    /// One long SplitMix64 stream (`CounterRng` is one): a draw is an add and a mix.
    pub(super) rng: CounterRng,
    pub(super) next_index: u64,
    pub(super) trace_pos: usize,
    pub(super) carry: f64,
}

impl Arrivals {
    /// The run's arrival process, from its first request.
    pub(super) fn new(m: &Model) -> Self {
        Arrivals {
            model: m.arrival.clone(),
            poisson_mean: match m.arrival {
                ArrivalModel::Poisson { mean_gap } => mean_gap,
                _ => 0.0,
            },
            rng: CounterRng::stream(Rng::derive(m.seed, STREAM_ARRIVALS).next_u64(), 0),
            next_index: 0,
            trace_pos: 0,
            carry: 0.0,
        }
    }

    #[inline(always)]
    pub(super) fn next_gap(&mut self) -> Nanos {
        // Keep the fractional nanoseconds so long runs hold the exact rate.
        // Poisson, the common case, is tested first without a `match`.
        let gap =
            if self.poisson_mean > 0.0 { self.poisson_mean * self.rng.exp1() } else { self.other_gap() } + self.carry;
        // `floor` is a libm call on baseline x86-64. For the non-negative gaps
        // below 2^53, truncating through i64 (one instruction each way) gives
        // the same value; anything else takes the old path.
        if (0.0..9.0e15).contains(&gap) {
            // SAFETY: `gap` is finite and in [0, 9e15), so it truncates to an i64.
            let whole = unsafe { gap.to_int_unchecked::<i64>() };
            self.carry = gap - whole as f64;
            whole as Nanos
        } else {
            let whole = gap.floor();
            self.carry = gap - whole;
            whole as Nanos
        }
    }

    /// The next gap of any arrival model, in fractional ns.
    pub(super) fn other_gap(&mut self) -> f64 {
        match &self.model {
            ArrivalModel::Poisson { mean_gap } => mean_gap * self.rng.exp1(),
            ArrivalModel::Deterministic { gap } => *gap,
            ArrivalModel::Pareto { xm, alpha } => xm / self.rng.next_f64_open0().powf(1.0 / alpha),
            ArrivalModel::Gaps { dist, scale } => dist.sample_ns(&mut self.rng) as f64 * scale,
            ArrivalModel::Trace { gaps, scale } => {
                let g = gaps[self.trace_pos % gaps.len()] as f64 * scale;
                self.trace_pos += 1;
                g
            }
        }
    }
}
