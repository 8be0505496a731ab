//! Host ids of threads registered from other PID namespaces (a service in a pod).
//!
//! A job's thread writes the ids it sees (`getpid`, `gettid`) and its PID namespace's
//! inode (`table::Slot::pid_ns`). Inside a pod those ids are the pod's, not the host's,
//! and `sched_setscheduler(tid)` from the node agent would hit whatever host thread
//! happens to carry that number. The agent (which runs in the host's PID namespace,
//! `hostPID: true`) translates them: the host process whose `/proc/<pid>/ns/pid` is that
//! namespace and whose `NSpid` ends in the registered pid, then the thread of that process
//! whose `NSpid` ends in the registered tid. A thread that cannot be found that way is
//! never written: it has died, or its id now names another thread.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The inode of the calling process's PID namespace, from `/proc/self/ns/pid`.
pub fn own_pid_ns() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/self/ns/pid")?.ino())
}

/// [`own_pid_ns`], read once per process (a process never changes PID namespace).
pub fn own_pid_ns_cached() -> Option<u64> {
    static OWN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| own_pid_ns().ok())
}

/// The inode of process `pid`'s PID namespace (host numbering), if it exists.
fn pid_ns_of(pid: i32) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok().map(|m| m.ino())
}

/// The innermost id in a `/proc/.../status` file's `NSpid:` line (the id the task has in
/// its own PID namespace), and its `Tgid:`.
fn innermost_and_tgid(status_file: &Path) -> Option<(i32, i32)> {
    let status = std::fs::read_to_string(status_file).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let innermost = field("NSpid:")?.split_whitespace().last()?.parse().ok()?;
    let tgid = field("Tgid:")?.parse().ok()?;
    Some((innermost, tgid))
}

/// Translates `(namespace, pid, tid)` as a job registered them into host `(pid, tid)`,
/// remembering what it found and checking it again on every use (ids are reused).
#[derive(Default)]
pub struct Resolver {
    own: u64,
    /// `(namespace, pid there)` → host pid.
    processes: HashMap<(u64, i32), i32>,
    /// `(host pid, tid in its namespace)` → host tid.
    threads: HashMap<(i32, i32), i32>,
    /// Namespaces in which some process was found: where a missing thread is a dead one
    /// (elsewhere the agent may just not see the namespace: no `hostPID`).
    seen: std::collections::HashSet<u64>,
}

impl Resolver {
    /// A resolver for an agent whose PID namespace is `own` (its inode).
    pub fn new(own: u64) -> Self {
        Resolver { own, ..Default::default() }
    }

    /// Host `(pid, tid)` of the thread a job registered as `(pid, tid)` in namespace `ns`
    /// (`None`: the agent's own namespace, ids as they are), or `None` if no live thread
    /// matches: then nothing may be written to it.
    pub fn resolve(&mut self, ns: Option<u64>, pid: i32, tid: i32) -> Option<(i32, i32)> {
        if pid <= 0 || tid <= 0 {
            return None;
        }
        let Some(ns) = ns.filter(|&ns| ns != self.own) else { return Some((pid, tid)) };
        let host_pid = self.host_pid(ns, pid)?;
        self.seen.insert(ns);
        let host_tid = self.host_tid(host_pid, tid)?;
        Some((host_pid, host_tid))
    }

    /// Whether a thread of namespace `ns` (`None`: ours) that [`Self::resolve`] cannot find
    /// is surely gone: the agent has found processes of that namespace before.
    pub fn sees(&self, ns: Option<u64>) -> bool {
        ns.is_none_or(|ns| ns == self.own || self.seen.contains(&ns))
    }

    /// Whether host process `host` is process `pid` of namespace `ns` now.
    fn is_process(host: i32, ns: u64, pid: i32) -> bool {
        pid_ns_of(host) == Some(ns)
            && innermost_and_tgid(Path::new(&format!("/proc/{host}/status"))).is_some_and(|(id, _)| id == pid)
    }

    fn host_pid(&mut self, ns: u64, pid: i32) -> Option<i32> {
        if let Some(&host) = self.processes.get(&(ns, pid)) {
            if Self::is_process(host, ns, pid) {
                return Some(host);
            }
            self.processes.remove(&(ns, pid));
        }
        // One walk of /proc per new process: a few hundred stat calls on a busy node.
        let host = std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&host| Self::is_process(host, ns, pid))?;
        self.processes.insert((ns, pid), host);
        Some(host)
    }

    fn host_tid(&mut self, host_pid: i32, tid: i32) -> Option<i32> {
        let is_thread = |host_tid: i32| {
            innermost_and_tgid(Path::new(&format!("/proc/{host_pid}/task/{host_tid}/status")))
                .is_some_and(|(id, tgid)| id == tid && tgid == host_pid)
        };
        if let Some(&host_tid) = self.threads.get(&(host_pid, tid)) {
            if is_thread(host_tid) {
                return Some(host_tid);
            }
            self.threads.remove(&(host_pid, tid));
        }
        let host_tid = std::fs::read_dir(format!("/proc/{host_pid}/task"))
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&t| is_thread(t))?;
        // Bounded: entries of processes and threads that are gone are dropped when met.
        if self.threads.len() > 65_536 {
            self.threads.clear();
        }
        self.threads.insert((host_pid, tid), host_tid);
        Some(host_tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_the_agents_own_namespace_are_used_as_they_are() {
        let own = own_pid_ns().unwrap();
        let mut r = Resolver::new(own);
        let (pid, tid) = (std::process::id() as i32, super::super::sys::gettid());
        assert_eq!(r.resolve(None, pid, tid), Some((pid, tid)));
        assert_eq!(r.resolve(Some(own), pid, tid), Some((pid, tid)));
        assert_eq!(r.resolve(None, 0, tid), None, "0 would mean the agent's own thread");
    }

    #[test]
    fn a_namespace_nobody_is_in_resolves_to_nothing() {
        let own = own_pid_ns().unwrap();
        let mut r = Resolver::new(own);
        // Seen from a namespace no process here is in, id 1 is nobody we may touch.
        assert_eq!(r.resolve(Some(own ^ 0x5a5a), 1, 1), None);
    }

    #[test]
    fn the_generation_tag_tells_a_current_namespace_from_a_stale_one() {
        use super::super::table::{pack_pid_ns, unpack_pid_ns};
        let v = pack_pid_ns(7, 4_026_531_836);
        assert_eq!(unpack_pid_ns(7, v), Some(4_026_531_836));
        assert_eq!(unpack_pid_ns(8, v), None, "written for an earlier job of the slot");
        assert_eq!(unpack_pid_ns(7, 0), None);
    }
}
