//! The undo journal: every change is appended and fsynced BEFORE it is made, with the original
//! value, so that safe mode, a signal, or the supervisor after a crash can put everything back.
//!
//! Each line is an entry's JSON, a tab and the FNV-1a hash of the JSON, so a line that was
//! damaged (not only one cut short) is never applied. A torn last line (a crash during the
//! append: that change was never made) is ignored; any other unreadable line is reported by
//! file and line, the readable entries are restored, and the file is kept aside as
//! `journal.jsonl.corrupt` until someone has checked the node and deleted it.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cgfs;
use crate::error::NodeError;
use crate::procs::{self, SchedState};

/// One undoable change.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Entry {
    /// A cgroup directory we created (removed at restore; its tasks go back to `fallback_dir`).
    /// `rt_band_priority`: the tier's SCHED_RR band, reset on threads born inside it.
    CreatedDir {
        path: PathBuf,
        fallback_dir: PathBuf,
        #[serde(default)]
        rt_band_priority: Option<i32>,
    },
    /// A control file we wrote, with the value it had before.
    WroteFile { path: PathBuf, original: String },
    /// A process we moved to another cgroup in one hierarchy, with where it was.
    MovedProcess {
        pid: u32,
        start_time: u64,
        /// Root of the hierarchy (one entry per process per hierarchy).
        hierarchy: PathBuf,
        original_dir: PathBuf,
        original_policy: Option<SchedState>,
    },
    /// A thread whose scheduling policy we changed, with what it was.
    SetPolicy { tid: u32, start_time: u64, original: SchedState },
    /// A change put back while the agent ran (a pod cgroup no tier selects any more): the
    /// earlier entries with the same subject are void, and a later change records a new original.
    Undone { of: Box<Entry> },
}

/// Append-only journal file.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Bytes of whole entries: a failed append is cut back to this, so a full disk never
    /// leaves half a line for the next entry to be glued to.
    len: u64,
    /// What is already journaled, by key: originals are recorded once (the first value is
    /// the true original) until undone.
    seen: HashMap<String, Entry>,
}

impl Entry {
    fn key(&self) -> String {
        match self {
            Entry::CreatedDir { path, .. } => format!("dir:{}", path.display()),
            Entry::WroteFile { path, .. } => format!("file:{}", path.display()),
            Entry::MovedProcess { pid, start_time, hierarchy, .. } => {
                format!("move:{pid}:{start_time}:{}", hierarchy.display())
            }
            Entry::SetPolicy { tid, start_time, .. } => format!("policy:{tid}:{start_time}"),
            Entry::Undone { of } => format!("undone:{}", of.key()),
        }
    }
}

impl Journal {
    pub fn path_in(state_dir: &Path) -> PathBuf {
        state_dir.join("journal.jsonl")
    }

    /// Where a journal with unreadable lines is kept after the readable ones were restored.
    pub fn corrupt_path_in(state_dir: &Path) -> PathBuf {
        state_dir.join("journal.jsonl.corrupt")
    }

    /// Opens (creating) the journal in `state_dir`. Call `restore` first if one is left over.
    /// Refuses while a corrupt journal is kept aside: what its unreadable lines changed may
    /// still be in effect, and recording today's settings as "originals" would make it permanent.
    pub fn open(state_dir: &Path) -> Result<Journal, NodeError> {
        let corrupt = Self::corrupt_path_in(state_dir);
        if corrupt.exists() {
            return Err(NodeError::Journal(format!(
                "{}: a journal with unreadable entries is kept here; its readable entries were restored, but what \
                 the others changed may still be in effect. Check the node (`tailor node status`; processes' \
                 cgroups and scheduling policies), then delete {} to let the agent enforce again",
                corrupt.display(),
                corrupt.display()
            )));
        }
        std::fs::create_dir_all(state_dir).map_err(|e| NodeError::io(state_dir, e))?;
        let path = Self::path_in(state_dir);
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| NodeError::io(&path, e))?;
        // The directory entry itself must be durable, or a crash could lose the whole file.
        if let Ok(dir) = File::open(state_dir) {
            let _ = dir.sync_all();
        }
        let read = read_entries(&path)?;
        if let Some(problem) = read.corrupt.first() {
            return Err(NodeError::Journal(format!("{problem}; restore it first (`tailor node safe-mode`)")));
        }
        let seen = live(read.entries).into_iter().map(|e| (e.key(), e)).collect();
        let len = file.metadata().map_err(|e| NodeError::io(&path, e))?.len();
        Ok(Journal { path, file, len, seen })
    }

    /// Whether an original for this change is already recorded.
    pub fn has(&self, entry: &Entry) -> bool {
        self.seen.contains_key(&entry.key())
    }

    /// The recorded entry (with the original) for the same subject as `entry`, if any.
    pub fn original(&self, entry: &Entry) -> Option<&Entry> {
        self.seen.get(&entry.key())
    }

    /// Appends and fsyncs; returns only when the entry is on disk. Duplicate originals are skipped.
    pub fn record(&mut self, entry: Entry) -> Result<(), NodeError> {
        let key = entry.key();
        if self.seen.contains_key(&key) {
            return Ok(());
        }
        self.append(&entry)?;
        self.seen.insert(key, entry);
        Ok(())
    }

    /// Records that the change `entry` names was put back (call it after putting it back: a
    /// crash in between only restores the same original twice). Its original is forgotten.
    pub fn undone(&mut self, entry: &Entry) -> Result<(), NodeError> {
        let key = entry.key();
        if !self.seen.contains_key(&key) {
            return Ok(());
        }
        self.append(&Entry::Undone { of: Box::new(entry.clone()) })?;
        self.seen.remove(&key);
        Ok(())
    }

    fn append(&mut self, entry: &Entry) -> Result<(), NodeError> {
        let line = encode_line(entry);
        let written = self.file.write_all(line.as_bytes()).and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            // The change will not be made; take back whatever part of the line got out.
            let _ = self.file.set_len(self.len);
            return Err(NodeError::Journal(format!(
                "{}: cannot record a change before making it ({e}); nothing more is changed until the state \
                 directory takes writes again (free space, or make it writable)",
                self.path.display()
            )));
        }
        self.len += line.len() as u64;
        Ok(())
    }

    pub fn entries(&self) -> usize {
        self.seen.len()
    }
}

/// The entries still in force: those an `Undone` after them voids are dropped, and so are the
/// `Undone` markers themselves.
fn live(entries: Vec<Entry>) -> Vec<Entry> {
    let mut voided = HashSet::new();
    let mut out: Vec<Entry> = entries
        .into_iter()
        .rev()
        .filter_map(|e| match e {
            Entry::Undone { of } => {
                voided.insert(of.key());
                None
            }
            e if voided.contains(&e.key()) => None,
            e => Some(e),
        })
        .collect();
    out.reverse();
    out
}

/// FNV-1a, 64 bits: a line's check value (not a defence against tampering, only damage).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// One journal line: JSON, a tab, the JSON's hash in hex, a newline.
fn encode_line(entry: &Entry) -> String {
    let json = serde_json::to_string(entry).expect("journal entries serialize");
    let sum = fnv1a(json.as_bytes());
    format!("{json}\t{sum:016x}\n")
}

/// Why one journal line cannot be read (the caller adds the file and line number).
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Every line ends in a tab and its check value; this one has none.
    #[error("no check value (a line cut short or overwritten)")]
    NoCheckValue,
    /// The check value is 16 hex digits.
    #[error("check value {sum:?} is not hex")]
    CheckValueNotHex { sum: String },
    /// The JSON does not hash to the check value.
    #[error("check value does not match (the line was damaged)")]
    CheckValueMismatch,
    /// The line is intact but is not an entry this version writes.
    #[error("not a journal entry: {0}")]
    NotAnEntry(#[source] serde_json::Error),
}

/// Parses one line (without its newline); the error says what is wrong with it.
pub(crate) fn parse_line(line: &str) -> Result<Entry, JournalError> {
    let (json, sum) = line.rsplit_once('\t').ok_or(JournalError::NoCheckValue)?;
    let want =
        u64::from_str_radix(sum.trim(), 16).map_err(|_| JournalError::CheckValueNotHex { sum: sum.to_string() })?;
    if fnv1a(json.as_bytes()) != want {
        return Err(JournalError::CheckValueMismatch);
    }
    serde_json::from_str(json).map_err(JournalError::NotAnEntry)
}

/// What a journal file holds.
struct ReadJournal {
    entries: Vec<Entry>,
    /// `file:line: what is wrong`, for every unreadable line but a torn last one.
    corrupt: Vec<String>,
}

fn read_entries(path: &Path) -> Result<ReadJournal, NodeError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ReadJournal { entries: Vec::new(), corrupt: Vec::new() })
        }
        Err(e) => return Err(NodeError::io(path, e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut out = ReadJournal { entries: Vec::new(), corrupt: Vec::new() };
    for (i, line) in lines.iter().enumerate() {
        match parse_line(line) {
            Ok(e) => out.entries.push(e),
            // A crash during an append leaves a torn last line: that change was never made.
            Err(_) if i + 1 == lines.len() && !complete => {}
            Err(why) => out.corrupt.push(format!("{}:{}: {why}", path.display(), i + 1)),
        }
    }
    Ok(out)
}

/// What a restore did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RestoreReport {
    pub entries: usize,
    pub files_restored: usize,
    pub processes_moved_back: usize,
    pub policies_restored: usize,
    pub dirs_removed: usize,
    /// Things that could not be undone (e.g. a process that exited is simply skipped, not listed).
    pub errors: Vec<String>,
    /// Unreadable journal lines (`file:line: why`); the journal was moved to
    /// [`Journal::corrupt_path_in`] and the agent will not enforce until it is deleted.
    pub corrupt: Vec<String>,
    /// Leftovers found in the agent's own cgroups beyond the journal (a truncated journal):
    /// threads reset, tasks moved out, directories removed.
    pub swept: usize,
}

impl RestoreReport {
    /// The report's problems as lines for a log, each naming what it is about.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.errors.iter().map(|e| format!("could not undo: {e}")).collect();
        for c in &self.corrupt {
            out.push(format!("unreadable journal entry, not applied: {c}"));
        }
        if let Some(c) = self.corrupt.first() {
            let file = c.split(':').next().unwrap_or("");
            out.push(format!(
                "the journal is kept as {file}.corrupt: check the node for what its unreadable entries changed, \
                 then delete it to let the agent enforce again"
            ));
        }
        out
    }
}

/// Undoes every journaled change in reverse order, then removes the journal. Idempotent: a
/// second call (or a call with no journal) does nothing.
pub fn restore(state_dir: &Path) -> Result<RestoreReport, NodeError> {
    let path = Journal::path_in(state_dir);
    let ReadJournal { entries, corrupt } = read_entries(&path)?;
    let entries = live(entries);
    let mut report = RestoreReport { entries: entries.len(), corrupt, ..Default::default() };
    let created: Vec<&PathBuf> =
        entries.iter().filter_map(|e| if let Entry::CreatedDir { path, .. } = e { Some(path) } else { None }).collect();
    // Policies of processes we moved, so leftover threads born inside our cgroups can be reset.
    let mut moved_policy = std::collections::HashMap::new();
    for e in &entries {
        if let Entry::MovedProcess { pid, original_policy: Some(p), .. } = e {
            moved_policy.insert(*pid, *p);
        }
    }
    // Threads that inherited SCHED_IDLE or the RT band from us (created after the last
    // reconcile, so never journaled) are reset first, while they are still inside our cgroups.
    for e in &entries {
        if let Entry::CreatedDir { path, rt_band_priority, .. } = e {
            reset_inherited(path, *rt_band_priority, &moved_policy, &mut report);
        }
    }
    let mut subtree_control: Vec<(&PathBuf, &String)> = Vec::new();
    for entry in entries.iter().rev() {
        match entry {
            Entry::SetPolicy { tid, start_time, original } => {
                if procs::alive(*tid, *start_time) || thread_alive(*tid, *start_time) {
                    match procs::set_sched_state(*tid, *original) {
                        Ok(()) => report.policies_restored += 1,
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => report.errors.push(format!("tid {tid}: restore policy: {e}")),
                    }
                }
            }
            Entry::MovedProcess { pid, start_time, hierarchy, original_dir, .. } => {
                if procs::alive(*pid, *start_time) {
                    move_back(*pid, original_dir, hierarchy, &mut report);
                }
            }
            Entry::WroteFile { path, original } => {
                // Files inside a directory we created disappear with it; restoring them first would
                // only fail (an empty cpuset) and gain nothing.
                let nothing_to_undo = original.is_empty() && path.ends_with("cgroup.subtree_control");
                if nothing_to_undo || created.iter().any(|d| path.starts_with(d)) {
                    continue;
                }
                if path.ends_with("cgroup.subtree_control") {
                    // cgroup v2 refuses to disable a controller while a child cgroup still enables
                    // it (EBUSY), and our own parent cgroup does until it is removed: undo these
                    // after every directory we created is gone.
                    subtree_control.push((path, original));
                    continue;
                }
                restore_file(path, original, &mut report);
            }
            // `live` left none: what they undid is already put back.
            Entry::Undone { .. } => {}
            Entry::CreatedDir { path, fallback_dir, rt_band_priority } => {
                if !path.exists() {
                    continue;
                }
                evacuate(path, fallback_dir, *rt_band_priority, &moved_policy, &mut report);
                match remove_dir_retrying(path) {
                    Ok(()) => report.dirs_removed += 1,
                    Err(e) => report.errors.push(format!("{}: rmdir: {e}", path.display())),
                }
            }
        }
    }
    // Reverse journal order, so a cgroup's undo comes before its (older-journaled) parent's.
    for (path, original) in subtree_control {
        restore_file(path, original, &mut report);
    }
    if !report.corrupt.is_empty() {
        // Kept for the operator: the lines that could not be read say what may still be changed.
        let aside = Journal::corrupt_path_in(state_dir);
        std::fs::rename(&path, &aside).map_err(|e| NodeError::io(&aside, e))?;
        return Ok(report);
    }
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(NodeError::io(&path, e));
        }
    }
    Ok(report)
}

/// [`restore`], then [`sweep`] of the agent's own cgroups in `roots`.
pub fn restore_and_sweep(state_dir: &Path, cgroup_name: &str, roots: &[PathBuf]) -> Result<RestoreReport, NodeError> {
    let mut report = restore(state_dir)?;
    sweep(roots, cgroup_name, &mut report);
    Ok(report)
}

/// Puts back what the agent's own cgroups (`<root>/<cgroup_name>` in each hierarchy) still hold
/// after the journal was restored: with a truncated journal, a process moved or a directory
/// created by an entry that was lost. Threads at SCHED_IDLE or SCHED_RR inside (the tiers'
/// policies; the runtime's own band is SCHED_FIFO and is left alone) go back to SCHED_OTHER, every
/// task moves to the hierarchy's root, and the directories are removed, children first.
pub fn sweep(roots: &[PathBuf], cgroup_name: &str, report: &mut RestoreReport) {
    let none = std::collections::HashMap::new();
    for root in roots {
        let parent = root.join(cgroup_name);
        if !parent.is_dir() {
            continue;
        }
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&parent)
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        dirs.push(parent.clone());
        for dir in dirs {
            for pid in pids_in(&dir) {
                for tid in procs::tids(pid) {
                    let Some(s) = procs::sched_state(tid) else { continue };
                    if s.policy == libc::SCHED_IDLE || s.policy == libc::SCHED_RR {
                        let back = SchedState { policy: libc::SCHED_OTHER, rt_priority: 0, nice: s.nice };
                        if procs::set_sched_state(tid, back).is_ok() {
                            report.swept += 1;
                        }
                    }
                }
            }
            report.swept += pids_in(&dir).len();
            evacuate(&dir, root, None, &none, report);
            match remove_dir_retrying(&dir) {
                Ok(()) => report.swept += 1,
                Err(e) => report.errors.push(format!("{}: rmdir: {e}", dir.display())),
            }
        }
    }
}

/// Moves a process back to the cgroup it came from or, if that is gone or now refuses it, to the
/// nearest ancestor that takes it (the hierarchy's root always does). cgroup v2 refuses a cgroup
/// that has since started enabling controllers for children (the no-internal-process rule:
/// EBUSY) and a threaded cgroup, whose `cgroup.procs` cannot be written (EOPNOTSUPP).
fn move_back(pid: u32, original_dir: &Path, hierarchy: &Path, report: &mut RestoreReport) {
    let mut target = existing_ancestor(original_dir);
    loop {
        let e = match cgfs::write(&target.join("cgroup.procs"), &pid.to_string()) {
            Ok(()) => {
                report.processes_moved_back += 1;
                return;
            }
            Err(e) => e,
        };
        let refused = matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EOPNOTSUPP));
        if e.raw_os_error() == Some(libc::ESRCH) {
            return;
        }
        if !(refused && target != hierarchy && target.starts_with(hierarchy) && target.pop()) {
            report.errors.push(format!("pid {pid} → {}: {e}", target.display()));
            return;
        }
    }
}

fn restore_file(path: &Path, original: &str, report: &mut RestoreReport) {
    if path.parent().is_some_and(|dir| !dir.exists()) {
        // A cgroup someone else owned and removed since (a pod that ended): nothing to undo.
        return;
    }
    match cgfs::write(path, original) {
        Ok(()) => report.files_restored += 1,
        Err(e) => report.errors.push(format!("{}: restore {:?}: {e}", path.display(), original)),
    }
}

fn thread_alive(tid: u32, start_time: u64) -> bool {
    // A thread that is not a group leader has no /proc/TID/stat in readdir, but the path resolves.
    procs::stat(&format!("/proc/{tid}/stat")).map(|p| p.start_time == start_time).unwrap_or(false)
}

fn existing_ancestor(dir: &Path) -> PathBuf {
    let mut d = dir.to_path_buf();
    while !d.exists() {
        if !d.pop() {
            break;
        }
    }
    d
}

fn pids_in(dir: &Path) -> Vec<u32> {
    let tasks = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    tasks.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Resets SCHED_IDLE or the tier's SCHED_RR band on threads in `dir` that got it by inheritance.
fn reset_inherited(
    dir: &Path,
    rt_band_priority: Option<i32>,
    moved_policy: &std::collections::HashMap<u32, SchedState>,
    report: &mut RestoreReport,
) {
    for pid in pids_in(dir) {
        let original = moved_policy.get(&pid).copied();
        for tid in procs::tids(pid) {
            let Some(s) = procs::sched_state(tid) else { continue };
            let was_idle = original.is_some_and(|o| o.policy == libc::SCHED_IDLE);
            let in_band = s.policy == libc::SCHED_RR && Some(s.rt_priority) == rt_band_priority;
            let was_band = original.is_some_and(|o| o.policy == libc::SCHED_RR);
            if (s.policy == libc::SCHED_IDLE && !was_idle) || (in_band && !was_band) {
                let back = match original {
                    Some(o) if !procs::is_rt(o.policy) => o,
                    _ => SchedState { policy: libc::SCHED_OTHER, rt_priority: 0, nice: s.nice },
                };
                if procs::set_sched_state(tid, back).is_ok() {
                    report.policies_restored += 1;
                }
            }
        }
    }
}

/// Moves every task still in `dir` (children born inside, threads) out to `fallback_dir`.
fn evacuate(
    dir: &Path,
    fallback_dir: &Path,
    rt_band_priority: Option<i32>,
    moved_policy: &std::collections::HashMap<u32, SchedState>,
    report: &mut RestoreReport,
) {
    for _attempt in 0..5 {
        let pids = pids_in(dir);
        if pids.is_empty() {
            return;
        }
        reset_inherited(dir, rt_band_priority, moved_policy, report);
        for pid in pids {
            if let Err(e) = cgfs::write(&fallback_dir.join("cgroup.procs"), &pid.to_string()) {
                if e.raw_os_error() != Some(libc::ESRCH) {
                    report.errors.push(format!("pid {pid} → {}: {e}", fallback_dir.display()));
                }
            }
        }
    }
}

fn remove_dir_retrying(dir: &Path) -> std::io::Result<()> {
    // Child cgroups first (a tier dir inside our parent dir is journaled separately, but a
    // cgroup someone else made inside ours would block rmdir).
    let mut last = Ok(());
    for attempt in 0..20 {
        last = cgfs::remove_dir(dir);
        match &last {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // EBUSY: exiting tasks still hold the cgroup for a moment.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5 * (attempt + 1))),
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_round_trip_and_restore_of_plain_files() {
        let dir = std::env::temp_dir().join(format!("tailor-journal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let target = dir.join("setting");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&target, "original").unwrap();
        {
            let mut j = Journal::open(&dir).unwrap();
            j.record(Entry::WroteFile { path: target.clone(), original: "original".into() }).unwrap();
            std::fs::write(&target, "changed").unwrap();
            // A second record of the same file keeps the first original.
            j.record(Entry::WroteFile { path: target.clone(), original: "changed".into() }).unwrap();
            std::fs::write(&target, "changed again").unwrap();
            assert_eq!(j.entries(), 1);
        }
        let report = restore(&dir).unwrap();
        assert_eq!(report.files_restored, 1);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
        assert!(!Journal::path_in(&dir).exists());
        // Idempotent.
        assert_eq!(restore(&dir).unwrap().entries, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_undone_change_is_not_restored_again_and_a_new_one_keeps_its_own_original() {
        let dir = std::env::temp_dir().join(format!("tailor-journal-undone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("cpu.weight");
        let wrote = |original: &str| Entry::WroteFile { path: target.clone(), original: original.into() };
        std::fs::write(&target, "100").unwrap();
        {
            let mut j = Journal::open(&dir).unwrap();
            j.record(wrote("100")).unwrap();
            std::fs::write(&target, "10000").unwrap();
            assert_eq!(j.original(&wrote("")), Some(&wrote("100")));
            // Put back while running, then someone else (the kubelet) sets 250.
            std::fs::write(&target, "100").unwrap();
            j.undone(&wrote("")).unwrap();
            assert!(!j.has(&wrote("")));
            std::fs::write(&target, "250").unwrap();
            j.record(wrote("250")).unwrap();
            std::fs::write(&target, "10000").unwrap();
        }
        // A reopened journal knows the live original only.
        assert_eq!(Journal::open(&dir).unwrap().original(&wrote("")), Some(&wrote("250")));
        let report = restore(&dir).unwrap();
        assert_eq!(report.files_restored, 1, "{report:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "250", "not the value undone before it");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_line_says_what_is_wrong_with_it() {
        let line =
            encode_line(&Entry::WroteFile { path: "/sys/fs/cgroup/x/cpu.weight".into(), original: "100".into() });
        let line = line.trim_end();
        assert!(parse_line(line).is_ok());
        let (json, _) = line.rsplit_once('\t').unwrap();
        assert!(matches!(parse_line(json), Err(JournalError::NoCheckValue)));
        assert!(matches!(
            parse_line(&format!("{json}\tnot-hex")),
            Err(JournalError::CheckValueNotHex { sum }) if sum == "not-hex"
        ));
        let damaged = line.replace("100", "900");
        assert!(matches!(parse_line(&damaged), Err(JournalError::CheckValueMismatch)), "{damaged}");
        let foreign = "{\"op\":\"rebooted\"}";
        let foreign = format!("{foreign}\t{:016x}", fnv1a(foreign.as_bytes()));
        match parse_line(&foreign) {
            Err(e @ JournalError::NotAnEntry(_)) => {
                assert!(e.to_string().starts_with("not a journal entry: "), "{e}");
                assert!(std::error::Error::source(&e).is_some(), "the JSON error is kept as the cause");
            }
            other => panic!("expected JournalError::NotAnEntry, got {other:?}"),
        }
    }

    #[test]
    fn torn_last_line_is_ignored() {
        let dir = std::env::temp_dir().join(format!("tailor-journal-torn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("s");
        std::fs::write(&target, "x").unwrap();
        let line = encode_line(&Entry::WroteFile { path: target.clone(), original: "a".into() });
        std::fs::write(Journal::path_in(&dir), format!("{line}{{\"op\":\"wrote_fi")).unwrap();
        let report = restore(&dir).unwrap();
        assert_eq!(report.entries, 1);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "a");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
