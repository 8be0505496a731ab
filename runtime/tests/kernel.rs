//! The kernel-enforced backend with real threads and real SCHED_FIFO priorities.
//! Needs CAP_SYS_NICE and bounded RT throttling; skips with a message otherwise.
//!
//! Every test pins its job threads to one CPU and runs an agent with `cpus = 1`,
//! so "the band is saturated" is true by construction.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::{run_agent, table, AgentConfig, AgentReport, BAND_PRIORITY};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

#[macro_use]
mod kernel_common;
use kernel_common::*;

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
