//! Ladder smoke test: the quick ladder on two steps, checking its structure, its attribution
//! tags, and that the enforcing arm's p99 at the top step is below the stock arm's.

use tailor_bench::ladder::{self, LadderOptions};
use tailor_node::runner::AgentCommand;

#[test]
fn quick_ladder_structure_and_enforcing_beats_stock_at_8_spinners() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP quick_ladder: needs root (cgroups, scheduling policies)");
        return;
    }
    let mut opts = LadderOptions::quick();
    opts.steps = vec![0, 8];
    opts.reps = 2;
    opts.window_s = 0.75;
    opts.helper = Some(AgentCommand { program: env!("CARGO_BIN_EXE_ladder").into(), prefix: Vec::new() });
    let report = ladder::run(&opts, &|l: &str| eprintln!("{l}")).unwrap();
    assert_eq!(report.windows.len(), 2 * 2 * 2);
    for w in &report.windows {
        assert!(w.latency.measured > 0, "{w:?}");
        // Every window carries its tag; a stock window is never tagged protected.
        if w.arm == "stock" {
            assert!(!w.attribution.protected);
        }
    }
    assert_eq!(report.steps.len(), 4);
    let p99 = |arm: &str| report.steps.iter().find(|s| s.arm == arm && s.spinners == 8).unwrap().p99_us;
    eprintln!("{}", ladder::table(&report));
    // A stock arm in which no request came back in time has no p99 (NaN): worse than any.
    let (enforcing, stock) = (p99("enforcing"), p99("stock"));
    assert!(
        enforcing.is_finite() && (stock.is_nan() || enforcing < stock),
        "enforcing p99 {enforcing} µs vs stock {stock} µs"
    );
    assert!(ladder::plot(&report).starts_with("<svg"));
    // Nothing left behind.
    let name = format!("tailor-ladder-{}", std::process::id());
    for h in tailor_node::Capabilities::probe().hierarchies {
        assert!(!h.root.join(&name).exists());
    }
}
