//! `tailor bench proxy`: what Tailor's sidecar and edge cost next to nginx and HAProxy
//! relaying to the same upstream (`cost`), and what sidecars do for the tail of a 3-tier
//! chain of plain Go and Python services that know nothing of Tailor (`effect`); real
//! processes on loopback (docs/proxy.md, "Measured results").
//!
//! This module holds what both share: the programs (the plain services are compiled into
//! the binary and written out, so the benchmark runs from any directory) and starting
//! and stopping processes.

pub mod cost;
pub mod effect;
pub mod limit;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http::Uri;
use serde::Serialize;

use crate::polyglot::{http_get, start_member, stop_member, Member};

/// The plain Go service (net/http, no Tailor): burns its tier's demand, calls the next tier
/// forwarding `baggage`; with no demand header it answers `ok` (the cost benchmark's upstream).
pub const PLAIN_GO: &str = include_str!("../../proxy/plain-go/main.go");
const PLAIN_GO_MOD: &str = include_str!("../../proxy/plain-go/go.mod");
/// The plain Python service (stdlib, pre-forked workers), same protocol.
pub const PLAIN_PYTHON: &str = include_str!("../../proxy/plain-python/service.py");

/// The programs the benchmark runs.
#[derive(Clone, Debug)]
pub struct Programs {
    /// `tailor` (proxy edge and sidecar).
    pub tailor: PathBuf,
    /// The plain Go service, built into the output directory.
    pub go_service: PathBuf,
    pub python: PathBuf,
    /// The plain Python service, written into the output directory.
    pub python_service: PathBuf,
}

impl Programs {
    /// Writes the plain services into `out` and builds the Go one. Err says what is
    /// missing (Go, python3) and how to get it; tests skip with it.
    pub fn prepare(tailor: &Path, out: &Path) -> Result<Programs, String> {
        if !tailor.is_file() {
            return Err(format!(
                "{} is missing; build it with `cargo build --release -p tailor-cli`",
                tailor.display()
            ));
        }
        let dir = std::path::absolute(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let go_dir = dir.join("plain-go");
        std::fs::create_dir_all(&go_dir).map_err(|e| format!("creating {}: {e}", go_dir.display()))?;
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display())).map(|_| path)
        };
        write(go_dir.join("go.mod"), PLAIN_GO_MOD)?;
        write(go_dir.join("main.go"), PLAIN_GO)?;
        let python_service = write(dir.join("plain-python.py"), PLAIN_PYTHON)?;
        let go_service = go_dir.join("plain-go");
        match Command::new("go").args(["build", "-o"]).arg(&go_service).arg(".").current_dir(&go_dir).output() {
            Err(e) => return Err(format!("Go is needed for the plain Go service (`go`: {e}); install Go 1.22+")),
            Ok(o) if !o.status.success() => {
                return Err(format!("go build in {} failed: {}", go_dir.display(), String::from_utf8_lossy(&o.stderr)))
            }
            Ok(_) => {}
        }
        let python = PathBuf::from("python3");
        if !Command::new(&python).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Err("python3 is needed for the plain Python service".into());
        }
        Ok(Programs { tailor: tailor.to_path_buf(), go_service, python, python_service })
    }
}

/// Processes started for a run; dropping it stops them all (by pid, SIGTERM then SIGKILL),
/// the last started first.
#[derive(Default)]
pub struct Processes(Vec<Member>);

impl Processes {
    /// Starts `cmd`, its output copied to `log`; ready at the first line containing
    /// `marker`, which is returned.
    pub fn start_printing(
        &mut self,
        name: &'static str,
        cmd: Command,
        log: &Path,
        marker: &'static str,
    ) -> Result<String, String> {
        let (m, line) = start_member(name, cmd, log, marker)?;
        self.0.push(m);
        Ok(line)
    }

    /// Starts `cmd` (a server that prints nothing when ready: nginx, HAProxy), its output
    /// going to `log`; ready when `addr` accepts a connection (within 10 s).
    pub fn start_listening(
        &mut self,
        name: &'static str,
        mut cmd: Command,
        log: &Path,
        addr: &str,
    ) -> Result<u32, String> {
        let file = std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        // Like every member: stopped with the benchmark even when a signal kills it.
        crate::polyglot::die_with_parent(&mut cmd);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {name} ({:?}): {e}", cmd.get_program()))?;
        let pid = child.id();
        self.0.push(Member { name, child });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                return Ok(pid);
            }
            let m = self.0.last_mut().expect("just pushed");
            if let Ok(Some(status)) = m.child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Err(format!("{name} exited ({status}) before listening on {addr}: {}", text.trim()));
            }
            if Instant::now() > deadline {
                return Err(format!("{name} did not listen on {addr} within 10 s; see {}", log.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Process ids, in start order.
    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|m| m.child.id()).collect()
    }

    /// Each process's name (as started) and id, in start order.
    pub fn named_pids(&self) -> Vec<(&'static str, u32)> {
        self.0.iter().map(|m| (m.name, m.child.id())).collect()
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        while let Some(m) = self.0.pop() {
            stop_member(m);
        }
    }
}

/// The 1-, 5- and 15-minute load averages (/proc/loadavg), to record how busy the
/// machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// Writes each `(file name, text)` into `out`; returns the paths written.
pub fn write_files(out: &Path, files: Vec<(String, String)>) -> Result<Vec<PathBuf>, String> {
    files
        .into_iter()
        .map(|(name, text)| {
            let path = out.join(name);
            std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// A gauge or counter from the /metrics of the admin listener at `admin` (`host:port`).
pub fn metric(admin: &str, name: &str) -> Result<f64, String> {
    let uri: Uri = format!("http://{admin}/metrics").parse().map_err(|e| format!("{e}"))?;
    let (_, text) = http_get(&uri, "GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")?;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no `{name}` in the sidecar's /metrics"))
}

/// Runs `work` while sampling the concurrency limit and queue length of the sidecar whose
/// admin listener is `admin` every 250 ms (no sampling without one).
pub fn sampling_limit<T>(
    admin: Option<&str>,
    work: impl FnOnce() -> Result<T, String>,
) -> Result<(T, Option<LimitSeen>), String> {
    let Some(admin) = admin else { return Ok((work()?, None)) };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let limit = metric(admin, "tailor_proxy_concurrency_limit");
                let queue = metric(admin, "tailor_proxy_queue_length");
                if let (Ok(l), Ok(q)) = (limit, queue) {
                    seen.push((l, q));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            seen
        });
        let out = work();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = sampler.join().map_err(|_| "the limit sampler panicked".to_string())?;
        Ok((out?, LimitSeen::of(&seen)))
    })
}

/// A sidecar's limit and queue as sampled through a run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LimitSeen {
    pub samples: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Mean requests waiting in the sidecar.
    pub queue_mean: f64,
}

impl LimitSeen {
    /// Over `(limit, queue)` samples; None without any.
    pub fn of(samples: &[(f64, f64)]) -> Option<LimitSeen> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        Some(LimitSeen {
            samples: samples.len(),
            mean: samples.iter().map(|s| s.0).sum::<f64>() / n,
            min: samples.iter().map(|s| s.0).fold(f64::INFINITY, f64::min),
            max: samples.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max),
            queue_mean: samples.iter().map(|s| s.1).sum::<f64>() / n,
        })
    }

    /// The fixed `c` that models it: the mean limit, rounded, at least 1.
    pub fn model_c(&self) -> usize {
        (self.mean.round() as usize).max(1)
    }
}
