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

/// Min-heap of `(time, seq)` keys, one per node whose timer is set, with
/// in-place updates. Unset timers (`Nanos::MAX`) leave the heap instead of
/// sinking to its bottom, so at low load (most nodes idle) it stays shallow;
/// each entry carries its key, so a sift compares without a lookup.
/// Set keys are distinct (every `set` that moves a timer takes a fresh `seq`),
/// so the order of the earliest timers does not depend on the heap's shape.
pub struct NodeTimers {
    /// The heap: (time, seq, node).
    heap: Vec<(Nanos, u64, u32)>,
    /// Position of each node in `heap`, or `ABSENT`.
    pos: Vec<u32>,
    /// Key of each node: time, then a sequence number for deterministic ties.
    key: Vec<(Nanos, u64)>,
}

impl NodeTimers {
    /// `nodes` timers, all unset (at `Nanos::MAX`).
    pub fn new(nodes: usize) -> Self {
        NodeTimers { heap: Vec::with_capacity(nodes), pos: vec![ABSENT; nodes], key: vec![(Nanos::MAX, 0); nodes] }
    }

    /// The earliest timer: (time, seq, node); `None` if every timer is unset.
    #[inline]
    pub fn peek(&self) -> Option<(Nanos, u64, usize)> {
        self.heap.first().map(|&(t, s, n)| (t, s, n as usize))
    }

    /// The earliest timer as (time, seq, node), with time `Nanos::MAX` when
    /// every timer is unset: one comparison less for the engine's loop.
    #[inline]
    pub fn peek_raw(&self) -> (Nanos, u64, usize) {
        match self.heap.first() {
            Some(&(t, s, n)) => (t, s, n as usize),
            None => (Nanos::MAX, 0, 0),
        }
    }

    /// Sets `node`'s timer (`Nanos::MAX` unsets it).
    #[inline(always)]
    pub fn set(&mut self, node: usize, time: Nanos, seq: u64) {
        let old = self.key[node];
        if old.0 == time {
            return; // keep the original tie-break order
        }
        self.key[node] = (time, seq);
        let i = self.pos[node];
        if time == Nanos::MAX {
            self.remove(i as usize);
        } else if i == ABSENT {
            self.heap.push((time, seq, node as u32));
            self.sift_up(self.heap.len() - 1);
        } else {
            let i = i as usize;
            self.heap[i].0 = time;
            self.heap[i].1 = seq;
            if (time, seq) < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    #[inline]
    pub fn get(&self, node: usize) -> Nanos {
        self.key[node].0
    }

    /// Takes the entry at `i` out of the heap.
    fn remove(&mut self, i: usize) {
        let gone = self.heap.swap_remove(i);
        self.pos[gone.2 as usize] = ABSENT;
        if i < self.heap.len() {
            let moved = self.heap[i];
            self.pos[moved.2 as usize] = i as u32;
            if (moved.0, moved.1) < (gone.0, gone.1) {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if (p.0, p.1) <= (e.0, e.1) {
                break;
            }
            self.place(i, p);
            i = parent;
        }
        self.place(i, e);
    }

    fn sift_down(&mut self, mut i: usize) {
        let e = self.heap[i];
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let (l, r) = (self.heap[left], if right < len { self.heap[right] } else { (Nanos::MAX, u64::MAX, 0) });
            let (child, c) = if (r.0, r.1) < (l.0, l.1) { (right, r) } else { (left, l) };
            if (e.0, e.1) <= (c.0, c.1) {
                break;
            }
            self.place(i, c);
            i = child;
        }
        self.place(i, e);
    }

    /// Puts `entry` at heap index `i` and records where its node now is.
    #[inline]
    fn place(&mut self, i: usize, entry: (Nanos, u64, u32)) {
        self.heap[i] = entry;
        self.pos[entry.2 as usize] = i as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::Rng;

    #[test]
    fn behaves_like_a_sorted_list_under_random_updates() {
        let mut rng = Rng::new(3);
        let n = 37;
        let mut t = NodeTimers::new(n);
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
}
