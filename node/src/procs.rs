//! Reading processes and threads from /proc, and their scheduling policy.

use std::path::PathBuf;

/// PF_KTHREAD in /proc/PID/stat's flags: kernel threads are never touched (many are per-CPU pinned).
const PF_KTHREAD: u64 = 0x0020_0000;
/// PF_EXITING: the task is in do_exit. Its cgroup links are being dropped (v1 shows it in the
/// root of every hierarchy), and a write to cgroup.procs succeeds without moving it.
const PF_EXITING: u64 = 0x0000_0004;

/// One process as the matcher sees it.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub pid: u32,
    /// Start time in clock ticks since boot: (pid, start_time) names a process across pid reuse.
    pub start_time: u64,
    pub comm: String,
    pub kernel_thread: bool,
    /// Exiting or a zombie: there is nothing left to place, and it would look misplaced.
    pub exiting: bool,
}

/// All numeric entries of /proc (processes).
pub fn pids() -> Vec<u32> {
    list_numeric("/proc")
}

/// All thread ids of a process.
pub fn tids(pid: u32) -> Vec<u32> {
    list_numeric(&format!("/proc/{pid}/task"))
}

fn list_numeric(dir: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// Parses /proc/PID/stat (or /proc/PID/task/TID/stat).
pub fn stat(path: &str) -> Option<ProcInfo> {
    let text = std::fs::read_to_string(path).ok()?;
    let pid = text.split(' ').next()?.parse().ok()?;
    // comm is in parentheses and may itself contain spaces or ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 2..].split(' ').collect();
    // After comm: state(0) ppid(1) ... flags(6) ... utime(11) stime(12) ... starttime(19)
    let state = rest.first()?;
    let flags: u64 = rest.get(6)?.parse().ok()?;
    let start_time = rest.get(19)?.parse().ok()?;
    let exiting = flags & PF_EXITING != 0 || matches!(*state, "Z" | "X" | "x");
    Some(ProcInfo { pid, start_time, comm, kernel_thread: flags & PF_KTHREAD != 0, exiting })
}

pub fn proc_info(pid: u32) -> Option<ProcInfo> {
    stat(&format!("/proc/{pid}/stat"))
}

/// Start time of a thread (for journaling per-thread policy changes).
pub fn thread_start_time(pid: u32, tid: u32) -> Option<u64> {
    stat(&format!("/proc/{pid}/task/{tid}/stat")).map(|p| p.start_time)
}

/// user + system CPU time of a process in clock ticks (USER_HZ), all threads.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = text.rfind(')')?;
    let rest: Vec<&str> = text[close + 2..].split(' ').collect();
    Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
}

/// Whether (pid, start_time) still names the same live process or thread.
pub fn alive(pid: u32, start_time: u64) -> bool {
    proc_info(pid).map(|p| p.start_time == start_time).unwrap_or(false)
}

/// Basename of /proc/PID/exe.
pub fn exe_basename(pid: u32) -> Option<String> {
    let target: PathBuf = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(target.file_name()?.to_string_lossy().trim_end_matches(" (deleted)").to_string())
}

/// The value of TAILOR_TIER in a process's initial environment (the registration label).
pub fn tier_label(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"TAILOR_TIER="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// (controllers, path) pairs of /proc/PID/cgroup (or .../task/TID/cgroup).
pub fn cgroups(path: &str) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// A thread's scheduling policy, RT priority and nice value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SchedState {
    pub policy: i32,
    pub rt_priority: i32,
    pub nice: i32,
}

pub fn sched_state(tid: u32) -> Option<SchedState> {
    // SAFETY: plain syscalls on a tid; errors are reported through the return value.
    unsafe {
        let policy = libc::sched_getscheduler(tid as libc::pid_t);
        if policy < 0 {
            return None;
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        if libc::sched_getparam(tid as libc::pid_t, &mut param) != 0 {
            return None;
        }
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if nice == -1 && *libc::__errno_location() != 0 {
            return None;
        }
        Some(SchedState { policy: policy & !libc::SCHED_RESET_ON_FORK, rt_priority: param.sched_priority, nice })
    }
}

pub fn set_sched_state(tid: u32, state: SchedState) -> std::io::Result<()> {
    // SAFETY: plain syscalls on a tid.
    unsafe {
        let param = libc::sched_param { sched_priority: state.rt_priority };
        if libc::sched_setscheduler(tid as libc::pid_t, state.policy, &param) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if state.policy != libc::SCHED_FIFO
            && state.policy != libc::SCHED_RR
            && libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, state.nice) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn is_rt(policy: i32) -> bool {
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR
}

/// Makes `cmd`'s child start at SCHED_OTHER, nice 0, whatever policy the caller runs at (a
/// child inherits it: a ladder or a test run under `chrt -i 0` would otherwise start every
/// server, spinner and sleeper at SCHED_IDLE).
pub fn start_at_stock_policy(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and only makes two syscalls,
    // which are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let param = libc::sched_param { sched_priority: 0 };
            if libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) != 0
                || libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
