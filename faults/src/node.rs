//! What the node looks like to the kernel: every thread of a process with its policy,
//! read back with `sched_getattr`, and the table's slots.

use std::path::Path;
use std::sync::atomic::Ordering;

use tailor_runtime::kernel::sys::{self, ThreadPolicy};
use tailor_runtime::kernel::table::{self, Table};

/// One thread as the kernel reports it.
#[derive(Clone, Debug)]
pub struct ThreadState {
    pub tid: i32,
    pub name: String,
    pub policy: ThreadPolicy,
}

impl ThreadState {
    /// At an RT priority or SCHED_IDLE: what a fallback must leave no thread of a service in.
    pub fn raised(&self) -> bool {
        matches!(self.policy.base(), libc::SCHED_FIFO | libc::SCHED_RR | libc::SCHED_IDLE)
    }

    pub fn describe(&self) -> String {
        format!("tid {} ({}) at {}", self.tid, self.name, self.policy.describe())
    }
}

/// Every live thread of `pid` (empty if the process is gone).
pub fn threads(pid: u32) -> Vec<ThreadState> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.filter_map(|e| {
        let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let policy = sys::get_policy(tid).ok()?;
        let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        Some(ThreadState { tid, name: name.trim().to_string(), policy })
    })
    .collect()
}

/// The threads of `pid` at an RT priority or SCHED_IDLE.
pub fn raised_threads(pid: u32) -> Vec<ThreadState> {
    threads(pid).into_iter().filter(ThreadState::raised).collect()
}

/// Slots of `table` not FREE, as `(slot, pid, tid)`.
pub fn busy_slots(path: &Path) -> Vec<(usize, u32, u32)> {
    let Ok(t) = Table::open(path) else { return Vec::new() };
    (0..t.slots())
        .filter_map(|i| {
            let s = t.slot(i);
            let (_, state) = table::unpack(s.word.load(Ordering::Acquire));
            (state != table::FREE).then(|| (i, s.pid.load(Ordering::Relaxed), s.tid.load(Ordering::Relaxed)))
        })
        .collect()
}

/// Why the suite cannot run here (no CAP_SYS_NICE, unbounded RT...), or `None`.
pub fn skip_reason() -> Option<String> {
    tailor_runtime::kernel::preflight().err().map(|e| e.to_string())
}

/// Whether this process may set `/proc/sys/kernel/ns_last_pid` (to hand a dead thread's id
/// to a new thread on purpose): needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.
pub fn can_choose_pids() -> bool {
    std::fs::OpenOptions::new().write(true).open("/proc/sys/kernel/ns_last_pid").is_ok()
}

/// Makes the next thread or process created on the machine likely to get id `id` (another
/// process forking in between takes it first: callers check and retry).
pub fn next_id_will_be(id: i32) -> std::io::Result<()> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", id - 1))
}
