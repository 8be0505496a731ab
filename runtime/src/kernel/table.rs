//! The node-wide registration table: a small file in /dev/shm, mapped by the agent
//! and by every service process using the kernel backend.
//!
//! Layout (all fields atomics, native endianness, one cache line each):
//! a [`Header`], a dirty bitmap (one bit per slot, rounded up to a cache line), then
//! `slots` × [`Slot`]. A slot belongs to one job of one thread
//! at a time; its `word` packs `(generation << 8) | state` so a single load tells
//! the agent both what the job is doing and whether it is still the same job.
//! Writers: the job's thread (claim, context, state changes, free), the agent (`admitted`
//! when it admits, `successor` while jobs wait, and `word` only to free the slot of a thread
//! that died), and a job leaving the band (another slot's `admitted`, in the hand-off).
//!
//! Two protocols keep the agent cheap and its priority writes safe:
//! - **dirty bits**: a thread that changes its slot sets the slot's bit, then rings;
//!   the agent swaps each non-zero bitmap word to 0 and reads only those slots, so a
//!   wake-up costs O(changed slots), not O(table);
//! - **the write fence** (`Slot::agent_busy`): the agent announces the generation whose
//!   thread it is about to re-prioritise, re-reads the slot (SeqCst), and only writes if
//!   that job is still RUNNABLE; a thread that leaves RUNNABLE (block, completion) stores
//!   its new state (SeqCst) and then waits until `agent_busy` no longer names its job
//!   before it sets its own policy. Either the agent sees the new state and does not
//!   write, or the thread waits for the write to land: an agent write can never land
//!   after the thread restored itself (the race that leaked priorities into later jobs).
//! - **the admission wait** (`Slot::admitted`): a new job's thread publishes RUNNABLE,
//!   rings, and sleeps on `admitted` until the agent has put it in the band and set it
//!   to 1. A new job the policy does not run yet is therefore blocked, not runnable:
//!   parked at SCHED_IDLE it would be a fair-class task starved by the band, and the
//!   kernel's fair server (Linux 6.12+: 50 ms per second per CPU at deadline priority)
//!   runs starved fair tasks in one stretch, freezing the band, the I/O threads and the
//!   agent on that CPU. Only a job preempted mid-run is parked at SCHED_IDLE.
//! - **the fast path** (`Header::runnable`, `Header::fast_limit`): while fewer jobs are
//!   runnable on the node than the policy runs at once, the policy's decision is known
//!   (run it), so a new job puts itself in the band (while CLAIMED, when the agent never
//!   writes it), marks its slot [`SELF_ADMITTED`] and sets its dirty bit without ringing;
//!   a job that leaves while nobody waits does not ring either. The agent learns of both
//!   at its next wake-up (the next ring or heartbeat), and the first arrival that finds
//!   the node full rings as before, so every ordering decision is still the policy's.
//!   A job that wakes from a blocking call while the node has room re-enters the band
//!   the same way (while BLOCKED, when the agent never writes it).
//! - **the hand-off** (`Slot::successor`): while jobs wait, the agent publishes in each
//!   running job's slot the job its policy would run next if that one left (asked of a
//!   copy of the policy). A running job that blocks or finishes on a full node claims
//!   that successor itself (`admitted`: [`WAITING`] → [`HANDED`], a CAS, so one claimer
//!   wins), wakes it and only marks its own slot: the successor puts itself in the band
//!   and stores [`SELF_ADMITTED`]. No agent wake-up and no cross-CPU priority write sit
//!   between a CPU coming free and the next job starting on it. While a successor is
//!   [`HANDED`] the agent does not write its thread (it rechecks shortly), so the job's
//!   own write cannot land after an agent write. A published successor can be stale by
//!   one agent pass (an older job arrived since); the agent then parks the successor at
//!   its next pass, as it would any job the policy stops running. If the claim fails
//!   (no successor, already admitted, claimed by another) the leaving job rings as before.
//!
//! **Key ordering** ([`ORDER_BY_KEY`], `tailor agent --enforce priority`) replaces all of
//! the above for policies that order jobs by one static key (orf and gfifo: the GAT; edf:
//! the deadline). A job's thread sets its own SCHED_FIFO priority from its key
//! ([`level`]: older key, higher level, one level per `bucket_ns`, counted down from
//! [`Header::base`]), and the kernel's RT scheduler, which always runs the highest-priority
//! runnable threads on the CPUs, does the ordering and the preemption: no ring, no agent
//! wake-up, no hand-off, no cross-CPU priority write per job. The agent only moves `base`
//! forward when new keys run out of levels (a job whose key lands on a level at or below
//! [`SHIFT_LEVEL`] rings), rewriting the live threads' levels under the write fence; the
//! shift raises every level, so no two live jobs swap order. A thread sets its level after
//! it publishes RUNNABLE, then re-reads `base` and sets it again if the agent shifted
//! meanwhile: the agent's rewrite and the thread's own write compute the same value.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use tailor_core::policy::KeyField;

pub const MAGIC: u64 = u64::from_le_bytes(*b"TAILORSC");
/// 8: [`Slot::start`] (thread identity across id reuse) and [`Header::agent_pid_ns`] /
/// [`Slot::pid_ns`] (PID namespaces), in what was padding (every other field keeps its
/// offset; both structs keep their size).
pub const VERSION: u32 = 8;
/// Default number of slots: concurrent jobs on the node, all processes together.
pub const DEFAULT_SLOTS: u32 = 1024;

/// Slot states (low 8 bits of `word`).
pub const FREE: u64 = 0;
pub const CLAIMED: u64 = 1;
pub const RUNNABLE: u64 = 2;
pub const BLOCKED: u64 = 3;

/// `Slot::admitted`: waiting for the agent; admitted by it; put in the band by itself;
/// handed a CPU by a leaving job and about to put itself in the band.
pub const WAITING: u32 = 0;
pub const ADMITTED: u32 = 1;
pub const SELF_ADMITTED: u32 = 2;
pub const HANDED: u32 = 3;

/// `Header::ordering`: the agent runs a policy and moves jobs in and out of the band, or
/// jobs order themselves by key (see "key ordering" above).
pub const ORDER_BY_BAND: u32 = 0;
pub const ORDER_BY_KEY: u32 = 1;
/// `Header::key`: which slot field is the key under [`ORDER_BY_KEY`] (core's
/// [`KeyField`](tailor_core::policy::KeyField) encoding).
pub const KEY_GAT: u32 = KeyField::Gat as u32;
pub const KEY_DEADLINE: u32 = KeyField::Deadline as u32;
/// The level rule is core's (`tailor_core::policy::keyed`), the one the simulator's
/// `keyed` policy runs: levels 1..=[`TOP_LEVEL`], all below the I/O threads
/// ([`super::IO_PRIORITY`]) and far below the kernel's threaded IRQs (50); a job at or
/// below [`SHIFT_LEVEL`] rings the agent to shift `base`.
pub use tailor_core::policy::keyed::{level, SHIFT_LEVEL, TOP_LEVEL};

/// Agent states.
pub const AGENT_STARTING: u32 = 0;
pub const AGENT_RUNNING: u32 = 1;
pub const AGENT_STOPPED: u32 = 2;

#[repr(C, align(64))]
pub struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub slots: AtomicU32,
    pub agent_pid: AtomicU32,
    pub agent_state: AtomicU32,
    /// Incremented by the agent at least every [`super::agent::HEARTBEAT`]; watchdogs watch it.
    pub heartbeat: AtomicU64,
    /// Rung (incremented, then futex-woken if the agent sleeps) on every slot change.
    pub doorbell: AtomicU32,
    /// 1 while the agent sleeps on `doorbell`: ringers skip the wake syscall otherwise.
    pub agent_sleeping: AtomicU32,
    /// Jobs RUNNABLE on the node (kept by the job threads; a hint that errs high).
    pub runnable: AtomicU32,
    /// The agent's policy runs every runnable job while at most this many are runnable
    /// (set by the agent; 0 = no fast path): see "the fast path" above.
    pub fast_limit: AtomicU32,
    /// Hand-offs so far (incremented by the job that hands its CPU on).
    pub handoffs: AtomicU64,
    /// [`ORDER_BY_BAND`] or [`ORDER_BY_KEY`]; set by the agent before it is running.
    pub ordering: AtomicU32,
    /// [`KEY_GAT`] or [`KEY_DEADLINE`] (key ordering only).
    pub key: AtomicU32,
    /// Key span of one level, ns (key ordering only).
    pub bucket_ns: AtomicU64,
    /// The key that maps to [`TOP_LEVEL`]; only the agent moves it, only forward.
    pub base: AtomicU64,
    /// The largest key that found itself at or below [`SHIFT_LEVEL`] (a job stores it with
    /// `fetch_max` before it rings): the agent shifts by it even if that job has ended.
    pub newest: AtomicU64,
    /// The inode of the agent's PID namespace: a service in another one cannot check the
    /// agent's pid (`agent_pid` means nothing there) and watches the heartbeat instead.
    pub agent_pid_ns: AtomicU64,
}

#[repr(C, align(64))]
pub struct Slot {
    pub word: AtomicU64,
    pub pid: AtomicU32,
    pub tid: AtomicU32,
    pub gat: AtomicU64,
    pub deadline: AtomicU64,
    pub class: AtomicU32,
    /// The thread's policy before the job: what the agent restores if it must.
    pub orig_policy: AtomicI32,
    pub orig_priority: AtomicI32,
    /// [`WAITING`] while the job's thread waits to be admitted (futex on this word); the
    /// agent sets [`ADMITTED`] and wakes it once the thread is in the band (or when the
    /// agent stops), or a leaving job sets [`HANDED`] (see "the hand-off").
    pub admitted: AtomicU32,
    /// The generation whose thread the agent is re-prioritising right now (0 = none).
    pub agent_busy: AtomicU64,
    /// Written by the agent while this job runs and others wait: the job the policy
    /// runs next if this one leaves ([`pack_successor`]; 0 = none, ring the agent).
    pub successor: AtomicU64,
    /// Wake-ups of this slot's jobs, counted by their threads before they store RUNNABLE:
    /// a block and a wake-up between two agent passes leave the state RUNNABLE as it was,
    /// and this is how the agent learns they happened.
    pub wakes: AtomicU32,
    /// When the job's thread started (`sys::thread_start_time`; 0 = unknown): with `tid`
    /// it names that thread for good, so the agent never writes a later thread that was
    /// given the same id after the service died.
    pub start: AtomicU64,
    /// The PID namespace `pid` and `tid` are numbered in ([`pack_pid_ns`]): the job's
    /// generation (low 32 bits) and the namespace's inode. A value whose generation is not
    /// the slot's (a writer that does not set it) means the agent's own namespace.
    pub pid_ns: AtomicU64,
}

// The fields added in versions 7 and 8 live in what was padding: every struct keeps its size.
const _: () = assert!(std::mem::size_of::<Header>() == 128 && std::mem::size_of::<Slot>() == 128);

/// The `pid_ns` value of job `generation` whose ids are numbered in PID namespace `inode`.
pub fn pack_pid_ns(generation: u64, inode: u64) -> u64 {
    ((generation & 0xffff_ffff) << 32) | (inode & 0xffff_ffff)
}

/// The PID namespace inode job `generation` registered with, or `None` if its writer did
/// not say (then its ids are the agent's own namespace's).
pub fn unpack_pid_ns(generation: u64, value: u64) -> Option<u64> {
    (value >> 32 == generation & 0xffff_ffff && value & 0xffff_ffff != 0).then_some(value & 0xffff_ffff)
}

/// Generation bits kept in a successor: enough to tell a slot's jobs apart across the
/// few microseconds between the agent's publish and a claim.
const SUCCESSOR_GENERATION_BITS: u32 = 40;

/// The successor value naming job `generation` of slot `slot`.
pub fn pack_successor(slot: usize, generation: u64) -> u64 {
    ((slot as u64 + 1) << SUCCESSOR_GENERATION_BITS) | (generation & ((1 << SUCCESSOR_GENERATION_BITS) - 1))
}

/// `(slot, generation bits)` of a successor value, or `None` for 0.
pub fn unpack_successor(value: u64) -> Option<(usize, u64)> {
    let slot = (value >> SUCCESSOR_GENERATION_BITS) as usize;
    (slot > 0).then(|| (slot - 1, value & ((1 << SUCCESSOR_GENERATION_BITS) - 1)))
}

/// Whether a slot word belongs to the job a successor names (`generation_bits` from
/// [`unpack_successor`]) and that job is RUNNABLE.
pub fn is_runnable_successor(word: u64, generation_bits: u64) -> bool {
    let (generation, state) = unpack(word);
    state == RUNNABLE && generation & ((1 << SUCCESSOR_GENERATION_BITS) - 1) == generation_bits
}

pub fn pack(generation: u64, state: u64) -> u64 {
    (generation << 8) | state
}

pub fn unpack(word: u64) -> (u64, u64) {
    (word >> 8, word & 0xff)
}

/// A mapped table.
pub struct Table {
    base: *mut u8,
    len: usize,
    slots: usize,
    path: PathBuf,
    /// `(device, inode)` of the mapped file.
    file_id: (u64, u64),
    /// This mapping's entry in [`truncation`]'s list.
    guard: Option<usize>,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Table {}
unsafe impl Sync for Table {}

/// Bytes of the dirty bitmap for `slots` slots: whole cache lines.
fn bitmap_len(slots: usize) -> usize {
    slots.div_ceil(512) * 64
}

fn slots_offset(slots: usize) -> usize {
    std::mem::size_of::<Header>() + bitmap_len(slots)
}

fn table_len(slots: usize) -> usize {
    slots_offset(slots) + slots * std::mem::size_of::<Slot>()
}

fn id_of(file: &std::fs::File) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    file.metadata().map(|m| (m.dev(), m.ino())).unwrap_or((0, 0))
}

fn io_err(path: &Path, what: &str, e: io::Error) -> crate::RuntimeError {
    crate::RuntimeError::Io { what: format!("{}: {what}", path.display()), source: e }
}

impl Table {
    fn map(path: &Path, file: &std::fs::File, len: usize) -> Result<*mut u8, crate::RuntimeError> {
        // SAFETY: mapping a file we hold open, shared, read-write, at a kernel-chosen address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err(path, "mmap", io::Error::last_os_error()));
        }
        Ok(ptr as *mut u8)
    }

    /// Creates the table with `slots` free slots as a new file that replaces `path` in one
    /// rename; the header is left in [`AGENT_STARTING`]. Never truncates the old file:
    /// services still map it (a mapping cut short faults with SIGBUS on its next access),
    /// and they find the new one by its new inode (see `super::KernelBackend`, re-attach).
    pub fn create(path: &Path, slots: u32) -> Result<Table, crate::RuntimeError> {
        let slots_n = slots.max(1) as usize;
        let len = table_len(slots_n);
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".new-{}", std::process::id()));
        let staging = PathBuf::from(staging);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&staging)
            .map_err(|e| io_err(&staging, "create", e))?;
        let made = (|| {
            file.set_len(len as u64).map_err(|e| io_err(&staging, "set_len", e))?;
            let base = Table::map(&staging, &file, len)?;
            let guard = truncation::watch(base, len);
            let table = Table { base, len, slots: slots_n, path: path.to_path_buf(), file_id: id_of(&file), guard };
            let h = table.header();
            h.version.store(VERSION, Ordering::Relaxed);
            h.slots.store(slots, Ordering::Relaxed);
            h.agent_state.store(AGENT_STARTING, Ordering::Relaxed);
            // The magic last: a reader that sees it sees a complete header.
            h.magic.store(MAGIC, Ordering::Release);
            std::fs::rename(&staging, path).map_err(|e| io_err(path, "rename the new table into place", e))?;
            Ok(table)
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(&staging);
        }
        made
    }

    /// `(device, inode)` of the file now at `path`, to tell a new table from the one mapped.
    pub fn file_id(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    /// Opens an existing table, checking magic, version and size.
    pub fn open(path: &Path) -> Result<Table, crate::RuntimeError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                crate::RuntimeError::Unsupported(format!(
                    "{}: no agent table. Fix: start the node agent first: `tailor agent --table {}`",
                    path.display(),
                    path.display()
                ))
            } else {
                io_err(path, "open", e)
            }
        })?;
        let size = file.metadata().map_err(|e| io_err(path, "stat", e))?.len() as usize;
        let bad = |why: String| {
            crate::RuntimeError::Unsupported(format!(
                "{}: not a tailor agent table ({why}). Fix: point `table` at the file `tailor agent --table` created",
                path.display()
            ))
        };
        if size < std::mem::size_of::<Header>() {
            return Err(bad(format!("{size} bytes")));
        }
        let header_only = Table::map(path, &file, std::mem::size_of::<Header>())?;
        // SAFETY: the mapping is at least a Header long and page-aligned.
        let (magic, version, slots) = unsafe {
            let h = &*(header_only as *const Header);
            (h.magic.load(Ordering::Acquire), h.version.load(Ordering::Relaxed), h.slots.load(Ordering::Relaxed))
        };
        // SAFETY: unmapping what we mapped above.
        unsafe { libc::munmap(header_only as *mut libc::c_void, std::mem::size_of::<Header>()) };
        if magic != MAGIC {
            return Err(bad("bad magic".into()));
        }
        if version != VERSION {
            return Err(bad(format!("version {version}, this build speaks {VERSION}")));
        }
        let len = table_len(slots as usize);
        if size < len {
            return Err(bad(format!("{size} bytes for {slots} slots")));
        }
        let base = Table::map(path, &file, len)?;
        let guard = truncation::watch(base, len);
        Ok(Table { base, len, slots: slots as usize, path: path.to_path_buf(), file_id: id_of(&file), guard })
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as `self`.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn slot(&self, i: usize) -> &Slot {
        assert!(i < self.slots);
        // SAFETY: slot `i` lies inside the mapping (checked above).
        unsafe { &*(self.base.add(slots_offset(self.slots) + i * std::mem::size_of::<Slot>()) as *const Slot) }
    }

    /// Number of 64-bit words in the dirty bitmap.
    pub fn dirty_words(&self) -> usize {
        self.slots.div_ceil(64)
    }

    /// Word `w` of the dirty bitmap (bit `b` = slot `64 w + b` changed since the agent looked).
    pub fn dirty_word(&self, w: usize) -> &AtomicU64 {
        assert!(w < self.dirty_words());
        // SAFETY: the bitmap follows the header, 8-byte aligned, inside the mapping.
        unsafe { &*(self.base.add(std::mem::size_of::<Header>() + w * 8) as *const AtomicU64) }
    }

    /// Marks slot `i` changed and tells the agent.
    pub fn changed(&self, i: usize) {
        self.mark(i);
        self.ring();
    }

    /// Sets slot `i`'s dirty bit without waking the agent: it reads the slot at its next
    /// wake-up.
    pub fn mark(&self, i: usize) {
        self.dirty_word(i / 64).fetch_or(1 << (i % 64), Ordering::SeqCst);
    }

    /// Stores `state` for job `generation` of slot `i`, then waits until the agent is not
    /// in the middle of re-prioritising that job's thread (see the module doc): after this
    /// returns, the agent will not touch the thread's policy until it is RUNNABLE again.
    pub fn leave_runnable(&self, i: usize, generation: u64, state: u64) {
        let slot = self.slot(i);
        slot.word.store(pack(generation, state), Ordering::SeqCst);
        let mut spins = 0u32;
        let mut last_beat = (self.header().heartbeat.load(Ordering::Acquire), std::time::Instant::now());
        while slot.agent_busy.load(Ordering::SeqCst) == generation {
            // The agent (SCHED_FIFO above every job) holds this for one syscall.
            spins += 1;
            if spins < 1_000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
                // An agent killed between announcing and clearing never clears: stop
                // waiting once it is gone (the watchdog then restores and falls back).
                if spins.is_multiple_of(1_000) {
                    let h = self.header();
                    let beat = h.heartbeat.load(Ordering::Acquire);
                    if beat != last_beat.0 {
                        last_beat = (beat, std::time::Instant::now());
                    }
                    // From another PID namespace the agent's pid names nothing: a silent
                    // heartbeat is how we tell it is gone there.
                    let silent = last_beat.1.elapsed() >= 10 * super::agent::HEARTBEAT;
                    if h.agent_state.load(Ordering::Acquire) != AGENT_RUNNING
                        || self.agent_alive_by_pid() == Some(false)
                        || silent
                    {
                        return;
                    }
                }
            }
        }
    }

    /// The agent's side of the write fence (see the module doc): announces job
    /// `generation` of slot `i`, re-reads the slot, and sets thread `tid` to `p` only if the
    /// slot still holds that job in a state `writable` accepts. `Ok(false)`: not written.
    pub fn set_policy_fenced(
        &self,
        i: usize,
        generation: u64,
        tid: i32,
        p: super::sys::ThreadPolicy,
        writable: impl Fn(u64) -> bool,
    ) -> io::Result<bool> {
        let slot = self.slot(i);
        slot.agent_busy.store(generation, Ordering::SeqCst);
        let (current, state) = unpack(slot.word.load(Ordering::SeqCst));
        let result = if current == generation && writable(state) {
            super::sys::set_policy(tid, p).map(|()| true)
        } else {
            Ok(false)
        };
        slot.agent_busy.store(0, Ordering::SeqCst);
        result
    }

    /// Whether the agent named in the header is alive, by its pid, when this process shares
    /// its PID namespace; `None` from another namespace (a pod), where its pid names nothing
    /// (or another process): watch the heartbeat there.
    pub fn agent_alive_by_pid(&self) -> Option<bool> {
        let h = self.header();
        let agent_ns = h.agent_pid_ns.load(Ordering::Acquire);
        if agent_ns == 0 || super::nspid::own_pid_ns_cached() != Some(agent_ns) {
            return None;
        }
        Some(super::sys::process_alive(h.agent_pid.load(Ordering::Acquire) as i32))
    }

    /// Whether the agent serves this table: RUNNING, alive by its pid when we can see it,
    /// else (from another PID namespace) its heartbeat moving within a few heartbeats.
    pub fn agent_serving(&self) -> bool {
        let h = self.header();
        if h.agent_state.load(Ordering::Acquire) != AGENT_RUNNING {
            return false;
        }
        if let Some(alive) = self.agent_alive_by_pid() {
            return alive;
        }
        let (beat, start) = (h.heartbeat.load(Ordering::Acquire), std::time::Instant::now());
        while start.elapsed() < 5 * super::agent::HEARTBEAT {
            if h.heartbeat.load(Ordering::Acquire) != beat {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(device, inode)` of the mapped file: differs from [`Table::file_id`] of the path
    /// once a new agent put its table there.
    pub fn mapped_file_id(&self) -> (u64, u64) {
        self.file_id
    }

    /// Whether someone cut the file short under this mapping: it now reads zeros (see
    /// [`truncation`]), so nobody can serve or use it any more.
    pub fn truncated(&self) -> bool {
        self.guard.is_some_and(truncation::hit)
    }

    /// The agent's sleep: until the doorbell moves past `bell` (read before the agent's
    /// pass, so a ring during the pass is not slept through) or `timeout`. Announces the
    /// sleep so ringers know to wake it. Returns whether it was rung.
    pub fn sleep_on_doorbell(&self, bell: u32, timeout: std::time::Duration) -> bool {
        let h = self.header();
        h.agent_sleeping.store(1, Ordering::SeqCst);
        if h.doorbell.load(Ordering::SeqCst) == bell {
            super::sys::futex_wait(&h.doorbell, bell, timeout);
        }
        h.agent_sleeping.store(0, Ordering::SeqCst);
        h.doorbell.load(Ordering::Relaxed) != bell
    }

    /// Tells the agent something changed.
    pub fn ring(&self) {
        let h = self.header();
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        if h.agent_sleeping.load(Ordering::SeqCst) != 0 {
            super::sys::futex_wake(&h.doorbell);
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        if let Some(i) = self.guard {
            truncation::forget(i);
        }
        // SAFETY: unmapping exactly what we mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A table file cut short under its mappings (`truncate`, or an old agent's in-place
/// re-create) would kill every service and the agent with SIGBUS at their next access to
/// the lost pages. Instead, a SIGBUS inside a table mapping replaces the whole mapping with
/// zeroed private memory and the access is retried: the table then reads as one whose
/// agent never beats (services fall back after `watchdog_ms`, the agent sees
/// [`Table::truncated`] and exits for its supervisor to start a fresh table). A SIGBUS
/// anywhere else gets the process's previous handling.
mod truncation {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Once;

    const MAX: usize = 64;
    static BASES: [AtomicUsize; MAX] = [const { AtomicUsize::new(0) }; MAX];
    static LENS: [AtomicUsize; MAX] = [const { AtomicUsize::new(0) }; MAX];
    static HIT: [AtomicBool; MAX] = [const { AtomicBool::new(false) }; MAX];
    static INSTALL: Once = Once::new();
    /// The SIGBUS disposition before ours, put back for a fault outside our mappings.
    static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

    extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
        let addr = unsafe { (*info).si_addr() } as usize;
        for i in 0..MAX {
            let (base, len) = (BASES[i].load(Ordering::Acquire), LENS[i].load(Ordering::Acquire));
            if base != 0 && addr >= base && addr < base + len {
                // SAFETY: replaces exactly our own mapping (mmap is async-signal-safe).
                unsafe {
                    libc::mmap(
                        base as *mut libc::c_void,
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                HIT[i].store(true, Ordering::Release);
                return;
            }
        }
        // SAFETY: PREVIOUS was filled before this handler was installed; the faulting access
        // runs again and gets it.
        unsafe { libc::sigaction(libc::SIGBUS, (&raw const PREVIOUS).cast(), std::ptr::null_mut()) };
    }

    /// Watches the mapping `[base, base + len)`; its entry, or `None` if the list is full.
    pub(super) fn watch(base: *mut u8, len: usize) -> Option<usize> {
        INSTALL.call_once(|| {
            // SAFETY: a zeroed sigaction with our handler; the old one is kept in PREVIOUS
            // before the handler can run.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(libc::SIGBUS, &action, (&raw mut PREVIOUS).cast());
            }
        });
        (0..MAX).find(|&i| {
            LENS[i].load(Ordering::Acquire) == 0
                && LENS[i].compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed).is_ok()
                && {
                    HIT[i].store(false, Ordering::Release);
                    BASES[i].store(base as usize, Ordering::Release);
                    true
                }
        })
    }

    pub(super) fn hit(i: usize) -> bool {
        HIT[i].load(Ordering::Acquire)
    }

    pub(super) fn forget(i: usize) {
        BASES[i].store(0, Ordering::Release);
        LENS[i].store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layout is a protocol other languages implement (docs/kernel-table-protocol.md;
    /// sdk/go/kernel): moving a field is a new VERSION, and this test says so.
    #[test]
    fn the_layout_is_the_documented_protocol() {
        assert_eq!(VERSION, 8, "a layout change bumps VERSION and docs/kernel-table-protocol.md");
        assert_eq!(MAGIC.to_le_bytes(), *b"TAILORSC");
        assert_eq!(size_of::<Header>(), 128);
        let header = [
            offset_of!(Header, magic),
            offset_of!(Header, version),
            offset_of!(Header, slots),
            offset_of!(Header, agent_pid),
            offset_of!(Header, agent_state),
            offset_of!(Header, heartbeat),
            offset_of!(Header, doorbell),
            offset_of!(Header, agent_sleeping),
            offset_of!(Header, runnable),
            offset_of!(Header, fast_limit),
            offset_of!(Header, handoffs),
            offset_of!(Header, ordering),
            offset_of!(Header, key),
            offset_of!(Header, bucket_ns),
            offset_of!(Header, base),
            offset_of!(Header, newest),
            offset_of!(Header, agent_pid_ns),
        ];
        assert_eq!(header, [0, 8, 12, 16, 20, 24, 32, 36, 40, 44, 48, 56, 60, 64, 72, 80, 88]);
        assert_eq!(size_of::<Slot>(), 128);
        let slot = [
            offset_of!(Slot, word),
            offset_of!(Slot, pid),
            offset_of!(Slot, tid),
            offset_of!(Slot, gat),
            offset_of!(Slot, deadline),
            offset_of!(Slot, class),
            offset_of!(Slot, orig_policy),
            offset_of!(Slot, orig_priority),
            offset_of!(Slot, admitted),
            offset_of!(Slot, agent_busy),
            offset_of!(Slot, successor),
            offset_of!(Slot, wakes),
            offset_of!(Slot, start),
            offset_of!(Slot, pid_ns),
        ];
        assert_eq!(slot, [0, 8, 12, 16, 24, 32, 36, 40, 44, 48, 56, 64, 72, 80]);
        // Header, dirty bitmap in whole cache lines, then the slots.
        assert_eq!((bitmap_len(1), bitmap_len(512), bitmap_len(513), bitmap_len(1024)), (64, 64, 128, 128));
        assert_eq!(slots_offset(1024), 256);
        assert_eq!(table_len(1024), 256 + 1024 * 128);
    }
}
