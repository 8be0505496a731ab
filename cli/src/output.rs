//! `-o text|json`: how a command prints its results, and the built-in files it falls back to.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// The output format of a command's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Tables for people.
    #[default]
    Text,
    /// One JSON document on stdout (progress and notices stay on stderr).
    Json,
}

/// The `-o/--output` flag, flattened into every command that prints results.
#[derive(Args, Clone, Copy)]
pub struct OutputArg {
    /// Result format: `text` (tables) or `json` (one document on stdout).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

impl OutputArg {
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).expect("JSON values serialize"));
}

/// A file of this repository at the path it had when `tailor` was built: what built-in
/// defaults (embedded with `include_str!`) resolve their relative references against, so they
/// work from any directory.
pub fn repo_path(relative: &str) -> PathBuf {
    let cli_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    cli_dir.parent().unwrap_or(cli_dir).join(relative)
}
