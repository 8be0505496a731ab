//! The demo's CPU accounting counts a busy thread as about one CPU. In a test binary of its
//! own: it reads the whole process's CPU time, and the library's unit tests (the fan-out
//! demo's simulations among them) would add theirs while they run beside it.

use tailor_bench::cpuacct::{process_cpu_ns, snapshot, usage};

/// The tests read this whole process's CPU time: one at a time, or one's spinning shows in
/// another's reading.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to the pointer we own.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A process's CPU time is exact, not sampled at the tick: 20 ms of spinning reads as 20 ms
/// (utime + stime in 10 ms ticks read 10, 20 or 30), and 1 ms as 1 ms.
#[test]
fn a_process_cpu_time_is_exact() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    for spin_ns in [20_000_000u64, 1_000_000] {
        let (process_before, thread_before) = (process_cpu_ns(me), thread_cpu_ns());
        let mut x = 1u64;
        while thread_cpu_ns() - thread_before < spin_ns {
            x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
        let spun = thread_cpu_ns() - thread_before;
        let process = process_cpu_ns(me) - process_before;
        // The process's clock includes this thread's; the test harness's other threads
        // only wait, so they add microseconds.
        assert!(process >= spun && process < spun + 2_000_000, "spun {spun} ns, process read {process} ns");
    }
    assert_eq!(process_cpu_ns(u32::MAX), 0, "a process that does not exist reads 0");
}

#[test]
fn a_busy_loop_shows_up_as_demo_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = snapshot(&[]);
    let t = std::time::Instant::now();
    let mut x = 1u64;
    while t.elapsed().as_millis() < 300 {
        x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
    }
    let u = usage(&before, &snapshot(&[]), 1);
    // One thread spun for 0.3 s: about one CPU (a loaded machine may give it less).
    assert!(u.demo_cpus > 0.2 && u.demo_cpus < 1.2, "{u:?}");
    assert!(u.cpu_per_request_us > 50_000.0, "{u:?}");
}

/// A pre-forking server's parent only waits; its workers burn the CPU. Counting the parent
/// alone hid a Python tier's whole cost in "other jobs" (the effect benchmark's ρ was then
/// computed without it, and its chains ran overloaded).
#[test]
fn a_process_counts_with_the_workers_it_forked() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
