//! The ladder's third-party server: `redis-server` from the distribution, started on a free
//! loopback port, and the calibration of its request (a Lua loop) to a CPU cost.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::processes::redis_request;

/// Starts `redis-server` (persistence off, loopback only) in the critical tier; returns it,
/// its port and its version line once it answers PING.
pub fn start(state_dir: &Path) -> Result<(Child, u16, String), String> {
    let version = match Command::new("redis-server").arg("--version").output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            install()?;
            Command::new("redis-server").arg("--version").output()
        }
        other => other,
    }
    .map_err(|e| {
        format!("redis-server: {e}. Fix: install it from your distribution (`apt-get install redis-server`)")
    })?;
    let version = String::from_utf8_lossy(&version.stdout).split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    // A free port: bind, read it, release it for redis (loopback only, so a clash is unlikely).
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("finding a free port: {e}"))?
        .port();
    std::fs::create_dir_all(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let child = tailor_node::procs::start_at_stock_policy(&mut Command::new("redis-server"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--protected-mode", "no", "--io-threads", "1", "--dir"])
        .arg(state_dir)
        .env("TAILOR_TIER", "critical")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting redis-server: {e}"))?;
    let mut child = super::Children(vec![child]);
    let begun = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut line = String::new();
            let pong = s.write_all(b"PING\r\n").is_ok() && BufReader::new(&s).read_line(&mut line).is_ok();
            if pong && line.starts_with("+PONG") {
                break;
            }
        }
        if let Ok(Some(status)) = child.0[0].try_wait() {
            return Err(format!("redis-server exited at start ({status})"));
        }
        if begun.elapsed() > Duration::from_secs(10) {
            return Err(format!("redis-server did not answer PING on port {port} within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child.0.pop().expect("one child"), port, version))
}

/// Installs Debian's redis-server (the ladder runs as root). Only the binary is used: the
/// ladder starts its own instance on a free loopback port (on a systemd machine the package
/// also starts its own service, on port 6379).
fn install() -> Result<(), String> {
    tracing::info!("redis-server not found: installing it with apt-get");
    let status = Command::new("apt-get")
        .args(["install", "-y", "-q", "redis-server"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("redis-server is not installed and apt-get could not run ({e}); install it yourself"))?;
    if !status.success() {
        return Err(format!(
            "redis-server is not installed and `apt-get install -y redis-server` failed ({status}); \
             run `apt-get update` first, or install it yourself"
        ));
    }
    Ok(())
}

/// The median round trip, µs, of `n` sequential requests of `iterations` steps.
fn median_rtt_us(stream: &TcpStream, iterations: u64, n: usize) -> Result<f64, String> {
    let request = redis_request(iterations);
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = stream;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        writer.write_all(&request).map_err(|e| format!("redis: {e}"))?;
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| format!("redis: {e}"))?;
        if !line.starts_with(':') {
            return Err(format!("redis answered {line:?} to EVAL"));
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[n / 2])
}

/// The loop length whose CPU cost is `service_us`: from the median round trips of a long
/// and a one-step loop on the idle server (the difference is the loop's CPU). Returns
/// `(iterations, ns per step, idle round trip µs)`.
pub fn calibrate(port: u16, service_us: f64) -> Result<(u64, f64, f64), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("redis: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    const LONG: u64 = 50_000;
    let _ = median_rtt_us(&stream, LONG, 5)?; // warm-up
    let base = median_rtt_us(&stream, 1, 31)?;
    let long = median_rtt_us(&stream, LONG, 31)?;
    let per_step_ns = ((long - base) * 1e3 / (LONG - 1) as f64).max(0.1);
    let iterations = ((service_us * 1e3 / per_step_ns).round() as u64).max(1);
    Ok((iterations, per_step_ns, base))
}
