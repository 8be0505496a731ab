//! Shared test support: root check, unique names, child processes killed by pid, and a guard
//! that restores the journal and removes every cgroup a test made, even when it fails.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use tailor_node::procs::start_at_stock_policy;
use tailor_node::{Capabilities, NodeConfig};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub const BIN: &str = env!("CARGO_BIN_EXE_tailor-node");

/// True when the test can run; prints why it skips otherwise.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP {test}: needs root (cgroups, scheduling policies)");
        return false;
    }
    let caps = Capabilities::probe();
    if caps.hierarchies.is_empty() {
        eprintln!("SKIP {test}: no cgroup cpu controller mounted");
        return false;
    }
    true
}

/// A test's unique names, state dir and cleanup.
pub struct Sandbox {
    pub name: String,
    pub dir: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("tailor-test-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Sandbox { name, dir }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// A tier name unique to this test (labels of parallel tests must not cross).
    pub fn tier(&self, role: &str) -> String {
        format!("{role}-{}", self.name.trim_start_matches("tailor-test-"))
    }

    /// Writes a config with the sandbox's state dir and cgroup name; `tiers` is TOML.
    pub fn config(&self, tiers: &str) -> (PathBuf, NodeConfig) {
        let text = format!(
            "state_dir = {:?}\ncgroup_name = \"{}\"\nreconcile_interval_ms = 100\nheartbeat_timeout_ms = 600\nwindow_ms = 0\n{tiers}",
            self.state_dir().display().to_string(),
            self.name
        );
        let path = self.dir.join("node.toml");
        std::fs::write(&path, &text).unwrap();
        (path.clone(), NodeConfig::parse(&text, &path.display().to_string()).unwrap())
    }

    /// The tier's cgroup dir in a hierarchy root.
    pub fn cgroup(&self, root: &Path, tier: &str) -> PathBuf {
        root.join(&self.name).join(tier)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Undo whatever the journal still holds, then remove anything left by name.
        let _ = tailor_node::journal::restore(&self.state_dir());
        for h in Capabilities::probe().hierarchies {
            let parent = h.root.join(&self.name);
            if let Ok(entries) = std::fs::read_dir(&parent) {
                for e in entries.flatten() {
                    if e.path().is_dir() {
                        move_all_out(&e.path(), &h.root);
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            if parent.exists() {
                move_all_out(&parent, &h.root);
                let _ = std::fs::remove_dir(&parent);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn move_all_out(dir: &Path, root: &Path) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines() {
        let _ = std::fs::write(root.join("cgroup.procs"), pid);
    }
}

/// A child process killed by pid when dropped.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sleep 1000` with an optional TAILOR_TIER label.
pub fn sleeper(label: Option<&str>) -> Proc {
    let mut cmd = Command::new("sleep");
    cmd.arg("1000").stdin(Stdio::null()).stdout(Stdio::null());
    start_at_stock_policy(&mut cmd);
    if let Some(l) = label {
        cmd.env("TAILOR_TIER", l);
    }
    let p = Proc(cmd.spawn().expect("spawn sleep"));
    exec_done(p.pid(), "sleep", label);
    p
}

/// Waits until `pid` has finished exec'ing `comm` (with its `TAILOR_TIER`
/// label readable, if it has one). `spawn` returns once the child is past the
/// point of no return in execve, but its comm and /proc/PID/environ are set a
/// little later; an agent pass in between would see an unlabeled process
/// (and a test that runs one pass right after spawning would fail under load).
pub fn exec_done(pid: u32, comm: &str, label: Option<&str>) {
    let done = || {
        tailor_node::procs::proc_info(pid).is_some_and(|p| p.comm == comm)
            && label.is_none_or(|l| tailor_node::procs::tier_label(pid).as_deref() == Some(l))
    };
    assert!(wait_for(Duration::from_secs(5), done).is_some(), "pid {pid} did not finish exec'ing {comm}");
}

/// The path of `pid` in the hierarchy whose /proc/PID/cgroup controller field satisfies `f`.
pub fn cgroup_of(pid: u32, f: impl Fn(&str) -> bool) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| {
        let mut p = l.splitn(3, ':');
        let _ = p.next();
        let c = p.next()?;
        if f(c) {
            p.next().map(|s| s.to_string())
        } else {
            None
        }
    })
}

pub fn cpu_cgroup_of(pid: u32) -> Option<String> {
    cgroup_of(pid, |c| c.split(',').any(|x| x == "cpu")).or_else(|| cgroup_of(pid, |c| c.is_empty()))
}

pub fn policy_of(tid: u32) -> i32 {
    // SAFETY: plain syscall.
    unsafe { libc::sched_getscheduler(tid as libc::pid_t) }
}

pub fn cpus_allowed(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string()
}

/// Polls `f` every 10 ms until it holds or `timeout` passes; returns the time it took.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}
