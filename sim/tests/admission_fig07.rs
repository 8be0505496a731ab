//! TailGuard Fig. 7 (§IV.D): what the admission controller does over a run, phase by phase,
//! under each reading of the paper's rule, at the R_th our calibration finds (0.469 %: the
//! task deadline-miss ratio of TF-EDFQ without admission control at the max load meeting both
//! SLOs, 52.8 %). `cargo test --release -p tailor-sim --test admission_fig07 -- --nocapture`
//! prints the table docs/reproduction.md quotes.

use std::path::{Path, PathBuf};

use tailor_core::tailguard::{AdmissionPhase, RefusedTasks};
use tailor_sim::engine;
use tailor_sim::model::{AdmissionModel, LoadOverride, Model, Overrides};
use tailor_sim::scenario::Scenario;

/// R_th as `tailor reproduce` calibrates it for this scenario (seed 1).
const CALIBRATED_R_TH: f64 = 0.00469;

fn scenario_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/seeds/tailguard/fig07-admission-masstree.toml")
}

/// One reading of §III.C/§IV.D's rule.
#[derive(Clone, Copy)]
struct Reading {
    label: &'static str,
    refused: RefusedTasks,
    proportional: bool,
    min_tasks: u64,
}

const fn reading(label: &'static str, refused: RefusedTasks, proportional: bool, min_tasks: u64) -> Reading {
    Reading { label, refused, proportional, min_tasks }
}

const READINGS: [Reading; 6] = [
    reading("all-or-nothing, refused tasks no outcome", RefusedTasks::NoOutcome, false, 0),
    reading("all-or-nothing, refused tasks on time", RefusedTasks::OnTime, false, 0),
    reading("share R_th/ratio, refused tasks no outcome", RefusedTasks::NoOutcome, true, 0),
    reading("share R_th/ratio, refused tasks on time", RefusedTasks::OnTime, true, 0),
    reading("all-or-nothing, refused tasks ignored", RefusedTasks::Ignored, false, 0),
    reading("all-or-nothing, no outcome, min 50,000", RefusedTasks::NoOutcome, false, 50_000),
];

struct Outcome {
    phases: Vec<AdmissionPhase>,
    accepted_util: f64,
    worst_p99_over_slo: f64,
}

impl Outcome {
    fn reject_phase_median(&self) -> u64 {
        let mut l: Vec<u64> = self.phases.iter().filter(|p| !p.admitting).map(|p| p.queries).collect();
        l.sort_unstable();
        l.get(l.len() / 2).copied().unwrap_or(0)
    }
}

/// One run of the Fig. 7 scenario (seed 1, 50,000 measured queries) at `offered` load.
fn run(offered: f64, reading: Reading) -> Outcome {
    run_at(offered, reading, CALIBRATED_R_TH)
}

fn run_at(offered: f64, reading: Reading, r_th: f64) -> Outcome {
    let loaded = Scenario::load(&scenario_file()).expect("the Fig. 7 scenario loads");
    let ov = Overrides { load: Some(LoadOverride::Utilization(offered)), ..Default::default() };
    let mut model = Model::build(&loaded, &ov).expect("the Fig. 7 scenario compiles");
    let a: &mut AdmissionModel = model.admission.as_mut().expect("the Fig. 7 scenario has [admission]");
    a.r_th = r_th;
    a.refused = reading.refused;
    a.proportional = reading.proportional;
    a.min_tasks = reading.min_tasks;
    a.phase_log = 1 << 20;
    let (rec, stats) = engine::run(&model);
    let s = rec.summarize();
    let worst_p99_over_slo =
        s.per_class.iter().map(|c| c.tail_ms / c.slo_ms.unwrap_or(f64::INFINITY)).fold(0.0, f64::max);
    Outcome {
        phases: stats.admission_phases,
        accepted_util: offered * (1.0 - s.rejected_pct / 100.0),
        worst_p99_over_slo,
    }
}

/// Every reading at offered 0.5, 0.6 and 0.9, with what explains the default's over-rejection:
/// a rejection under "no outcome" lasts about one whole window (1,000 queries), because the
/// refused slots push out the oldest outcomes (mostly on time) while the misses that caused it
/// are the newest, so the ratio over the outcomes left rises until none is left.
#[test]
fn fig07_readings_and_their_phases() {
    let mut table = Vec::new();
    for reading in READINGS {
        let outcomes: Vec<Outcome> = [0.5, 0.6, 0.9].iter().map(|&u| run(u, reading)).collect();
        println!(
            "{:44} accepted {:.3} / {:.3} / {:.3}, worst p99/SLO {:.2} / {:.2} / {:.2}, median reject phase {} / {} / {} queries",
            reading.label,
            outcomes[0].accepted_util,
            outcomes[1].accepted_util,
            outcomes[2].accepted_util,
            outcomes[0].worst_p99_over_slo,
            outcomes[1].worst_p99_over_slo,
            outcomes[2].worst_p99_over_slo,
            outcomes[0].reject_phase_median(),
            outcomes[1].reject_phase_median(),
            outcomes[2].reject_phase_median(),
        );
        table.push(outcomes);
    }
    let [default, on_time, share, share_on_time, ignored, min_tasks] = &table[..] else { unreachable!() };
    // The default rejects in whole windows, even at 0.5 (below the max load, 0.528): the mean
    // miss ratio there (0.27 %) is below R_th, but a window of 1,000 queries exceeds it now and then.
    for o in default {
        assert!((900..=1100).contains(&o.reject_phase_median()), "median reject phase {}", o.reject_phase_median());
    }
    assert!(default[0].accepted_util < 0.45, "offered 0.5: accepted {}", default[0].accepted_util);
    // Counting refused tasks as on time ends some rejections early, but a burst of misses at
    // the newest end of the window still takes the window's length to leave.
    assert!(on_time[1].accepted_util > default[1].accepted_util);
    assert!(on_time[2].reject_phase_median() > 500);
    // Admitting the share R_th/ratio spreads the refusals out (phases of a few queries) and
    // keeps far more load at 0.9, yet the admitted queries still miss their SLO there.
    for o in [share, share_on_time] {
        assert!(o[2].reject_phase_median() <= 10, "median reject phase {}", o[2].reject_phase_median());
        assert!(o[2].accepted_util > 4.0 * default[2].accepted_util);
        assert!(o[2].worst_p99_over_slo > 1.0);
    }
    // Refusals that move nothing lock out: once the first misses put the ratio above R_th,
    // nothing new is admitted, the queues drain and the ratio never changes again.
    for o in ignored {
        assert!(o.accepted_util < 0.01, "accepted {}", o.accepted_util);
    }
    // A minimum of outcomes stops rejections on a nearly empty window, and so lets whole
    // windows of queries in at 0.9: the admitted queries miss their SLOs by far.
    assert!(min_tasks[2].worst_p99_over_slo > 2.0, "p99/SLO {}", min_tasks[2].worst_p99_over_slo);
}

/// With the paper's R_th (1.7 %) instead of ours, admitting the share R_th/ratio with refused
/// tasks on time gives the paper's Fig. 7a: accepted load within 2.5 points of the max load
/// (52.8 % here) at 0.6, and a few points below it at 0.9 (the paper: 6 below). But the SLOs
/// fail: our miss ratio at the max load is 0.469 %, so 1.7 % admits too much here.
#[test]
fn fig07_paper_threshold_gives_the_papers_accepted_load_but_not_its_slos() {
    const MAX_UTIL: f64 = 0.528;
    let reading = READINGS[3];
    let at_06 = run_at(0.6, reading, 0.017);
    let at_09 = run_at(0.9, reading, 0.017);
    println!(
        "paper R_th, {}: accepted {:.3} / {:.3}, worst p99/SLO {:.2} / {:.2} at 0.6 / 0.9",
        reading.label, at_06.accepted_util, at_09.accepted_util, at_06.worst_p99_over_slo, at_09.worst_p99_over_slo
    );
    assert!((at_06.accepted_util - MAX_UTIL).abs() <= 0.025, "accepted {} at 0.6", at_06.accepted_util);
    assert!((MAX_UTIL - 0.085..MAX_UTIL).contains(&at_09.accepted_util), "accepted {} at 0.9", at_09.accepted_util);
    assert!(at_06.worst_p99_over_slo > 1.0 && at_09.worst_p99_over_slo > 1.0);
}
