//! Arrival traces: a CSV file whose `arrival_ms` column holds ascending arrival times in ms,
//! read with the `csv` crate (quoting, any column order, extra columns). `tailor sim`'s
//! `arrival = { kind = "trace" }` and `tailor demo --trace` both read traces here.

use std::path::Path;

/// Why a trace could not be read. Messages name the line; callers add the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("not valid CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("line 1: no `arrival_ms` column in the header `{header}`; the first line must name the columns, e.g. `arrival_ms`")]
    NoColumn { header: String },
    #[error("line {line}: `{value}` is not a time in ms; arrival_ms must be a number ≥ 0")]
    BadValue { line: u64, value: String },
    #[error("line {line}: arrival_ms {value} is before the previous line's; sort the trace by arrival time")]
    NotAscending { line: u64, value: f64 },
    #[error("the trace has no arrivals")]
    Empty,
}

/// The `arrival_ms` column of the CSV file at `path`: finite, ≥ 0, ascending, at least one.
pub fn read_arrival_ms(path: &Path) -> Result<Vec<f64>, TraceError> {
    let file = std::fs::File::open(path)?;
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(file);
    let header = reader.headers()?.clone();
    let column = header
        .iter()
        .position(|c| c == "arrival_ms")
        .ok_or_else(|| TraceError::NoColumn { header: header.iter().collect::<Vec<_>>().join(",") })?;
    let mut ms: Vec<f64> = Vec::new();
    for record in reader.records() {
        let record = record?;
        let line = record.position().map_or(0, |p| p.line());
        let value = record.get(column).unwrap_or("");
        let v: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| TraceError::BadValue { line, value: value.to_string() })?;
        if ms.last().is_some_and(|&last| v < last) {
            return Err(TraceError::NotAscending { line, value: v });
        }
        ms.push(v);
    }
    if ms.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<f64>, TraceError> {
        let dir = std::env::temp_dir().join(format!("tailor-sim-trace-{}-{}", std::process::id(), text.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.csv");
        std::fs::write(&f, text).unwrap();
        let r = read_arrival_ms(&f);
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    #[test]
    fn reads_the_column_wherever_it_is_with_quotes_and_spaces() {
        assert_eq!(read("id, arrival_ms ,note\n0,10,\"a, b\"\n1, 11 ,x\n").unwrap(), vec![10.0, 11.0]);
    }

    #[test]
    fn bad_traces_name_the_line_and_the_fix() {
        let err = |t: &str| read(t).unwrap_err().to_string();
        assert!(err("id,arrival_ms\n0,10\n1,9\n").contains("line 3: arrival_ms 9 is before"));
        assert!(err("id,when\n0,10\n").contains("no `arrival_ms` column"));
        assert!(err("arrival_ms\nx\n").contains("line 2: `x` is not a time"));
        assert!(err("arrival_ms\n-1\n").contains("must be a number ≥ 0"));
        assert!(err("arrival_ms\n").contains("no arrivals"));
        assert!(err("id,arrival_ms\n0,10\n1,11,extra\n").contains("not valid CSV"));
    }
}
