//! Patching a scenario's TOML before it is parsed: the manifest's way of
//! saying "this figure's scenario, but with T-EDFQ deadlines" or "keep the
//! first n tiers", so each figure needs one scenario file.
//!
//! A path is dotted keys; a number indexes an array; `*` is every element of
//! an array (or every value of a table). `set` creates missing table keys.

use toml::{Table, Value};

/// Why a patch path cannot be applied to a scenario. Every variant names the path as the
/// manifest spells it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// Paths are dotted keys with nothing between two dots.
    #[error("{path:?}: empty path segment; write keys separated by single dots, e.g. \"service.0.cores\"")]
    EmptySegment { path: String },
    /// A path with `*` must reach at least one value, or the patch would silently do nothing.
    #[error("{path:?}: `*` matched nothing")]
    NothingMatched { path: String },
    /// `truncate` only walks keys that exist.
    #[error("{path:?}: no key {key:?}")]
    NoKey { path: String, key: String },
    /// A segment that lands on an array must be an element number.
    #[error("{path:?}: {segment:?} indexes an array; use a number or `*` (`truncate` takes numbers only)")]
    NotAnIndex { path: String, segment: String },
    /// Array indices start at 0 and must be below the length.
    #[error("{path:?}: index {index} but the array has {len} elements")]
    OutOfRange { path: String, index: usize, len: usize },
    /// Only tables and arrays have parts to walk into.
    #[error("{path:?}: {segment:?} is inside a value that is not a table or an array")]
    NotAContainer { path: String, segment: String },
    /// `truncate` keeps a prefix; it cannot lengthen an array.
    #[error("{path:?}: keep {keep} but the array has only {len}")]
    TooShort { path: String, keep: usize, len: usize },
    /// `truncate` needs an array at the end of its path.
    #[error("{path:?} is not an array")]
    NotAnArray { path: String },
}

/// Sets `path` to `value` (creating missing table keys on the way).
pub fn set(root: &mut Table, path: &str, value: Value) -> Result<(), PatchError> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(PatchError::EmptySegment { path: path.to_string() });
    }
    let mut hits = 0;
    set_in_table(root, &parts, &value, path, &mut hits)?;
    if hits == 0 {
        return Err(PatchError::NothingMatched { path: path.to_string() });
    }
    Ok(())
}

fn set_in_table(t: &mut Table, parts: &[&str], value: &Value, path: &str, hits: &mut usize) -> Result<(), PatchError> {
    let (head, rest) = (parts[0], &parts[1..]);
    if head == "*" {
        for (_, v) in t.iter_mut() {
            set_in_value(v, rest, value, path, hits)?;
        }
        return Ok(());
    }
    if rest.is_empty() {
        t.insert(head.to_string(), value.clone());
        *hits += 1;
        return Ok(());
    }
    let next = t.entry(head.to_string()).or_insert_with(|| Value::Table(Table::new()));
    set_in_value(next, rest, value, path, hits)
}

fn set_in_value(v: &mut Value, parts: &[&str], value: &Value, path: &str, hits: &mut usize) -> Result<(), PatchError> {
    if parts.is_empty() {
        *v = value.clone();
        *hits += 1;
        return Ok(());
    }
    match v {
        Value::Table(t) => set_in_table(t, parts, value, path, hits),
        Value::Array(a) => {
            let (head, rest) = (parts[0], &parts[1..]);
            if head == "*" {
                for x in a.iter_mut() {
                    set_in_value(x, rest, value, path, hits)?;
                }
                Ok(())
            } else {
                let index = array_index(path, head)?;
                let len = a.len();
                let x =
                    a.get_mut(index).ok_or_else(|| PatchError::OutOfRange { path: path.to_string(), index, len })?;
                set_in_value(x, rest, value, path, hits)
            }
        }
        _ => Err(PatchError::NotAContainer { path: path.to_string(), segment: parts[0].to_string() }),
    }
}

/// The values at `path` (every match of `*`); missing keys give nothing.
pub fn get<'a>(root: &'a Table, path: &str) -> Vec<&'a Value> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur: Vec<&Value> = Vec::new();
    let mut first = true;
    for part in &parts {
        let mut next = Vec::new();
        if first {
            first = false;
            if *part == "*" {
                next.extend(root.values());
            } else if let Some(v) = root.get(*part) {
                next.push(v);
            }
        } else {
            for v in cur {
                match v {
                    Value::Table(t) if *part == "*" => next.extend(t.values()),
                    Value::Table(t) => next.extend(t.get(*part)),
                    Value::Array(a) if *part == "*" => next.extend(a.iter()),
                    Value::Array(a) => next.extend(part.parse::<usize>().ok().and_then(|i| a.get(i))),
                    _ => {}
                }
            }
        }
        cur = next;
    }
    cur
}

/// Keeps the first `n` elements of the array at `path`.
pub fn truncate(root: &mut Table, path: &str, n: usize) -> Result<(), PatchError> {
    let parts: Vec<&str> = path.split('.').collect();
    let no_key = |key: &str| PatchError::NoKey { path: path.to_string(), key: key.to_string() };
    let mut cur: &mut Value = root.get_mut(parts[0]).ok_or_else(|| no_key(parts[0]))?;
    for part in &parts[1..] {
        cur = match cur {
            Value::Table(t) => t.get_mut(*part).ok_or_else(|| no_key(part))?,
            Value::Array(a) => {
                let index = array_index(path, part)?;
                let len = a.len();
                a.get_mut(index).ok_or(PatchError::OutOfRange { path: path.to_string(), index, len })?
            }
            _ => return Err(PatchError::NotAContainer { path: path.to_string(), segment: part.to_string() }),
        };
    }
    match cur {
        Value::Array(a) if n <= a.len() => {
            a.truncate(n);
            Ok(())
        }
        Value::Array(a) => Err(PatchError::TooShort { path: path.to_string(), keep: n, len: a.len() }),
        _ => Err(PatchError::NotAnArray { path: path.to_string() }),
    }
}

fn array_index(path: &str, segment: &str) -> Result<usize, PatchError> {
    segment.parse().map_err(|_| PatchError::NotAnIndex { path: path.to_string(), segment: segment.to_string() })
}

/// Sets `path` to `x`, as an integer where the current value is one (or
/// absent) and `x` is whole, so `cores` stays an integer and `slo_ms` a float.
pub fn set_number(root: &mut Table, path: &str, x: f64) -> Result<(), PatchError> {
    let current_is_float = get(root, path).iter().any(|v| matches!(v, Value::Float(_)));
    let v = if x.fract() == 0.0 && !current_is_float && x.abs() < 9.0e15 {
        Value::Integer(x as i64)
    } else {
        Value::Float(x)
    };
    set(root, path, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Table {
        toml::from_str(
            r#"
name = "x"
[load]
rps = 10
[[service]]
name = "a"
cores = 3
[[service]]
name = "b"
cores = 3
[[class]]
name = "I"
slo_ms = 0.8
"#,
        )
        .unwrap()
    }

    #[test]
    fn set_with_wildcards_indices_and_new_keys() {
        let mut t = doc();
        set(&mut t, "service.*.cores", Value::Integer(1)).unwrap();
        set(&mut t, "service.1.name", Value::String("c".into())).unwrap();
        set(&mut t, "deadlines.mode", Value::String("slo".into())).unwrap();
        let s: Vec<_> = get(&t, "service.*.cores").into_iter().cloned().collect();
        assert_eq!(s, vec![Value::Integer(1), Value::Integer(1)]);
        assert_eq!(get(&t, "service.1.name")[0].as_str(), Some("c"));
        assert_eq!(get(&t, "deadlines.mode")[0].as_str(), Some("slo"));
        assert!(set(&mut t, "service.7.cores", Value::Integer(1)).is_err());
        assert!(set(&mut t, "name.x", Value::Integer(1)).is_err());
    }

    #[test]
    fn numbers_keep_their_type_and_arrays_truncate() {
        let mut t = doc();
        set_number(&mut t, "class.0.slo_ms", 1.0).unwrap();
        assert_eq!(get(&t, "class.0.slo_ms")[0], &Value::Float(1.0));
        set_number(&mut t, "service.0.cores", 8.0).unwrap();
        assert_eq!(get(&t, "service.0.cores")[0], &Value::Integer(8));
        truncate(&mut t, "service", 1).unwrap();
        assert_eq!(get(&t, "service.*.name").len(), 1);
        assert!(truncate(&mut t, "service", 5).is_err());
    }

    #[test]
    fn bad_paths_give_the_variant_that_names_the_fix() {
        let mut t = doc();
        let int = || Value::Integer(1);
        let path = |p: &str| p.to_string();
        assert_eq!(
            set(&mut t, "service..cores", int()),
            Err(PatchError::EmptySegment { path: path("service..cores") })
        );
        assert_eq!(
            set(&mut t, "service.7.cores", int()),
            Err(PatchError::OutOfRange { path: path("service.7.cores"), index: 7, len: 2 })
        );
        assert_eq!(
            set(&mut t, "service.first.cores", int()),
            Err(PatchError::NotAnIndex { path: path("service.first.cores"), segment: path("first") })
        );
        assert_eq!(
            set(&mut t, "name.x", int()),
            Err(PatchError::NotAContainer { path: path("name.x"), segment: path("x") })
        );
        t.insert("empty".into(), Value::Array(Vec::new()));
        assert_eq!(set(&mut t, "empty.*", int()), Err(PatchError::NothingMatched { path: path("empty.*") }));
        assert_eq!(truncate(&mut t, "tiers", 1), Err(PatchError::NoKey { path: path("tiers"), key: path("tiers") }));
        assert_eq!(truncate(&mut t, "load.rps", 1), Err(PatchError::NotAnArray { path: path("load.rps") }));
        assert_eq!(
            truncate(&mut t, "service", 5),
            Err(PatchError::TooShort { path: path("service"), keep: 5, len: 2 })
        );
        assert_eq!(
            truncate(&mut t, "service.*.name", 1),
            Err(PatchError::NotAnIndex { path: path("service.*.name"), segment: path("*") })
        );
        // The message keeps the path and the fix, as the manifest's author reads it.
        let e = set(&mut t, "service.7.cores", int()).unwrap_err().to_string();
        assert_eq!(e, "\"service.7.cores\": index 7 but the array has 2 elements");
    }
}
