//! Test helper: runs the checks on a recorded tree under `testdata/CASE/{t0,t1}`.

use std::path::PathBuf;
use std::time::Duration;

use crate::finding::Finding;
use crate::inspect::{diagnose, Diagnosis};
use crate::root::SysRoot;
use crate::sample::snapshot;
use crate::target::{resolve, TargetSpec};

/// The snapshots of `testdata/CASE` are one second apart.
pub fn diagnose_case(case: &str, spec: TargetSpec) -> Diagnosis {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata").join(case);
    let (t0, t1) = (SysRoot::at(dir.join("t0")), SysRoot::at(dir.join("t1")));
    let target = resolve(&t1, &spec).expect("the fixture's target resolves");
    diagnose(&t1, &target, &snapshot(&t0), &snapshot(&t1), Duration::from_secs(1))
}

/// The finding of `check` for pid 100 of `case`.
pub fn finding(case: &str, check: &str) -> Finding {
    diagnose_case(case, TargetSpec::Pid(100))
        .finding(check)
        .cloned()
        .unwrap_or_else(|| panic!("{case}: no {check} finding"))
}
