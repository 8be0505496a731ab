//! Host ids of threads registered from other PID namespaces (a service in a pod).
//!
//! A job's thread writes the ids it sees (`getpid`, `gettid`), its start time and its PID
//! namespace's inode (`table::Slot::pid_ns`). Inside a pod those ids are the pod's, not the
//! host's, and `sched_setscheduler(tid)` from the node agent would hit whatever host thread
//! happens to carry that number. The agent (which runs in the host's PID namespace,
//! `hostPID: true`) translates them: the host process whose `/proc/<pid>/ns/pid` is that
//! namespace and whose `NSpid` ends in the registered pid, then the thread of that process
//! whose `NSpid` ends in the registered tid and whose start time is the registered one. A
//! thread that cannot be found that way is never written: it has died, or its id now names
//! another thread.
//!
//! What is found is kept per thread: `(namespace, pid, tid, start time)` names one thread for
//! good (an id reused by a later thread comes with a later start time: see `identity`), and a
//! thread's host ids never change while it lives. So a registration that carries the same four
//! values as one verified before is that same thread, and its host ids are taken from the
//! cache without reading /proc; one with another start time (the id was reused) is looked up
//! and verified again. Whether the thread still lives when the agent writes it is the writer's
//! check, the same one host threads get (`identity::Processes`). A registration without a
//! start time (0: a writer that could not read it) is verified on every use, as before.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::sys;

/// Cached threads before the cache is emptied (entries of threads that are gone are never hit
/// again, since a new thread with their ids has a later start time; this only bounds memory).
const MAX_CACHED_THREADS: usize = 65_536;

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

/// A thread of another namespace, verified once: its host ids and the start time they were
/// verified for.
#[derive(Clone, Copy, Debug)]
struct Found {
    host_pid: i32,
    host_tid: i32,
    start: u64,
}

/// What the resolver did, for tests and the agent's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResolverCounts {
    /// Registrations answered from the cache (no /proc read).
    pub cached: u64,
    /// Registrations looked up and verified in /proc.
    pub verified: u64,
}

/// Translates `(namespace, pid, tid, start)` as a job registered them into host `(pid, tid)`,
/// verifying each thread in /proc once and remembering it (see the module doc).
#[derive(Default)]
pub struct Resolver {
    own: u64,
    /// `(namespace, pid there)` → host pid (checked again before use: pids are reused).
    processes: HashMap<(u64, i32), i32>,
    /// `(namespace, pid there, tid there)` → the thread verified for it.
    threads: HashMap<(u64, i32, i32), Found>,
    /// Namespaces in which some process was found: where a missing thread is a dead one
    /// (elsewhere the agent may just not see the namespace: no `hostPID`).
    seen: HashSet<u64>,
    counts: ResolverCounts,
}

impl Resolver {
    /// A resolver for an agent whose PID namespace is `own` (its inode).
    pub fn new(own: u64) -> Self {
        Resolver { own, ..Default::default() }
    }

    /// Host `(pid, tid)` of the thread a job registered as `(pid, tid)`, started at `start`
    /// (clock ticks since boot; 0: unknown), in namespace `ns` (`None`: the agent's own
    /// namespace, ids as they are), or `None` if no live thread matches: then nothing may
    /// be written to it.
    pub fn resolve(&mut self, ns: Option<u64>, pid: i32, tid: i32, start: u64) -> Option<(i32, i32)> {
        if pid <= 0 || tid <= 0 {
            return None;
        }
        let Some(ns) = ns.filter(|&ns| ns != self.own) else { return Some((pid, tid)) };
        if let Some(found) = self.threads.get(&(ns, pid, tid)).filter(|f| start != 0 && f.start == start) {
            // The same thread as verified before (same ids, same start): its host ids hold.
            self.counts.cached += 1;
            return Some((found.host_pid, found.host_tid));
        }
        self.counts.verified += 1;
        let host_pid = self.host_pid(ns, pid)?;
        self.seen.insert(ns);
        let host_tid = Self::host_tid(host_pid, tid)?;
        if start != 0 {
            // The thread with that id now must be the one that registered.
            if sys::thread_start_time(host_pid, host_tid) != Some(start) {
                return None;
            }
            if self.threads.len() >= MAX_CACHED_THREADS {
                self.threads.clear();
            }
            self.threads.insert((ns, pid, tid), Found { host_pid, host_tid, start });
        }
        Some((host_pid, host_tid))
    }

    /// Whether a thread of namespace `ns` (`None`: ours) that [`Self::resolve`] cannot find
    /// is surely gone: the agent has found processes of that namespace before.
    pub fn sees(&self, ns: Option<u64>) -> bool {
        ns.is_none_or(|ns| ns == self.own || self.seen.contains(&ns))
    }

    /// Registrations answered from the cache and verified in /proc so far.
    pub fn counts(&self) -> ResolverCounts {
        self.counts
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
        if self.processes.len() >= MAX_CACHED_THREADS {
            self.processes.clear();
        }
        self.processes.insert((ns, pid), host);
        Some(host)
    }

    /// The host id of the thread of `host_pid` whose id in its namespace is `tid`: one walk
    /// of the process's threads (once per thread: the result is cached with its start time).
    fn host_tid(host_pid: i32, tid: i32) -> Option<i32> {
        let is_thread = |host_tid: i32| {
            innermost_and_tgid(Path::new(&format!("/proc/{host_pid}/task/{host_tid}/status")))
                .is_some_and(|(id, tgid)| id == tid && tgid == host_pid)
        };
        std::fs::read_dir(format!("/proc/{host_pid}/task"))
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&t| is_thread(t))
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
        assert_eq!(r.resolve(None, pid, tid, 0), Some((pid, tid)));
        assert_eq!(r.resolve(Some(own), pid, tid, 0), Some((pid, tid)));
        assert_eq!(r.resolve(None, 0, tid, 0), None, "0 would mean the agent's own thread");
        assert_eq!(r.counts(), ResolverCounts::default(), "nothing to look up in our own namespace");
    }

    #[test]
    fn a_namespace_nobody_is_in_resolves_to_nothing() {
        let own = own_pid_ns().unwrap();
        let mut r = Resolver::new(own);
        // Seen from a namespace no process here is in, id 1 is nobody we may touch.
        assert_eq!(r.resolve(Some(own ^ 0x5a5a), 1, 1, 0), None);
        assert_eq!(r.resolve(Some(own ^ 0x5a5a), 1, 1, 12_345), None);
        assert!(!r.sees(Some(own ^ 0x5a5a)));
    }

    /// Why a test pod cannot be started here (the test is skipped, saying so).
    #[derive(Debug, thiserror::Error)]
    enum PodSkip {
        #[error("needs root to create a PID namespace")]
        NotRoot,
        #[error("cannot run `unshare` (util-linux): {0}")]
        NoUnshare(#[source] std::io::Error),
    }

    /// A shell that is pid 1 of a PID namespace of its own (`unshare`), killed with its
    /// namespace on drop.
    struct Pod {
        unshare: std::process::Child,
        out: std::io::BufReader<std::process::ChildStdout>,
    }

    impl Pod {
        /// Starts `script` under `unshare --pid --fork --mount-proc --kill-child`, or says why not.
        fn start(script: &str) -> Result<Pod, PodSkip> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err(PodSkip::NotRoot);
            }
            let mut unshare = std::process::Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(PodSkip::NoUnshare)?;
            let out = std::io::BufReader::new(unshare.stdout.take().expect("piped"));
            Ok(Pod { unshare, out })
        }

        fn line(&mut self) -> String {
            let mut l = String::new();
            std::io::BufRead::read_line(&mut self.out, &mut l).expect("the pod's output");
            l.trim().to_string()
        }

        fn go(&mut self) {
            std::io::Write::write_all(self.unshare.stdin.as_mut().expect("piped"), b"go\n").expect("the pod reads");
        }
    }

    impl Drop for Pod {
        fn drop(&mut self) {
            // Killing unshare kills its child, pid 1 of the namespace, and with it the namespace.
            let _ = self.unshare.kill();
            let _ = self.unshare.wait();
        }
    }

    /// Host pids of `parent`'s children (field 4 of /proc/<pid>/stat).
    fn children_of(parent: i32) -> Vec<i32> {
        let ppid = |pid: i32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse::<i32>().ok()
        };
        let procs = std::fs::read_dir("/proc").into_iter().flatten().flatten();
        procs.filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).filter(|&p| ppid(p) == Some(parent)).collect()
    }

    /// The one child of `parent`, waiting for it to appear.
    fn only_child(parent: i32) -> i32 {
        for _ in 0..500 {
            if let [child] = children_of(parent)[..] {
                return child;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("process {parent} has no single child: {:?}", children_of(parent));
    }

    /// A thread is verified in /proc once and then found from the cache; when its process
    /// dies and a new one takes its id in the namespace (`ns_last_pid`), the new registration
    /// is verified again and maps to the new process, and the old one never maps to the new
    /// process (nor to the host's own thread of that number).
    #[test]
    fn a_reused_id_in_a_pod_is_verified_again_and_never_taken_for_the_old_thread() {
        let script = "sleep 1000 & echo $!; read x; kill $!; wait $! 2>/dev/null; \
                      echo 1 > /proc/sys/kernel/ns_last_pid; sleep 1000 & echo $!; read x";
        let mut pod = match Pod::start(script) {
            Ok(p) => p,
            Err(why) => return eprintln!("SKIPPED: {why}"),
        };
        let first_ns_pid: i32 = pod.line().parse().expect("the sleep's pid in the pod");
        assert_eq!(first_ns_pid, 2, "the shell is pid 1, its first child 2");
        let shell = only_child(pod.unshare.id() as i32);
        let ns = pid_ns_of(shell).expect("the pod shell's namespace");
        let first = only_child(shell);
        let first_start = sys::thread_start_time(first, first).expect("the first sleep's start");
        let mut r = Resolver::new(own_pid_ns().unwrap());
        assert_ne!(ns, own_pid_ns().unwrap());

        assert_eq!(r.resolve(Some(ns), 2, 2, first_start), Some((first, first)));
        assert_eq!(r.counts(), ResolverCounts { cached: 0, verified: 1 });
        assert!(r.sees(Some(ns)));
        for _ in 0..3 {
            assert_eq!(r.resolve(Some(ns), 2, 2, first_start), Some((first, first)));
        }
        assert_eq!(r.counts(), ResolverCounts { cached: 3, verified: 1 }, "the same thread: no /proc read");

        // Start times count 10 ms ticks: let the next process start in a later one.
        std::thread::sleep(std::time::Duration::from_millis(30));
        pod.go();
        assert_eq!(pod.line(), "2", "the new sleep took the old one's id in the pod (ns_last_pid)");
        let second = only_child(shell);
        assert_ne!(second, first);
        let second_start = sys::thread_start_time(second, second).expect("the second sleep's start");
        assert!(second_start > first_start);

        // A stale registration of the old thread (its job still in a slot), still cached:
        // the old thread's own host ids, which the writer's liveness check refuses.
        assert_eq!(r.resolve(Some(ns), 2, 2, first_start), Some((first, first)));
        assert!(!sys::same_thread(first, first, first_start), "the writer's check: that thread is gone");
        // The new thread's registration: verified again, found as the new process.
        assert_eq!(r.resolve(Some(ns), 2, 2, second_start), Some((second, second)));
        assert_eq!(r.counts(), ResolverCounts { cached: 4, verified: 2 });
        // Now the stale registration is verified, and never taken for the new thread.
        assert_eq!(r.resolve(Some(ns), 2, 2, first_start), None, "id 2 names another thread now");
        assert_eq!(r.resolve(Some(ns), 2, 2, second_start), Some((second, second)));
        assert_eq!(r.counts(), ResolverCounts { cached: 5, verified: 3 }, "the live thread's entry stayed");
        assert!(![first, second].contains(&2), "the host's own pid 2 is not the pod's");
        // Without a start time nothing is cached: every use is verified.
        assert_eq!(r.resolve(Some(ns), 2, 2, 0), Some((second, second)));
        assert_eq!(r.resolve(Some(ns), 2, 2, 0), Some((second, second)));
        assert_eq!(r.counts().verified, 5);
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
