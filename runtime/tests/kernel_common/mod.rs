//! Helpers shared by the kernel backend's test binaries (`kernel.rs`, `kernel_key_ordering.rs`,
//! `kernel_namespaces.rs`): the serial lock, skip checks, table files, in-process and child
//! agents, CPU pinning and the jobs the tests run.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::{run_agent, table, AgentConfig, AgentReport, Enforce};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

/// Kernel tests change global scheduling state of this process's threads: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub const AGENT_CHILD_ENV: &str = "TAILOR_TEST_AGENT_TABLE";

pub fn skip_reason() -> Option<String> {
    tailor_runtime::kernel::preflight().err().map(|e| e.to_string())
}

#[allow(unused_macros)] // not every test binary uses both
macro_rules! require_kernel {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("SKIPPED (kernel backend unavailable here): {why}");
            return;
        }
    };
}

pub fn table_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tailor-test-{}-{name}", std::process::id()))
}

/// Removes the table file when the test ends, pass or fail, and the agent's `<table>.lock`:
/// an agent that stops removes its lock itself, but the tests that SIGKILL their agent leave it.
pub struct TableFile(pub PathBuf);
impl Drop for TableFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}

pub fn agent_config(table: &Path, policy: PolicySpec) -> AgentConfig {
    AgentConfig { table: table.to_path_buf(), policy, cpus: 1, slots: 64, verbose: false, enforce: Enforce::Band }
}

/// An in-process agent on its own thread; stopped (and its threads restored) on drop.
pub struct InProcessAgent {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(AgentReport, ThreadPolicy, ThreadPolicy)>>,
}

impl InProcessAgent {
    pub fn start(cfg: AgentConfig) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = cfg.table.clone();
        let thread = std::thread::spawn(move || {
            let before = sys::get_policy(0).unwrap();
            let report = run_agent(&cfg, &flag).expect("agent runs");
            (report, before, sys::get_policy(0).unwrap())
        });
        wait_for_agent(&path);
        InProcessAgent { stop, thread: Some(thread) }
    }

    pub fn stop(mut self) -> AgentReport {
        self.stop.store(true, Ordering::Relaxed);
        let (report, before, after) = self.thread.take().unwrap().join().unwrap();
        assert_eq!(before, after, "the agent thread's own policy is restored");
        report
    }
}

impl Drop for InProcessAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn wait_for_agent(path: &Path) {
    let start = Instant::now();
    loop {
        if let Ok(t) = table::Table::open(path) {
            if t.header().agent_state.load(Ordering::Acquire) == table::AGENT_RUNNING {
                return;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "agent did not start on {}", path.display());
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t with the given bits set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

pub fn pin_to_cpu0() {
    pin(&[0]);
}

/// Keeps the calling (coordinating) thread, and the threads it spawns, off CPU 0,
/// where the band runs: a SCHED_OTHER thread there would wait for the band (only RT
/// throttling's 5% would let it run). Restores all CPUs on drop.
pub struct OffCpu0(Vec<usize>);
impl OffCpu0 {
    pub fn new() -> Option<Self> {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        if n < 2 {
            return None;
        }
        let all: Vec<usize> = (0..n).collect();
        pin(&all[1..]);
        Some(OffCpu0(all))
    }
}
impl Drop for OffCpu0 {
    fn drop(&mut self) {
        pin(&self.0);
    }
}

pub fn scheduler(spec: BackendSpec) -> Scheduler {
    Scheduler::with_options(spec, SchedulerOptions { log: false, ..Default::default() }).unwrap()
}

/// A thread that runs one job of `gat` on CPU 0, burning `ms` of CPU, and records `name`
/// in `finished` when the job ends; `started`: sent on after that many ms of the burn.
/// Checks the thread's policy is back to what it was after the job.
pub fn domain_job(
    sched: &Scheduler,
    finished: &Arc<Mutex<Vec<&'static str>>>,
    name: &'static str,
    gat: u64,
    ms: u64,
    started: Option<(mpsc::Sender<()>, u64)>,
) -> std::thread::JoinHandle<()> {
    let (sched, finished) = (sched.clone(), finished.clone());
    std::thread::spawn(move || {
        let before = sys::get_policy(0).unwrap();
        // A domain thread, like a pool or I/O thread: it takes the request from
        // above the band, so it can register while the band holds CPU 0. (Raised
        // before pinning: pinned at SCHED_OTHER it could not even get to this line.)
        sched.io_thread_started().unwrap();
        pin_to_cpu0();
        sched.run(&Context::stamped(gat), |_| {
            let mut left = ms;
            if let Some((tx, after_ms)) = started {
                cpu::burn_cpu(after_ms * 1_000_000);
                tx.send(()).unwrap();
                left -= after_ms;
            }
            cpu::burn_cpu(left * 1_000_000);
            finished.lock().unwrap().push(name);
        });
        sched.io_thread_stopped();
        assert_eq!(sys::get_policy(0).unwrap(), before, "{name}: policy restored after the job");
    })
}

/// Keeps the test's own threads off CPU 0 (see [`OffCpu0`]), or skips the test.
#[allow(unused_macros)] // not every test binary uses both
macro_rules! off_cpu0_or_skip {
    () => {
        match OffCpu0::new() {
            Some(guard) => guard,
            None => {
                eprintln!("SKIPPED: needs at least 2 CPUs (one for the band, one for the test's own threads)");
                return;
            }
        }
    };
}

/// A young request (GAT 2000) starts first and burns `young_ms` of CPU; once it has
/// run a while, an older request (GAT 1000) arrives and burns `old_ms`. Both pinned to
/// CPU 0. Returns the requests in the order they finished, and checks each thread's
/// policy is back to what it was.
pub fn older_arrives_later(sched: &Scheduler, young_ms: u64, old_ms: u64) -> Vec<&'static str> {
    let finished = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = mpsc::channel();
    // Let the young one really run (10 ms) before the old one shows up.
    let young = domain_job(sched, &finished, "young", 2_000, young_ms, Some((started_tx, 10)));
    started_rx.recv_timeout(Duration::from_secs(20)).expect("the young job starts");
    let old = domain_job(sched, &finished, "old", 1_000, old_ms, None);
    young.join().unwrap();
    old.join().unwrap();
    let order = finished.lock().unwrap().clone();
    order
}

/// Kills the child agent on drop (by pid, via Child), whatever happens.
pub struct ChildAgent(pub Child);

impl ChildAgent {
    /// This test binary, re-executed to run only the test `child_test`, which runs an agent
    /// on `table` (passed in `env`).
    pub fn start(child_test: &str, env: &str, table: &Path) -> ChildAgent {
        ChildAgent(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
                .env(env, table)
                .spawn()
                .unwrap(),
        )
    }
}
impl Drop for ChildAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sets the calling thread's policy for a test and puts the old one back on drop.
pub struct PolicyGuard(ThreadPolicy);
impl PolicyGuard {
    pub fn set(p: ThreadPolicy) -> Self {
        let before = sys::get_policy(0).unwrap();
        sys::set_policy(0, p).unwrap();
        PolicyGuard(before)
    }
}
impl Drop for PolicyGuard {
    fn drop(&mut self) {
        let _ = sys::set_policy(0, self.0);
    }
}

/// Runs `jobs` back-to-back kernel jobs on the calling thread (every third one with a
/// `blocked` call, which raises the thread above the band) and counts the jobs after
/// which the thread's policy, read back with sched_getattr, is not what it was before.
pub fn leftovers_after_tight_loop(sched: &Scheduler, jobs: u64, first_gat: u64) -> (u64, Vec<String>) {
    let before = sys::get_policy(0).unwrap();
    let (mut leftovers, mut seen) = (0, Vec::new());
    for j in 0..jobs {
        sched.run(&Context::stamped(first_gat + j), |permit| {
            if j % 3 == 0 {
                permit.blocked(|| std::hint::black_box(j));
            }
        });
        let after = sys::get_policy(0).unwrap();
        if after != before {
            leftovers += 1;
            if seen.len() < 5 {
                seen.push(format!("job {j}: {} instead of {}", after.describe(), before.describe()));
            }
            let _ = sys::set_policy(0, before);
        }
    }
    (leftovers, seen)
}

/// The policy this test process was started with (SCHED_OTHER, or SCHED_IDLE under
/// `chrt -i 0`): what a restored thread is back at.
pub fn started_policy() -> sys::ThreadPolicy {
    sys::get_policy(std::process::id() as i32).expect("the main thread's policy")
}

/// An agent that enforces by key ordering (`--enforce priority`) with `bucket_ns` of GAT per level.
pub fn key_agent_config(table: &Path, bucket_ns: u64) -> AgentConfig {
    AgentConfig {
        enforce: Enforce::Priority { bucket_ns },
        ..agent_config(table, PolicySpec::Orf { c: 1, slice_us: 500.0 })
    }
}
