//! The agent's error type: every variant says what was being done and to which file.

use std::path::Path;

/// Errors from the node agent.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A system call on a file (cgroup, /proc, journal) failed.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The config is invalid; the message names the file, line and fix.
    #[error("{0}")]
    Config(String),
    /// The kernel lacks what a tier asks for, or a process cannot be placed.
    #[error("{0}")]
    Unsupported(String),
    /// The undo journal cannot be written or read; the message names the file and the fix.
    #[error("{0}")]
    Journal(String),
}

impl NodeError {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        NodeError::Io { path: path.as_ref().display().to_string(), source }
    }
}
