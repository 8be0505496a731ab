//! The request context on the wire: codec, carriers, clamping, MACs and counters.
//!
//! One text value, e.g. `1.g1732272000123456789.d1732272000125456789.c0.k4.h2`,
//! rides in three carriers: the `tailor-context` header (HTTP) or metadata
//! entry (gRPC), and the `tailor` member of W3C `baggage`, so services that
//! only forward OpenTelemetry baggage carry it too. The deadline also maps to
//! `grpc-timeout`. The format, its grammar and the reasons behind it are in
//! `docs/wire-format.md`; `testdata/context/vectors.json` pins it, and the Go
//! and Python codecs in `sdk/` pass the same vectors.
//!
//! What a hop does with an incoming request:
//!
//! ```
//! use tailor_core::wire::{self, WireStats};
//! # let headers = [("tailor-context", "1.g1000.d9000.c0.k1.h1")];
//! # let (now, max_age) = (2_000, 10_000_000_000);
//! # let stats = WireStats::new();
//! let outcome = wire::extract(headers);
//! stats.record(&outcome);
//! let ctx = match outcome {
//!     Ok(Some(d)) => {
//!         let (ctx, clamped) = wire::clamp(d.context, now, max_age);
//!         stats.record_clamp(&clamped);
//!         ctx
//!     }
//!     // Absent or rejected: serve the request anyway, as if it arrived now.
//!     _ => tailor_core::Context::stamped(now),
//! };
//! // Calls it makes carry `ctx.child()`: wire::encode(&ctx.child()).
//! # assert_eq!(ctx.gat, 1000);
//! ```
//!
//! Nothing here reads a clock: `now` is always an argument.

pub mod baggage;
mod clamp;
mod codec;
mod error;
pub mod grpc_timeout;
mod mac;
mod stats;

pub use clamp::{clamp, Clamped, EdgeRoute};
pub use codec::{decode, encode, encode_signed, is_value_byte, Decoded, Encoded, Mac, MAX_LEN, VERSION};
pub use error::WireError;
pub use mac::{Key, KeyError, KeyId, Keyring, Tag, MAX_KEY_ID_LEN, MIN_SECRET_LEN, TAG_CHARS, TAG_LEN};
pub use stats::WireStats;

/// The dedicated HTTP header and gRPC metadata key.
pub const HEADER: &str = "tailor-context";

/// The context carried by a request's headers (or gRPC metadata), given as
/// `(name, value)` pairs in any order; names match case-insensitively.
///
/// - `tailor-context` wins when present: it is what Tailor-aware hops set, and
///   it carries the same value as baggage. More than one is `ambiguous`.
/// - Otherwise the `tailor` member of `baggage`. Several `baggage` headers are
///   one list (RFC 9110 §5.3): at most [`baggage::MAX_LEN`] bytes in all
///   (`too_long`), at most one `tailor` member (`ambiguous`). The member's
///   value is percent-decoded before it is decoded.
/// - Neither: `Ok(None)`. Not an error; the hop stamps the request itself.
///
/// The result is not yet clamped (see [`clamp`]) or verified (see
/// [`Decoded::verify`]). Never panics; copies at most two 128-byte values.
pub fn extract<I, N, V>(headers: I) -> Result<Option<Decoded>, WireError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut dedicated: Option<Result<baggage::Value, WireError>> = None;
    let mut dedicated_count = 0usize;
    let mut member: Option<Result<baggage::Value, WireError>> = None;
    let mut member_count = 0usize;
    // Bytes of the joined baggage list so far (with a `,` between lines).
    let mut baggage_len = 0usize;
    let mut baggage_lines = 0usize;
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        if name.eq_ignore_ascii_case(HEADER) {
            dedicated_count += 1;
            if dedicated.is_none() {
                dedicated = Some(baggage::Value::copy(value));
            }
        } else if name.eq_ignore_ascii_case(baggage::HEADER) {
            baggage_len += value.len() + usize::from(baggage_lines > 0);
            baggage_lines += 1;
            if baggage_len > baggage::MAX_LEN {
                continue; // too long in all: no need to look inside
            }
            let (count, first) = baggage::scan(value);
            member_count += count;
            if let (None, Some(raw)) = (&member, first) {
                member = Some(baggage::percent_decode(raw));
            }
        }
    }
    let value = match (dedicated_count, dedicated) {
        (1, Some(v)) => v,
        (0, _) if baggage_len > baggage::MAX_LEN => return Err(WireError::TooLong),
        (0, _) => match (member_count, member) {
            (0, _) => return Ok(None),
            (1, Some(v)) => v,
            _ => return Err(WireError::Ambiguous),
        },
        _ => return Err(WireError::Ambiguous),
    };
    decode(value?.as_bytes()).map(Some)
}
