"""The context as a W3C baggage list-member ``tailor=<value>``, and extraction
from a request's headers."""

from __future__ import annotations

from typing import Iterable, Optional, Tuple, Union

from ._codec import HEADER, MAX_LEN, Decoded, as_bytes, decode
from ._errors import WireError

BAGGAGE_HEADER = "baggage"
BAGGAGE_KEY = "tailor"
MAX_BAGGAGE_LEN = 8192  # what W3C Baggage requires every platform to propagate

_KEY = BAGGAGE_KEY.encode("ascii")
_OWS = b" \t"
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _our_value(member: bytes) -> Optional[bytes]:
    """Whether a trimmed list-member is ours (``tailor``, OWS, ``=``); if so its
    raw value, properties and surrounding OWS removed."""
    if not member.startswith(_KEY):
        return None
    rest = member[len(_KEY) :].strip(_OWS)
    if not rest.startswith(b"="):
        return None
    return rest[1:].split(b";", 1)[0].strip(_OWS)


def _scan(header: bytes) -> Tuple[int, Optional[bytes]]:
    count, first = 0, None
    for m in header.split(b","):
        v = _our_value(m.strip(_OWS))
        if v is not None:
            if first is None:
                first = v
            count += 1
    return count, first


def _percent_decode(raw: bytes) -> bytes:
    """Decodes %XX; a % not followed by two hex digits stays literal (and then
    fails as invalid_char). More than 128 decoded bytes is too_long."""
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw) and raw[i + 1] in _HEX and raw[i + 2] in _HEX:
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
        if len(out) > MAX_LEN:
            raise WireError("too_long")
    return bytes(out)


def decode_baggage(header: Union[str, bytes]) -> Optional[Decoded]:
    """The context in one baggage header value, or None if it has no tailor member."""
    h = as_bytes(header)
    if len(h) > MAX_BAGGAGE_LEN:
        raise WireError("too_long")
    count, raw = _scan(h)
    if count == 0:
        return None
    if count > 1:
        raise WireError("ambiguous")
    return decode(_percent_decode(raw or b""))


def _members(header: str):
    for m in header.split(","):
        m = m.strip(" \t")
        if m:
            yield m, _our_value(m.encode("utf-8")) is not None


def baggage_with(header: Optional[str], value: str) -> str:
    """``header`` with our member set to ``value``, every other member kept in
    order; ours replaces the first tailor member (others are dropped) or goes last."""
    out, placed = [], False
    for m, ours in _members(header or ""):
        if ours and placed:
            continue
        if ours:
            out.append(f"{BAGGAGE_KEY}={value}")
            placed = True
        else:
            out.append(m)
    if not placed:
        out.append(f"{BAGGAGE_KEY}={value}")
    return ",".join(out)


def baggage_without(header: str) -> Optional[str]:
    """``header`` without our member; None when nothing is left (drop the header)."""
    out = [m for m, ours in _members(header) if not ours]
    return ",".join(out) if out else None


_NAME_HEADER = HEADER.encode("ascii")
_NAME_BAGGAGE = BAGGAGE_HEADER.encode("ascii")


def _header_name(name: Union[str, bytes, bytearray]) -> bytes:
    """A header name as lower-case bytes: ASGI gives bytes, WSGI and grpcio give str.
    (Comparing a bytes name with a str would silently never match.)"""
    if isinstance(name, str):
        return name.lower().encode("utf-8", "surrogateescape")
    return bytes(name).lower()


def extract(headers: Iterable[Tuple[Union[str, bytes], Union[str, bytes]]]) -> Optional[Decoded]:
    """The context a request carries, from its (name, value) header pairs (or
    gRPC metadata); names and values may be str or bytes (raw ASGI headers are
    bytes); names match case-insensitively. None when it carries none.

    ``tailor-context`` wins when present (more than one is ambiguous); else the
    tailor member of baggage, all baggage headers being one list of at most
    8192 bytes with at most one member of ours. Raises WireError."""
    dedicated: list = []
    baggage: list = []
    for name, value in headers:
        n = _header_name(name)
        if n == _NAME_HEADER:
            dedicated.append(value)
        elif n == _NAME_BAGGAGE:
            baggage.append(value)
    if len(dedicated) > 1:
        raise WireError("ambiguous")
    if dedicated:
        return decode(dedicated[0])  # baggage is not consulted at all
    total, count, first = 0, 0, None
    for i, value in enumerate(baggage):
        v = as_bytes(value)
        total += len(v) + (1 if i else 0)
        if total > MAX_BAGGAGE_LEN:
            raise WireError("too_long")
        c, raw = _scan(v)
        if first is None and raw is not None:
            first = raw
        count += c
    if count == 0:
        return None
    if count > 1:
        raise WireError("ambiguous")
    return decode(_percent_decode(first or b""))
