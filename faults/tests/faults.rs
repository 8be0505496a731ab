//! The fault-injection suite on real processes (docs/failure-modes.md). Each test injects
//! one fault into child processes of the `tailor-faults` binary and checks the node after:
//! nothing left at an RT priority or SCHED_IDLE once the fallback is in effect, nothing
//! outside the GAT domain changed, no admitted request lost, and the way back taken.
//! Skips with a message without CAP_SYS_NICE or with unbounded RT. Child processes are
//! killed (by pid) when a test ends, pass or fail, so nothing stays raised.

use std::path::Path;
use std::sync::Mutex;

use tailor_faults::cases::{self, Row};
use tailor_faults::node;

/// One fault at a time: they share the CPUs and probe ordering on CPU 0.
static SERIAL: Mutex<()> = Mutex::new(());

/// The services' watchdog (`watchdog_ms` default): restore times are judged against it.
const WATCHDOG_MS: f64 = 200.0;

fn run(case: fn(&Path) -> Row) -> Option<Row> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(why) = node::skip_reason() {
        eprintln!("SKIPPED (the kernel scheduler cannot run here): {why}");
        return None;
    }
    let row = {
        let _measuring = cases::MeasuringThread::raise();
        case(Path::new(env!("CARGO_BIN_EXE_tailor-faults")))
    };
    eprintln!("{row:?}");
    assert!(row.left.is_empty(), "{}: left changed: {:?}", row.fault, row.left);
    assert_eq!(row.lost, 0, "{}: admitted requests lost: {row:?}", row.fault);
    Some(row)
}

/// Restored soon after the watchdog fires: within 4 watchdog periods of the fault
/// (a generous bound; the measured times are in docs/failure-modes.md).
fn restored_promptly(row: &Row) {
    let restore = row.restore_ms.unwrap_or_else(|| panic!("{}: never restored: {row:?}", row.fault));
    assert!(restore < 4.0 * WATCHDOG_MS, "{}: restored after {restore} ms: {row:?}", row.fault);
}

#[test]
fn agent_kill9_leaves_no_service_thread_raised() {
    let Some(row) = run(cases::agent_kill9) else { return };
    restored_promptly(&row);
    assert!(row.detect_ms.is_some(), "{row:?}");
}

#[test]
fn a_hung_agent_is_fallen_back_from_and_reattached_to_when_it_resumes() {
    let Some(row) = run(cases::agent_sigstop) else { return };
    restored_promptly(&row);
    assert!(row.reattach_ms.is_some(), "never re-attached after SIGCONT: {row:?}");
    assert!(row.ordering_ms.is_some(), "an older request was never served first again: {row:?}");
}

#[test]
fn an_agent_killed_mid_write_again_and_again_leaves_nothing_raised() {
    let Some(row) = run(|exe| cases::agent_killed_mid_write(exe, 3)) else { return };
    restored_promptly(&row);
    assert!(row.reattach_ms.is_some_and(f64::is_finite), "{row:?}");
}

#[test]
fn a_supervised_agent_comes_back_and_kernel_ordering_resumes() {
    let Some(row) = run(cases::supervised_restart) else { return };
    restored_promptly(&row);
    assert!(row.reattach_ms.is_some(), "never re-attached: {row:?}");
    assert!(row.ordering_ms.is_some(), "an older request was never served first again: {row:?}");
}

#[test]
fn a_second_agent_on_a_served_table_refuses() {
    run(cases::two_agents);
}

#[test]
fn a_removed_table_keeps_services_ordered_until_the_agent_stops() {
    let Some(row) = run(cases::table_removed) else { return };
    restored_promptly(&row);
    assert!(row.reattach_ms.is_some(), "never re-attached to the new table: {row:?}");
}

#[test]
fn a_truncated_table_neither_crashes_nor_strands_services() {
    let Some(row) = run(cases::table_truncated) else { return };
    restored_promptly(&row);
    assert!(row.reattach_ms.is_some(), "never re-attached to the supervisor's new agent: {row:?}");
}

#[test]
fn a_killed_service_s_slots_are_reclaimed_and_its_reused_ids_never_written() {
    let Some(row) = run(cases::service_killed) else { return };
    assert!(row.detect_ms.is_some(), "slots never reclaimed: {row:?}");
}

#[test]
fn a_job_thread_that_exits_mid_job_is_reaped_and_its_reused_id_never_written() {
    let Some(row) = run(cases::job_thread_exits) else { return };
    if row.note.starts_with("skipped") || row.note.contains("could not hand") {
        eprintln!("SKIPPED: {}", row.note);
        return;
    }
    assert!(row.detect_ms.is_some(), "the dead thread's slot was never reclaimed: {row:?}");
    restored_promptly(&row);
}

#[test]
fn panicking_jobs_complete_and_leave_nothing_raised() {
    let Some(row) = run(cases::job_panics) else { return };
    restored_promptly(&row);
}

#[test]
fn a_pool_growing_and_shrinking_leaves_nothing_raised_after_the_fallback() {
    let Some(row) = run(cases::pool_grows_and_shrinks) else { return };
    restored_promptly(&row);
}
