//! Short soaks in the test suite: the chain under the kernel backend and the fan-out handler,
//! each held at its load with RSS, descriptors, threads and table slots sampled, asserting no
//! growth beyond a generous bound. 20 s each; 60 s each with TAILOR_LONG_TESTS=1 (as CI runs).
//! The 30-minute soaks are a documented command (docs/failure-modes.md, "Soak").

use std::path::PathBuf;
use std::time::Duration;

use tailor_bench::soak::{self, ChainSoak, FanoutSoak, SoakReport, SoakTiming};
use tailor_bench::workload::Workload;

fn timing() -> SoakTiming {
    let long = std::env::var("TAILOR_LONG_TESTS").is_ok_and(|v| v == "1");
    let (duration, window) = if long { (60, 20) } else { (20, 10) };
    SoakTiming {
        duration: Duration::from_secs(duration),
        window: Duration::from_secs(window),
        sample_every: Duration::from_secs(1),
    }
}

/// No series grows past twice its bound (the report's own flag is the 30-minute criterion; a
/// short run on a shared machine gets room), and every window answered.
fn check(report: &SoakReport) {
    println!("{}", report.markdown());
    for t in &report.trends {
        assert!(
            t.fitted_change <= 2.0 * t.bound,
            "{} grew by {:.1} (bound {:.1}): {t:?}",
            t.name,
            t.fitted_change,
            t.bound
        );
    }
    assert!(report.windows.iter().all(|w| w.requests > 0), "{:?}", report.windows);
    let requests: u64 = report.windows.iter().map(|w| w.requests).sum();
    let errors: u64 = report.windows.iter().map(|w| w.errors).sum();
    assert!(errors * 100 <= requests, "{errors} errors in {requests} requests");
}

#[test]
fn chain_under_the_kernel_backend_does_not_grow() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP chain_under_the_kernel_backend_does_not_grow: the kernel backend needs root (CAP_SYS_NICE)");
        return;
    }
    let out = std::env::temp_dir().join(format!("tailor-soak-test-{}", std::process::id()));
    let s = ChainSoak {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_soak")),
        tier_args: vec!["tier".into()],
        agent_args: vec!["agent".into()],
        tiers: 3,
        rho: 0.8,
        mean_ms: 1.0,
        workload: Workload::Exp,
        seed: 1,
        out: out.clone(),
        timing: timing(),
    };
    let report = soak::run_chain(&s, |l| println!("{l}")).expect("chain soak");
    let _ = std::fs::remove_dir_all(&out);
    assert!(report.trends.iter().any(|t| t.name == "table.slots_in_use"), "table slots sampled");
    assert!(report.trends.iter().any(|t| t.name == "agent.threads"), "the agent sampled");
    check(&report);
}

// Known defect, measured (docs/failure-modes.md, "Soak"): the handler's descriptors and RSS
// grow at load (49 -> 736 fds, 6 -> 41 MB in one minute; 326 MB after 20 minutes). Run it
// with `--ignored` while fixing that; it fails today.
#[test]
#[ignore = "the fan-out handler's fds and RSS grow under load: an open defect (docs/failure-modes.md, Soak)"]
fn fanout_handler_at_load_does_not_grow() {
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fanout/configs/exp-two-class.toml");
    let s = FanoutSoak { config, scheme: tailor_fanout::Scheme::TfEdfq, load: 0.2, timing: timing() };
    let report = soak::run_fanout(&s, |l| println!("{l}")).expect("fan-out soak");
    assert!(report.trends.iter().any(|t| t.name == "handler.in_flight_tasks"));
    check(&report);
}
