//! The context as a W3C `baggage` list-member, `tailor=<value>`.
//!
//! Baggage is what OpenTelemetry-instrumented services already forward, so a
//! context in it crosses services that know nothing of Tailor. The header is
//! shared with other members, so reading never touches them and writing
//! replaces only ours. Grammar (W3C Baggage, "Definition"):
//! `list-member *( OWS "," OWS list-member )`, each `key OWS "=" OWS value
//! *( OWS ";" OWS property )`, OWS = spaces and tabs.

use super::codec::{self, Decoded, MAX_LEN as VALUE_MAX_LEN};
use super::WireError;

/// The `baggage` header (and gRPC metadata key).
pub const HEADER: &str = "baggage";

/// Our list-member's key.
pub const KEY: &str = "tailor";

/// The longest `baggage` read, in bytes: the size W3C Baggage requires every
/// platform to propagate. Longer is rejected (`too_long`) without being scanned.
pub const MAX_LEN: usize = 8192;

const fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Whether a list-member (already trimmed) is ours; if so, its raw value
/// (properties and surrounding OWS removed, still percent-encoded).
///
/// A member's key is what precedes its first `=`, so it is ours exactly when
/// it starts with `tailor`, then OWS, then `=`: other members are told apart
/// by their first bytes, without a scan.
fn our_value(member: &[u8]) -> Option<&[u8]> {
    let rest = member.strip_prefix(KEY.as_bytes())?;
    let value = trim_ows(rest).strip_prefix(b"=")?;
    let value = match value.iter().position(|&b| b == b';') {
        Some(semi) => &value[..semi],
        None => value,
    };
    Some(trim_ows(value))
}

/// Counts our members in one `baggage` value and returns the first one's raw
/// value. Other members, well formed or not, are skipped: they are not ours to judge.
pub(crate) fn scan(header: &[u8]) -> (usize, Option<&[u8]>) {
    let mut count = 0;
    let mut first = None;
    for member in header.split(|&b| b == b',') {
        if let Some(v) = our_value(trim_ows(member)) {
            count += 1;
            first = first.or(Some(v));
        }
    }
    (count, first)
}

/// A context value copied off a carrier (percent-decoded if from baggage), held inline.
#[derive(Clone, Copy)]
pub(crate) struct Value {
    len: usize,
    buf: [u8; VALUE_MAX_LEN],
}

impl Value {
    /// A copy of `bytes`, if they fit (`too_long` otherwise).
    pub(crate) fn copy(bytes: &[u8]) -> Result<Value, WireError> {
        if bytes.len() > VALUE_MAX_LEN {
            return Err(WireError::TooLong);
        }
        let mut v = Value { len: bytes.len(), buf: [0; VALUE_MAX_LEN] };
        v.buf[..bytes.len()].copy_from_slice(bytes);
        Ok(v)
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Percent-decodes a member value (W3C Baggage, "value": receivers decode; a
/// sender may encode any byte). A `%` not followed by two hex digits stays
/// literal, and then fails the codec as `invalid_char`. More than
/// [`codec::MAX_LEN`] decoded bytes is `too_long`.
pub(crate) fn percent_decode(raw: &[u8]) -> Result<Value, WireError> {
    if !raw.contains(&b'%') {
        return Value::copy(raw); // what Tailor itself writes: nothing to decode
    }
    let mut out = Value { len: 0, buf: [0; VALUE_MAX_LEN] };
    let mut i = 0;
    while i < raw.len() {
        let escaped = match raw[i..] {
            [b'%', hi, lo, ..] => hex(hi).zip(hex(lo)).map(|(hi, lo)| hi << 4 | lo),
            _ => None,
        };
        let (b, step) = match escaped {
            Some(b) => (b, 3),
            None => (raw[i], 1),
        };
        if out.len == VALUE_MAX_LEN {
            return Err(WireError::TooLong);
        }
        out.buf[out.len] = b;
        out.len += 1;
        i += step;
    }
    Ok(out)
}

/// The context in one `baggage` header value, if it has a `tailor` member.
///
/// Errors: `too_long` (header over [`MAX_LEN`], or member value over 128
/// bytes once percent-decoded), `ambiguous` (two `tailor` members), and
/// anything [`codec::decode`] rejects in the member's value. When a request
/// has several `baggage` headers, use [`extract`](super::extract), which
/// treats them as one list.
pub fn decode(header: impl AsRef<[u8]>) -> Result<Option<Decoded>, WireError> {
    let header = header.as_ref();
    if header.len() > MAX_LEN {
        return Err(WireError::TooLong);
    }
    match scan(header) {
        (0, _) => Ok(None),
        (1, Some(raw)) => codec::decode(percent_decode(raw)?.as_bytes()).map(Some),
        _ => Err(WireError::Ambiguous),
    }
}

/// `s` without surrounding OWS.
fn trim_ows_str(s: &str) -> &str {
    let b = s.as_bytes();
    let start = b.iter().position(|&c| !is_ows(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|&c| !is_ows(c)).map_or(start, |e| e + 1);
    // Both ends are next to ASCII bytes, so they are char boundaries.
    &s[start..end]
}

/// The list-members of `header`, trimmed, empty ones skipped, each with
/// whether it is ours.
fn members(header: &str) -> impl Iterator<Item = (&str, bool)> {
    header.split(',').map(trim_ows_str).filter(|m| !m.is_empty()).map(|m| (m, our_value(m.as_bytes()).is_some()))
}

/// `header` (the outgoing request's `baggage`, if any) with our member set to
/// `value` and every other member kept, in order. Our member takes the place
/// of the first `tailor` member there was (any others are dropped), or goes
/// last. Members are re-joined with `,` and lose only surrounding whitespace.
///
/// With several `baggage` headers, join them with `,` first (RFC 9110 §5.3).
pub fn with(header: Option<&str>, value: &str) -> String {
    let header = header.unwrap_or("");
    let mut out = String::with_capacity(header.len() + KEY.len() + 1 + value.len());
    let mut placed = false;
    for (member, ours) in members(header) {
        if ours && placed {
            continue;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if ours {
            push_member(&mut out, value);
            placed = true;
        } else {
            out.push_str(member);
        }
    }
    if !placed {
        if !out.is_empty() {
            out.push(',');
        }
        push_member(&mut out, value);
    }
    out
}

fn push_member(out: &mut String, value: &str) {
    out.push_str(KEY);
    out.push('=');
    out.push_str(value);
}

/// `header` without our member: what the edge forwards after stripping an
/// incoming context. `None` when no other member is left (drop the header).
pub fn without(header: &str) -> Option<String> {
    let mut out = String::with_capacity(header.len());
    for (member, _) in members(header).filter(|(_, ours)| !ours) {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(member);
    }
    (!out.is_empty()).then_some(out)
}
