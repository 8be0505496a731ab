//! Helpers of the tests that run one model through two engine paths and
//! require identical results.

use std::path::Path;

use tailor_sim::engine::RunStats;
use tailor_sim::metrics::Recorder;
use tailor_sim::model::{Model, Overrides};
use tailor_sim::scenario::Scenario;

pub fn model_from(toml: &str, ov: &Overrides) -> Model {
    let loaded = Scenario::from_toml(toml, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e}"));
    Model::build(&loaded, ov).unwrap_or_else(|e| panic!("{e}"))
}

pub fn model_file(file: &str, ov: &Overrides) -> Model {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let loaded = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    Model::build(&loaded, ov).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts that two runs of one model gave the same records, run counters and summary.
pub fn assert_same(what: &str, a: &(Recorder, RunStats), b: &(Recorder, RunStats)) {
    let (ra, sa) = a;
    let (rb, sb) = b;
    assert!(!ra.latency.is_empty(), "{what}: no requests measured");
    assert_eq!(ra.gat, rb.gat, "{what}: GATs differ");
    assert_eq!(ra.latency, rb.latency, "{what}: latencies differ");
    assert_eq!(ra.ideal_latency, rb.ideal_latency, "{what}: ideal latencies differ");
    assert_eq!(ra.class, rb.class, "{what}: classes differ");
    assert_eq!(ra.fanout, rb.fanout, "{what}: fanouts differ");
    assert_eq!(ra.demand, rb.demand, "{what}: demands differ");
    assert_eq!(ra.admitted, rb.admitted, "{what}: admitted differ");
    assert_eq!(ra.rejected_by_class, rb.rejected_by_class, "{what}: rejections differ");
    assert_eq!(ra.tasks_dequeued, rb.tasks_dequeued, "{what}: tasks dequeued differ");
    assert_eq!(ra.tasks_missed, rb.tasks_missed, "{what}: tasks missed differ");
    assert_eq!(
        (sa.events, sa.arrivals, sa.end_time, sa.noise_stolen, sa.preemptions),
        (sb.events, sb.arrivals, sb.end_time, sb.noise_stolen, sb.preemptions),
        "{what}: run counters differ"
    );
    assert_eq!(format!("{:?}", ra.summarize()), format!("{:?}", rb.summarize()), "{what}: summaries differ");
}
