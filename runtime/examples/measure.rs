//! Measures the runtime itself: per-request overhead of each backend, context parsing,
//! the kernel path's cost on a saturated node (where jobs wait and hand CPUs on), the
//! kernel agent's CPU cost per rotation at several slices, and how much CPU a
//! SCHED_OTHER spinner still gets while the band saturates its CPU.
//!
//! `cargo run --release -p tailor-runtime --example measure` (kernel parts need
//! CAP_SYS_NICE and at least 2 CPUs; they are skipped with a message otherwise).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use tailor_core::wire::WireStats;
use tailor_core::{Context, PolicySpec};
use tailor_runtime::http::ContextConfig;
use tailor_runtime::kernel::{self, run_agent, sys, AgentConfig, AgentReport, Enforce};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

const REQUESTS: u64 = 20_000;

fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t with the given bits set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

struct Agent {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<AgentReport>>,
    path: PathBuf,
}

impl Agent {
    fn start(name: &str, policy: PolicySpec, cpus: usize) -> Agent {
        Agent::start_enforcing(name, policy, cpus, Enforce::Band)
    }

    fn start_enforcing(name: &str, policy: PolicySpec, cpus: usize, enforce: Enforce) -> Agent {
        let path = PathBuf::from(format!("/dev/shm/tailor-measure-{}-{name}", std::process::id()));
        let cfg = AgentConfig { table: path.clone(), policy, cpus, slots: 256, verbose: false, enforce };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run_agent(&cfg, &flag).expect("agent"));
        while kernel::table::Table::open(&path)
            .map(|t| t.header().agent_state.load(Ordering::Acquire) != kernel::table::AGENT_RUNNING)
            .unwrap_or(true)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        Agent { stop, thread: Some(thread), path }
    }

    fn stop(mut self) -> AgentReport {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn quiet(spec: BackendSpec) -> Scheduler {
    Scheduler::with_options(spec, SchedulerOptions { log: false, ..Default::default() }).unwrap()
}

/// ns per `run` of an empty job, one thread, no contention: the backend's own cost.
fn per_request_ns(sched: &Scheduler) -> f64 {
    let ctx = Context::stamped(1);
    for _ in 0..1_000 {
        sched.run(&ctx, |_| ());
    }
    let start = Instant::now();
    for i in 0..REQUESTS {
        let ctx = Context::stamped(i);
        std::hint::black_box(sched.run(&ctx, |_| i));
    }
    start.elapsed().as_nanos() as f64 / REQUESTS as f64
}

/// ns per `run` with one `blocked` call inside (a downstream call), as a tier does.
fn per_request_with_block_ns(sched: &Scheduler) -> f64 {
    let start = Instant::now();
    for i in 0..REQUESTS {
        sched.run(&Context::stamped(i), |p| p.blocked(|| std::hint::black_box(i)));
    }
    start.elapsed().as_nanos() as f64 / REQUESTS as f64
}

fn context_parse_ns() -> f64 {
    let mut headers = HeaderMap::new();
    headers.insert("tailor-context", "1.g1732272000123456789.d1732272000125456789.c0.k4.h2".parse().unwrap());
    headers.insert("baggage", "a=b,tailor=1.g1732272000123456789.d1732272000125456789.c0.k4.h2".parse().unwrap());
    let (cfg, stats) = (ContextConfig::hop(), WireStats::new());
    let now = 1_732_272_000_200_000_000;
    let start = Instant::now();
    for _ in 0..REQUESTS * 10 {
        std::hint::black_box(cfg.extract(std::hint::black_box(&mut headers), now, &stats));
    }
    start.elapsed().as_nanos() as f64 / (REQUESTS * 10) as f64
}

/// CPU share a SCHED_OTHER spinner on CPU 0 gets while one band job burns CPU 0 for 1 s.
fn spinner_share() -> f64 {
    let agent = Agent::start("spinner", PolicySpec::Fifo, 1);
    let sched = quiet(BackendSpec::kernel(&agent.path));
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin(&[0]);
            let (t0, c0) = (Instant::now(), cpu::thread_cpu_ns());
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            (cpu::thread_cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let job = {
        let sched = sched.clone();
        std::thread::spawn(move || {
            sched.io_thread_started().unwrap();
            pin(&[0]);
            let t0 = Instant::now();
            sched.run(&Context::stamped(1), |_| {
                while t0.elapsed() < Duration::from_millis(2_000) {
                    cpu::burn_cpu(1_000_000);
                }
            });
            sched.io_thread_stopped();
        })
    };
    job.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let share = spinner.join().unwrap();
    agent.stop();
    share
}

/// Agent CPU per rotation: `jobs` jobs pinned to CPU 0 share it under orf (c = 6) for
/// `burn_ms` each, at `slice_us`. Returns (rotations, agent CPU ns, ns per rotation, wall ms).
fn rotation_cost(slice_us: f64, jobs: usize, burn_ms: u64) -> (u64, u64, f64, f64) {
    let agent = Agent::start(&format!("rot{slice_us}"), PolicySpec::Orf { c: 6, slice_us }, 1);
    let sched = quiet(BackendSpec::kernel(&agent.path));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..jobs)
        .map(|j| {
            let sched = sched.clone();
            std::thread::spawn(move || {
                sched.io_thread_started().unwrap();
                pin(&[0]);
                sched.run(&Context::stamped(1 + j as u64), |_| cpu::burn_cpu(burn_ms * 1_000_000));
                sched.io_thread_stopped();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let r = agent.stop();
    (r.rotations, r.cpu_ns, r.cpu_ns as f64 / r.rotations.max(1) as f64, wall)
}

fn process_cpu_ns() -> u64 {
    // SAFETY: getrusage with a valid out-pointer.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// A saturated node, the case the fast path does not cover: `threads` domain threads
/// (above the band between jobs, as pool threads are), each running `jobs` jobs of
/// 200 µs CPU with one 100 µs downstream call in the middle, GAT = the clock at the job's
/// start (as an edge stamps it), on every CPU. Returns jobs per second and the CPU per job beyond its 200 µs of work, µs
/// (the whole process, an in-process agent included).
fn saturated_node(sched: &Scheduler, threads: usize, jobs: usize) -> (f64, f64) {
    let (t0, cpu0) = (Instant::now(), process_cpu_ns());
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let sched = sched.clone();
            std::thread::spawn(move || {
                sched.io_thread_started().unwrap();
                for _ in 0..jobs {
                    sched.run(&Context::stamped(cpu::monotonic_ns()), |p| {
                        cpu::burn_cpu(100_000);
                        p.blocked(|| std::thread::sleep(Duration::from_micros(100)));
                        cpu::burn_cpu(100_000);
                    });
                }
                sched.io_thread_stopped();
            })
        })
        .collect();
    handles.into_iter().for_each(|t| t.join().unwrap());
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), process_cpu_ns() - cpu0);
    let n = (threads * jobs) as f64;
    (n / wall, (cpu as f64 / n - 200_000.0) / 1e3)
}

fn main() {
    println!("context parse + clamp (hop, both carriers present): {:.0} ns", context_parse_ns());
    let none = quiet(BackendSpec::None);
    println!(
        "none:        {:>7.0} ns/request, {:>7.0} with one blocked()",
        per_request_ns(&none),
        per_request_with_block_ns(&none)
    );
    let coop = quiet(BackendSpec::Cooperative { policy: PolicySpec::Orf { c: 6, slice_us: 30.0 }, c: 2 });
    println!(
        "cooperative: {:>7.0} ns/request, {:>7.0} with one blocked()  (orf, c=2)",
        per_request_ns(&coop),
        per_request_with_block_ns(&coop)
    );
    let kernel_ok = kernel::preflight()
        .map_err(|e| e.to_string())
        .and_then(|_| (tailor_runtime::available_cpus() >= 2).then_some(()).ok_or_else(|| "needs 2 CPUs".to_string()));
    if let Err(why) = kernel_ok {
        println!("kernel: SKIPPED ({why})");
        return;
    }
    {
        let agent = Agent::start("overhead", PolicySpec::Orf { c: 6, slice_us: 500.0 }, 2);
        let k = quiet(BackendSpec::kernel(&agent.path));
        let before = sys::get_policy(0).unwrap();
        println!("kernel:      {:>7.0} ns/request, {:>7.0} with one blocked()  (orf c=6 slice 500 µs, 2 CPUs; job thread's own cost)", per_request_ns(&k), per_request_with_block_ns(&k));
        let after = sys::get_policy(0).unwrap();
        let r = agent.stop();
        println!(
            "  thread policy before {} after {} (stats().errors: {})",
            before.describe(),
            after.describe(),
            k.stats().errors
        );
        println!(
            "  agent for those {} jobs: {:.0} ns CPU per job, {} promotions",
            2 * (REQUESTS + 1_000),
            r.cpu_ns as f64 / r.arrivals.max(1) as f64,
            r.promotions
        );
    }
    {
        // Key ordering: the job thread takes its level itself; the agent only shifts.
        let enforce = Enforce::Priority { bucket_ns: 2_000_000 };
        let agent = Agent::start_enforcing("key-overhead", PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2, enforce);
        let k = quiet(BackendSpec::kernel(&agent.path));
        let before = sys::get_policy(0).unwrap();
        println!(
            "kernel, key ordering: {:>7.0} ns/request, {:>7.0} with one blocked()  (orf c=2, 2 ms per level; job thread's own cost)",
            per_request_ns(&k),
            per_request_with_block_ns(&k)
        );
        let after = sys::get_policy(0).unwrap();
        let r = agent.stop();
        println!(
            "  thread policy before {} after {} (stats().errors: {}); agent for those {} jobs: {:.0} ns CPU per job, {} shifts",
            before.describe(),
            after.describe(),
            k.stats().errors,
            2 * REQUESTS + 1_000,
            r.cpu_ns as f64 / (2 * REQUESTS + 1_000) as f64,
            r.shifts
        );
    }
    {
        let (threads, jobs) = (6, 1_000);
        let (rate, extra) = saturated_node(&none, threads, jobs);
        println!(
            "saturated node, {threads} threads × {jobs} jobs of 200 µs CPU + one 100 µs call, 2 CPUs: none: {rate:.0} jobs/s, {extra:.1} µs CPU per job beyond the work"
        );
        let agent = Agent::start("saturated", PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2);
        let k = quiet(BackendSpec::kernel(&agent.path));
        let (rate, extra) = saturated_node(&k, threads, jobs);
        let r = agent.stop();
        println!(
            "  kernel orf c=2: {rate:.0} jobs/s, {extra:.1} µs CPU per job beyond the work (agent {:.1} µs per job)\n  agent {r:?}",
            r.cpu_ns as f64 / 1e3 / r.arrivals.max(1) as f64
        );
        let enforce = Enforce::Priority { bucket_ns: 200_000 };
        let agent = Agent::start_enforcing("saturated-key", PolicySpec::Orf { c: 2, slice_us: 500.0 }, 2, enforce);
        let k = quiet(BackendSpec::kernel(&agent.path));
        let (rate, extra) = saturated_node(&k, threads, jobs);
        let r = agent.stop();
        println!(
            "  kernel orf c=2, key ordering (200 µs per level): {rate:.0} jobs/s, {extra:.1} µs CPU per job beyond the work (agent {:.1} µs per job)\n  agent {r:?}",
            r.cpu_ns as f64 / 1e3 / (threads * jobs) as f64
        );
    }
    println!(
        "SCHED_OTHER spinner on the band's CPU while the band is saturated: {:.1}% of the CPU",
        100.0 * spinner_share()
    );
    for slice_us in [100.0, 500.0, 1000.0] {
        let (rot, cpu_ns, per, wall) = rotation_cost(slice_us, 3, 150);
        println!(
            "orf slice {slice_us:>6} µs, 3 jobs × 150 ms on 1 CPU: {rot} rotations, agent {:.1} ms CPU = {per:.0} ns/rotation = {:.2}% of one CPU over {wall:.0} ms",
            cpu_ns as f64 / 1e6,
            100.0 * cpu_ns as f64 / (wall * 1e6)
        );
    }
}
