//! Progress of a long run, reported to whoever started it: a terminal progress bar, plain lines, or nothing.
//!
//! Library code that runs for more than a few seconds (the demo chain, the node ladder, the fan-out
//! search, the reproduction, simulator sweeps) takes a `&dyn Progress` and says how many steps it
//! has and when each finishes; how that is shown is the caller's business, so no library crate
//! depends on a terminal library. A closure `Fn(&str)` is a `Progress` that only receives lines.

/// A sink for a run's progress. Only [`Progress::line`] is required.
pub trait Progress: Sync {
    /// The run (or its current phase) has `total` steps; `phase` names what they are.
    fn start(&self, total: u64, phase: &str) {
        let _ = (total, phase);
    }
    /// `done` of the total steps are finished; `label` names the last one.
    fn advance(&self, done: u64, label: &str) {
        let _ = (done, label);
    }
    /// A line worth keeping in the output (a result row, a notice).
    fn line(&self, line: &str);
}

impl<F: Fn(&str) + Sync> Progress for F {
    fn line(&self, line: &str) {
        self(line)
    }
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {
    fn line(&self, _: &str) {}
}
