//! One timer per node in an indexed binary min-heap.
//!
//! Why not put completions in the event heap? A preemptive policy preempts
//! every slice (30 µs), and each preemption invalidates the running task's
//! completion event. With lazy deletion the heap fills with millions of stale
//! entries and every pop pays for them. Here each node has exactly one entry,
//! its earliest pending completion or policy tick, updated in place.

use tailor_core::Nanos;

/// Min-heap of `(time, seq)` keys, one per node, with in-place updates.
pub struct NodeTimers {
    /// Heap of node ids.
    heap: Vec<u32>,
    /// Position of each node in `heap`.
    pos: Vec<u32>,
    /// Key of each node: time, then a sequence number for deterministic ties.
    key: Vec<(Nanos, u64)>,
}

impl NodeTimers {
    /// `nodes` timers, all unset (at `Nanos::MAX`).
    pub fn new(nodes: usize) -> Self {
        NodeTimers {
            heap: (0..nodes as u32).collect(),
            pos: (0..nodes as u32).collect(),
            key: vec![(Nanos::MAX, 0); nodes],
        }
    }

    /// The earliest timer: (time, seq, node); `None` if every timer is unset.
    #[inline]
    pub fn peek(&self) -> Option<(Nanos, u64, usize)> {
        let &n = self.heap.first()?;
        let (t, s) = self.key[n as usize];
        (t != Nanos::MAX).then_some((t, s, n as usize))
    }

    /// The earliest timer as (time, seq, node), with time `Nanos::MAX` when
    /// every timer is unset: one comparison less for the engine's loop.
    #[inline]
    pub fn peek_raw(&self) -> (Nanos, u64, usize) {
        match self.heap.first() {
            Some(&n) => {
                let (t, s) = self.key[n as usize];
                (t, s, n as usize)
            }
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
        if self.heap.len() == 1 {
            return; // a single node: nothing to reorder
        }
        let i = self.pos[node] as usize;
        if (time, seq) < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    #[inline]
    pub fn get(&self, node: usize) -> Nanos {
        self.key[node].0
    }

    fn sift_up(&mut self, mut i: usize) {
        let n = self.heap[i];
        let k = self.key[n as usize];
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if self.key[p as usize] <= k {
                break;
            }
            self.heap[i] = p;
            self.pos[p as usize] = i as u32;
            i = parent;
        }
        self.heap[i] = n;
        self.pos[n as usize] = i as u32;
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap[i];
        let k = self.key[n as usize];
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.key[self.heap[right] as usize] < self.key[self.heap[left] as usize] {
                right
            } else {
                left
            };
            let c = self.heap[child];
            if k <= self.key[c as usize] {
                break;
            }
            self.heap[i] = c;
            self.pos[c as usize] = i as u32;
            i = child;
        }
        self.heap[i] = n;
        self.pos[n as usize] = i as u32;
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
