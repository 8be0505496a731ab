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

/// Starts `tailor agent` with `policy_args` on one CPU, 64 slots and an admin address, and
/// waits for /readyz; `None` (with a message) where the agent cannot run.
fn start_agent(name: &str, policy_args: &[&str]) -> Option<(Agent, PathBuf, SocketAddr)> {
    if let Err(e) = tailor_runtime::kernel::preflight() {
        eprintln!("SKIPPED (the scheduler agent cannot run here): {e}");
        return None;
    }
    let table = PathBuf::from(format!("/dev/shm/tailor-test-agent-{name}-{}", std::process::id()));
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["agent", "--cpus", "1", "--slots", "64", "--admin-addr", &addr.to_string()])
        .args(policy_args)
        .arg("--table")
        .arg(&table)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tailor agent");
    let agent = Agent(child, table.clone());
    wait_until(
        "/readyz 200",
        Duration::from_secs(10),
        || matches!(http_get(addr, "/readyz", None), Ok(r) if r.status == 200),
    );
    Some((agent, table, addr))
}

/// Runs `jobs` jobs on the agent's table, one after another. Each job burns 60 ms, three
/// heartbeats of the agent: a job that ends before the agent's next pass would be admitted
/// on the table's fast path without the agent ever seeing it.
fn run_jobs(table: &PathBuf, jobs: u64) {
    let sched =
        Scheduler::with_options(BackendSpec::kernel(table), SchedulerOptions { log: false, ..Default::default() })
            .unwrap();
    for gat in 1..=jobs {
        sched.run(&Context::stamped(gat), |_| {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(60) {
                std::hint::black_box(gat);
            }
        });
    }
    assert_eq!(sched.stats().fallbacks, 0, "the jobs went through the agent's table");
}

fn assert_promtool_clean(scrape: &tailor_telemetry::testing::Scrape) {
    match &scrape.promtool {
        Promtool::Clean => {}
        Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
        Promtool::Problems(p) => panic!("promtool check metrics: {p}\n{}", scrape.body),
    }
}

#[test]
fn agent_admin_endpoint_counts_jobs_and_passes_promtool() {
    let Some((_agent, table, addr)) = start_agent("metrics", &[]) else { return };
    assert_eq!(http_get(addr, "/healthz", None).unwrap().status, 200);
    run_jobs(&table, 3);
    wait_until("three jobs completed in the agent's counters", Duration::from_secs(10), || {
        scrape_metrics(addr).is_ok_and(|s| sample_value(&s.body, "tailor_agent_jobs_completed_total") == Some(3.0))
    });

    let scrape = scrape_metrics(addr).unwrap();
    assert_promtool_clean(&scrape);
    assert_eq!(sample_value(&scrape.body, "tailor_agent_jobs_admitted_total"), Some(3.0), "{}", scrape.body);
    assert_eq!(sample_value(&scrape.body, "tailor_agent_running"), Some(1.0));
    assert_eq!(sample_value(&scrape.body, "tailor_agent_table_slots"), Some(64.0));
    assert_eq!(sample_value(&scrape.body, "tailor_agent_table_slots_used"), Some(0.0));
    assert_eq!(sample_value(&scrape.body, "tailor_agent_jobs_unresolved_total"), Some(0.0));
    let age = sample_value(&scrape.body, "tailor_agent_heartbeat_age_seconds").unwrap();
    assert!((0.0..5.0).contains(&age), "the agent passes at least every 20 ms: {age}");
    // orf with a fixed c: no decision helper, so no capacity gauge and its counters stay 0.
    assert_eq!(sample_value(&scrape.body, "tailor_agent_adaptive_pool_capacity"), None, "{}", scrape.body);
    assert_eq!(sample_value(&scrape.body, "tailor_agent_adaptive_windows_total"), Some(0.0));
}

/// `--policy orf-adaptive`: the decision helper's windows, decisions and the pool capacity in
/// force reach /metrics, and promtool passes.
#[test]
fn adaptive_agent_exports_its_decision_helper() {
    let args = ["--policy", "orf-adaptive", "--c-max", "8", "--window-jobs", "4"];
    let Some((_agent, table, addr)) = start_agent("adaptive", &args) else { return };
    // Windows of 1, 2, then 4 completed jobs: 7 jobs make three.
    run_jobs(&table, 7);
    let metric = |name: &str| scrape_metrics(addr).ok().and_then(|s| sample_value(&s.body, name));
    wait_until("the helper decided every window", Duration::from_secs(10), || {
        let (windows, decided, dropped) = (
            metric("tailor_agent_adaptive_windows_total").unwrap_or(0.0),
            metric("tailor_agent_adaptive_decisions_total").unwrap_or(0.0),
            metric("tailor_agent_adaptive_windows_dropped_total").unwrap_or(0.0),
        );
        windows >= 3.0 && decided + dropped == windows
    });
    let scrape = scrape_metrics(addr).unwrap();
    assert_promtool_clean(&scrape);
    let value = |name: &str| sample_value(&scrape.body, name).unwrap_or_else(|| panic!("{name}:\n{}", scrape.body));
    assert!(value("tailor_agent_adaptive_decisions_total") >= 1.0, "{}", scrape.body);
    assert!(value("tailor_agent_adaptive_c_changes_total") <= value("tailor_agent_adaptive_decisions_total"));
    let cap = value("tailor_agent_adaptive_pool_capacity");
    assert!((1.0..=8.0).contains(&cap), "max(c, 1 CPU) with c <= c_max 8: {cap}");
    assert!(value("tailor_agent_adaptive_helper_cpu_seconds_total") >= 0.0);
    assert_eq!(value("tailor_agent_jobs_completed_total"), 7.0);
}
