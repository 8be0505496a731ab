//! The harness's child processes: started from the `tailor-faults` binary, watched through
//! their stdout and the table, killed by pid (theirs only) when a test ends, pass or fail.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tailor_runtime::kernel::table::{self, Table};

/// A child process, killed (SIGKILL, by its pid) and reaped on drop.
pub struct Proc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Option<mpsc::Receiver<String>>,
    pub stderr_file: PathBuf,
}

impl Proc {
    pub fn start_role(exe: &Path, role: &str, args: &[String], tag: &str) -> Proc {
        let stderr_file = std::env::temp_dir().join(format!("tailor-faults-{}-{tag}.log", std::process::id()));
        let err = std::fs::File::create(&stderr_file).expect("stderr log file");
        let mut child = Command::new(exe)
            .arg(role)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {} {role}: {e}", exe.display()));
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { stdin: child.stdin.take(), child, lines: Some(rx), stderr_file }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to this child (by its pid).
    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child, by pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// The next stdout line, waiting at most `timeout`.
    pub fn line(&self, timeout: Duration) -> Option<String> {
        self.lines.as_ref()?.recv_timeout(timeout).ok()
    }

    /// Lines until one starts with `prefix` (returned), or `None` after `timeout`; the
    /// lines skipped are handed to `seen`.
    pub fn until(&self, prefix: &str, timeout: Duration, mut seen: impl FnMut(&str)) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.line(left)?;
            if line.starts_with(prefix) {
                return Some(line);
            }
            seen(&line);
        }
    }

    /// Every stdout line already read, without waiting.
    pub fn drain(&self) -> Vec<String> {
        self.lines.as_ref().map(|rx| rx.try_iter().collect()).unwrap_or_default()
    }

    pub fn say(&mut self, line: &str) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "{line}");
        }
    }

    /// Waits for the child to exit (at most `timeout`); its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr_file);
    }
}

/// A table path for one case, its file (and lock, and a crashed agent's staging file)
/// removed when the case ends.
pub struct TablePath(pub PathBuf);

impl TablePath {
    pub fn new(case: &str) -> TablePath {
        TablePath(PathBuf::from(format!("/dev/shm/tailor-faults-{}-{case}", std::process::id())))
    }
}

impl Drop for TablePath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.as_os_str().to_owned();
        lock.push(".lock");
        let _ = std::fs::remove_file(PathBuf::from(lock));
    }
}

/// The pid of the agent serving `table` once it is running, waiting at most `timeout`.
pub fn running_agent(table: &Path, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(t) = Table::open(table) {
            let h = t.header();
            let pid = h.agent_pid.load(Ordering::Acquire);
            if h.agent_state.load(Ordering::Acquire) == table::AGENT_RUNNING && pid != 0 {
                return Some(pid);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Starts an agent on `table` (key ordering unless `extra` says otherwise) and waits for it.
pub fn agent(exe: &Path, table: &Path, extra: &[&str]) -> Proc {
    let mut args = vec!["--table".to_string(), table.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = Proc::start_role(exe, "agent", &args, &format!("agent-{}", table.file_name().unwrap().to_string_lossy()));
    // The table may still name an agent killed a moment ago: wait for this one's.
    let deadline = Instant::now() + Duration::from_secs(10);
    while running_agent(table, Duration::ZERO) != Some(p.pid()) {
        assert!(Instant::now() < deadline, "the agent did not start on {}: {}", table.display(), p.stderr());
        std::thread::sleep(Duration::from_millis(1));
    }
    p
}

/// Starts the agent's supervisor on `table` and waits for its first agent.
pub fn supervised_agent(exe: &Path, table: &Path, hang_ms: u64) -> Proc {
    let args = vec!["--table".into(), table.display().to_string(), "--hang-ms".into(), hang_ms.to_string()];
    let p = Proc::start_role(exe, "supervise", &args, "supervisor");
    assert!(running_agent(table, Duration::from_secs(10)).is_some(), "no agent under the supervisor: {}", p.stderr());
    p
}

/// Starts a service on `table` with `extra` options and waits for its `ready` line.
pub fn service(exe: &Path, table: &Path, extra: &[&str]) -> Proc {
    let mut args = vec!["--table".to_string(), table.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = Proc::start_role(exe, "service", &args, "service");
    let ready = p.until("ready", Duration::from_secs(20), |_| {});
    assert!(ready.is_some(), "the service did not start: {}", p.stderr());
    p
}
