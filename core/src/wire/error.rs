//! Why a context read off the wire was rejected: one variant per rule.

/// Why a context (or a `grpc-timeout`) read off the wire was rejected.
///
/// A rejected context is never fatal: the caller serves the request as if it
/// carried no context (the edge re-stamps, an inner hop stamps `now`) and
/// counts the error in [`WireStats`](super::WireStats) under its
/// [`kind`](WireError::kind). Each variant's doc states the rule it enforces.
/// When an input breaks several rules, the first in the order of
/// `docs/wire-format.md` ("Decoding") decides, so every implementation names
/// the same kind; the names are shared with the Go and Python codecs and with
/// `testdata/context/vectors.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// A context value is at most [`MAX_LEN`](super::MAX_LEN) (128) bytes, after
    /// percent-decoding when it came from `baggage`; a request's `baggage`
    /// (all its headers together) is at most
    /// [`baggage::MAX_LEN`](super::baggage::MAX_LEN) (8192) bytes, what W3C
    /// Baggage requires every platform to propagate; a `grpc-timeout` is at
    /// most 8 digits and a unit.
    #[error("too long: a context is at most 128 bytes, a baggage header at most 8192, a grpc-timeout at most 8 digits and a unit")]
    TooLong,
    /// Every byte of a context is an RFC 3986 unreserved character:
    /// `A-Z a-z 0-9 - . _ ~`. (This is what keeps it byte-identical in every
    /// carrier, including through percent-encoding baggage propagators.)
    #[error("invalid character: a context uses only A-Z a-z 0-9 - . _ ~")]
    InvalidChar,
    /// The structure is broken: empty input, a version that is not a decimal
    /// number, an empty field (`..`, trailing `.`), a key id that is not 1–16 of
    /// `A-Z a-z 0-9 - _`, a tag that is not 22 base64url characters ending in one
    /// of `A Q g w`; for `grpc-timeout`, a value shorter than 2 bytes or a unit
    /// other than `H M S m u n`.
    #[error("malformed: see docs/wire-format.md for the grammar")]
    Malformed,
    /// The version (the digits before the first `.`) is well formed but not
    /// `1`, the only one this codec reads. A sender that is ahead of us: upgrade
    /// this hop, or make senders emit version 1 until every hop reads the new one.
    #[error("unsupported version: this codec reads version 1 only")]
    UnsupportedVersion,
    /// Every field key is one of `g d c k h i m`.
    #[error("unknown field: version 1 has the fields g, d, c, k, h, i, m")]
    UnknownField,
    /// A field appears at most once.
    #[error("duplicate field")]
    DuplicateField,
    /// Fields appear in the order `g d c k h i m`.
    #[error("fields out of order: they appear as g, d, c, k, h, i, m")]
    OutOfOrder,
    /// `g`, `c`, `k` and `h` are required (so `1` alone, a version with no
    /// fields, is missing them); `i` and `m` come together or not at all.
    #[error("missing field: g, c, k and h are required; i and m come together")]
    MissingField,
    /// A numeric field (`g d c k h`), and the digits of a `grpc-timeout`, are
    /// ASCII digits; in a context they are also canonical: non-empty, no sign,
    /// no leading zero (`0` itself is fine).
    #[error("invalid number: decimal digits without leading zeros")]
    InvalidNumber,
    /// A number fits its field: `g` in u64; `d` in u64 below 2^64−1 (no
    /// deadline is written by omitting `d`); `c` and `h` in 0–255; `k` in u32.
    #[error("number out of range: g < 2^64, d < 2^64-1, c and h <= 255, k < 2^32")]
    OutOfRange,
    /// A carrier holds at most one context: one `tailor-context` header (or
    /// gRPC metadata entry), and at most one `tailor` member across all of its
    /// `baggage` headers.
    #[error("ambiguous: more than one tailor-context header or tailor baggage member")]
    Ambiguous,
    /// Where a MAC is required (a hop across a trust boundary), the context
    /// carries one (`i` and `m`).
    #[error("missing MAC: this hop requires a signed context")]
    MissingMac,
    /// The key id (`i`) names a key this hop holds.
    #[error("unknown key id: this hop holds no key by that id")]
    UnknownKey,
    /// The tag (`m`) is the HMAC-SHA256 (first 128 bits) of every byte before
    /// `.m`, under the key named by `i`.
    #[error("bad MAC: the tag does not match the context")]
    BadMac,
}

impl WireError {
    /// Every kind, in declaration order (the order of [`WireStats`](super::WireStats)).
    pub const ALL: [WireError; 14] = [
        WireError::TooLong,
        WireError::InvalidChar,
        WireError::Malformed,
        WireError::UnsupportedVersion,
        WireError::UnknownField,
        WireError::DuplicateField,
        WireError::OutOfOrder,
        WireError::MissingField,
        WireError::InvalidNumber,
        WireError::OutOfRange,
        WireError::Ambiguous,
        WireError::MissingMac,
        WireError::UnknownKey,
        WireError::BadMac,
    ];

    /// The stable snake_case name of this kind: a metric label, and the name the
    /// test vectors and the Go and Python codecs use.
    pub const fn kind(self) -> &'static str {
        match self {
            WireError::TooLong => "too_long",
            WireError::InvalidChar => "invalid_char",
            WireError::Malformed => "malformed",
            WireError::UnsupportedVersion => "unsupported_version",
            WireError::UnknownField => "unknown_field",
            WireError::DuplicateField => "duplicate_field",
            WireError::OutOfOrder => "out_of_order",
            WireError::MissingField => "missing_field",
            WireError::InvalidNumber => "invalid_number",
            WireError::OutOfRange => "out_of_range",
            WireError::Ambiguous => "ambiguous",
            WireError::MissingMac => "missing_mac",
            WireError::UnknownKey => "unknown_key",
            WireError::BadMac => "bad_mac",
        }
    }

    /// The kind named `name`, if any (the inverse of [`WireError::kind`]).
    pub fn from_kind(name: &str) -> Option<WireError> {
        WireError::ALL.into_iter().find(|e| e.kind() == name)
    }

    /// Position in [`WireError::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}
