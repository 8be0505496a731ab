"""Tailor's request context on the wire, for Python services.

Byte-compatible with the Rust codec in tailor-core and with sdk/go: all pass
the shared vectors in testdata/context/vectors.json. The format and the
reasons behind it are in docs/wire-format.md. Standard library only.

What a service does with an incoming request::

    try:
        d = tailor_context.extract(request.headers.items())
        stats.record(d is not None)
    except tailor_context.WireError as e:
        d = None
        stats.record(True, e)
    ctx = tailor_context.Context.stamped(now)  # absent or rejected: serve it anyway
    if d is not None:
        ctx, clamped = tailor_context.clamp(d.context, now, max_age)
        stats.record_clamp(clamped)
    # Outgoing calls carry tailor_context.encode(ctx.child()).

Times are integer nanoseconds on the edge's clock; nothing here reads a clock.
"""

from ._baggage import (
    BAGGAGE_HEADER,
    BAGGAGE_KEY,
    MAX_BAGGAGE_LEN,
    baggage_with,
    baggage_without,
    decode_baggage,
    extract,
)
from ._clamp import Clamped, EdgeRoute, clamp
from ._codec import HEADER, MAX_LEN, NEVER, VALUE_BYTES, VERSION, Context, Decoded, decode, encode, encode_signed
from ._errors import ERROR_KINDS, KeyConfigError, WireError
from ._grpc import (
    GRPC_TIMEOUT_HEADER,
    grpc_timeout_decode,
    grpc_timeout_encode,
    grpc_timeout_from_deadline,
    grpc_timeout_to_deadline,
)
from ._mac import MAX_KEY_ID_LEN, MIN_SECRET_LEN, TAG_CHARS, TAG_LEN, Key, Keyring
from ._stats import Stats

__all__ = [
    "BAGGAGE_HEADER", "BAGGAGE_KEY", "ERROR_KINDS", "GRPC_TIMEOUT_HEADER", "HEADER", "MAX_BAGGAGE_LEN",
    "MAX_KEY_ID_LEN", "MAX_LEN", "MIN_SECRET_LEN", "NEVER", "TAG_CHARS", "TAG_LEN", "VALUE_BYTES", "VERSION",
    "Clamped", "Context", "Decoded", "EdgeRoute", "Key", "KeyConfigError", "Keyring", "Stats", "WireError",
    "baggage_with", "baggage_without", "clamp", "decode", "decode_baggage", "encode", "encode_signed", "extract",
    "grpc_timeout_decode", "grpc_timeout_encode", "grpc_timeout_from_deadline", "grpc_timeout_to_deadline",
]
