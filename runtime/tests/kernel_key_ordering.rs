//! Key ordering (`tailor agent --enforce priority`) with real threads and real SCHED_FIFO
//! levels: jobs take levels from their GAT and the kernel orders them; the agent only shifts
//! the levels' base. Needs CAP_SYS_NICE and bounded RT throttling; skips with a message otherwise.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::{run_agent, table, AgentConfig, Enforce};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

#[macro_use]
mod kernel_common;
use kernel_common::*;

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
