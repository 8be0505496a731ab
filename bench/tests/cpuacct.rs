//! The demo's CPU accounting counts a busy thread as about one CPU. In a test binary of its
//! own: it reads the whole process's CPU time, and the library's unit tests (the fan-out
//! demo's simulations among them) would add theirs while they run beside it.

use tailor_bench::cpuacct::{snapshot, usage};

#[test]
fn a_busy_loop_shows_up_as_demo_cpu() {
    let before = snapshot(&[]);
    let t = std::time::Instant::now();
    let mut x = 1u64;
    while t.elapsed().as_millis() < 300 {
        x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
    }
    let u = usage(&before, &snapshot(&[]), 1);
    // One thread spun for 0.3 s: about one CPU (tick granularity is 10 ms;
    // a loaded machine may give it less).
    assert!(u.demo_cpus > 0.2 && u.demo_cpus < 1.2, "{u:?}");
    assert!(u.cpu_per_request_us > 50_000.0, "{u:?}");
}

/// A pre-forking server's parent only waits; its workers burn the CPU. Counting the parent
/// alone hid a Python tier's whole cost in "other jobs" (the effect benchmark's ρ was then
/// computed without it, and its chains ran overloaded).
#[test]
fn a_process_counts_with_the_workers_it_forked() {
    let mut parent =
        std::process::Command::new("sh").args(["-c", "sh -c 'while :; do :; done' & wait"]).spawn().expect("sh runs");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = parent.id();
    let tree = tailor_bench::cpuacct::with_descendants(&[pid]);
    let before = snapshot(&[pid]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let u = usage(&before, &snapshot(&[pid]), 1);
    for p in &tree {
        // SAFETY: kill has no memory preconditions; these are the processes this test started.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    let _ = parent.wait();
    assert!(tree.len() >= 2, "the forked worker is found below its parent: {tree:?}");
    // The worker spun for 0.5 s beside this sleeping thread: most of a CPU is the demo's.
    assert!(u.demo_cpus > 0.3, "{u:?}");
}
