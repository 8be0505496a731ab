//! A service in its own PID and mount namespace (a pod) registered with a host agent, with real
//! threads and SCHED_FIFO priorities. Needs CAP_SYS_NICE, bounded RT throttling and `unshare`;
//! skips with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::BackendSpec;

#[macro_use]
mod kernel_common;
use kernel_common::*;

// The child is this test binary re-executed under `unshare --pid --fork --mount-proc`: it
// is pid 1 there and its threads' ids are the namespace's, so an agent that wrote the ids
// as registered would hit the host's threads of those numbers (init, kthreadd, ...).

const NS_SERVICE_ENV: &str = "TAILOR_TEST_NS_TABLE";
const NS_SCENARIO_ENV: &str = "TAILOR_TEST_NS_SCENARIO";

/// Why a namespace test cannot run here, if it cannot.
fn namespace_skip_reason() -> Option<String> {
    if let Some(why) = skip_reason() {
        return Some(format!("kernel backend unavailable here: {why}"));
    }
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).status();
    match probe {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("`unshare --pid --fork --mount-proc true` failed ({s}): needs root (CAP_SYS_ADMIN)")),
        Err(e) => Some(format!("cannot run `unshare` (util-linux): {e}")),
    }
}

/// A table outside /dev/shm, as a pod mounts it from the host (`hostPath`).
fn host_path_table(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tailor-test-{}-{name}", std::process::id()))
}

/// The scheduling policy of every host thread whose id is in `ids`.
fn host_policies(ids: &[i32]) -> Vec<(i32, Option<ThreadPolicy>)> {
    ids.iter().map(|&t| (t, sys::get_policy(t).ok())).collect()
}

/// Host threads with the pod's ids whose policy changed between two looks. A thread that
/// came or went meanwhile is the kernel's (a kworker started or ended; seen in CI on a busy
/// fresh machine), not a write of the agent's: only threads there both times are compared.
fn host_policies_changed(before: &[(i32, Option<ThreadPolicy>)], after: &[(i32, Option<ThreadPolicy>)]) -> Vec<String> {
    before
        .iter()
        .zip(after)
        .filter_map(|(&(id, was), &(_, now))| match (was, now) {
            (Some(was), Some(now)) if was != now => Some(format!("host thread {id}: {was:?} -> {now:?}")),
            _ => None,
        })
        .collect()
}

/// The service, inside the namespaces: runs a scenario against the host agent's table and
/// reports on stdout. Does nothing when run as a normal test.
#[test]
fn ns_service_child() {
    let Ok(path) = std::env::var(NS_SERVICE_ENV) else { return };
    let path = PathBuf::from(path);
    println!("NS pid {}", std::process::id());
    let sched = scheduler(BackendSpec::kernel(&path));
    match std::env::var(NS_SCENARIO_ENV).as_deref() {
        Ok("order") => {
            // Spawned by a test thread kept off CPU 0: start from every online CPU again.
            // SAFETY: sysconf has no preconditions.
            let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
            pin(&(0..online).collect::<Vec<_>>());
            let _off_cpu0 = OffCpu0::new().expect("2 CPUs");
            let order = older_arrives_later(&sched, 60, 120);
            println!("ORDER {}", order.join(","));
        }
        Ok("restore") => {
            // One job that holds its level until the parent has stopped the agent.
            let before = sys::get_policy(0).unwrap();
            sched.run(&Context::stamped(1_000), |_| {
                println!("RUNNING tid {} at {}", sys::gettid(), sys::get_policy(0).unwrap().describe());
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).unwrap();
                println!("AFTER AGENT {}", sys::get_policy(0).unwrap().describe());
            });
            assert_eq!(sys::get_policy(0).unwrap(), before, "policy restored after the job");
        }
        other => panic!("unknown scenario {other:?}"),
    }
    let stats = sched.stats();
    println!(
        "STATS admitted={} completed={} fallbacks={} errors={}",
        stats.admitted, stats.completed, stats.fallbacks, stats.errors
    );
}

/// Starts the namespaced service child for `scenario` against table `path`.
fn spawn_namespaced_service(path: &Path, scenario: &str) -> ChildAgent {
    let exe = std::env::current_exe().unwrap();
    ChildAgent(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(exe)
            .args(["--exact", "ns_service_child", "--nocapture", "--test-threads=1"])
            .env(NS_SERVICE_ENV, path)
            .env(NS_SCENARIO_ENV, scenario)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn unshare"),
    )
}

/// The child's stdout lines until `until` matches one (returned last), or EOF.
fn lines_until(out: &mut impl std::io::BufRead, until: impl Fn(&str) -> bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    while out.read_line(&mut line).unwrap_or(0) > 0 {
        let l = line.trim_end().to_string();
        line.clear();
        let done = until(&l);
        lines.push(l);
        if done {
            break;
        }
    }
    lines
}

const NS_HOST_ENV: &str = "TAILOR_TEST_NS_HOST";

#[test]
fn a_service_in_its_own_pid_namespace_is_ordered_by_the_host_agent() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(why) = namespace_skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    if std::env::var_os(NS_HOST_ENV).is_none() {
        // The host side in a process of its own (this binary, re-executed): run in this one,
        // it left `thousands_of_short_jobs_leave_no_priority_behind`, run after it, without
        // any contended job (all on the fast path). Not understood yet; see docs/kubernetes.md.
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_service_in_its_own_pid_namespace_is_ordered_by_the_host_agent"])
            .args(["--nocapture", "--test-threads=1"])
            .env(NS_HOST_ENV, "1")
            .status()
            .expect("re-run this test in its own process");
        assert!(status.success(), "the namespace test failed in its own process: {status}");
        return;
    }
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = host_path_table("ns-order");
    let _file = TableFile(path.clone());
    // The host threads the pod's thread ids name: none of them may change.
    let decoys: Vec<i32> = (1..=64).collect();
    let before = host_policies(&decoys);
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Orf { c: 1, slice_us: 500.0 }));
    let mut child = spawn_namespaced_service(&path, "order");
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let lines = lines_until(&mut out, |l| l.starts_with("STATS"));
    let status = child.0.wait().unwrap();
    let report = agent.stop();
    assert!(status.success(), "the namespaced service failed: {lines:?}");
    assert!(lines.iter().any(|l| l.ends_with("NS pid 1")), "the service is pid 1 of its own namespace: {lines:?}");
    assert!(lines.iter().any(|l| l == "ORDER old,young"), "the older request runs first: {lines:?}; {report:?}");
    assert!(lines.iter().any(|l| l.contains("admitted=2 completed=2 fallbacks=0 errors=0")), "{lines:?}");
    // The agent wrote the pod's threads (by their host ids): promotions and a demotion.
    assert!(report.promotions + report.self_admitted >= 3 && report.demotions >= 1, "{report:?}");
    assert_eq!((report.errors, report.unresolved, report.reaped), (0, 0, 0), "{report:?}");
    assert_eq!(
        host_policies_changed(&before, &host_policies(&decoys)),
        Vec::<String>::new(),
        "host threads with the pod's ids were never touched"
    );
}

#[test]
fn a_host_agent_stopping_restores_a_namespaced_thread_mid_job() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(why) = namespace_skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let path = host_path_table("ns-restore");
    let _file = TableFile(path.clone());
    let decoys: Vec<i32> = (1..=64).collect();
    let before = host_policies(&decoys);
    let agent = InProcessAgent::start(key_agent_config(&path, 1_000));
    let mut child = spawn_namespaced_service(&path, "restore");
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let running = lines_until(&mut out, |l| l.starts_with("RUNNING"));
    assert!(running.last().is_some_and(|l| l.contains("SCHED_FIFO/")), "the job took its level: {running:?}");
    // Stop the agent mid-job: it restores the job's thread, found by its host id.
    let report = agent.stop();
    std::io::Write::write_all(child.0.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let rest = lines_until(&mut out, |l| l.starts_with("STATS"));
    let status = child.0.wait().unwrap();
    assert!(status.success(), "the namespaced service failed: {running:?} {rest:?}");
    assert_eq!((report.restored, report.errors, report.unresolved), (1, 0, 0), "{report:?}");
    // Back at the policy it was spawned with (this process's: SCHED_IDLE under `chrt -i 0`).
    let restored = format!("AFTER AGENT {}", started_policy().inherited_by_child().describe());
    assert!(rest.contains(&restored), "restored mid-job to {restored:?}: {rest:?}");
    assert_eq!(
        host_policies_changed(&before, &host_policies(&decoys)),
        Vec::<String>::new(),
        "host threads with the pod's ids were never touched"
    );
}
