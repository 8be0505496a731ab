//! Running `tailor proxy` in a test: the process (killed by its pid when the test ends, also
//! on failure), a scratch directory, loopback ports nothing else takes, and plain HTTP/1.1 GETs on the
//! admin endpoint.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A child process killed (by its pid) when the test ends, also on failure.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends `signal` (e.g. `-HUP`, `-TERM`) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill").args([signal, &self.0.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {signal}");
    }
}

/// A directory removed when the test ends.
pub struct Tmp(pub PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh scratch directory for the test `name`.
pub fn tmpdir(name: &str) -> Tmp {
    let dir = std::env::temp_dir().join(format!("tailor-proxy-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Tmp(dir)
}

pub use tailor_telemetry::testing::free_port;

/// Plain HTTP/1.1 GET on an admin port: the status and the whole response text.
pub fn admin_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, text))
}

/// The value of the metric line starting with `name` (including labels).
pub fn metric(admin: u16, name: &str) -> f64 {
    let text = admin_get(admin, "/metrics").unwrap().1;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')).map(|v| v.parse().unwrap()))
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// Runs `tailor proxy <mode> --config <file>` and waits until its admin port answers /readyz.
pub fn proxy(mode: &str, config: &Path, admin: u16) -> Proc {
    proxy_with_env(mode, config, admin, &[])
}

/// [`proxy`] with `env` set for the process (e.g. `TOKIO_WORKER_THREADS`).
pub fn proxy_with_env(mode: &str, config: &Path, admin: u16, env: &[(&str, &str)]) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["proxy", mode, "--config"])
        .arg(config)
        .envs(env.iter().copied())
        .spawn()
        .expect("start tailor proxy");
    let mut p = Proc(child);
    let start = Instant::now();
    loop {
        if admin_get(admin, "/readyz").is_ok_and(|(status, _)| status == 200) {
            return p;
        }
        if let Ok(Some(status)) = p.0.try_wait() {
            panic!("tailor proxy {mode} exited early: {status}");
        }
        assert!(start.elapsed() < Duration::from_secs(20), "proxy {mode} never became ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (polling) until `cond` holds; fails the test after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
