//! Per-request overhead of the kernel backend for a service on the host and for the same
//! service in a pod's PID and mount namespaces, both registered with one host agent.
//!
//! The agent runs in this process on a thread, its table on a host path (as the DaemonSet's
//! `hostPath` mount puts it in every pod). Each repetition starts the service twice, as this
//! example re-executed: directly (host) and under `unshare --pid --fork --mount-proc` (pod:
//! its thread ids are the namespace's, which registration resolves to the host's). The order
//! alternates per repetition. Each service run measures, on one thread, the wall time per
//! `run` of an empty job and of a job with one `blocked` call, then a contended phase (more
//! job threads than CPUs, each job 200 µs of CPU: jobs wait and are handed the CPU, so the
//! agent works on every job) with the service's and the agent's CPU per job.
//!
//! `cargo run --release -p tailor-node --example pod_overhead [-- REPS]` as root, on 2+ CPUs
//! (docs/kubernetes.md has the numbers).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailor_core::{Context, PolicySpec};
use tailor_runtime::kernel::{self, run_agent, AgentConfig, Enforce};
use tailor_runtime::{cpu, BackendSpec, Scheduler, SchedulerOptions};

const SERVICE_ENV: &str = "TAILOR_POD_OVERHEAD_TABLE";
const EMPTY_JOBS: u64 = 20_000;
const CONTENDED_THREADS: usize = 4;
const CONTENDED_JOBS: usize = 400;

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

/// The service side: prints `pid <own pid as it sees it>` then one result line
/// `empty_ns blocked_ns contended_jobs_per_s contended_extra_cpu_us`.
fn service(table: PathBuf) {
    let sched =
        Scheduler::with_options(BackendSpec::kernel(&table), SchedulerOptions { log: false, ..Default::default() })
            .unwrap_or_else(|e| panic!("kernel backend on {}: {e}", table.display()));
    println!("pid {}", std::process::id());
    for i in 0..1_000 {
        sched.run(&Context::stamped(i), |_| ());
    }
    let t = Instant::now();
    for i in 0..EMPTY_JOBS {
        std::hint::black_box(sched.run(&Context::stamped(i), |_| i));
    }
    let empty_ns = t.elapsed().as_nanos() as f64 / EMPTY_JOBS as f64;
    let t = Instant::now();
    for i in 0..EMPTY_JOBS {
        sched.run(&Context::stamped(i), |p| p.blocked(|| std::hint::black_box(i)));
    }
    let blocked_ns = t.elapsed().as_nanos() as f64 / EMPTY_JOBS as f64;
    let (t, cpu0) = (Instant::now(), process_cpu_ns());
    let threads: Vec<_> = (0..CONTENDED_THREADS)
        .map(|_| {
            let sched = sched.clone();
            std::thread::spawn(move || {
                sched.io_thread_started().expect("register the job thread");
                for _ in 0..CONTENDED_JOBS {
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
    threads.into_iter().for_each(|h| h.join().expect("job thread"));
    let jobs = (CONTENDED_THREADS * CONTENDED_JOBS) as f64;
    let rate = jobs / t.elapsed().as_secs_f64();
    let extra_us = ((process_cpu_ns() - cpu0) as f64 / jobs - 200_000.0) / 1e3;
    println!("{empty_ns:.0} {blocked_ns:.0} {rate:.0} {extra_us:.1}");
}

/// One service run; returns its numbers and the agent's CPU per contended job, µs.
fn run_service(table: &PathBuf, in_pod: bool) -> ([f64; 4], String) {
    let exe = std::env::current_exe().expect("own path");
    let mut cmd = if in_pod {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc", "--kill-child"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    let mut child = cmd.env(SERVICE_ENV, table).stdout(Stdio::piped()).spawn().expect("start the service");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let pid_line = lines.next().and_then(Result::ok).unwrap_or_default();
    let result = lines.next().and_then(Result::ok).unwrap_or_default();
    let status = child.wait().expect("service exit");
    assert!(status.success(), "the service failed ({status})");
    let v: Vec<f64> = result.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    assert_eq!(v.len(), 4, "service said {result:?}");
    ([v[0], v[1], v[2], v[3]], pid_line)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(table) = std::env::var(SERVICE_ENV) {
        return service(PathBuf::from(table));
    }
    let reps: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    if let Err(why) = kernel::preflight() {
        eprintln!("pod_overhead: kernel backend unavailable here: {why}");
        std::process::exit(2);
    }
    // A host path, as the pod mounts it (not /dev/shm, which is private to each pod).
    let table = std::env::temp_dir().join(format!("tailor-pod-overhead-{}", std::process::id()));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = AgentConfig {
        table: table.clone(),
        policy: PolicySpec::Orf { c: cpus, slice_us: 500.0 },
        cpus,
        slots: 256,
        verbose: false,
        enforce: Enforce::Band,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let agent = std::thread::spawn(move || run_agent(&cfg, &flag));
    while kernel::table::Table::open(&table)
        .map(|t| t.header().agent_state.load(Ordering::Acquire) != kernel::table::AGENT_RUNNING)
        .unwrap_or(true)
    {
        if agent.is_finished() {
            eprintln!("pod_overhead: the agent stopped at start: {:?}", agent.join().map(|r| r.err()));
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let jobs = EMPTY_JOBS as f64 * 2.0 + 1_000.0 + (CONTENDED_THREADS * CONTENDED_JOBS) as f64;
    let mut results: [Vec<[f64; 5]>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..reps {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for in_pod in order {
            let cpu0 = process_cpu_ns();
            let (v, pid_line) = run_service(&table, in_pod);
            // This process is the agent (its main thread only waits): its CPU is the agent's.
            let agent_us = (process_cpu_ns() - cpu0) as f64 / jobs / 1e3;
            let place = if in_pod { "pod " } else { "host" };
            println!(
                "rep {rep} {place} ({pid_line}): empty {:.0} ns, with blocked {:.0} ns, contended {:.0} jobs/s, \
                 service CPU +{:.1} µs/job, agent {agent_us:.2} µs/job",
                v[0], v[1], v[2], v[3]
            );
            results[usize::from(in_pod)].push([v[0], v[1], v[2], v[3], agent_us]);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let report = agent.join();
    let _ = std::fs::remove_file(&table);
    println!("\nmedians of {reps} runs each (agent CPU: all jobs of a run, {jobs:.0})");
    println!("| where | empty job (ns) | job with one blocked (ns) | contended jobs/s | service CPU beyond the work (µs/job) | agent CPU (µs/job) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, place) in ["host", "pod (own PID + mount namespace)"].iter().enumerate() {
        let col = |k: usize| median(results[i].iter().map(|r| r[k]).collect());
        println!("| {place} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} |", col(0), col(1), col(2), col(3), col(4));
    }
    match report {
        Ok(Ok(r)) => println!("\nagent: {r:?}"),
        other => println!("\nagent ended with {other:?}"),
    }
}
