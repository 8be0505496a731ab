//! The limit benchmark (`tailor bench proxy --limit`), small: one plain Go service whose
//! requests wait 5 ms off the CPU, behind a sidecar with `c` = 1 and one with the adaptive
//! limit. Facts that hold on any machine, not timing: every request is accounted for; a
//! sidecar with `c` = 1 lets one request at a time into a service that holds each for
//! ≥ 5 ms, so it cannot answer more than ~200 a second in time; the adaptive limit grows
//! past the CPUs and answers several times as many. Skips, saying why, without Go.

use std::path::Path;

use tailor_bench::proxybench::effect::SidecarC;
use tailor_bench::proxybench::limit::{self, LimitConfig, Profile};
use tailor_bench::proxybench::Programs;
use tailor_core::progress::Silent;

#[test]
fn the_adaptive_limit_lets_an_io_bound_service_use_its_cpus_where_c_of_one_cannot() {
    let out = std::env::temp_dir().join(format!("tailor-proxy-bench-limit-{}", std::process::id()));
    let programs = match Programs::prepare(Path::new(env!("CARGO_BIN_EXE_tailor")), &out) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIP the_adaptive_limit_lets_an_io_bound_service_use_its_cpus_where_c_of_one_cannot: {why}");
            return;
        }
    };
    let cfg = LimitConfig {
        cores: 2,
        cs: vec![SidecarC::Fixed(1), SidecarC::Adaptive],
        profiles: vec![Profile::Io],
        loads: vec![0.5],
        seeds: vec![1],
        seconds: 1.5,
        out: out.clone(),
    };
    let report = limit::run(&programs, &cfg, &Silent).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.runs.len(), 2);
    for r in &report.runs {
        assert!(r.requests >= 100, "{r:?}");
        assert_eq!(r.good + r.late + r.shed + r.other, r.requests, "every request accounted for: {r:?}");
    }
    let run = |c: SidecarC| report.runs.iter().find(|r| r.c == c).expect("ran");
    let (one, adaptive) = (run(SidecarC::Fixed(1)), run(SidecarC::Adaptive));
    let one_limit = one.limit.expect("the sidecar's /metrics was sampled");
    assert_eq!((one_limit.min, one_limit.max), (1.0, 1.0), "a fixed c is reported as the limit");
    // One request at a time, each ≥ 5 ms in the service: ≤ 200/s, whatever the machine.
    assert!(one.goodput_rps <= 220.0, "c = 1 cannot answer more than ~200/s of 5 ms requests: {one:?}");
    assert!(one.shed > 0, "c = 1 at this load sheds what cannot make its deadline: {one:?}");
    let grown = adaptive.limit.expect("sampled");
    assert!(grown.max > 2.0, "the adaptive limit grew past the CPUs: {grown:?}");
    assert!(
        adaptive.goodput_rps >= 3.0 * one.goodput_rps,
        "adaptive {:.0}/s in time against c = 1's {:.0}/s",
        adaptive.goodput_rps,
        one.goodput_rps
    );
    let md = limit::tables(&report);
    assert!(md.contains("| io | 0.5 | 1 | 1 | 1.0 (1–1) |"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
