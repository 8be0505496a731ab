//! Thin, checked wrappers over the Linux calls the kernel backend needs:
//! per-thread scheduling policy, futexes on shared memory, capability and RT checks.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `SCHED_RESET_ON_FORK`: threads our band threads create start at SCHED_OTHER,
/// so a handler that spawns a thread never leaks an RT priority.
pub const SCHED_RESET_ON_FORK: i32 = 0x4000_0000;

/// A thread's scheduling policy and RT priority, as `sched_getscheduler` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadPolicy {
    /// `SCHED_OTHER`, `SCHED_FIFO`, ... possibly with [`SCHED_RESET_ON_FORK`].
    pub policy: i32,
    /// RT priority (0 for the normal policies).
    pub priority: i32,
}

impl ThreadPolicy {
    pub const IDLE: ThreadPolicy = ThreadPolicy { policy: libc::SCHED_IDLE, priority: 0 };

    /// SCHED_FIFO at `priority`, reset on fork.
    pub const fn fifo(priority: i32) -> ThreadPolicy {
        ThreadPolicy { policy: libc::SCHED_FIFO | SCHED_RESET_ON_FORK, priority }
    }

    /// What a thread created by a thread with this policy starts with: the same, except
    /// that an RT policy with [`SCHED_RESET_ON_FORK`] gives SCHED_OTHER.
    pub fn inherited_by_child(&self) -> ThreadPolicy {
        let rt = matches!(self.base(), libc::SCHED_FIFO | libc::SCHED_RR);
        if rt && self.policy & SCHED_RESET_ON_FORK != 0 {
            ThreadPolicy { policy: libc::SCHED_OTHER, priority: 0 }
        } else {
            *self
        }
    }

    /// The policy without flags, e.g. `libc::SCHED_FIFO`.
    pub fn base(&self) -> i32 {
        self.policy & !SCHED_RESET_ON_FORK
    }

    /// Human-readable, e.g. `SCHED_FIFO/10`.
    pub fn describe(&self) -> String {
        let name = match self.base() {
            libc::SCHED_OTHER => "SCHED_OTHER",
            libc::SCHED_FIFO => "SCHED_FIFO",
            libc::SCHED_RR => "SCHED_RR",
            libc::SCHED_BATCH => "SCHED_BATCH",
            libc::SCHED_IDLE => "SCHED_IDLE",
            _ => "SCHED_?",
        };
        format!("{name}/{}", self.priority)
    }
}

/// The calling thread's kernel id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The policy of thread `tid` (0 = the calling thread), read with ONE `sched_getattr`
/// call: `sched_getscheduler` + `sched_getparam` are two calls, and a priority change
/// landing between them yields an impossible pair (e.g. SCHED_OTHER/10) that cannot be
/// set back later.
pub fn get_policy(tid: i32) -> io::Result<ThreadPolicy> {
    /// `struct sched_attr`, SCHED_ATTR_SIZE_VER0 (48 bytes).
    #[repr(C)]
    #[derive(Default)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
    let mut attr = SchedAttr { size: std::mem::size_of::<SchedAttr>() as u32, ..Default::default() };
    // SAFETY: a valid, writable sched_attr of the size we pass.
    let r = unsafe {
        libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut SchedAttr, std::mem::size_of::<SchedAttr>(), 0)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let reset = if attr.sched_flags & SCHED_FLAG_RESET_ON_FORK != 0 { SCHED_RESET_ON_FORK } else { 0 };
    Ok(ThreadPolicy { policy: attr.sched_policy as i32 | reset, priority: attr.sched_priority as i32 })
}

/// Sets the policy of a thread of this process by its pthread handle: works on a thread
/// that was just created and has not run yet (its kernel id is not known to us). glibc
/// rejects the reset-on-fork flag here, so it is dropped: the thread adds it itself.
pub fn set_pthread_policy(thread: libc::pthread_t, p: ThreadPolicy) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: p.priority };
    // SAFETY: `thread` is a live thread of this process (its JoinHandle is held by the
    // caller) and `param` lives across the call.
    match unsafe { libc::pthread_setschedparam(thread, p.base(), &param) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Sets the policy of thread `tid` (0 = the calling thread).
pub fn set_policy(tid: i32, p: ThreadPolicy) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: p.priority };
    // SAFETY: valid pointer to a sched_param that lives across the call.
    if unsafe { libc::sched_setscheduler(tid, p.policy, &param) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether thread `tid` of process `pid` still exists.
pub fn thread_alive(pid: i32, tid: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// When thread `tid` of process `pid` started (clock ticks since boot, field 22 of
/// `/proc/<pid>/task/<tid>/stat`), or `None` if there is no such thread. With the id it
/// names one thread for good: a thread id reused by a later thread has a later start.
pub fn thread_start_time(pid: i32, tid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The calling thread's `(tid, start time)`, read once per thread.
pub fn my_thread_identity() -> (i32, u64) {
    thread_local! {
        static IDENTITY: (i32, u64) = {
            let tid = gettid();
            (tid, thread_start_time(std::process::id() as i32, tid).unwrap_or(0))
        };
    }
    IDENTITY.with(|id| *id)
}

/// The calling thread, for good: its id with a pidfd on it (`PIDFD_THREAD`, Linux 6.9+),
/// which tells when that thread, and not a later one given its id, has ended; on older
/// kernels its start time (clock ticks: two threads with one id in one tick look alike).
#[derive(Clone, Debug)]
pub struct ThreadIdentity {
    pub tid: i32,
    pub start: u64,
    pidfd: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl ThreadIdentity {
    /// The calling thread's (opened once per thread).
    pub fn current() -> ThreadIdentity {
        thread_local! {
            static ME: ThreadIdentity = {
                let (tid, start) = my_thread_identity();
                const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;
                // SAFETY: pidfd_open takes an id and flags; returns a new fd or -1.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::c_long, PIDFD_THREAD) };
                // SAFETY: a fresh fd we own.
                let pidfd = (fd >= 0).then(|| std::sync::Arc::new(unsafe {
                    <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32)
                }));
                ThreadIdentity { tid, start, pidfd }
            };
        }
        ME.with(Clone::clone)
    }

    /// Whether the thread still lives (its id still names it), so writing its id is safe.
    pub fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => !pidfd_exited(fd),
            None => same_thread(std::process::id() as i32, self.tid, self.start),
        }
    }
}

/// Whether the process or thread a pidfd refers to has exited (it polls readable).
pub fn pidfd_exited(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// Whether `tid` of `pid` is still the thread that started at `start` (0 = unknown: only
/// that the id names a thread of `pid`).
pub fn same_thread(pid: i32, tid: i32, start: u64) -> bool {
    if start == 0 {
        return thread_alive(pid, tid);
    }
    thread_start_time(pid, tid) == Some(start)
}

/// Whether process `pid` exists.
pub fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Sleeps while `*word == expected`, at most `timeout`; wakes on [`futex_wake`].
/// Works across processes (the word lives in a shared mapping, so no FUTEX_PRIVATE_FLAG).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0, 0)
    };
}

/// Wakes one waiter of `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1, 0, 0, 0) };
}

/// Whether this process has CAP_SYS_NICE in its effective set.
pub fn has_cap_sys_nice() -> bool {
    const CAP_SYS_NICE: u32 = 23;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0)
}

/// Why the kernel's RT settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A `/proc` file the check needs is missing or unreadable (not Linux, or `/proc` not mounted).
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A `/proc` file does not hold the integer the kernel writes there.
    #[error("{}: not a number: {text:?} ({source})", .path.display())]
    NotANumber {
        path: PathBuf,
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    /// `sched_rt_runtime_us` is -1: SCHED_FIFO threads may run forever.
    #[error(
        "{} is -1 (RT throttling off): a saturated SCHED_FIFO band would starve every other thread on its \
         CPUs. Fix: `sysctl kernel.sched_rt_runtime_us=950000` (the Linux default)",
        .path.display()
    )]
    RtThrottlingOff { path: PathBuf },
}

/// Refuses unbounded RT: with `sched_rt_runtime_us = -1` a saturated SCHED_FIFO band
/// would starve everything else on its CPUs forever. Returns `(runtime_us, period_us)`.
pub fn check_rt_throttling() -> Result<(i64, i64), SysError> {
    rt_throttling_in(Path::new("/proc/sys/kernel"))
}

/// [`check_rt_throttling`] on the sysctl files under `dir` (`/proc/sys/kernel` on a host).
fn rt_throttling_in(dir: &Path) -> Result<(i64, i64), SysError> {
    let read = |name: &str| -> Result<(i64, PathBuf), SysError> {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).map_err(|source| SysError::Read { path: path.clone(), source })?;
        let text = text.trim();
        match text.parse() {
            Ok(v) => Ok((v, path)),
            Err(source) => Err(SysError::NotANumber { path, text: text.to_string(), source }),
        }
    };
    let (runtime, runtime_path) = read("sched_rt_runtime_us")?;
    let (period, _) = read("sched_rt_period_us")?;
    if runtime < 0 {
        return Err(SysError::RtThrottlingOff { path: runtime_path });
    }
    Ok((runtime, period))
}

/// With RT_GROUP_SCHED (cgroup v1 `cpu` controller with `cpu.rt_runtime_us`), a thread
/// in a cpu cgroup whose `cpu.rt_runtime_us` is 0 cannot become SCHED_FIFO. Returns the
/// error to show for thread `tid` of `pid` (0, 0 = this thread), or `None` if the
/// cgroup allows RT (or there is no such controller).
pub fn rt_group_problem(pid: i32, tid: i32) -> Option<String> {
    let cgroup_file =
        if pid == 0 { "/proc/thread-self/cgroup".to_string() } else { format!("/proc/{pid}/task/{tid}/cgroup") };
    let content = std::fs::read_to_string(&cgroup_file).ok()?;
    // cgroup v1 lines look like `1:cpu:/path` or `3:cpu,cpuacct:/path`.
    let path = content.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "cpu").then(|| path.to_string())
    })?;
    for mount in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        let file = format!("{mount}{}/cpu.rt_runtime_us", path.trim_end_matches('/'));
        if let Ok(v) = std::fs::read_to_string(&file) {
            if v.trim() == "0" {
                return Some(format!(
                    "{file} is 0: threads in cpu cgroup `{path}` cannot use SCHED_FIFO (RT_GROUP_SCHED). \
                     Fix: give the cgroup (and each parent) an RT budget, e.g. `echo 100000 > {file}`, \
                     or run the service in the root cpu cgroup"
                ));
            }
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory standing in for `/proc/sys/kernel`, removed on drop.
    struct SysctlDir(PathBuf);

    impl SysctlDir {
        fn new(name: &str) -> SysctlDir {
            let dir = std::env::temp_dir().join(format!("tailor-sysctl-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            SysctlDir(dir)
        }

        fn write(&self, file: &str, text: &str) {
            std::fs::write(self.0.join(file), text).unwrap();
        }
    }

    impl Drop for SysctlDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn rt_throttling_names_the_file_that_is_missing_garbled_or_off() {
        let dir = SysctlDir::new("rt");
        let runtime = dir.0.join("sched_rt_runtime_us");
        match rt_throttling_in(&dir.0) {
            Err(SysError::Read { path, source }) => {
                assert_eq!(path, runtime);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("expected SysError::Read, got {other:?}"),
        }
        dir.write("sched_rt_runtime_us", "950000\n");
        dir.write("sched_rt_period_us", "a million\n");
        match rt_throttling_in(&dir.0) {
            Err(SysError::NotANumber { path, text, .. }) => {
                assert_eq!(path, dir.0.join("sched_rt_period_us"));
                assert_eq!(text, "a million");
            }
            other => panic!("expected SysError::NotANumber, got {other:?}"),
        }
        dir.write("sched_rt_period_us", "1000000\n");
        assert_eq!(rt_throttling_in(&dir.0).unwrap(), (950_000, 1_000_000));
        dir.write("sched_rt_runtime_us", "-1\n");
        let off = rt_throttling_in(&dir.0).unwrap_err();
        assert!(matches!(&off, SysError::RtThrottlingOff { path } if *path == runtime), "{off:?}");
        assert!(off.to_string().contains("sysctl kernel.sched_rt_runtime_us=950000"), "{off}");
    }
}
