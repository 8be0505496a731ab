//! The polyglot chain as real processes on loopback: `tailor proxy edge` → the Go SDK's
//! example → the Python SDK's WSGI example → the Rust runtime's example. Every tier must
//! serve the request by the GAT the edge stamped (not one a client forged, not one of
//! its own), one hop further each time, under the SDKs' ordering gates and under load.
//! Skips, saying what is missing, without Go, python3 + waitress, or the built binaries
//! (`cargo test --workspace` builds them).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tailor_bench::loadgen::{self, LoadgenConfig, Plan};
use tailor_bench::polyglot::{Ordering, PolyglotChain, Tools, TIERS};
use tailor_bench::record::Outcome;

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_nanos() as u64
}

#[test]
fn every_tier_sees_the_gat_the_edge_stamped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let out = std::env::temp_dir().join(format!("tailor-polyglot-test-{}", std::process::id()));
    let tools = match Tools::find(root, &out) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("SKIP every_tier_sees_the_gat_the_edge_stamped: {why}");
            return;
        }
    };
    let chain = PolyglotChain::start(&tools, Ordering::Gates, 2, &out.join("no-table"), &out.join("logs"))
        .unwrap_or_else(|e| panic!("{e}"));

    // A client's forged context (an hour old) is replaced at the edge; every tier then
    // serves the edge's stamp, one hop further each.
    let forged = format!("1.g{}.c0.k1.h0", now_ns() - 3_600_000_000_000);
    let before = now_ns();
    let seen = chain.trace(&[("tailor-context", &forged)]).unwrap_or_else(|e| panic!("{e}"));
    let after = now_ns();
    assert_eq!(seen.len(), TIERS, "{seen:?}");
    assert!(seen.iter().all(|s| s.gat == seen[0].gat), "the GAT changed between tiers: {seen:?}");
    assert_eq!(seen.iter().map(|s| s.hop).collect::<Vec<_>>(), vec![0, 1, 2], "{seen:?}");
    assert!(before <= seen[0].gat && seen[0].gat <= after, "not the edge's stamp ({before}..{after}): {seen:?}");

    // Concurrent requests each keep their own GAT through every tier.
    let gats: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..5)
                        .map(|_| {
                            let seen = chain.trace(&[]).unwrap_or_else(|e| panic!("{e}"));
                            assert!(seen.len() == TIERS && seen.iter().all(|x| x.gat == seen[0].gat), "{seen:?}");
                            seen[0].gat
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("worker")).collect()
    });
    let mut distinct = gats.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), gats.len(), "two requests got one GAT: {gats:?}");

    // Open-loop load with CPU demand at every tier: every request answered.
    let n = 150;
    let plan =
        Plan { intended_ns: (0..n).map(|i| i as u64 * 10_000_000).collect(), demands_us: vec![vec![300, 300, 300]; n] };
    let cfg = LoadgenConfig {
        uri: chain.entry.clone(),
        timeout: Duration::from_secs(20),
        max_in_flight: 1024,
        rt_priority: None,
    };
    let records = loadgen::run(&plan, &cfg).expect("the generator starts");
    let failed: Vec<_> = records.iter().filter(|r| r.outcome != Outcome::Ok).collect();
    assert!(failed.is_empty(), "{} of {n} requests failed, e.g. {:?}", failed.len(), failed.first());

    // The Go tier read the edge's context on every request: none absent, none rejected.
    let metrics = chain.go_metrics().unwrap_or_else(|e| panic!("{e}"));
    let counter = |name: &str| -> u64 {
        metrics.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    assert!(counter("tailor_context_accepted_total ") >= n as u64 + 21, "{metrics}");
    assert_eq!(counter("tailor_context_absent_total "), 0, "{metrics}");
    let mut rejected = metrics.lines().filter(|l| l.starts_with("tailor_context_rejected_total"));
    assert!(rejected.clone().count() > 0 && rejected.all(|l| l.ends_with(" 0")), "{metrics}");
    drop(chain);
    let _ = std::fs::remove_dir_all(&out);
}
