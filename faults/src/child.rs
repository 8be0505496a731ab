//! The processes the suite injects faults into, run by the `tailor-faults` binary itself
//! (`tailor-faults agent|supervise|service ...`): a kernel scheduler agent, its supervisor,
//! and a service with a real load on its domain pool. The service reports on stdout, one
//! line per event (see `Service` in `procs`).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tailor_core::{Context, PolicySpec};
use tailor_runtime::cpu::{burn_cpu, monotonic_ns, realtime_ns};
use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::{self, AgentConfig, Enforce};
use tailor_runtime::{available_cpus, BackendSpec, Scheduler, SchedulerOptions};

/// `--name value` pairs after the role.
pub struct Args(HashMap<String, String>);

impl Args {
    pub fn parse(args: &[String]) -> Result<Args, String> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let name = a.strip_prefix("--").ok_or_else(|| format!("{a}: expected --name value"))?;
            let value = it.next().ok_or_else(|| format!("--{name}: missing value"))?;
            map.insert(name.to_string(), value.clone());
        }
        Ok(Args(map))
    }

    fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name} {v}: not a valid value")),
        }
    }

    fn table(&self) -> Result<PathBuf, String> {
        self.0.get("table").map(PathBuf::from).ok_or_else(|| "--table PATH is required".to_string())
    }
}

/// `tailor-faults agent --table P [--enforce priority|band] [--bucket-us B]`: the node's
/// agent, orf on every CPU; stops (restoring every thread) on SIGTERM or stdin EOF.
pub fn agent(args: &Args) -> Result<(), String> {
    let cpus = available_cpus();
    let enforce = match args.get("enforce", "priority".to_string())?.as_str() {
        "band" => Enforce::Band,
        _ => Enforce::priority_us(args.get("bucket-us", 1000.0)?).map_err(|e| e.to_string())?,
    };
    let cfg = AgentConfig {
        table: args.table()?,
        policy: PolicySpec::Orf { c: cpus, slice_us: 500.0 },
        cpus,
        slots: args.get("slots", 256)?,
        verbose: false,
        enforce,
    };
    let report = kernel::run_agent(&cfg, kernel::stop_on_signals()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&cfg.table);
    // The same JSON line as `tailor agent` (AgentReport::from_log reads it).
    eprintln!("{}", report.log_line());
    Ok(())
}

/// `tailor-faults supervise --table P [--hang-ms H] [agent args]`: the agent under the
/// same supervisor as `tailor agent --supervise`.
pub fn supervise(args: &Args, raw: &[String]) -> Result<(), String> {
    let cfg = kernel::supervise::SupervisorConfig {
        program: std::env::current_exe().map_err(|e| e.to_string())?,
        args: std::iter::once("agent".into())
            .chain(raw.chunks(2).filter(|kv| kv[0] != "--hang-ms").flatten().map(Into::into))
            .collect(),
        table: args.table()?,
        hang_ms: args.get("hang-ms", 1000)?,
    };
    kernel::supervise::supervise(&cfg, kernel::stop_on_signals()).map_err(|e| e.to_string())?;
    Ok(())
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with bit 0 set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One ordering probe: a young request starts on CPU 0, an older one (GAT 1 s earlier)
/// arrives 5 ms later; returns which finished first. Kernel-ordered, the old one preempts
/// and finishes first; under the cooperative fallback both share the CPU and the young
/// one, with less work left, finishes first.
fn probe(sched: &Scheduler) -> (u64, &'static str) {
    let finished = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = mpsc::channel();
    let job = |name: &'static str, gat: u64, before_ms: u64, after_ms: u64, started: Option<mpsc::Sender<()>>| {
        let (sched, finished) = (sched.clone(), finished.clone());
        std::thread::spawn(move || {
            let _ = sched.io_thread_started();
            pin_to_cpu0();
            sched.run(&Context::stamped(gat), |_| {
                burn_cpu(before_ms * 1_000_000);
                if let Some(tx) = started {
                    let _ = tx.send(());
                }
                burn_cpu(after_ms * 1_000_000);
                // Timed here, on the job's thread (RT while kernel-ordered), not by a logger.
                finished.lock().unwrap().push((monotonic_ns(), name));
            });
            sched.io_thread_stopped();
        })
    };
    let young = job("young-first", realtime_ns(), 5, 25, Some(started_tx));
    let _ = started_rx.recv_timeout(Duration::from_secs(5));
    let old = job("old-first", realtime_ns() - 1_000_000_000, 30, 0, None);
    let _ = young.join();
    let _ = old.join();
    let order = finished.lock().unwrap();
    order.first().copied().unwrap_or((monotonic_ns(), "none"))
}

/// The raw `exit` system call on the calling thread: it ends without unwinding, so a job
/// it is in never leaves the table (what a thread killed mid-job looks like).
fn exit_thread_now() -> ! {
    // SAFETY: ends this thread only; nothing of it is used again (its stack is leaked).
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("SYS_exit returned")
}

/// A thread that runs one job and ends inside it, then a new thread given its id on
/// purpose, at SCHED_BATCH (a policy nothing of ours sets): anything that writes the old
/// id by mistake changes it. Reports `reused tid=T` (or `reuse-failed`).
fn exit_mid_job_and_reuse(sched: &Scheduler, hold: Arc<AtomicBool>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let s = sched.clone();
    std::thread::spawn(move || {
        s.run(&Context::stamped(realtime_ns()), |_| {
            let _ = tid_tx.send(sys::gettid());
            exit_thread_now();
        })
    });
    let Ok(tid) = tid_rx.recv_timeout(Duration::from_secs(5)) else { return say("reuse-failed".into()) };
    let gone = |tid: i32| !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists();
    while !gone(tid) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Two clock ticks: the agent tells threads apart by id and start time, in ticks (10 ms);
    // a new thread given the id within the same tick is beyond it (docs/failure-modes.md).
    std::thread::sleep(Duration::from_millis(25));
    for _ in 0..2000 {
        if crate::node::next_id_will_be(tid).is_err() {
            break;
        }
        let (got_tx, got_rx) = mpsc::channel();
        let hold = hold.clone();
        std::thread::spawn(move || {
            let me = sys::gettid();
            let reused = me == tid;
            if reused {
                let _ = sys::set_policy(0, ThreadPolicy { policy: libc::SCHED_BATCH, priority: 0 });
            }
            let _ = got_tx.send(reused);
            while reused && hold.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        if got_rx.recv().unwrap_or(false) {
            return say(format!("reused tid={tid}"));
        }
    }
    say("reuse-failed".into());
}

/// `tailor-faults service --table P [--rate R] [--work-us W] ...`: a service on the kernel
/// backend serving an open-loop load on its domain pool until stdin says `stop` (or
/// closes). Prints `ready`, `event fallback|reattach <monotonic ns>`, `probe <ns> <order>`,
/// then per request `lat <arrival ns> <done ns>` and a `done` line with its counters.
pub fn service(args: &Args) -> Result<(), String> {
    let table = args.table()?;
    let rate: f64 = args.get("rate", 300.0)?;
    let work_us: u64 = args.get("work-us", 300)?;
    let block_every: u64 = args.get("block-every", 4)?;
    let panic_every: u64 = args.get("panic-every", 0)?;
    let bursts: bool = args.get("bursts", false)?;
    let probes: bool = args.get("probe", false)?;
    let main_job: bool = args.get("main-job", false)?;
    let exit_mid_job: bool = args.get("exit-mid-job", false)?;
    let options = SchedulerOptions {
        max_threads: args.get("max-threads", 64)?,
        log: false,
        idle_retire_ms: args.get("idle-retire-ms", 10_000)?,
        ..Default::default()
    };
    if panic_every > 0 {
        // Injected panics are expected: keep stderr for the unexpected ones.
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().downcast_ref::<&str>().is_some_and(|m| m.starts_with("injected")) {
                default(info);
            }
        }));
    }
    let sched = Scheduler::with_options(BackendSpec::kernel(&table), options).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    // A thread outside the GAT domain: it never registers, nothing may change it.
    let bystander_stop = stop.clone();
    let _ = std::thread::Builder::new().name("bystander".into()).spawn(move || {
        while !bystander_stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    {
        let (sched, stop) = (sched.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut fell_back = false;
            while !stop.load(Ordering::Relaxed) {
                if sched.fell_back() != fell_back {
                    fell_back = !fell_back;
                    say(format!("event {} {}", if fell_back { "fallback" } else { "reattach" }, monotonic_ns()));
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
    }
    if probes {
        let (sched, stop) = (sched.clone(), stop.clone());
        std::thread::spawn(move || {
            // Above the band while attached, like an I/O thread: it starts the older request
            // on time even while the younger one and the load hold the CPUs.
            let _ = sched.io_thread_started();
            while !stop.load(Ordering::Relaxed) {
                let (at, order) = probe(&sched);
                say(format!("probe {at} {order}"));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
    // The load: open loop at `rate`, or bursts (300 ms at 4× the rate, 300 ms idle).
    let latencies = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let submitted = Arc::new(AtomicU64::new(0));
    let load = {
        let (sched, stop, latencies, submitted) = (sched.clone(), stop.clone(), latencies.clone(), submitted.clone());
        std::thread::spawn(move || {
            let start = monotonic_ns();
            let mut next = start;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let phase_on = !bursts || ((monotonic_ns() - start) / 300_000_000).is_multiple_of(2);
                let interval = (1e9 / rate / if bursts { 4.0 } else { 1.0 }) as u64;
                next += interval;
                let now = monotonic_ns();
                if next > now {
                    std::thread::sleep(Duration::from_nanos(next - now));
                }
                if !phase_on {
                    continue;
                }
                n += 1;
                submitted.fetch_add(1, Ordering::Relaxed);
                let arrival = monotonic_ns();
                let latencies = latencies.clone();
                // Submitted at once; the result is not awaited (the job records its own latency).
                drop(sched.spawn(Context::stamped(realtime_ns()), move |permit| {
                    // Recorded on unwind too: a panicking job still completes.
                    struct Record(Arc<Mutex<Vec<(u64, u64)>>>, u64);
                    impl Drop for Record {
                        fn drop(&mut self) {
                            self.0.lock().unwrap_or_else(|p| p.into_inner()).push((self.1, monotonic_ns()));
                        }
                    }
                    let _record = Record(latencies, arrival);
                    burn_cpu(work_us * 500);
                    if block_every > 0 && n.is_multiple_of(block_every) {
                        permit.blocked(|| std::thread::sleep(Duration::from_micros(100)));
                    }
                    if panic_every > 0 && n.is_multiple_of(panic_every) {
                        panic!("injected panic in job {n}");
                    }
                    burn_cpu(work_us * 500);
                }));
            }
        })
    };
    let hold = Arc::new(AtomicBool::new(true));
    say(format!("ready pid={}", std::process::id()));
    if exit_mid_job {
        exit_mid_job_and_reuse(&sched, hold.clone());
    }
    let (stdin_tx, stdin_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if line.map_or(true, |l| l.trim() == "stop") {
                break;
            }
        }
        let _ = stdin_tx.send(());
    });
    if main_job {
        // The main thread (tid = pid) in a job that waits on a downstream call until stop.
        let _ = sched.run(&Context::stamped(realtime_ns()), |permit| permit.blocked(|| stdin_rx.recv()));
    } else {
        let _ = stdin_rx.recv();
    }
    stop.store(true, Ordering::Relaxed);
    hold.store(false, Ordering::Relaxed);
    let _ = load.join();
    // In flight: every spawned job records itself when it ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let expected = submitted.load(Ordering::Relaxed) - sched.stats().overloaded;
    while (latencies.lock().unwrap().len() as u64) < expected && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = sched.stats();
    let lat = latencies.lock().unwrap();
    for (arrival, done) in lat.iter() {
        say(format!("lat {arrival} {done}"));
    }
    say(format!(
        "done submitted={} rejected={} completed={} panicked={} errors={} fallbacks={} reattached={}",
        submitted.load(Ordering::Relaxed),
        stats.overloaded,
        lat.len(),
        stats.panicked,
        stats.errors,
        stats.fallbacks,
        stats.reattached
    ));
    Ok(())
}
