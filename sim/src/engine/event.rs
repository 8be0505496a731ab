//! The event queue's entries: what happens next and when; equal times pop in insertion order.

use std::cmp::Ordering;

use tailor_core::Nanos;

#[derive(Clone, Copy, Debug)]
pub(super) enum EvKind {
    /// A task reaches its node after the network delay.
    Deliver { task: u32 },
    /// A task a gate admitted after it waited reaches its node's CPUs (the hand-off).
    Enter { task: u32 },
    /// An interrupt steals the CPU.
    Noise { node: u32, cpu: u32 },
    /// The response reaches the edge.
    Respond { req: u32 },
    /// A task's answer reaches its caller (`[network] returns = "per-task"`).
    Return { act: u32 },
}

/// Where the next event comes from.
#[derive(Clone, Copy)]
pub(super) enum Source {
    Arrival,
    Heap,
    Timer,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Event {
    pub(super) time: Nanos,
    pub(super) seq: u64,
    pub(super) kind: EvKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // BinaryHeap is a max-heap: reverse so the earliest (then first-inserted) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.time.cmp(&self.time).then(other.seq.cmp(&self.seq))
    }
}
