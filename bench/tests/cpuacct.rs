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
