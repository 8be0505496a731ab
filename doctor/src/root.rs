//! The root every `/proc` and `/sys` path is read under: `/` on a live node, a fixture tree
//! in tests.

use std::path::{Path, PathBuf};

/// Where `proc/` and `sys/` live.
#[derive(Clone, Debug)]
pub struct SysRoot {
    base: PathBuf,
}

impl SysRoot {
    /// The live node.
    pub fn live() -> Self {
        SysRoot { base: PathBuf::from("/") }
    }

    /// A recorded tree with `proc/` and `sys/` under `base`.
    pub fn at(base: impl Into<PathBuf>) -> Self {
        SysRoot { base: base.into() }
    }

    /// `relative` (e.g. `proc/pressure/cpu`) under the root.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.base.join(relative.trim_start_matches('/'))
    }

    /// The file's text, or the error kind (absent, permission denied) so a check can say
    /// "not exposed" or "needs root" rather than guess.
    pub fn read(&self, relative: &str) -> Result<String, std::io::ErrorKind> {
        std::fs::read_to_string(self.path(relative)).map_err(|e| e.kind())
    }

    /// The file's text, trimmed, when it can be read.
    pub fn read_trimmed(&self, relative: &str) -> Option<String> {
        self.read(relative).ok().map(|s| s.trim().to_string())
    }

    /// Names in a directory under the root (empty when it cannot be listed), sorted.
    pub fn list(&self, relative: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(relative))
            .map(|rd| rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Where a symbolic link under the root points (`/proc/PID/fd/N` → `socket:[INODE]`).
    pub fn link(&self, relative: &str) -> Result<String, std::io::ErrorKind> {
        std::fs::read_link(self.path(relative)).map(|p| p.to_string_lossy().into_owned()).map_err(|e| e.kind())
    }

    /// Whether a path exists under the root.
    pub fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    pub fn base(&self) -> &Path {
        &self.base
    }
}

/// Numeric entries of a directory (pids under `proc/`, tids under `proc/PID/task/`), ascending.
pub fn numeric_entries(root: &SysRoot, relative: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = root.list(relative).iter().filter_map(|n| n.parse().ok()).collect();
    ids.sort_unstable();
    ids
}
