//! `tailor agent --admin-addr`: the real scheduler agent process serves /metrics, /healthz and
//! /readyz; a job registered through its table shows up in the counters, and promtool passes.
//! Needs CAP_SYS_NICE and bounded RT throttling (what the agent needs); skips with a message otherwise.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tailor_core::Context;
use tailor_runtime::{BackendSpec, Scheduler, SchedulerOptions};
use tailor_telemetry::testing::{http_get, sample_value, scrape_metrics, Promtool};

/// The agent child: stdin is a pipe, so closing it (or this process dying) stops the agent,
/// which restores every thread; killed by pid on drop as well.
struct Agent(Child, PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.1);
    }
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn agent_admin_endpoint_counts_jobs_and_passes_promtool() {
    if let Err(e) = tailor_runtime::kernel::preflight() {
        eprintln!("SKIPPED (the scheduler agent cannot run here): {e}");
        return;
    }
    let table = PathBuf::from(format!("/dev/shm/tailor-test-agent-metrics-{}", std::process::id()));
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["agent", "--cpus", "1", "--slots", "64", "--admin-addr", &addr.to_string(), "--table"])
        .arg(&table)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tailor agent");
    let _agent = Agent(child, table.clone());
    wait_until(
        "/readyz 200",
        Duration::from_secs(10),
        || matches!(http_get(addr, "/readyz", None), Ok(r) if r.status == 200),
    );
    assert_eq!(http_get(addr, "/healthz", None).unwrap().status, 200);

    let sched =
        Scheduler::with_options(BackendSpec::kernel(&table), SchedulerOptions { log: false, ..Default::default() })
            .unwrap();
    // Each job burns 60 ms, three heartbeats of the agent: a job that ends before the agent's
    // next pass would be admitted on the table's fast path without the agent ever seeing it.
    for gat in 1..=3 {
        sched.run(&Context::stamped(gat), |_| {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(60) {
                std::hint::black_box(gat);
            }
        });
    }
    assert_eq!(sched.stats().fallbacks, 0, "the jobs went through the agent's table");
    wait_until("three jobs completed in the agent's counters", Duration::from_secs(10), || {
        scrape_metrics(addr).is_ok_and(|s| sample_value(&s.body, "tailor_agent_jobs_completed_total") == Some(3.0))
    });

    let scrape = scrape_metrics(addr).unwrap();
    match &scrape.promtool {
        Promtool::Clean => {}
        Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
        Promtool::Problems(p) => panic!("promtool check metrics: {p}\n{}", scrape.body),
    }
    assert_eq!(sample_value(&scrape.body, "tailor_agent_jobs_admitted_total"), Some(3.0), "{}", scrape.body);
    assert_eq!(sample_value(&scrape.body, "tailor_agent_running"), Some(1.0));
    assert_eq!(sample_value(&scrape.body, "tailor_agent_table_slots"), Some(64.0));
    assert_eq!(sample_value(&scrape.body, "tailor_agent_table_slots_used"), Some(0.0));
    let age = sample_value(&scrape.body, "tailor_agent_heartbeat_age_seconds").unwrap();
    assert!((0.0..5.0).contains(&age), "the agent passes at least every 20 ms: {age}");
}
