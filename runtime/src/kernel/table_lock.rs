//! One agent per table: the agent holds `<table>.lock` (an exclusive `flock`) for its life and
//! removes the file when it stops, so a node's `/dev/shm` does not collect a lock file per
//! table ever served.
//!
//! The lock is the kernel's, so it is free again the moment its holder dies, however it dies
//! (two agents started at once both pass the table's own "is an agent serving?" check). An
//! agent killed by SIGKILL leaves the file behind; the next agent on that table takes it and
//! removes it in turn.
//!
//! Removing a lock file has one race, which `take` closes: an agent that opened the file just
//! before the previous holder removed it then locks a file no longer at the path, while a
//! third agent could create a fresh file there and lock that too. So after locking, `take`
//! checks that the path still names the file it locked, and starts over if not.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::table::Table;
use crate::RuntimeError;

/// Attempts before `take` gives up on a lock file that keeps being replaced under it (each
/// replacement means another agent started and stopped in between: never more than a few).
const ATTEMPTS: usize = 64;

/// `<table>.lock`, locked; unlocked and removed on drop.
#[derive(Debug)]
pub(super) struct TableLock {
    file: File,
    path: PathBuf,
}

impl TableLock {
    /// Takes the lock of `table`, or says which agent holds it.
    pub(super) fn take(table: &Path) -> Result<TableLock, RuntimeError> {
        let path = lock_path(table);
        for _ in 0..ATTEMPTS {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| RuntimeError::Io { what: format!("{}: open", path.display()), source: e })?;
            // SAFETY: flock on an fd we hold.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let holder = Table::open(table).map(|t| t.header().agent_pid.load(Ordering::Acquire)).unwrap_or(0);
                return Err(RuntimeError::Unsupported(format!(
                    "{}: another agent (pid {holder}) holds {}; one agent serves a table. Fix: stop it, or use another --table",
                    table.display(),
                    path.display()
                )));
            }
            if is_at(&file, &path) {
                return Ok(TableLock { file, path });
            }
            // The previous holder removed the file between our open and our flock: the lock
            // we hold guards nothing. Drop it and lock whatever is at the path now.
        }
        Err(RuntimeError::Unsupported(format!(
            "{}: replaced {ATTEMPTS} times while this agent was taking it; agents are being started and stopped \
             on this table in a loop. Fix: run one agent per table (a supervisor restarts it)",
            path.display()
        )))
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        // Removed while still locked, and only if it is still ours: an agent waiting to lock
        // it then finds it gone from the path and starts over (see the module's note).
        if is_at(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn lock_path(table: &Path) -> PathBuf {
    let mut path = table.as_os_str().to_owned();
    path.push(".lock");
    PathBuf::from(path)
}

/// Whether `path` names the open file `file` (same device and inode).
fn is_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_table(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tailor-table-lock-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("table")
    }

    #[test]
    fn one_holder_at_a_time_and_the_file_goes_with_the_last() {
        let table = scratch_table("holders");
        let lock = TableLock::take(&table).unwrap();
        assert!(lock_path(&table).exists());
        let refused = TableLock::take(&table).unwrap_err().to_string();
        assert!(refused.contains("another agent") && refused.contains("table.lock"), "{refused}");
        drop(lock);
        assert!(!lock_path(&table).exists(), "the lock file outlived its agent");
        let again = TableLock::take(&table).unwrap();
        drop(again);
        std::fs::remove_dir_all(table.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_lock_file_left_by_a_killed_agent_is_taken_and_then_removed() {
        let table = scratch_table("left");
        std::fs::write(lock_path(&table), b"").unwrap();
        let lock = TableLock::take(&table).unwrap();
        drop(lock);
        assert!(!lock_path(&table).exists());
        std::fs::remove_dir_all(table.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_lock_on_a_file_removed_from_the_path_is_not_a_lock() {
        // What a second agent holds if the first removes the file between the second's open
        // and its flock: `take` must see that and start over, never return such a lock.
        let table = scratch_table("removed");
        let stale =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(lock_path(&table)).unwrap();
        std::fs::remove_file(lock_path(&table)).unwrap();
        assert!(!is_at(&stale, &lock_path(&table)));
        std::fs::write(lock_path(&table), b"").unwrap();
        assert!(!is_at(&stale, &lock_path(&table)), "a new file at the path is a different lock");
        let lock = TableLock::take(&table).unwrap();
        assert!(is_at(&lock.file, &lock_path(&table)));
        // Dropping the stale handle must not remove the live holder's file.
        drop(stale);
        assert!(lock_path(&table).exists());
        drop(lock);
        std::fs::remove_dir_all(table.parent().unwrap()).unwrap();
    }
}
