//! The ideal latency distribution (Tales of the Tail, §2): the measured
//! arrival times and each request's CPU demand fed to a G/G/c FIFO queue,
//! the best a work-conserving FIFO system with `c` CPUs and no overheads
//! could have done with exactly this input.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tailor_core::Nanos;

/// Latency of each request in a FIFO G/G/c queue (Kiefer–Wolfowitz recursion
/// written with per-server free times): request i, arriving at `arrival[i]`
/// with work `demand[i]`, starts on the server that frees first, no earlier
/// than its arrival, and leaves `demand[i]` later. Arrivals must be in
/// ascending order (requests are served in that order). O(n log c).
pub fn ggc_fifo_latencies(arrival: &[Nanos], demand: &[Nanos], c: usize) -> Vec<Nanos> {
    assert_eq!(arrival.len(), demand.len(), "one demand per arrival");
    assert!(c > 0, "at least one server");
    let mut free_at: BinaryHeap<Reverse<Nanos>> = (0..c).map(|_| Reverse(0)).collect();
    let mut out = Vec::with_capacity(arrival.len());
    let mut previous = 0;
    for (&t, &s) in arrival.iter().zip(demand) {
        assert!(t >= previous, "arrivals must be ascending");
        previous = t;
        let Reverse(free) = free_at.pop().expect("c > 0");
        let done = free.max(t) + s;
        free_at.push(Reverse(done));
        out.push(done - t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_two_server_case() {
        // Two servers. Arrivals 0, 1, 2, 3, 10 with demands 5, 5, 2, 1, 1:
        // r0 on A 0..5, r1 on B 1..6, r2 waits for A: 5..7, r3 waits for B: 6..7,
        // r4 arrives to an empty system: 10..11.
        let lat = ggc_fifo_latencies(&[0, 1, 2, 3, 10], &[5, 5, 2, 1, 1], 2);
        assert_eq!(lat, vec![5, 5, 5, 4, 1]);
    }

    #[test]
    fn one_server_is_lindleys_recursion() {
        // W_{n+1} = max(0, W_n + S_n − A_{n+1}); latency = W + S.
        let arrival = [0, 2, 3, 9, 9];
        let demand = [4, 1, 3, 2, 2];
        let mut w = 0i64;
        let mut expected = Vec::new();
        for i in 0..5 {
            if i > 0 {
                w = (w + demand[i - 1] as i64 - (arrival[i] - arrival[i - 1]) as i64).max(0);
            }
            expected.push(w as Nanos + demand[i]);
        }
        assert_eq!(ggc_fifo_latencies(&arrival, &demand, 1), expected);
        assert_eq!(expected, vec![4, 3, 5, 2, 4]);
    }

    #[test]
    fn many_servers_never_queue() {
        assert_eq!(ggc_fifo_latencies(&[0, 0, 0], &[3, 4, 5], 3), vec![3, 4, 5]);
    }
}
