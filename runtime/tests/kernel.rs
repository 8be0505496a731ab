//! The kernel-enforced backend with real threads and real SCHED_FIFO priorities.
//! Needs CAP_SYS_NICE and bounded RT throttling; skips with a message otherwise.
//!
//! Every test pins its job threads to one CPU and runs an agent with `cpus = 1`,
//! so "the band is saturated" is true by construction.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::{run_agent, table, AgentConfig, AgentReport, Enforce, BAND_PRIORITY};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

/// Kernel tests change global scheduling state of this process's threads: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const AGENT_CHILD_ENV: &str = "TAILOR_TEST_AGENT_TABLE";

fn skip_reason() -> Option<String> {
    tailor_runtime::kernel::preflight().err().map(|e| e.to_string())
}

macro_rules! require_kernel {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("SKIPPED (kernel backend unavailable here): {why}");
            return;
        }
    };
}

fn table_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tailor-test-{}-{name}", std::process::id()))
}

/// Removes the table file when the test ends, pass or fail, and the agent's `<table>.lock`:
/// an agent that stops removes its lock itself, but the tests that SIGKILL their agent leave it.
struct TableFile(PathBuf);
impl Drop for TableFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}

fn agent_config(table: &Path, policy: PolicySpec) -> AgentConfig {
    AgentConfig { table: table.to_path_buf(), policy, cpus: 1, slots: 64, verbose: false, enforce: Enforce::Band }
}

/// An in-process agent on its own thread; stopped (and its threads restored) on drop.
struct InProcessAgent {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(AgentReport, ThreadPolicy, ThreadPolicy)>>,
}

impl InProcessAgent {
    fn start(cfg: AgentConfig) -> Self {
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

    fn stop(mut self) -> AgentReport {
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

fn wait_for_agent(path: &Path) {
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

fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t with the given bits set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

fn pin_to_cpu0() {
    pin(&[0]);
}

/// Keeps the calling (coordinating) thread, and the threads it spawns, off CPU 0,
/// where the band runs: a SCHED_OTHER thread there would wait for the band (only RT
/// throttling's 5% would let it run). Restores all CPUs on drop.
struct OffCpu0(Vec<usize>);
impl OffCpu0 {
    fn new() -> Option<Self> {
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

fn scheduler(spec: BackendSpec) -> Scheduler {
    Scheduler::with_options(spec, SchedulerOptions { log: false, ..Default::default() }).unwrap()
}

/// A thread that runs one job of `gat` on CPU 0, burning `ms` of CPU, and records `name`
/// in `finished` when the job ends; `started`: sent on after that many ms of the burn.
/// Checks the thread's policy is back to what it was after the job.
fn domain_job(
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
fn older_arrives_later(sched: &Scheduler, young_ms: u64, old_ms: u64) -> Vec<&'static str> {
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

#[test]
fn an_older_request_preempts_a_younger_one_in_the_band() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("order");
    let _file = TableFile(path.clone());
    // Baseline, same scenario under the Linux default: CFS shares CPU 0, so the young
    // request (less work left) finishes first. This shows the test can tell them apart.
    let order = older_arrives_later(&scheduler(BackendSpec::None), 60, 120);
    assert_eq!(order, ["young", "old"], "Linux default: fair sharing finishes the young request first");

    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Orf { c: 1, slice_us: 500.0 }));
    let sched = scheduler(BackendSpec::kernel(&path));
    let order = older_arrives_later(&sched, 60, 120);
    let stats = sched.stats();
    let report = agent.stop();
    assert_eq!(order, ["old", "young"], "orf: the older request runs first; {report:?}");
    // Into the band three times (young, old, young again): by the agent, or by the young
    // job itself on the fast path when it found the node idle.
    assert!(report.promotions + report.self_admitted >= 3 && report.demotions >= 1, "{report:?}");
    assert_eq!((stats.admitted, stats.completed, stats.fallbacks), (2, 2, 0));
    eprintln!("kernel order test: agent {report:?}");
}

/// Runs the agent in a child process (this test binary, re-executed) so a test can
/// `kill -9` it. Does nothing when run as a normal test.
#[test]
fn agent_child() {
    let Ok(path) = std::env::var(AGENT_CHILD_ENV) else { return };
    let cfg = agent_config(&PathBuf::from(path), PolicySpec::Orf { c: 1, slice_us: 500.0 });
    run_agent(&cfg, &AtomicBool::new(false)).unwrap();
}

/// Kills the child agent on drop (by pid, via Child), whatever happens.
struct ChildAgent(Child);

impl ChildAgent {
    /// This test binary, re-executed to run only the test `child_test`, which runs an agent
    /// on `table` (passed in `env`).
    fn start(child_test: &str, env: &str, table: &Path) -> ChildAgent {
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

#[test]
fn killing_the_agent_restores_threads_and_falls_back_to_cooperative() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("watchdog");
    let _file = TableFile(path.clone());
    let mut child = ChildAgent::start("agent_child", AGENT_CHILD_ENV, &path);
    wait_for_agent(&path);
    let sched = scheduler(BackendSpec::kernel(&path));
    let (tid_tx, tid_rx) = mpsc::channel();
    let release = Arc::new(AtomicBool::new(false));
    let burned = Arc::new(AtomicUsize::new(0));
    let job = {
        let (sched, release, burned) = (sched.clone(), release.clone(), burned.clone());
        std::thread::spawn(move || {
            pin_to_cpu0();
            let before = sys::get_policy(0).unwrap();
            sched.run(&Context::stamped(1), |_| {
                tid_tx.send(sys::gettid()).unwrap();
                while !release.load(Ordering::Relaxed) {
                    cpu::burn_cpu(1_000_000);
                    burned.fetch_add(1, Ordering::Relaxed);
                }
            });
            (before, sys::get_policy(0).unwrap())
        })
    };
    let tid = tid_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    // The agent puts the only job in the band.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sys::get_policy(tid).unwrap().base() != libc::SCHED_FIFO {
        assert!(Instant::now() < deadline, "the agent never promoted the job");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sys::get_policy(tid).unwrap().priority, BAND_PRIORITY);

    child.0.kill().unwrap(); // SIGKILL: no chance to restore anything
    let killed = Instant::now();
    while !sched.fell_back() {
        assert!(killed.elapsed() < Duration::from_secs(5), "the watchdog never fired");
        std::thread::sleep(Duration::from_millis(1));
    }
    let fallback_ms = killed.elapsed().as_secs_f64() * 1e3;
    let restored = sys::get_policy(tid).unwrap();
    release.store(true, Ordering::Relaxed);
    let (before, after) = job.join().unwrap();
    assert_eq!(restored, before, "the watchdog restored the running job's thread");
    assert_eq!(after, before);
    // New jobs still run, through the cooperative fallback.
    assert_eq!(sched.run(&Context::stamped(2), |_| 3), 3);
    let stats = sched.stats();
    assert_eq!((stats.fallbacks, stats.completed), (1, 2));
    eprintln!("watchdog: fell back {fallback_ms:.0} ms after kill -9 of the agent (watchdog_ms = 200)");
    assert!(fallback_ms < 2_000.0, "fallback took {fallback_ms} ms");
}

/// Sets the calling thread's policy for a test and puts the old one back on drop.
struct PolicyGuard(ThreadPolicy);
impl PolicyGuard {
    fn set(p: ThreadPolicy) -> Self {
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
fn leftovers_after_tight_loop(sched: &Scheduler, jobs: u64, first_gat: u64) -> (u64, Vec<String>) {
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

/// Fills the band with `c` young jobs (each holds until released), then runs a job older than
/// all of them on this thread, which waits until it is in the band; true if it got there
/// within 10 s. The band is full, so no fast path or hand-off admits it: only the agent.
fn an_older_job_arriving_at_a_full_band_waits_for_the_agent(sched: &Scheduler, c: usize) -> bool {
    let in_band = |deadline: Instant| {
        while sys::get_policy(0).unwrap().base() != libc::SCHED_FIFO {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    };
    let release = Arc::new(AtomicBool::new(false));
    let entered = Arc::new(AtomicUsize::new(0));
    let young: Vec<_> = (0..c)
        .map(|i| {
            let (sched, release, entered) = (sched.clone(), release.clone(), entered.clone());
            std::thread::spawn(move || {
                sched.run(&Context::stamped(20_000_000 + i as u64), |_| {
                    if in_band(Instant::now() + Duration::from_secs(10)) {
                        entered.fetch_add(1, Ordering::SeqCst);
                    }
                    while !release.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while entered.load(Ordering::SeqCst) < c && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let full = entered.load(Ordering::SeqCst) == c;
    let raised =
        full && sched.run(&Context::stamped(10_000_000), |_| in_band(Instant::now() + Duration::from_secs(10)));
    release.store(true, Ordering::Relaxed);
    for t in young {
        t.join().unwrap();
    }
    assert!(full, "only {} of {c} young jobs entered the band", entered.load(Ordering::SeqCst));
    raised
}

#[test]
fn thousands_of_short_jobs_leave_no_priority_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("tight");
    let _file = TableFile(path.clone());
    // One policy CPU for several threads: jobs are promoted, demoted to SCHED_IDLE and
    // complete while the agent is writing their priorities, which is the racy part.
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Orf { c: 6, slice_us: 500.0 }));
    let sched = scheduler(BackendSpec::kernel(&path));

    let (leftovers, seen) = leftovers_after_tight_loop(&sched, 6_000, 1_000);
    assert_eq!(leftovers, 0, "one thread: jobs left a priority behind: {seen:?}");

    // Several threads at once, each starting from a different policy: a plain thread, a
    // batch thread, and a domain-pool-like thread that sits at the I/O level between jobs.
    let starts = [
        ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 },
        ThreadPolicy { policy: libc::SCHED_BATCH, priority: 0 },
        ThreadPolicy::fifo(tailor_runtime::kernel::IO_PRIORITY),
        ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 },
    ];
    let threads: Vec<_> = starts
        .into_iter()
        .enumerate()
        .map(|(t, start)| {
            let sched = sched.clone();
            std::thread::spawn(move || {
                let _policy = PolicyGuard::set(start);
                let result = leftovers_after_tight_loop(&sched, 2_500, 100_000 * (t as u64 + 1));
                (start, result)
            })
        })
        .collect();
    for t in threads {
        let (start, (leftovers, seen)) = t.join().unwrap();
        assert_eq!(leftovers, 0, "thread starting at {}: jobs left a priority behind: {seen:?}", start.describe());
    }
    // The loops' jobs last microseconds: on a loaded machine the agent may catch none of
    // them running, and a lone job enters the band on the fast path without the agent. An
    // older job arriving at a full band can only be let in by the agent (it preempts the
    // youngest): that proves the promotion path ran, and it too must leave nothing behind.
    let before = sys::get_policy(0).unwrap();
    let raised = an_older_job_arriving_at_a_full_band_waits_for_the_agent(&sched, 6);
    assert!(raised, "the agent never raised an older job that waited 10 s for it: {}", sched.describe());
    assert_eq!(sys::get_policy(0).unwrap(), before, "the waiting job left a priority behind");
    let stats = sched.stats();
    let report = agent.stop();
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert_eq!(stats.completed, 6_000 + 4 * 2_500 + 7, "{stats:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.promotions > 0, "the agent did promote jobs: {report:?} {stats:?} {}", sched.describe());
    eprintln!("tight loop: {stats:?}\n  agent {report:?}");
}

/// A pool thread created while the band saturates its CPU must be able to register at
/// once. Its spawner is an I/O thread (SCHED_FIFO above the band, reset on fork), so
/// the new thread starts at SCHED_OTHER; before the spawner raised it, it waited for
/// the band to drain (100-400 ms latency spikes whenever the pool grew in `tailor demo`).
#[test]
fn a_pool_thread_spawned_under_a_saturated_band_registers_at_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("spawn");
    let _file = TableFile(path.clone());
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Gfifo));
    let sched = scheduler(BackendSpec::kernel(&path));

    // Stands for band jobs holding CPU 0: SCHED_FIFO at the band's priority for 500 ms.
    const HOG_MS: u64 = 500;
    let (hog_tx, hog_rx) = mpsc::channel();
    let hog = std::thread::spawn(move || {
        let before = sys::get_policy(0).unwrap();
        sys::set_policy(0, ThreadPolicy::fifo(BAND_PRIORITY)).unwrap();
        pin_to_cpu0();
        hog_tx.send(()).unwrap();
        cpu::burn_cpu(HOG_MS * 1_000_000);
        sys::set_policy(0, before).unwrap();
    });
    hog_rx.recv_timeout(Duration::from_secs(10)).expect("the hog starts");

    // An I/O thread on CPU 0 hands a request to the pool, which has no thread yet.
    let (spawned_tx, spawned_rx) = mpsc::channel();
    let spawner = {
        let sched = sched.clone();
        std::thread::spawn(move || {
            sched.io_thread_started().unwrap();
            pin_to_cpu0();
            let done = sched.spawn(Context::stamped(1_000), |_| sys::get_policy(0).unwrap());
            spawned_tx.send(Instant::now()).unwrap();
            sched.io_thread_stopped();
            done
        })
    };
    // Registered = its slot in the table is taken (admission into the band may then wait
    // for the hog: same priority), or already done with it (on the fast path the job enters
    // the band itself, and a thread that lowers itself keeps its CPU, so it may finish first).
    let table = table::Table::open(&path).unwrap();
    let registered = || {
        sched.stats().admitted > 0
            || (0..table.slots()).any(|i| table::unpack(table.slot(i).word.load(Ordering::Acquire)).1 != table::FREE)
    };
    let spawned_at = spawned_rx.recv_timeout(Duration::from_secs(10)).expect("the spawner runs");
    while !registered() && spawned_at.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let registered_after = spawned_at.elapsed();
    let done = spawner.join().unwrap();
    let job_policy = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(done).unwrap();
    hog.join().unwrap();
    let stats = sched.stats();
    let report = agent.stop();
    eprintln!(
        "pool thread registered {registered_after:?} after the spawn (hog {HOG_MS} ms); job ran at {job_policy:?}"
    );
    assert!(
        registered_after < Duration::from_millis(HOG_MS / 5),
        "the new pool thread waited {registered_after:?} for the band to drain before it could register; {report:?}"
    );
    assert_eq!(
        job_policy.base(),
        libc::SCHED_FIFO,
        "the job ran at an RT level (the band, or the pool level the agent had not yet changed)"
    );
    assert_eq!((stats.admitted, stats.completed, stats.errors, stats.fallbacks), (1, 1, 0, 0), "{stats:?}");
}

/// A job that finishes on a full node starts the policy's next job itself (the hand-off):
/// the oldest waiting job, not the first to arrive, and without the agent in between.
#[test]
fn a_finishing_job_hands_its_cpu_to_the_oldest_waiting_job() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("handoff");
    let _file = TableFile(path.clone());
    // Non-preemptive GAT order, no ticks: after the arrivals, only hand-offs and the
    // heartbeat can start a job.
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Gfifo));
    let sched = scheduler(BackendSpec::kernel(&path));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = mpsc::channel();
    let first = domain_job(&sched, &finished, "first", 1_000, 50, Some((started_tx, 0)));
    started_rx.recv_timeout(Duration::from_secs(20)).expect("the first job starts");
    // Both wait while the first runs; the younger one arrives first.
    let young = domain_job(&sched, &finished, "young", 3_000, 50, None);
    std::thread::sleep(Duration::from_millis(5));
    let old = domain_job(&sched, &finished, "old", 2_000, 50, None);
    for t in [first, young, old] {
        t.join().unwrap();
    }
    let stats = sched.stats();
    let report = agent.stop();
    let order = finished.lock().unwrap().clone();
    eprintln!("hand-off test: order {order:?}; agent {report:?}");
    assert_eq!(order, ["first", "old", "young"], "GAT order across the hand-offs; {report:?}");
    assert_eq!(report.handoffs, 2, "each finishing job started the next itself; {report:?}");
    assert_eq!((stats.admitted, stats.completed, stats.errors, stats.fallbacks), (3, 3, 0, 0), "{stats:?}");
    assert_eq!(report.errors, 0, "{report:?}");
}

/// A job whose blocking call returns while the node is full waits asleep for its turn:
/// it is not left running above the band for the agent to demote (no demotion at all),
/// and the job holding the CPU hands it over when it finishes.
#[test]
fn a_job_waking_on_a_full_node_waits_asleep_and_is_handed_the_cpu() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("wake");
    let _file = TableFile(path.clone());
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Gfifo));
    let sched = scheduler(BackendSpec::kernel(&path));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let caller = {
        let (sched, finished) = (sched.clone(), finished.clone());
        std::thread::spawn(move || {
            sched.io_thread_started().unwrap();
            pin_to_cpu0();
            sched.run(&Context::stamped(500), |permit| {
                permit.blocked(|| {
                    blocked_tx.send(()).unwrap();
                    // The downstream call: returns while `busy` holds the CPU.
                    std::thread::sleep(Duration::from_millis(30));
                });
                cpu::burn_cpu(10_000_000);
                finished.lock().unwrap().push("caller");
            });
            sched.io_thread_stopped();
        })
    };
    blocked_rx.recv_timeout(Duration::from_secs(20)).expect("the caller blocks");
    // Younger, and non-preemptive order: it keeps the CPU until it is done.
    let busy = domain_job(&sched, &finished, "busy", 1_000, 100, None);
    caller.join().unwrap();
    busy.join().unwrap();
    let stats = sched.stats();
    let report = agent.stop();
    let order = finished.lock().unwrap().clone();
    eprintln!("wake test: order {order:?}; agent {report:?}; {stats:?}");
    assert_eq!(order, ["busy", "caller"], "gfifo does not preempt; {report:?}");
    assert_eq!(report.demotions, 0, "the woken caller never ran outside its turn; {report:?}");
    assert!(report.handoffs >= 1, "busy handed its CPU to the waiting caller; {report:?}");
    assert!(stats.waited_ns >= 30_000_000, "the caller waited for busy after its call: {stats:?}");
    assert_eq!((stats.completed, stats.errors, stats.fallbacks), (2, 0, 0), "{stats:?}");
}

/// Many jobs with short blocking calls on a node the policy keeps full: a block and a
/// wake-up can both fall between two agent passes (the slot reads RUNNABLE before and
/// after), and the woken job then waits for an admission only a fresh look can give.
/// Every job must finish, promptly, with every thread's policy restored.
#[test]
fn a_full_node_with_short_blocking_calls_finishes_every_job() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let cpus = tailor_runtime::available_cpus();
    let report = full_node_churn("churn", cpus, PolicySpec::Orf { c: cpus, slice_us: 500.0 });
    assert!(report.handoffs > 0, "a full node hands CPUs on: {report:?}");
}

/// `orf-adaptive` in the agent: under the same churn, windows go to the helper thread and
/// are decided there while jobs keep flowing; the helper stops with the agent, whose own
/// policy is restored (`InProcessAgent::stop` checks).
#[test]
fn orf_adaptive_decides_on_the_agent_helper_thread() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let cpus = tailor_runtime::available_cpus();
    let policy = PolicySpec::OrfAdaptive { c_max: 8, slice_us: 500.0, window_jobs: 40 };
    let a = full_node_churn("adaptive", cpus, policy).adaptive;
    // 6 jobs per CPU × 300, each leaving the policy twice (block, completion): thousands of
    // visits in windows of 10, 20, then 40.
    assert!(a.windows >= 30, "windows were cut and handed over: {a:?}");
    assert!(a.decided >= 1 && a.decided + a.dropped <= a.windows, "{a:?}");
}

/// Runs 3 threads per CPU of 300 jobs each (100 µs of CPU, a 50 µs blocking call, 100 µs
/// of CPU) under an agent running `policy` on `cpus` CPUs; checks every job finished with
/// its thread's policy restored and no errors, and returns the agent's report.
fn full_node_churn(name: &str, cpus: usize, policy: PolicySpec) -> AgentReport {
    let path = table_path(name);
    let _file = TableFile(path.clone());
    let agent = InProcessAgent::start(AgentConfig { cpus, ..agent_config(&path, policy) });
    let sched = scheduler(BackendSpec::kernel(&path));
    let (threads, jobs) = (3 * cpus, 300);
    let next_gat = Arc::new(AtomicUsize::new(1));
    let (done_tx, done_rx) = mpsc::channel();
    for _ in 0..threads {
        let (sched, next_gat, done_tx) = (sched.clone(), next_gat.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let before = sys::get_policy(0).unwrap();
            sched.io_thread_started().unwrap();
            for _ in 0..jobs {
                let gat = next_gat.fetch_add(1, Ordering::Relaxed) as u64;
                sched.run(&Context::stamped(gat), |permit| {
                    cpu::burn_cpu(100_000);
                    permit.blocked(|| std::thread::sleep(Duration::from_micros(50)));
                    cpu::burn_cpu(100_000);
                });
            }
            sched.io_thread_stopped();
            done_tx.send(sys::get_policy(0).unwrap() == before).unwrap();
        });
    }
    // ~0.1 s of work per CPU per 500 jobs: 60 s means jobs were stranded.
    for t in 0..threads {
        let restored = done_rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!("{} of {threads} threads still stuck after 60 s: {:?}", threads - t, sched.stats())
        });
        assert!(restored, "a thread's policy was not restored");
    }
    let stats = sched.stats();
    let report = agent.stop();
    eprintln!("{name}: {stats:?}\n  agent {report:?}");
    assert_eq!(stats.completed, (threads * jobs) as u64, "{stats:?}");
    assert_eq!((stats.errors, stats.fallbacks, report.errors), (0, 0, 0), "{stats:?} {report:?}");
    report
}

// ---- Key ordering (`tailor agent --enforce priority`): jobs take SCHED_FIFO levels from
// their GAT and the kernel orders them; the agent only shifts the levels' base.

fn key_agent_config(table: &Path, bucket_ns: u64) -> AgentConfig {
    AgentConfig {
        enforce: Enforce::Priority { bucket_ns },
        ..agent_config(table, PolicySpec::Orf { c: 1, slice_us: 500.0 })
    }
}

#[test]
fn key_ordering_runs_the_older_request_first_with_no_agent_in_the_way() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let _off_cpu0 = off_cpu0_or_skip!();
    let path = table_path("key-order");
    let _file = TableFile(path.clone());
    // GAT 1000 and 2000 with 500 ns per level: levels 38 and 36 below a base of 0.
    let agent = InProcessAgent::start(key_agent_config(&path, 500));
    let sched = scheduler(BackendSpec::kernel(&path));
    assert!(sched.describe().contains("by GAT"), "{}", sched.describe());
    let order = older_arrives_later(&sched, 60, 120);
    let stats = sched.stats();
    let report = agent.stop();
    assert_eq!(order, ["old", "young"], "key ordering: the older request runs first; {report:?}");
    // The kernel did the preemption: the agent never wrote a priority.
    assert_eq!((report.shifts, report.rewrites, report.errors), (0, 0, 0), "{report:?}");
    assert_eq!((stats.admitted, stats.completed, stats.fallbacks, stats.errors), (2, 2, 0, 0), "{stats:?}");
}

#[test]
fn key_ordering_shifts_keep_live_jobs_in_order_at_their_levels() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("key-shift");
    let _file = TableFile(path.clone());
    let bucket = 1_000u64;
    let agent = InProcessAgent::start(key_agent_config(&path, bucket));
    let sched = scheduler(BackendSpec::kernel(&path));
    let table = table::Table::open(&path).unwrap();
    // Five jobs that stay blocked (a downstream call that does not return yet), keys 0, 5,
    // 10, 15 and 19 levels apart. The base starts at 0, so the first one lands on level 1
    // and rings; the agent moves the base to it and rewrites it to the top.
    let first_gat = 1_000_000u64;
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let mut waiting = Vec::new();
    for steps in [0u64, 5, 10, 15, 19] {
        let (sched, release_rx) = (sched.clone(), release_rx.clone());
        let (tid_tx, tid_rx) = mpsc::channel();
        let gat = first_gat + steps * bucket;
        let thread = std::thread::spawn(move || {
            let before = sys::get_policy(0).unwrap();
            sched.run(&Context::stamped(gat), |permit| {
                tid_tx.send(sys::gettid()).unwrap();
                permit.blocked(|| release_rx.lock().unwrap().recv().unwrap());
            });
            assert_eq!(sys::get_policy(0).unwrap(), before, "GAT {gat}: policy restored after the job");
        });
        waiting.push((gat, tid_rx.recv_timeout(Duration::from_secs(10)).unwrap(), thread));
        std::thread::sleep(Duration::from_millis(5));
    }
    let h = table.header();
    let levels_now =
        || -> Vec<i32> { waiting.iter().map(|(_, tid, _)| sys::get_policy(*tid).unwrap().priority).collect() };
    assert_eq!(h.base.load(Ordering::SeqCst), first_gat, "the first shift puts the oldest live key at the top");
    let top = table::TOP_LEVEL;
    assert_eq!(levels_now(), [top, top - 5, top - 10, top - 15, top - 19], "one level per bucket below the oldest");

    // Short jobs with ever younger keys, from 20 to 44 levels after the first: the one
    // that lands on the shift level rings, and the agent moves the base so the newest has
    // room again. The blocked jobs more than the room older than it share the top level.
    let mut gat = first_gat + 20 * bucket;
    while gat <= first_gat + 44 * bucket {
        sched.run(&Context::stamped(gat), |_| {});
        gat += bucket / 2;
        std::thread::sleep(Duration::from_micros(200));
    }
    // Let the agent finish any shift in flight (one heartbeat is plenty).
    std::thread::sleep(Duration::from_millis(50));
    let base = h.base.load(Ordering::SeqCst);
    assert!(base >= first_gat + 16 * bucket, "the base moved forward: {base}");
    let levels = levels_now();
    let expected: Vec<i32> = waiting.iter().map(|(g, _, _)| table::level(*g, base, bucket)).collect();
    assert_eq!(levels, expected, "every live job at its key's level under the current base {base}");
    assert!(levels.windows(2).all(|w| w[0] >= w[1]), "older jobs never below younger ones: {levels:?}");
    let newest_level = table::level(gat, base, bucket);
    assert!(newest_level > table::SHIFT_LEVEL, "shifts made room for new keys: level {newest_level}");
    assert!(levels[4] >= newest_level, "the blocked jobs stay above every younger key: {levels:?} vs {newest_level}");
    for _ in &waiting {
        release_tx.send(()).unwrap();
    }
    for (_, _, thread) in waiting {
        thread.join().unwrap();
    }
    let stats = sched.stats();
    let report = agent.stop();
    eprintln!("key shifts: levels {levels:?} base {base}; {stats:?}\n  agent {report:?}");
    assert!(report.shifts >= 2 && report.rewrites >= 2, "the agent shifted and rewrote live jobs: {report:?}");
    assert_eq!((stats.errors, report.errors, stats.completed), (0, 0, 5 + 49), "{stats:?} {report:?}");
}

#[test]
fn key_ordering_under_constant_shifts_leaves_no_priority_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("key-tight");
    let _file = TableFile(path.clone());
    // One ns per level and keys one apart: the base shifts every ~16 jobs, so the agent's
    // rewrites race the threads' own level writes and restores all the time.
    let agent = InProcessAgent::start(key_agent_config(&path, 1));
    let sched = scheduler(BackendSpec::kernel(&path));
    let (leftovers, seen) = leftovers_after_tight_loop(&sched, 6_000, 1_000);
    assert_eq!(leftovers, 0, "one thread: jobs left a priority behind: {seen:?}");
    let starts = [
        ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 },
        ThreadPolicy { policy: libc::SCHED_BATCH, priority: 0 },
        ThreadPolicy::fifo(tailor_runtime::kernel::IO_PRIORITY),
    ];
    let next = Arc::new(AtomicUsize::new(10_000));
    let threads: Vec<_> = starts
        .into_iter()
        .map(|start| {
            let (sched, next) = (sched.clone(), next.clone());
            std::thread::spawn(move || {
                let _policy = PolicyGuard::set(start);
                let before = sys::get_policy(0).unwrap();
                let mut leftovers = 0;
                for _ in 0..2_000 {
                    let gat = next.fetch_add(1, Ordering::Relaxed) as u64;
                    sched.run(&Context::stamped(gat), |permit| permit.blocked(|| std::hint::black_box(gat)));
                    if sys::get_policy(0).unwrap() != before {
                        leftovers += 1;
                        let _ = sys::set_policy(0, before);
                    }
                }
                (start, leftovers)
            })
        })
        .collect();
    for t in threads {
        let (start, leftovers) = t.join().unwrap();
        assert_eq!(leftovers, 0, "thread starting at {}: jobs left a priority behind", start.describe());
    }
    let stats = sched.stats();
    let report = agent.stop();
    eprintln!("key tight loop: {stats:?}\n  agent {report:?}");
    assert_eq!((stats.errors, report.errors), (0, 0), "{stats:?} {report:?}");
    assert_eq!(stats.completed, 6_000 + 3 * 2_000, "{stats:?}");
    assert!(report.shifts > 10, "the keys kept running out of levels: {report:?}");
}

#[test]
fn key_ordering_by_deadline_keeps_jobs_without_one_at_the_bottom() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("key-edf");
    let _file = TableFile(path.clone());
    let bucket = 1_000u64;
    let agent = InProcessAgent::start(AgentConfig {
        enforce: Enforce::Priority { bucket_ns: bucket },
        ..agent_config(&path, PolicySpec::Edf)
    });
    let sched = scheduler(BackendSpec::kernel(&path));
    assert!(sched.describe().contains("by deadline"), "{}", sched.describe());
    let table = table::Table::open(&path).unwrap();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    // Blocked jobs: a deadline, no deadline (NEVER), a deadline centuries away, and a
    // deadline 5 levels after the first.
    let first = 2_000_000u64;
    let mut jobs = Vec::new();
    for deadline in [first, tailor_core::time::NEVER, u64::MAX - 1, first + 5 * bucket] {
        let (sched, release_rx) = (sched.clone(), release_rx.clone());
        let (tid_tx, tid_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let ctx = Context { deadline, ..Context::stamped(1_000) };
            sched.run(&ctx, |permit| {
                tid_tx.send(sys::gettid()).unwrap();
                permit.blocked(|| release_rx.lock().unwrap().recv().unwrap());
            });
        });
        jobs.push((tid_rx.recv_timeout(Duration::from_secs(10)).unwrap(), thread));
        std::thread::sleep(Duration::from_millis(30));
    }
    let base = table.header().base.load(Ordering::SeqCst);
    let levels: Vec<i32> = jobs.iter().map(|(tid, _)| sys::get_policy(*tid).unwrap().priority).collect();
    for _ in &jobs {
        release_tx.send(()).unwrap();
    }
    for (_, thread) in jobs {
        thread.join().unwrap();
    }
    let report = agent.stop();
    assert_eq!(base, first, "distant and missing deadlines do not move the base: {report:?}");
    assert_eq!(levels, [table::TOP_LEVEL, 1, 1, table::TOP_LEVEL - 5], "{report:?}");
    assert_eq!((report.errors, sched.stats().errors), (0, 0));
}

// ---- The agent dies under key ordering while pool threads run jobs (issue: `kill -9` of
// `tailor agent` during `tailor demo --modes orf` left `tailor-job` threads at SCHED_FIFO 41).

const KEY_AGENT_CHILD_ENV: &str = "TAILOR_TEST_KEY_AGENT_TABLE";

/// Runs a key-ordering agent in a child process (see [`agent_child`]).
#[test]
fn key_agent_child() {
    let Ok(path) = std::env::var(KEY_AGENT_CHILD_ENV) else { return };
    let cpus = tailor_runtime::available_cpus();
    let cfg = AgentConfig {
        cpus,
        policy: PolicySpec::Orf { c: cpus, slice_us: 500.0 },
        ..key_agent_config(&PathBuf::from(path), 1_000_000)
    };
    run_agent(&cfg, &AtomicBool::new(false)).unwrap();
}

/// The policy this test process was started with (SCHED_OTHER, or SCHED_IDLE under
/// `chrt -i 0`): what a restored thread is back at.
fn started_policy() -> sys::ThreadPolicy {
    sys::get_policy(std::process::id() as i32).expect("the main thread's policy")
}

/// Every thread of this process at another policy than the process started with, read back
/// from the kernel (but the `tailor-job` pool threads earlier tests' schedulers left: this
/// test's pool is named `key-kill-job`).
fn raised_threads_of_this_process() -> Vec<String> {
    let started = started_policy();
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let p = sys::get_policy(tid).ok()?;
            let raised = (p.base(), p.priority) != (started.base(), started.priority);
            let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
            (raised && name.trim() != "tailor-job").then(|| format!("tid {tid} ({}) at {}", name.trim(), p.describe()))
        })
        .collect()
}

#[test]
fn killing_a_key_ordering_agent_leaves_no_thread_of_the_service_raised() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("key-kill");
    let _file = TableFile(path.clone());
    let mut child = ChildAgent::start("key_agent_child", KEY_AGENT_CHILD_ENV, &path);
    wait_for_agent(&path);
    let options = SchedulerOptions { log: false, thread_name: "key-kill-job".into(), ..Default::default() };
    let sched = Scheduler::with_options(BackendSpec::kernel(&path), options).unwrap();
    // Three pool jobs in flight across the kill, as in `tailor demo`: pool threads raised
    // to the I/O level, each job at its key's level.
    let release = Arc::new(AtomicBool::new(false));
    let jobs: Vec<_> = (0..3)
        .map(|_| {
            let release = release.clone();
            sched.spawn(Context::stamped(cpu::realtime_ns()), move |_| {
                while !release.load(Ordering::Relaxed) {
                    cpu::burn_cpu(200_000);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while raised_threads_of_this_process().iter().filter(|t| t.contains("key-kill-job")).count() < 3 {
        assert!(Instant::now() < deadline, "pool threads never raised: {:?}", raised_threads_of_this_process());
        std::thread::sleep(Duration::from_millis(2));
    }

    child.0.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    while !sched.fell_back() {
        assert!(killed.elapsed() < Duration::from_secs(5), "the watchdog never fired");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The fallback restores every thread while the jobs still run ...
    let deadline = Instant::now() + Duration::from_secs(2);
    while !raised_threads_of_this_process().is_empty() {
        assert!(Instant::now() < deadline, "after the fallback, still raised: {:?}", raised_threads_of_this_process());
        std::thread::sleep(Duration::from_millis(1));
    }
    let restored_ms = killed.elapsed().as_secs_f64() * 1e3;
    // ... and the jobs' ends do not raise their pool threads back to the I/O level.
    release.store(true, Ordering::Relaxed);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for job in jobs {
        rt.block_on(job).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(raised_threads_of_this_process(), Vec::<String>::new(), "raised again after the jobs ended");
    // New jobs run cooperatively, leaving nothing raised either.
    rt.block_on(sched.spawn(Context::stamped(cpu::realtime_ns()), |_| ())).unwrap();
    assert_eq!(raised_threads_of_this_process(), Vec::<String>::new());
    eprintln!("key-ordering kill: every thread restored {restored_ms:.0} ms after kill -9 (watchdog 200 ms)");
}

// ---- A service in its own PID and mount namespace (a pod) registered with a host agent.
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
    assert_eq!(host_policies(&decoys), before, "host threads with the pod's ids were never touched");
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
    assert!(rest.iter().any(|l| *l == restored), "restored mid-job to {restored:?}: {rest:?}");
    assert_eq!(host_policies(&decoys), before, "host threads with the pod's ids were never touched");
}

#[test]
fn dropping_the_scheduler_restores_and_ends_its_idle_pool_threads_at_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_kernel!();
    let path = table_path("drop");
    let _file = TableFile(path.clone());
    let agent = InProcessAgent::start(agent_config(&path, PolicySpec::Gfifo));
    // Pool threads that would idle for an hour: only the drop can end them in time.
    let sched = Scheduler::with_options(
        BackendSpec::kernel(&path),
        SchedulerOptions { log: false, idle_retire_ms: 3_600_000, ..Default::default() },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let jobs: Vec<_> = (0..3u64)
        .map(|i| {
            sched.spawn(Context::stamped(1_000 + i), |_| {
                cpu::burn_cpu(2_000_000);
                sys::gettid()
            })
        })
        .collect();
    let mut tids: Vec<i32> = jobs.into_iter().map(|j| rt.block_on(j).expect("job ran")).collect();
    tids.sort_unstable();
    tids.dedup();
    // Idle now, at the I/O level above the band (raised by their spawner).
    let deadline = Instant::now() + Duration::from_secs(5);
    while tids.iter().all(|&t| sys::get_policy(t).ok().map(|p| p.base()) != Some(libc::SCHED_FIFO)) {
        assert!(Instant::now() < deadline, "no pool thread ever idled above the band: {tids:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(sched);
    let dropped = Instant::now();
    let alive = |t: i32| Path::new(&format!("/proc/self/task/{t}")).exists();
    while tids.iter().any(|&t| alive(t)) {
        for &t in &tids {
            if let Ok(p) = sys::get_policy(t) {
                assert_ne!(p.base(), libc::SCHED_FIFO, "thread {t} still raised after the drop");
            }
        }
        assert!(dropped.elapsed() < Duration::from_secs(5), "idle pool threads did not end after the drop: {tids:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!(
        "drop: {} pool threads restored and ended in {:.1} ms",
        tids.len(),
        dropped.elapsed().as_secs_f64() * 1e3
    );
    agent.stop();
}
