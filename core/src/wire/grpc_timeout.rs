//! Deadlines as gRPC's `grpc-timeout`: `<1–8 digits><unit>`, units `H M S m u n`.
//!
//! gRPC carries the time remaining, not an absolute time, so a deadline maps
//! to `deadline − now` on the way out and `now + timeout` on the way in; the
//! two clocks need no sync. What the mapping is for, and why a TailGuard
//! queuing deadline is not sent as a gRPC timeout by default, is in
//! `docs/wire-format.md` ("grpc-timeout").

use std::fmt;

use super::WireError;
use crate::time::{Nanos, NEVER};

/// The gRPC metadata key.
pub const HEADER: &str = "grpc-timeout";

/// The largest value gRPC allows: 8 digits.
pub const MAX_VALUE: u64 = 99_999_999;

/// Units from finest to coarsest, with their length in ns.
const UNITS: [(u8, Nanos); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60 * 1_000_000_000),
    (b'H', 3_600 * 1_000_000_000),
];

/// An encoded `grpc-timeout`, held inline. Derefs to `str`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct GrpcTimeout {
    len: u8,
    buf: [u8; 9],
}

impl GrpcTimeout {
    /// The value as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len as usize]).expect("a grpc-timeout is ASCII")
    }
}

impl std::ops::Deref for GrpcTimeout {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for GrpcTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for GrpcTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `remaining` in the finest unit whose count fits in 8 digits, rounded up
/// (as grpc-go does: a timeout is never shortened). Exact below 0.1 s; every
/// u64 fits, in hours at worst. `0` is `0n` (already expired).
pub fn encode(remaining: Nanos) -> GrpcTimeout {
    let (unit, count) = UNITS
        .iter()
        .map(|&(unit, ns)| (unit, remaining.div_ceil(ns)))
        .find(|&(_, count)| count <= MAX_VALUE)
        .expect("u64::MAX ns is about 5.1 million hours");
    let mut digits = [0u8; 8];
    let mut i = digits.len();
    let mut n = count;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let n = digits.len() - i;
    let mut buf = [0; 9];
    buf[..n].copy_from_slice(&digits[i..]);
    buf[n] = unit;
    GrpcTimeout { len: n as u8 + 1, buf }
}

/// The timeout in ns, saturating at `u64::MAX` (99,999,999 hours is more than
/// 2^64 ns). Accepts what gRPC peers send: 1–8 digits, leading zeros and `0` included.
///
/// Errors, in order: more than 9 bytes (`too_long`), fewer than 2 or a unit
/// not in `H M S m u n` (`malformed`), a non-digit before the unit (`invalid_number`).
pub fn decode(value: impl AsRef<[u8]>) -> Result<Nanos, WireError> {
    let value = value.as_ref();
    if value.len() > 9 {
        return Err(WireError::TooLong);
    }
    let [digits @ .., unit] = value else { return Err(WireError::Malformed) };
    if digits.is_empty() {
        return Err(WireError::Malformed);
    }
    let &(_, ns) = UNITS.iter().find(|(u, _)| u == unit).ok_or(WireError::Malformed)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(WireError::InvalidNumber);
    }
    let count = digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Ok(count.saturating_mul(ns))
}

/// The `grpc-timeout` for an absolute `deadline` at `now`; `None` when there
/// is no deadline ([`NEVER`]). A deadline already passed is `0n`.
pub fn from_deadline(deadline: Nanos, now: Nanos) -> Option<GrpcTimeout> {
    (deadline != NEVER).then(|| encode(deadline.saturating_sub(now)))
}

/// The absolute deadline a `grpc-timeout` received at `now` stands for:
/// `now + timeout`, saturating to [`NEVER`] (no deadline).
pub fn to_deadline(value: impl AsRef<[u8]>, now: Nanos) -> Result<Nanos, WireError> {
    Ok(now.saturating_add(decode(value)?))
}
