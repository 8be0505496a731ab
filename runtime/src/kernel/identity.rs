//! Which registered threads the agent may still write: a thread id outlives its thread
//! (a killed service's ids are handed to new threads, of any process), so before a write
//! the agent checks that the id still names the thread that registered.
//!
//! A registered thread cannot end while its job is in the table unless its whole process
//! dies (a job's end, also by panic, frees its slot first). So the agent holds a pidfd per
//! registering process, opened after checking that the slot's thread is the one that
//! started at the slot's `start` (so the pidfd names the right process): while that pidfd
//! says the process lives, its registered thread ids are its own. One `poll` and one
//! `tgkill` per check, no /proc read except the first time a process is seen.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};

use super::sys;

#[derive(Default)]
pub(super) struct Processes {
    /// Processes seen registering, with a pidfd on each (polls readable once it exits).
    known: HashMap<i32, OwnedFd>,
}

impl Processes {
    /// Whether thread `tid` of process `pid`, which registered a job having started at
    /// `start` (0 = unknown), is still that thread, reading its start time back (one /proc
    /// read): what the reaper and the rare writes (key-ordering shifts, the restore at
    /// exit) use. Also right for a thread that ended mid-job without unwinding (a raw
    /// thread exit) in a process that lives on, whose id a new thread took.
    pub(super) fn same_thread(&mut self, pid: i32, tid: i32, start: u64) -> bool {
        self.alive(pid, tid, start) && (start == 0 || sys::thread_start_time(pid, tid) == Some(start))
    }

    /// The cheap form of [`Self::same_thread`] for the band's frequent writes: false once the
    /// thread's process exited, even if both ids were given to new ones since; a thread of a
    /// live process is taken to be the one that registered (jobs end before their threads,
    /// and the reaper's exact check runs every `REAP_EVERY`).
    pub(super) fn alive(&mut self, pid: i32, tid: i32, start: u64) -> bool {
        if let Some(fd) = self.known.get(&pid) {
            if exited(fd) {
                self.known.remove(&pid);
                // The process we knew under this id is gone: this slot was its, or (if a
                // new process has the id and registered since) `start` tells them apart.
                return start != 0 && self.first_sight(pid, tid, start);
            }
            return sys::thread_alive(pid, tid);
        }
        self.first_sight(pid, tid, start)
    }

    fn first_sight(&mut self, pid: i32, tid: i32, start: u64) -> bool {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return false; // ESRCH: no such process
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // Checked after the pidfd exists: if the thread is still the one that registered,
        // the pidfd names its process.
        if !sys::same_thread(pid, tid, start) {
            return false;
        }
        self.known.insert(pid, fd);
        true
    }

    /// Forgets processes that exited (their pidfds), keeping the map as small as the node.
    pub(super) fn forget_exited(&mut self) {
        self.known.retain(|_, fd| !exited(fd));
    }
}

fn exited(fd: &OwnedFd) -> bool {
    sys::pidfd_exited(fd)
}
