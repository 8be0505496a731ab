//! A real CPU-bound process and a real spinner: the doctor names the spinner and the run-queue
//! delay it causes when both are pinned to one CPU, and not when the spinner runs on another.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use tailor_doctor::{inspect, InspectOptions, Severity, SysRoot, TargetSpec};

/// A shell busy-loop pinned to `cpu` in the normal class (the test may run under `chrt -i`).
fn spin_on(cpu: usize) -> KillOnDrop {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "while :; do :; done"]);
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
            Ok(())
        });
    }
    KillOnDrop(cmd.spawn().expect("spawn sh"))
}

/// Ends the child it holds (by its pid) however the test exits.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_delay(pid: u32) -> tailor_doctor::Finding {
    let opts =
        InspectOptions { root: SysRoot::live(), target: TargetSpec::Pid(pid), interval: Duration::from_millis(1000) };
    let d = inspect(&opts).expect("the worker is running");
    d.finding("run_delay").cloned().expect("the run-delay check ran")
}

fn names(f: &tailor_doctor::Finding, pid: u32) -> bool {
    f.evidence.iter().any(|e| e.contains(&format!("pid {pid} ")))
}

#[test]
fn a_spinner_on_the_workers_cpu_is_reported_and_one_elsewhere_is_not() {
    // The harness may run at SCHED_IDLE (`chrt -i 0 cargo test`): the sampling thread and the
    // children it forks must compete as ordinary processes do.
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; `param` is valid.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if cpus < 2 {
        println!("SKIP: needs 2 CPUs (one for the worker, one for the spinner's baseline), found {cpus}");
        return;
    }
    let worker = spin_on(1);
    let worker_pid = worker.0.id();

    // Baseline: the spinner runs, but on the other CPU.
    let elsewhere = spin_on(0);
    let apart = run_delay(worker_pid);
    let elsewhere_pid = elsewhere.0.id();
    drop(elsewhere);

    // Contention: the spinner shares the worker's CPU.
    let beside = spin_on(1);
    let together = run_delay(worker_pid);
    let beside_pid = beside.0.id();
    drop(beside);

    println!("apart: {apart:#?}\ntogether: {together:#?}");
    assert!(!names(&apart, elsewhere_pid), "a spinner on another CPU is not other work on the worker's CPU: {apart:?}");
    assert!(names(&together, beside_pid), "the spinner beside the worker is named: {together:?}");
    assert_eq!(together.severity, Severity::Problem, "{together:?}");
    let (share_apart, share_together) = (apart.metrics["wait_share"], together.metrics["wait_share"]);
    // Two equal CFS threads on one CPU: each waits about half of its runnable time.
    assert!(share_together >= 0.25, "wait share with the spinner beside: {share_together:.2}");
    // Other jobs on this machine also delay the worker; only when they left it mostly alone
    // does the spinner's own share show as a clear rise.
    if share_apart < 0.2 {
        assert!(share_together >= 1.3 * share_apart, "wait share {share_together:.2} beside vs {share_apart:.2} apart");
    } else {
        println!("other jobs delayed the worker {share_apart:.2} of its runnable time without the spinner: the rise is not asserted");
    }
}
