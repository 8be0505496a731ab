//! Reading one-float-per-line tables (tailbench quantile tables, TailGuard `RUT_*` files).

use std::path::{Path, PathBuf};

/// What can be wrong with a table file. Every variant names the file, and the
/// line (1-based, as an editor shows it) where it applies.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The file could not be read at all.
    #[error("cannot read table {}: {source}; check the path (a relative path is resolved against the directory of the file that names it)", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The table must have exactly `expected` lines.
    #[error("{}: has {found} lines, expected {expected} ({what})", .path.display())]
    LineCount { path: PathBuf, found: usize, expected: usize, what: &'static str },
    /// A line does not hold a number.
    #[error("{}:{line}: `{text}` is not a number; each line must hold exactly one float, in milliseconds", .path.display())]
    Parse { path: PathBuf, line: usize, text: String },
    /// A value is NaN, infinite or negative.
    #[error("{}:{line}: value {value} is {problem}; every value must be a finite, non-negative time in milliseconds", .path.display())]
    BadValue { path: PathBuf, line: usize, value: f64, problem: &'static str },
    /// Values must not decrease (they are quantiles, or tails of growing fan-outs).
    #[error("{}:{line}: value {value} is smaller than {prev} on the line before; the table must be sorted ascending (sort it, or check that this is the right file)", .path.display())]
    NotAscending { path: PathBuf, line: usize, value: f64, prev: f64 },
}

/// Reads a table of finite, non-negative, non-decreasing floats, one per line.
///
/// A single trailing newline (or trailing blank lines) is allowed; a blank line
/// in the middle is an error, since it would shift every later quantile.
pub(crate) fn read_table(path: &Path, expected: Option<(usize, &'static str)>) -> Result<Vec<f64>, TableError> {
    let text = std::fs::read_to_string(path).map_err(|source| TableError::Read { path: path.to_owned(), source })?;
    parse_table(path, &text, expected)
}

pub(crate) fn parse_table(
    path: &Path,
    text: &str,
    expected: Option<(usize, &'static str)>,
) -> Result<Vec<f64>, TableError> {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let found = if text.trim().is_empty() { 0 } else { lines.len() };
    if let Some((expected, what)) = expected {
        if found != expected {
            return Err(TableError::LineCount { path: path.to_owned(), found, expected, what });
        }
    } else if found == 0 {
        return Err(TableError::LineCount { path: path.to_owned(), found, expected: 1, what: "at least one value" });
    }
    let mut values = Vec::with_capacity(found);
    let mut prev = 0.0f64;
    for (i, raw) in lines.iter().enumerate() {
        let line = i + 1;
        let t = raw.trim();
        let value: f64 =
            t.parse().map_err(|_| TableError::Parse { path: path.to_owned(), line, text: t.to_owned() })?;
        let problem = if value.is_nan() {
            Some("NaN")
        } else if value.is_infinite() {
            Some("infinite")
        } else if value < 0.0 {
            Some("negative")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(TableError::BadValue { path: path.to_owned(), line, value, problem });
        }
        if i > 0 && value < prev {
            return Err(TableError::NotAscending { path: path.to_owned(), line, value, prev });
        }
        prev = value;
        values.push(value);
    }
    Ok(values)
}
