"""Why a context read off the wire was rejected: one kind per rule."""

from __future__ import annotations

# Every kind, in the shared order (the order of Stats and of the Rust enum).
# The constraint each enforces is in docs/wire-format.md ("Errors").
ERROR_KINDS: tuple[str, ...] = (
    "too_long",  # a context is at most 128 bytes (after percent-decoding), baggage 8192, grpc-timeout 8 digits + unit
    "invalid_char",  # every byte is one of A-Z a-z 0-9 - . _ ~
    "malformed",  # empty, bad version syntax, empty field, bad key id or tag; grpc-timeout: short or bad unit
    "unsupported_version",  # the version is well formed but not 1
    "unknown_field",  # field keys are g d c k h i m
    "duplicate_field",  # a field appears at most once
    "out_of_order",  # fields appear in the order g d c k h i m
    "missing_field",  # g c k h are required; i and m come together
    "invalid_number",  # decimal digits without leading zeros
    "out_of_range",  # g < 2^64, d < 2^64-1, c and h <= 255, k < 2^32
    "ambiguous",  # at most one tailor-context header and one tailor baggage member
    "missing_mac",  # where a MAC is required, the context carries one
    "unknown_key",  # the key id names a key this hop holds
    "bad_mac",  # the tag is HMAC-SHA256 (first 128 bits) of every byte before ".m"
)

_MESSAGES = {
    "too_long": "too long: a context is at most 128 bytes, a baggage header at most 8192, a grpc-timeout at most 8 digits and a unit",
    "invalid_char": "invalid character: a context uses only A-Z a-z 0-9 - . _ ~",
    "malformed": "malformed: see docs/wire-format.md for the grammar",
    "unsupported_version": "unsupported version: this codec reads version 1 only",
    "unknown_field": "unknown field: version 1 has the fields g, d, c, k, h, i, m",
    "duplicate_field": "duplicate field",
    "out_of_order": "fields out of order: they appear as g, d, c, k, h, i, m",
    "missing_field": "missing field: g, c, k and h are required; i and m come together",
    "invalid_number": "invalid number: decimal digits without leading zeros",
    "out_of_range": "number out of range: g < 2^64, d < 2^64-1, c and h <= 255, k < 2^32",
    "ambiguous": "ambiguous: more than one tailor-context header or tailor baggage member",
    "missing_mac": "missing MAC: this hop requires a signed context",
    "unknown_key": "unknown key id: this hop holds no key by that id",
    "bad_mac": "bad MAC: the tag does not match the context",
}


class WireError(ValueError):
    """A context (or grpc-timeout) was rejected. Never fatal: serve the request
    as if it carried no context, and count ``kind`` (see :class:`Stats`)."""

    def __init__(self, kind: str) -> None:
        assert kind in _MESSAGES, kind
        super().__init__(_MESSAGES[kind])
        #: The stable snake_case name shared with the Rust and Go codecs.
        self.kind = kind


class KeyConfigError(ValueError):
    """A Key or Keyring could not be built (configuration, not wire).
    ``kind`` is ``invalid_id``, ``short_secret`` or ``duplicate_id``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
