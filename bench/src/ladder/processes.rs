//! The ladder's processes: a probe server that burns a given CPU time per request on worker
//! threads, an open-loop client that measures latency from the intended send time, and a
//! single-thread spinner. Each runs as its own process (so the agent can tier it) and exits when
//! its stdin closes, so nothing outlives the benchmark that started it.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tailor_core::rng::Rng;
use tailor_core::time::thread_cpu_ns;

/// Exits the process when stdin reaches EOF (the parent died or let go of us).
fn exit_on_stdin_eof() {
    std::thread::spawn(|| {
        let mut buf = [0u8; 64];
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        while matches!(lock.read(&mut buf), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
}

/// Burns `ns` of this thread's CPU time (not wall time: preemption shows up as latency).
fn burn(ns: u64) {
    let start = thread_cpu_ns();
    let mut x = 1u64;
    while thread_cpu_ns().wrapping_sub(start) < ns {
        for _ in 0..64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
}

/// `probe-server --workers N`: prints "port P", serves connections until stdin closes.
pub fn probe_server(workers: usize) -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("port {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    exit_on_stdin_eof();
    for stream in listener.incoming() {
        let stream = stream?;
        std::thread::spawn(move || {
            let _ = serve(stream, workers);
        });
    }
    Ok(())
}

fn serve(stream: TcpStream, workers: usize) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // Bounded: when workers fall behind, the reader blocks and TCP pushes back on the client,
    // whose latency (measured from the intended send time) shows it.
    let (tx, rx) = mpsc::sync_channel::<(u64, u64)>(4096);
    let rx = Arc::new(Mutex::new(rx));
    let writer = Arc::new(Mutex::new(stream.try_clone()?));
    // Once the client is gone its backlog is dropped, not burned: it would leak into the next window.
    let closed = Arc::new(AtomicBool::new(false));
    for _ in 0..workers.max(1) {
        let (rx, writer, closed) = (rx.clone(), writer.clone(), closed.clone());
        std::thread::spawn(move || loop {
            let job = rx.lock().map(|r| r.recv());
            let Ok(Ok((id, service_ns))) = job else { return };
            if closed.load(Ordering::Relaxed) {
                continue;
            }
            burn(service_ns);
            let ok = writer.lock().map(|mut w| w.write_all(&id.to_le_bytes()).is_ok()).unwrap_or(false);
            if !ok {
                closed.store(true, Ordering::Relaxed);
            }
        });
    }
    let mut reader = stream;
    let mut buf = [0u8; 16];
    while reader.read_exact(&mut buf).is_ok() {
        let id = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let service_ns = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
        if tx.send((id, service_ns)).is_err() {
            break;
        }
    }
    closed.store(true, Ordering::Relaxed);
    Ok(())
}

/// What the load client talks to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Protocol {
    /// The probe server: 16-byte requests (id, CPU ns), 8-byte replies (id), any order.
    Probe,
    /// A Redis server: `EVAL` of a Lua loop of `iterations` steps per request (CPU-bound in
    /// the server, one request at a time), integer replies in request order.
    Redis { iterations: u64 },
}

/// The Lua loop a Redis request runs: its CPU cost grows with ARGV[1].
pub const REDIS_SCRIPT: &str = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1";

/// One `EVAL REDIS_SCRIPT 0 <iterations>` request in RESP.
pub fn redis_request(iterations: u64) -> Vec<u8> {
    let n = iterations.to_string();
    let args = ["EVAL", REDIS_SCRIPT, "0", n.as_str()];
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    out.into_bytes()
}

/// Load-client parameters.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub protocol: Protocol,
    /// SCHED_FIFO priority for the client's threads (protected from the spinners, as a
    /// separate client machine would be), or `None` to run at the default policy.
    pub rt_priority: Option<i32>,
    pub port: u16,
    pub rate_per_s: f64,
    pub duration: Duration,
    pub warmup: Duration,
    pub service_us: f64,
    pub exponential: bool,
    pub seed: u64,
}

/// Load-client result (one JSON line on stdout). A window in which no request came back has
/// no latencies: JSON writes them as `null`, read back as NaN.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClientResult {
    pub sent: u64,
    pub measured: u64,
    pub lost: u64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p999_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_us: f64,
}

fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `load-client`: connects, prints "ready", waits for a line on stdin, then sends open-loop at a
/// fixed rate and prints a `ClientResult` JSON line.
pub fn load_client(opts: &ClientOptions) -> std::io::Result<()> {
    // Wake-ups on time: the default 50 µs timer slack would blur the intended send times.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    if let Some(priority) = opts.rt_priority {
        // Before any thread starts: the receiver inherits it.
        let param = libc::sched_param { sched_priority: priority };
        // SAFETY: a valid sched_param for the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            return Err(std::io::Error::other(format!(
                "load client: SCHED_FIFO/{priority}: {} (needs root, and an RT budget in its cpu cgroup)",
                std::io::Error::last_os_error()
            )));
        }
    }
    let stream = TcpStream::connect(("127.0.0.1", opts.port))?;
    stream.set_nodelay(true)?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(());
    }
    exit_on_stdin_eof();
    let n = (opts.rate_per_s * opts.duration.as_secs_f64()).ceil() as usize;
    let period_ns = 1e9 / opts.rate_per_s;
    let latency: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(u64::MAX)).collect());
    let start = Instant::now() + Duration::from_millis(5);
    let done = Arc::new(AtomicBool::new(false));
    let mut reader = stream.try_clone()?;
    reader.set_read_timeout(Some(Duration::from_millis(100)))?;
    let record = {
        let latency = latency.clone();
        move |id: usize| {
            let now = start.elapsed().as_nanos() as u64;
            let intended = (id as f64 * period_ns) as u64;
            match latency.get(id) {
                Some(slot) => {
                    slot.store(now.saturating_sub(intended), Ordering::Relaxed);
                    true
                }
                None => false,
            }
        }
    };
    let receiver = if let Protocol::Redis { .. } = opts.protocol {
        let done = done.clone();
        // Replies come in request order, one line each (`:1`, or `-ERR ...`).
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut got = 0usize;
            while got < n && !done.load(Ordering::Relaxed) {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        for &b in &buf[..k] {
                            if b == b'\n' {
                                record(got);
                                got += 1;
                            }
                        }
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
        })
    } else {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            let mut got = 0usize;
            let mut filled = 0usize;
            while got < n && !done.load(Ordering::Relaxed) {
                match reader.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(k) => {
                        filled += k;
                        if filled == 8 {
                            filled = 0;
                            if record(u64::from_le_bytes(buf) as usize) {
                                got += 1;
                            }
                        }
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
        })
    };
    let mut rng = Rng::new(opts.seed);
    let mut writer = stream;
    let redis = match opts.protocol {
        Protocol::Redis { iterations } => Some(redis_request(iterations)),
        Protocol::Probe => None,
    };
    for id in 0..n {
        let intended = start + Duration::from_nanos((id as f64 * period_ns) as u64);
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        if let Some(request) = &redis {
            writer.write_all(request)?;
            continue;
        }
        let service_ns = if opts.exponential { rng.exp(opts.service_us * 1e3) } else { opts.service_us * 1e3 } as u64;
        let mut msg = [0u8; 16];
        msg[..8].copy_from_slice(&(id as u64).to_le_bytes());
        msg[8..].copy_from_slice(&service_ns.to_le_bytes());
        writer.write_all(&msg)?;
    }
    // Responses get a grace period of 2 s after the last send; later ones count as lost.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !receiver.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    done.store(true, Ordering::Relaxed);
    let _ = receiver.join();
    let warm = (opts.warmup.as_secs_f64() * opts.rate_per_s) as usize;
    let mut samples: Vec<u64> = latency[warm.min(n)..].iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let lost = samples.iter().filter(|&&v| v == u64::MAX).count() as u64;
    samples.retain(|&v| v != u64::MAX);
    samples.sort_unstable();
    let q = |p: f64| -> f64 {
        if samples.is_empty() {
            return f64::NAN;
        }
        let i = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i] as f64 / 1e3
    };
    let mean = samples.iter().map(|&v| v as f64).sum::<f64>() / samples.len().max(1) as f64 / 1e3;
    let result = ClientResult {
        sent: n as u64,
        measured: samples.len() as u64,
        lost,
        p50_us: q(0.50),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: samples.last().map(|&v| v as f64 / 1e3).unwrap_or(f64::NAN),
        mean_us: mean,
    };
    println!("{}", serde_json::to_string(&result).expect("serializes"));
    std::io::stdout().flush()?;
    Ok(())
}

/// `spinner`: one thread spinning until stdin closes; prints its iteration count.
pub fn spinner() -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let stdin = std::io::stdin();
            let mut lock = stdin.lock();
            while matches!(lock.read(&mut buf), Ok(n) if n > 0) {}
            stop.store(true, Ordering::Relaxed);
        });
    }
    let mut iterations = 0u64;
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..4096 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        std::hint::black_box(x);
        iterations += 1;
    }
    println!("iterations {}", iterations * 4096);
    Ok(())
}
