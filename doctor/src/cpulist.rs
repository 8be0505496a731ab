//! CPU sets as the kernel prints them: lists (`0-3,6`) and hex masks (`0000000f,00000001`).

use std::collections::BTreeSet;

/// A set of CPU numbers.
pub type CpuSet = BTreeSet<u32>;

/// Parses a CPU list such as `0-3,6` (empty string = empty set); `None` when malformed.
pub fn parse_list(text: &str) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 65_536 {
                    return None;
                }
                set.extend(a..=b);
            }
            None => {
                set.insert(part.trim().parse().ok()?);
            }
        }
    }
    Some(set)
}

/// Parses a hex mask such as `00000003` or `ffffffff,00000001` (words most significant first).
pub fn parse_mask(text: &str) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    let words: Vec<&str> = text.trim().split(',').collect();
    for (i, word) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(word, 16).ok()?;
        for b in 0..32 {
            if bits & (1 << b) != 0 {
                set.insert(i as u32 * 32 + b);
            }
        }
    }
    Some(set)
}

/// Prints a set as a compact list (`0-3,6`).
pub fn format_list(set: &CpuSet) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap();
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_masks_round_trip() {
        let s = parse_list("0-3,6").unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3, 6]);
        assert_eq!(format_list(&s), "0-3,6");
        assert_eq!(parse_mask("00000003").unwrap(), parse_list("0-1").unwrap());
        assert_eq!(parse_mask("00000001,00000000").unwrap(), parse_list("32").unwrap());
        assert!(parse_list("3-1").is_none());
        assert!(parse_list("x").is_none());
        assert!(parse_list("").unwrap().is_empty());
    }
}
