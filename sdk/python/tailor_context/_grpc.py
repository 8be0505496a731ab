"""Deadlines as gRPC's ``grpc-timeout``: ``<1-8 digits><unit>``, units H M S m u n."""

from __future__ import annotations

from typing import Optional, Union

from ._codec import NEVER, as_bytes
from ._errors import WireError

GRPC_TIMEOUT_HEADER = "grpc-timeout"
_MAX_VALUE = 99_999_999
_UNITS = ((b"n", 1), (b"u", 10**3), (b"m", 10**6), (b"S", 10**9), (b"M", 60 * 10**9), (b"H", 3600 * 10**9))
_U64 = 2**64 - 1


def grpc_timeout_encode(remaining: int) -> str:
    """``remaining`` ns in the finest unit whose count fits in 8 digits, rounded up."""
    if not 0 <= remaining <= _U64:
        raise ValueError(f"remaining must be in 0..2^64, not {remaining}")
    for unit, ns in _UNITS:
        count = -(-remaining // ns)
        if count <= _MAX_VALUE:
            return f"{count}{unit.decode()}"
    raise AssertionError("unreachable: 2^64 ns is about 5.1 million hours")


def grpc_timeout_decode(value: Union[str, bytes]) -> int:
    """The timeout in ns, saturating at 2^64-1. Raises WireError: more than 9
    bytes too_long; under 2 or a bad unit malformed; a non-digit invalid_number."""
    v = as_bytes(value)
    if len(v) > 9:
        raise WireError("too_long")
    if len(v) < 2:
        raise WireError("malformed")
    unit = dict(_UNITS).get(v[-1:])
    if unit is None:
        raise WireError("malformed")
    digits = v[:-1]
    if not all(0x30 <= b <= 0x39 for b in digits):
        raise WireError("invalid_number")
    return min(int(digits) * unit, _U64)


def grpc_timeout_from_deadline(deadline: int, now: int) -> Optional[str]:
    """The grpc-timeout for ``deadline`` at ``now``; None for no deadline."""
    if deadline == NEVER:
        return None
    return grpc_timeout_encode(max(deadline - now, 0))


def grpc_timeout_to_deadline(value: Union[str, bytes], now: int) -> int:
    """``now`` + the timeout, saturating to NEVER."""
    return min(now + grpc_timeout_decode(value), NEVER)
