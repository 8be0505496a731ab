//! The one `tracing` subscriber a Tailor binary installs: level from `--log-level` or `RUST_LOG`, text or JSON lines on stderr.
//!
//! Precedence: an explicit `--log-level` (any `RUST_LOG`-style directive, e.g.
//! `debug` or `info,tailor_node=debug`) wins; otherwise `RUST_LOG`; otherwise
//! `info`. Logs always go to stderr, so a command's stdout stays its result.

use std::fmt;
use std::io::{self, IsTerminal};
use std::str::FromStr;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// The filter used when neither `--log-level` nor `RUST_LOG` is given.
pub const DEFAULT_LEVEL: &str = "info";

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, fields at the top level, for log shippers.
    Json,
}

impl FromStr for LogFormat {
    type Err = LoggingError;
    fn from_str(s: &str) -> Result<LogFormat, LoggingError> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(LoggingError::UnknownFormat(other.to_string())),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `--log-level` must be a level (`error`…`trace`) or `RUST_LOG`-style directives.
    #[error(
        "--log-level {value:?}: {reason} (use a level such as `info` or directives such as `info,tailor_node=debug`)"
    )]
    BadLevel { value: String, reason: String },
    /// `RUST_LOG` must be `RUST_LOG`-style directives.
    #[error("RUST_LOG={value:?}: {reason} (unset it or use directives such as `info,tailor_node=debug`)")]
    BadRustLog { value: String, reason: String },
    /// `--log-format` is `text` or `json`.
    #[error("--log-format {0:?}: expected `text` or `json`")]
    UnknownFormat(String),
    /// `--log-level` and `--log-format` take a value.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// A process installs one global subscriber.
    #[error("a tracing subscriber is already installed in this process")]
    AlreadyInstalled,
}

/// The filter for `level` (the `--log-level` value), else `RUST_LOG`, else [`DEFAULT_LEVEL`].
pub fn filter(level: Option<&str>) -> Result<EnvFilter, LoggingError> {
    if let Some(value) = level {
        return EnvFilter::try_new(value)
            .map_err(|e| LoggingError::BadLevel { value: value.to_string(), reason: e.to_string() });
    }
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(value) if !value.trim().is_empty() => {
            EnvFilter::try_new(&value).map_err(|e| LoggingError::BadRustLog { value, reason: e.to_string() })
        }
        _ => Ok(EnvFilter::new(DEFAULT_LEVEL)),
    }
}

/// A subscriber writing to `writer`; [`init_tracing`] installs one on stderr.
pub fn subscriber<W>(
    level: Option<&str>,
    format: LogFormat,
    writer: W,
    ansi: bool,
) -> Result<Box<dyn Subscriber + Send + Sync>, LoggingError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter(level)?).with_writer(writer);
    Ok(match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(builder.json().flatten_event(true).with_current_span(false).finish()),
    })
}

/// Installs the process's subscriber: `level` is the `--log-level` value
/// (None when not given, so `RUST_LOG` applies), logs go to stderr.
pub fn init_tracing(level: Option<&str>, format: LogFormat) -> Result<(), LoggingError> {
    let ansi = io::stderr().is_terminal();
    let subscriber = subscriber(level, format, io::stderr, ansi)?;
    tracing::subscriber::set_global_default(subscriber).map_err(|_| LoggingError::AlreadyInstalled)
}

/// The two logging flags every Tailor binary takes; `#[command(flatten)]` it
/// into a clap parser (feature `clap`), or use [`take_log_flags`] where flags are
/// parsed by hand.
#[cfg(feature = "clap")]
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LogArgs {
    /// Log filter: a level (error, warn, info, debug, trace) or RUST_LOG-style directives
    /// (`info,tailor_node=debug`). Overrides RUST_LOG; default info.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format on stderr: text, or json (one object per line).
    #[arg(long, global = true, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

#[cfg(feature = "clap")]
impl LogArgs {
    /// Installs the subscriber; `default` is the format when `--log-format` is not given.
    pub fn init(&self, default: LogFormat) -> Result<(), LoggingError> {
        init_tracing(self.log_level.as_deref(), self.log_format.unwrap_or(default))
    }
}

/// Removes `--log-level VALUE` and `--log-format VALUE` (or `--flag=VALUE`)
/// from hand-parsed arguments and installs the subscriber, `default` being the
/// format when none is given.
pub fn take_log_flags(args: &mut Vec<String>, default: LogFormat) -> Result<(), LoggingError> {
    let mut level = None;
    let mut format = default;
    let mut i = 0;
    while i < args.len() {
        let (name, inline) = match args[i].split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (args[i].clone(), None),
        };
        if name != "--log-level" && name != "--log-format" {
            i += 1;
            continue;
        }
        args.remove(i);
        let value = match inline {
            Some(v) => v,
            None if i < args.len() => args.remove(i),
            None => return Err(LoggingError::MissingValue(name)),
        };
        if name == "--log-level" {
            level = Some(value);
        } else {
            format = value.parse()?;
        }
    }
    init_tracing(level.as_deref(), format)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn logged(level: &str, format: LogFormat) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = subscriber(Some(level), format, move || out.clone(), false).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(tier = "lc", procs = 3, "tier reconciled");
            tracing::debug!("only at debug");
        });
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn json_lines_carry_level_message_and_fields() {
        let text = logged("info", LogFormat::Json);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "debug is filtered out at info: {text}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["message"], "tier reconciled");
        assert_eq!(line["tier"], "lc");
        assert_eq!(line["procs"], 3);
    }

    #[test]
    fn text_lines_follow_the_level_directive() {
        let text = logged("debug", LogFormat::Text);
        assert!(text.contains("tier reconciled") && text.contains("tier=\"lc\"") || text.contains("tier=lc"), "{text}");
        assert!(text.contains("only at debug"), "{text}");
    }

    #[test]
    fn log_flags_are_taken_out_of_hand_parsed_arguments() {
        let mut args: Vec<String> =
            ["servers", "--count", "2", "--log-format=xml"].iter().map(|s| s.to_string()).collect();
        let err = take_log_flags(&mut args, LogFormat::Json).unwrap_err();
        assert!(matches!(err, LoggingError::UnknownFormat(ref f) if f == "xml"), "{err}");
        assert_eq!(args, ["servers", "--count", "2"], "the flag is consumed even when its value is bad");
        let mut args: Vec<String> = ["run", "--log-level"].iter().map(|s| s.to_string()).collect();
        assert_eq!(take_log_flags(&mut args, LogFormat::Text).unwrap_err().to_string(), "--log-level needs a value");
    }

    #[test]
    fn bad_values_name_the_flag_and_the_fix() {
        let err = filter(Some("info,=[")).unwrap_err().to_string();
        assert!(err.starts_with("--log-level") && err.contains("directives"), "{err}");
        let err = "xml".parse::<LogFormat>().unwrap_err().to_string();
        assert_eq!(err, "--log-format \"xml\": expected `text` or `json`");
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
    }
}
