//! The context's text encoding, version 1: `1.g<gat>[.d<deadline>].c<class>.k<fanout>.h<hop>[.i<key id>.m<tag>]`.
//!
//! The encoding is canonical: every [`Context`] has exactly one encoding and
//! every accepted string decodes to exactly one context, so
//! `decode(encode(c)) == c` for every `c` and `encode(decode(s)) == s` for every
//! accepted `s`. That is what makes a MAC over the bytes well defined and lets
//! the fuzz targets check exact round trips. Neither direction allocates.

use std::fmt;

use super::mac::{self, Key, KeyId, Keyring, Tag};
use super::WireError;
use crate::context::Context;
use crate::time::NEVER;

/// The version this codec writes and the only one it reads.
pub const VERSION: u8 = 1;

/// The longest context value accepted, in bytes. The longest canonical value
/// is 109 bytes (every number at its maximum, a 16-byte key id and a tag);
/// the rest is headroom, and the cap bounds the work a hostile value can cause.
pub const MAX_LEN: usize = 128;

/// Whether `b` may appear in a context: RFC 3986 unreserved (`A-Z a-z 0-9 - . _ ~`).
///
/// Percent-encoders leave these bytes alone (OpenTelemetry Python re-encodes
/// baggage values with `quote_plus`, which would turn `:` or `=` into `%3A`,
/// `%3D`), and all of them are W3C baggage octets and valid in HTTP header
/// values and gRPC ASCII metadata, so the value is byte-identical in every carrier.
pub const fn is_value_byte(b: u8) -> bool {
    VALUE_BYTES[b as usize]
}

/// [`is_value_byte`] as a table: one load per byte.
const VALUE_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    t
};

// === Fields ===

/// The fields of version 1, in their required order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Gat = 0,
    Deadline,
    Class,
    Fanout,
    Hop,
    KeyId,
    Tag,
}

impl Field {
    fn from_key(key: u8) -> Option<Field> {
        Some(match key {
            b'g' => Field::Gat,
            b'd' => Field::Deadline,
            b'c' => Field::Class,
            b'k' => Field::Fanout,
            b'h' => Field::Hop,
            b'i' => Field::KeyId,
            b'm' => Field::Tag,
            _ => return None,
        })
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

const REQUIRED: u8 = Field::Gat.bit() | Field::Class.bit() | Field::Fanout.bit() | Field::Hop.bit();

// === impl Encoded ===

/// "00" "01" … "99": decimal digits two at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// An encoded context, held inline (no allocation). Derefs to `str`.
#[derive(Clone, Copy)]
pub struct Encoded {
    len: u8,
    buf: [u8; MAX_LEN],
}

impl Encoded {
    fn new() -> Self {
        Encoded { len: 0, buf: [0; MAX_LEN] }
    }

    /// The encoding as text (always ASCII).
    pub fn as_str(&self) -> &str {
        // Only `push` writes `buf`, and every byte it is given is ASCII.
        std::str::from_utf8(self.as_bytes()).expect("an encoding is ASCII")
    }

    /// Length in bytes.
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// The encoding as bytes, e.g. for an HTTP header value.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    fn push(&mut self, bytes: &[u8]) {
        // Cannot overflow: the longest encoding is 109 bytes (see MAX_LEN).
        let at = self.len as usize;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len() as u8;
    }

    /// Appends `.<key><n>`, writing the digits in place, two at a time.
    fn push_field(&mut self, key: u8, n: u64) {
        let at = self.len as usize;
        let end = at + 2 + n.checked_ilog10().map_or(1, |d| d as usize + 1);
        self.buf[at] = b'.';
        self.buf[at + 1] = key;
        let (mut n, mut i) = (n, end);
        while n >= 100 {
            let pair = 2 * (n % 100) as usize;
            n /= 100;
            i -= 2;
            self.buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = 2 * n as usize;
            self.buf[i - 2..i].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            self.buf[i - 1] = b'0' + n as u8;
        }
        self.len = end as u8;
    }
}

impl std::ops::Deref for Encoded {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Encoded {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for Encoded {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Encoded {}

impl PartialEq<str> for Encoded {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Encoded {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

// === Encoding ===

/// The canonical encoding of `ctx`, unsigned.
///
/// Total: every `Context` value has an encoding (a deadline of
/// [`NEVER`] is written by leaving `d` out).
pub fn encode(ctx: &Context) -> Encoded {
    let mut out = Encoded::new();
    out.push(b"1");
    out.push_field(b'g', ctx.gat);
    if ctx.deadline != NEVER {
        out.push_field(b'd', ctx.deadline);
    }
    out.push_field(b'c', ctx.class.into());
    out.push_field(b'k', ctx.fanout.into());
    out.push_field(b'h', ctx.hop.into());
    out
}

/// The bytes the tag covers: the unsigned encoding, then `.i<key id>`.
fn signed_prefix(ctx: &Context, key_id: &KeyId) -> Encoded {
    let mut out = encode(ctx);
    out.push(b".i");
    out.push(key_id.as_str().as_bytes());
    out
}

fn with_tag(mut prefix: Encoded, tag: &Tag) -> Encoded {
    prefix.push(b".m");
    prefix.push(&mac::tag_to_base64url(tag));
    prefix
}

/// The canonical encoding of `ctx`, signed with `key`: the unsigned encoding,
/// `.i<key id>`, then `.m<tag>`, where the tag is HMAC-SHA256 under `key` of
/// every byte before `.m`, truncated to 128 bits, in unpadded base64url.
pub fn encode_signed(ctx: &Context, key: &Key) -> Encoded {
    let prefix = signed_prefix(ctx, key.id());
    with_tag(prefix, &key.tag(prefix.as_bytes()))
}

// === Decoding ===

/// The MAC fields of a signed context, as received (not yet verified).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mac {
    /// Which key signed it (`i`).
    pub key_id: KeyId,
    /// The claimed tag (`m`), decoded.
    pub tag: Tag,
}

/// A context as read off the wire, with its MAC fields if it was signed.
///
/// Use `context` directly on hops that trust their inbound traffic; call
/// [`Decoded::verify`] on a hop across a trust boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decoded {
    /// The context. Not yet clamped: pass it through [`clamp`](super::clamp) before use.
    pub context: Context,
    /// The key id and tag, if the context was signed. Unverified.
    pub mac: Option<Mac>,
}

impl Decoded {
    /// The context, if it is signed by a key in `keys` and the tag matches.
    ///
    /// Errors: [`WireError::MissingMac`] (unsigned), [`WireError::UnknownKey`],
    /// [`WireError::BadMac`]. The tag comparison takes constant time.
    pub fn verify(&self, keys: &Keyring) -> Result<Context, WireError> {
        let mac = self.mac.as_ref().ok_or(WireError::MissingMac)?;
        let key = keys.get(mac.key_id.as_str()).ok_or(WireError::UnknownKey)?;
        let prefix = signed_prefix(&self.context, &mac.key_id);
        if key.verify(prefix.as_bytes(), &mac.tag) {
            Ok(self.context)
        } else {
            Err(WireError::BadMac)
        }
    }

    /// The exact bytes this was decoded from (decoding is canonical).
    pub fn encode(&self) -> Encoded {
        match &self.mac {
            None => encode(&self.context),
            Some(mac) => with_tag(signed_prefix(&self.context, &mac.key_id), &mac.tag),
        }
    }
}

/// Decodes a context value (a `tailor-context` header, gRPC metadata entry, or
/// an already percent-decoded baggage value). Strict and total: any input
/// either decodes to exactly the context whose encoding it is, or is rejected
/// with the [`WireError`] of the first rule it breaks, in this order:
///
/// 1. at most [`MAX_LEN`] bytes (`too_long`), not empty (`malformed`);
/// 2. only [`is_value_byte`] bytes (`invalid_char`);
/// 3. the version, up to the first `.`, is a canonical decimal (`malformed`)
///    equal to `1` (`unsupported_version`);
/// 4. then each `.`-separated field, left to right: not empty (`malformed`),
///    a known key (`unknown_field`), not seen before (`duplicate_field`), no
///    later-ordered field seen before it (`out_of_order`), a valid value
///    (`invalid_number`, `out_of_range`, `malformed`);
/// 5. finally, `g c k h` present and `i`, `m` both or neither (`missing_field`).
///
/// Never panics, never allocates.
pub fn decode(input: impl AsRef<[u8]>) -> Result<Decoded, WireError> {
    decode_bytes(input.as_ref())
}

fn decode_bytes(input: &[u8]) -> Result<Decoded, WireError> {
    if input.len() > MAX_LEN {
        return Err(WireError::TooLong);
    }
    if input.is_empty() {
        return Err(WireError::Malformed);
    }
    // Every byte an accepted value consists of (digits, `.`, keys, key id and
    // tag characters) is a value byte, so the happy path needs no separate
    // scan; only a rejection looks for the bad byte that outranks its reason.
    parse(input).map_err(|e| if input.iter().all(|&b| is_value_byte(b)) { e } else { WireError::InvalidChar })
}

/// [`decode_bytes`] after the length checks, except that an invalid byte may
/// be reported as whatever rule it breaks first.
fn parse(input: &[u8]) -> Result<Decoded, WireError> {
    let (version, fields) = match input.iter().position(|&b| b == b'.') {
        Some(dot) => (&input[..dot], Some(&input[dot + 1..])),
        None => (input, None),
    };
    if !is_canonical_decimal(version) {
        return Err(WireError::Malformed);
    }
    if version != b"1" {
        return Err(WireError::UnsupportedVersion);
    }
    let fields = fields.ok_or(WireError::MissingField)?;

    let mut ctx = Context { gat: 0, deadline: NEVER, class: 0, fanout: 0, hop: 0 };
    let mut key_id = None;
    let mut tag = None;
    let mut seen = 0u8;
    // One pass: `at` is the start of a field (its key); a field ends at the next `.`.
    let mut at = 0;
    loop {
        let &key = fields.get(at).ok_or(WireError::Malformed)?;
        if key == b'.' {
            return Err(WireError::Malformed);
        }
        let f = Field::from_key(key).ok_or(WireError::UnknownField)?;
        if seen & f.bit() != 0 {
            return Err(WireError::DuplicateField);
        }
        // Any bit above f's: a field that comes after f was already seen.
        if seen >> (f as u8) != 0 {
            return Err(WireError::OutOfOrder);
        }
        seen |= f.bit();
        let rest = &fields[at + 1..];
        let len = match f {
            Field::Gat => number(rest, u64::MAX, &mut ctx.gat)?,
            // NEVER is written by omission, so it cannot also be written out.
            Field::Deadline => number(rest, NEVER - 1, &mut ctx.deadline)?,
            Field::Class => small(rest, u8::MAX.into(), |n| ctx.class = n as u8)?,
            Field::Fanout => small(rest, u32::MAX.into(), |n| ctx.fanout = n as u32)?,
            Field::Hop => small(rest, u8::MAX.into(), |n| ctx.hop = n as u8)?,
            Field::KeyId | Field::Tag => {
                let len = rest.iter().position(|&b| b == b'.').unwrap_or(rest.len());
                let value = &rest[..len];
                if f == Field::KeyId {
                    key_id = Some(KeyId::parse(value).ok_or(WireError::Malformed)?);
                } else {
                    tag = Some(mac::tag_from_base64url(value).ok_or(WireError::Malformed)?);
                }
                len
            }
        };
        at += 1 + len;
        if at == fields.len() {
            break;
        }
        at += 1; // the `.` (numbers stop only at `.` or the end)
    }
    if seen & REQUIRED != REQUIRED {
        return Err(WireError::MissingField);
    }
    let mac = match (key_id, tag) {
        (Some(key_id), Some(tag)) => Some(Mac { key_id, tag }),
        (None, None) => None,
        _ => return Err(WireError::MissingField),
    };
    Ok(Decoded { context: ctx, mac })
}

/// `0`, or a non-zero digit followed by digits.
fn is_canonical_decimal(s: &[u8]) -> bool {
    match s {
        [] => false,
        [b'0'] => true,
        [b'0', ..] => false,
        _ => s.iter().all(u8::is_ascii_digit),
    }
}

/// Parses the canonical decimal at the start of `s`, which runs to the next
/// `.` or the end, into `out` if it is at most `max`; returns its length.
/// Syntax is checked before range: `99…9x` is `invalid_number`, not `out_of_range`.
fn number(s: &[u8], max: u64, out: &mut u64) -> Result<usize, WireError> {
    // One loop scans and accumulates (wrapping): 19 digits always fit in a
    // u64, so only a longer number is summed again, checked.
    let mut n: u64 = 0;
    let mut len = 0;
    while let Some(&b) = s.get(len) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(d));
        len += 1;
    }
    let ends_field = len == s.len() || s[len] == b'.';
    if len == 0 || !ends_field || (s[0] == b'0' && len > 1) {
        return Err(WireError::InvalidNumber);
    }
    if len > 19 {
        n = s[..len]
            .iter()
            .try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .ok_or(WireError::OutOfRange)?;
    }
    if n > max {
        return Err(WireError::OutOfRange);
    }
    *out = n;
    Ok(len)
}

/// [`number`] for the narrow fields.
fn small(s: &[u8], max: u64, set: impl FnOnce(u64)) -> Result<usize, WireError> {
    let mut n = 0;
    let len = number(s, max, &mut n)?;
    set(n);
    Ok(len)
}
