//! Per-request records for `--ideal`: the bench's per-request CSV (`id,warmup,intended_ns,…`)
//! or a simple CSV `arrival_ns,latency_ns[,service_ns]` (header optional).

use std::path::{Path, PathBuf};

use tailor_core::Nanos;

/// At most this many records are read (bounded memory: ~24 bytes each).
pub const MAX_RECORDS: usize = 50_000_000;

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub arrival_ns: Nanos,
    /// `None` for a request that got no successful response (it still loaded the server).
    pub latency_ns: Option<Nanos>,
    /// Measured service time (CPU demand), when the file has it.
    pub service_ns: Option<Nanos>,
    /// False for warm-up rows: they load the ideal queue but are not compared.
    pub measured: bool,
}

/// A records file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("{file}: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}:{line}: field `{field}`: {problem}")]
    Field { file: PathBuf, line: usize, field: &'static str, problem: String },
    #[error("{file}:{line}: expected {expected} comma-separated fields, found {found}")]
    Width { file: PathBuf, line: usize, expected: &'static str, found: usize },
    #[error("{file}: no records (expected `arrival_ns,latency_ns[,service_ns]` rows or the bench's per-request CSV)")]
    Empty { file: PathBuf },
    #[error("{file}: more than {MAX_RECORDS} records; split the file or sample it")]
    TooMany { file: PathBuf },
}

/// Which layout the file has.
#[derive(Clone, Copy)]
enum Layout {
    /// The bench's `records_csv`: intended_ns, done_ns, outcome, total_demand_us, warmup.
    Bench {
        warmup: usize,
        intended: usize,
        done: usize,
        outcome: usize,
        demand_us: usize,
        width: usize,
    },
    Simple,
}

const BENCH_HEADER_START: &str = "id,warmup,intended_ns";

/// Reads a records file (see the module doc).
pub fn read(file: &Path) -> Result<Vec<Record>, RecordsError> {
    let text = std::fs::read_to_string(file).map_err(|source| RecordsError::Io { file: file.into(), source })?;
    parse(&text, file)
}

/// Parses records; `file` names them in errors.
pub fn parse(text: &str, file: &Path) -> Result<Vec<Record>, RecordsError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).peekable();
    let layout = match lines.peek() {
        Some((_, first)) if first.starts_with(BENCH_HEADER_START) => {
            let cols: Vec<&str> = first.split(',').collect();
            let at = |name: &'static str, line: usize| {
                cols.iter().position(|c| c.trim() == name).ok_or(RecordsError::Field {
                    file: file.into(),
                    line,
                    field: name,
                    problem: "missing from the bench header".into(),
                })
            };
            let layout = Layout::Bench {
                warmup: at("warmup", 1)?,
                intended: at("intended_ns", 1)?,
                done: at("done_ns", 1)?,
                outcome: at("outcome", 1)?,
                demand_us: at("total_demand_us", 1)?,
                width: cols.len(),
            };
            lines.next();
            layout
        }
        Some((_, first)) if first.starts_with("arrival_ns") => {
            lines.next();
            Layout::Simple
        }
        _ => Layout::Simple,
    };
    let mut out = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        if out.len() >= MAX_RECORDS {
            return Err(RecordsError::TooMany { file: file.into() });
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let num = |idx: usize, field: &'static str| -> Result<Nanos, RecordsError> {
            f[idx].parse::<Nanos>().map_err(|e| RecordsError::Field {
                file: file.into(),
                line: n,
                field,
                problem: format!("{:?} is not a non-negative integer ({e})", f[idx]),
            })
        };
        out.push(match layout {
            Layout::Bench { warmup, intended, done, outcome, demand_us, width } => {
                if f.len() != width {
                    return Err(RecordsError::Width {
                        file: file.into(),
                        line: n,
                        expected: "as many as the header's",
                        found: f.len(),
                    });
                }
                let arrival = num(intended, "intended_ns")?;
                let ok = f[outcome] == "ok";
                let done = num(done, "done_ns")?;
                let demand = num(demand_us, "total_demand_us")? * 1_000;
                Record {
                    arrival_ns: arrival,
                    latency_ns: ok.then(|| done.saturating_sub(arrival)),
                    service_ns: (demand > 0).then_some(demand),
                    measured: f[warmup] != "1",
                }
            }
            Layout::Simple => {
                if !(2..=3).contains(&f.len()) {
                    return Err(RecordsError::Width {
                        file: file.into(),
                        line: n,
                        expected: "2 or 3 (arrival_ns,latency_ns[,service_ns])",
                        found: f.len(),
                    });
                }
                Record {
                    arrival_ns: num(0, "arrival_ns")?,
                    latency_ns: Some(num(1, "latency_ns")?),
                    service_ns: if f.len() == 3 { Some(num(2, "service_ns")?) } else { None },
                    measured: true,
                }
            }
        });
    }
    if out.is_empty() {
        return Err(RecordsError::Empty { file: file.into() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_csv_with_and_without_header_and_service() {
        let p = Path::new("r.csv");
        let a = parse("arrival_ns,latency_ns,service_ns\n0,10,5\n7,12,6\n", p).unwrap();
        assert_eq!(a[1], Record { arrival_ns: 7, latency_ns: Some(12), service_ns: Some(6), measured: true });
        let b = parse("0,10\n\n7,12\n", p).unwrap();
        assert_eq!((b.len(), b[1].service_ns), (2, None));
    }

    #[test]
    fn bench_csv_keeps_failed_and_warmup_rows_as_load() {
        let text = "id,warmup,intended_ns,sent_ns,done_ns,latency_us,status,outcome,demands_us,total_demand_us,gat_ns,tiers_seen,gat_consistent\n\
                    0,1,0,10,5000,5.000,200,ok,4,4,1,1,1\n\
                    1,0,100,110,0,,0,timeout,3,3,0,0,0\n\
                    2,0,200,210,9200,9.000,200,ok,2,2,1,1,1\n";
        let r = parse(text, Path::new("bench.csv")).unwrap();
        assert_eq!(r[0], Record { arrival_ns: 0, latency_ns: Some(5000), service_ns: Some(4000), measured: false });
        assert_eq!(r[1].latency_ns, None);
        assert_eq!(r[2].latency_ns, Some(9000));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = parse("0,10\n5,x\n", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.starts_with("r.csv:2: field `latency_ns`"), "{e}");
        let e = parse("0,1,2,3\n", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:1: expected 2 or 3"), "{e}");
        assert!(parse("\n", Path::new("r.csv")).unwrap_err().to_string().contains("no records"));
    }
}
