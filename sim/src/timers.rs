//! One timer per node in an indexed binary min-heap.
//!
//! Why not put completions in the event heap? A preemptive policy preempts
//! every slice (30 µs), and each preemption invalidates the running task's
//! completion event. With lazy deletion the heap fills with millions of stale
//! entries and every pop pays for them. Here each node has exactly one entry,
//! its earliest pending completion or policy tick, updated in place.

use tailor_core::Nanos;

/// Marks a node whose timer is unset: it has no entry in the heap.
const ABSENT: u32 = u32::MAX;

/// A timer's order: its time, then the sequence number it was set with, in
/// one integer (time in the high half), so that comparing two timers is one
/// 128-bit comparison instead of a comparison and a branch per field.
#[inline(always)]
pub fn order(time: Nanos, seq: u64) -> u128 {
    ((time as u128) << 64) | seq as u128
}

/// A heap entry: the node's [`order`] and the node.
#[derive(Clone, Copy)]
struct Entry {
    key: u128,
    node: u32,
}

/// Min-heap of `(time, seq)` keys, one per node whose timer is set, with
/// in-place updates. Unset timers (`Nanos::MAX`) leave the heap instead of
/// sinking to its bottom, so at low load (most nodes idle) it stays shallow;
/// each entry carries its key, so a sift compares without a lookup.
/// Set keys are distinct (every `set` that moves a timer takes a fresh `seq`),
/// so the order of the earliest timers does not depend on the heap's shape.
pub struct NodeTimers {
    heap: Vec<Entry>,
    /// Position of each node in `heap`, or `ABSENT` (not kept when `top_only`).
    pos: Vec<u32>,
    /// Key of each node ([`order`]): time, then a sequence number for deterministic ties.
    key: Vec<u128>,
    /// Only the earliest timer or an unset one is ever set ([`NodeTimers::top_only`]).
    top_only: bool,
}

impl NodeTimers {
    /// `nodes` timers, all unset (at `Nanos::MAX`).
    pub fn new(nodes: usize) -> Self {
        NodeTimers {
            heap: Vec::with_capacity(nodes),
            pos: vec![ABSENT; nodes],
            key: vec![order(Nanos::MAX, 0); nodes],
            top_only: false,
        }
    }

    /// Timers of nodes that are each one core under a non-preemptive policy
    /// with no OS noise: a node's timer is then its one running task's
    /// completion, so a timer is only ever set when it is unset (a task starts
    /// on an idle node) or when it is the earliest (it just fired: the next
    /// task starts, or the node goes idle). The heap then needs no positions
    /// (one store less per level of every sift) and the earliest leaves
    /// bottom-up (one comparison per level instead of two). Setting another
    /// timer still works, found by a scan: correct, only slower.
    pub fn top_only(nodes: usize) -> Self {
        NodeTimers { top_only: true, ..NodeTimers::new(nodes) }
    }

    /// The earliest timer: (time, seq, node); `None` if every timer is unset.
    #[inline]
    pub fn peek(&self) -> Option<(Nanos, u64, usize)> {
        self.heap.first().map(|e| ((e.key >> 64) as Nanos, e.key as u64, e.node as usize))
    }

    /// The earliest timer as ([`order`] of (time, seq), node), with time
    /// `Nanos::MAX` when every timer is unset: one comparison less for the engine's loop.
    #[inline]
    pub fn peek_raw(&self) -> (u128, usize) {
        match self.heap.first() {
            Some(e) => (e.key, e.node as usize),
            None => (order(Nanos::MAX, 0), 0),
        }
    }

    /// Sets `node`'s timer (`Nanos::MAX` unsets it).
    #[inline(always)]
    pub fn set(&mut self, node: usize, time: Nanos, seq: u64) {
        let old = self.key[node];
        if (old >> 64) as Nanos == time {
            return; // keep the original tie-break order
        }
        let key = order(time, seq);
        self.key[node] = key;
        if self.top_only {
            self.set_top_only(node, old, key);
            return;
        }
        let i = self.pos[node];
        if time == Nanos::MAX {
            self.remove(i as usize);
        } else if i == ABSENT {
            self.heap.push(Entry { key, node: node as u32 });
            self.sift_up::<true>(self.heap.len() - 1);
        } else {
            let i = i as usize;
            self.heap[i].key = key;
            if key < old {
                self.sift_up::<true>(i);
            } else {
                self.sift_down::<true>(i);
            }
        }
    }

    /// `set` for [`NodeTimers::top_only`] timers: `node`'s key goes from
    /// `old` to `key` (either may be unset).
    #[inline(always)]
    fn set_top_only(&mut self, node: usize, old: u128, key: u128) {
        let unset = order(Nanos::MAX, 0) >> 64;
        if old >> 64 == unset {
            self.heap.push(Entry { key, node: node as u32 });
            self.sift_up::<false>(self.heap.len() - 1);
            return;
        }
        let i = match self.heap.first() {
            Some(top) if top.node as usize == node => 0,
            // Not the pattern this form is for; still correct.
            _ => self.heap.iter().position(|e| e.node as usize == node).expect("a set timer is in the heap"),
        };
        if key >> 64 == unset {
            let last = self.heap.pop().expect("a set timer is in the heap");
            if i < self.heap.len() {
                // The hole at `i` sinks to a leaf along the smaller children,
                // then the last entry rises into it from there.
                let i = self.sink_hole(i);
                self.heap[i] = last;
                self.sift_up::<false>(i);
            }
        } else {
            self.heap[i].key = key;
            if key < old {
                self.sift_up::<false>(i);
            } else {
                self.sift_down::<false>(i);
            }
        }
    }

    /// Moves the smaller child up into the hole at `i` until the hole is a
    /// leaf; returns where it ended ([`NodeTimers::top_only`]).
    #[inline(always)]
    fn sink_hole(&mut self, mut i: usize) -> usize {
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                return i;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].key < self.heap[left].key { right } else { left };
            self.heap[i] = self.heap[child];
            i = child;
        }
    }

    #[inline]
    pub fn get(&self, node: usize) -> Nanos {
        (self.key[node] >> 64) as Nanos
    }

    /// Takes the entry at `i` out of the heap.
    fn remove(&mut self, i: usize) {
        let gone = self.heap.swap_remove(i);
        self.pos[gone.node as usize] = ABSENT;
        if i < self.heap.len() {
            let moved = self.heap[i];
            self.pos[moved.node as usize] = i as u32;
            if moved.key < gone.key {
                self.sift_up::<true>(i);
            } else {
                self.sift_down::<true>(i);
            }
        }
    }

    /// `POSITIONS`: keep `pos` up to date (all but [`NodeTimers::top_only`]).
    fn sift_up<const POSITIONS: bool>(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if p.key <= e.key {
                break;
            }
            self.place::<POSITIONS>(i, p);
            i = parent;
        }
        self.place::<POSITIONS>(i, e);
    }

    /// `POSITIONS`: as in [`NodeTimers::sift_up`].
    fn sift_down<const POSITIONS: bool>(&mut self, mut i: usize) {
        let e = self.heap[i];
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            // The smaller child; a missing right child never is.
            let child = if right < len && self.heap[right].key < self.heap[left].key { right } else { left };
            let c = self.heap[child];
            if e.key <= c.key {
                break;
            }
            self.place::<POSITIONS>(i, c);
            i = child;
        }
        self.place::<POSITIONS>(i, e);
    }

    /// Puts `entry` at heap index `i` and, with `POSITIONS`, records where its node now is.
    #[inline(always)]
    fn place<const POSITIONS: bool>(&mut self, i: usize, entry: Entry) {
        self.heap[i] = entry;
        if POSITIONS {
            self.pos[entry.node as usize] = i as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::Rng;

    /// Both forms; the `top_only` one here also takes sets of timers that are
    /// not the earliest (its slow path).
    #[test]
    fn behaves_like_a_sorted_list_under_random_updates() {
        random_updates(NodeTimers::new);
        random_updates(NodeTimers::top_only);
    }

    fn random_updates(new: fn(usize) -> NodeTimers) {
        let mut rng = Rng::new(3);
        let n = 37;
        let mut t = new(n);
        let mut model = vec![(Nanos::MAX, 0u64); n];
        for seq in 1..20_000u64 {
            let node = rng.below(n as u64) as usize;
            let time = if rng.below(5) == 0 { Nanos::MAX } else { rng.below(1000) };
            t.set(node, time, seq);
            if model[node].0 != time {
                model[node] = (time, seq);
            }
            let want = (0..n)
                .filter(|&i| model[i].0 != Nanos::MAX)
                .min_by_key(|&i| model[i])
                .map(|i| (model[i].0, model[i].1, i));
            assert_eq!(t.peek(), want);
        }
    }

    /// The engine's pattern on one-core nodes: the earliest timer fires and its
    /// node either takes a later completion or goes idle, while arrivals start
    /// idle nodes. Times come from a narrow range, so many timers tie and the
    /// order must come from the sequence numbers alone: timers fire in exactly
    /// the order of a sorted set of (time, seq, node).
    #[test]
    fn fires_in_time_then_seq_order_with_many_ties() {
        engine_pattern(NodeTimers::new);
        engine_pattern(NodeTimers::top_only);
    }

    fn engine_pattern(new: fn(usize) -> NodeTimers) {
        let mut rng = Rng::new(11);
        let n = 100;
        let mut t = new(n);
        let mut model = std::collections::BTreeSet::new();
        let mut key = vec![None; n];
        let mut seq = 0u64;
        let mut now = 0;
        for _ in 0..50_000 {
            // An arrival at an idle node sets its timer.
            let node = rng.below(n as u64) as usize;
            if key[node].is_none() {
                seq += 1;
                let time = now + rng.below(4);
                t.set(node, time, seq);
                key[node] = Some((time, seq));
                model.insert((time, seq, node));
            }
            // The earliest timer fires: a later completion, or idle.
            let first = model.iter().next().copied();
            assert_eq!(t.peek(), first);
            let Some((time, s, node)) = first else { continue };
            model.remove(&(time, s, node));
            now = time;
            seq += 1;
            if rng.below(3) == 0 {
                t.set(node, Nanos::MAX, seq);
                key[node] = None;
            } else {
                let next = now + 1 + rng.below(4);
                t.set(node, next, seq);
                key[node] = Some((next, seq));
                model.insert((next, seq, node));
            }
        }
    }
}
