//! `tailor bench proxy` killed by SIGTERM while its processes run: none of them survives
//! (each is started to get SIGTERM when the benchmark dies, PR_SET_PDEATHSIG).
//! Skips, saying why, without Go (the cost benchmark's upstream is a Go service).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tailor_bench::cpuacct::descendants;

/// Alive: present and not a zombie waiting for its new parent to reap it.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn a_signal_stops_every_process_the_benchmark_started() {
    if !Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: Go is not installed (the benchmark builds a Go upstream)");
        return;
    }
    let out = std::env::temp_dir().join(format!("tailor-bench-signal-{}", std::process::id()));
    let mut bench = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["bench", "proxy", "--cost", "--quick", "--no-install", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tailor bench proxy");
    let pid = bench.id();
    // The upstream, the sidecar and the edge (nginx and HAProxy are skipped without --install).
    let start = Instant::now();
    let started = loop {
        let below = descendants(pid);
        if below.len() >= 3 && below.iter().all(|&p| alive(p)) {
            std::thread::sleep(Duration::from_millis(200));
            break descendants(pid);
        }
        if let Ok(Some(status)) = bench.try_wait() {
            panic!("the benchmark ended ({status}) before its processes were seen; see {}", out.display());
        }
        assert!(start.elapsed() < Duration::from_secs(180), "the benchmark never started its processes");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ok = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill -TERM {pid}");
    let _ = bench.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<u32> = started.clone();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&p| alive(p));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Never leave one running, even when the assertion fails.
    for &p in &left {
        let _ = Command::new("kill").args(["-KILL", &p.to_string()]).status();
    }
    assert!(left.is_empty(), "still running 10 s after the benchmark got SIGTERM: {left:?} (of {started:?})");
    let _ = std::fs::remove_dir_all(&out);
}
