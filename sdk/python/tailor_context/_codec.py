"""The context's text encoding, version 1:
``1.g<gat>[.d<deadline>].c<class>.k<fanout>.h<hop>[.i<key id>.m<tag>]``.

Canonical both ways: every Context has exactly one encoding and every
accepted string decodes to exactly one Context.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, replace
from typing import Optional, Union

from ._errors import WireError
from ._mac import Key, Keyring, tag_from_base64url, tag_to_base64url, valid_key_id

VERSION = 1
MAX_LEN = 128
HEADER = "tailor-context"
NEVER = 2**64 - 1  # "no deadline": sorts after every real deadline

_U8, _U32, _U64 = 2**8 - 1, 2**32 - 1, 2**64 - 1

#: RFC 3986 unreserved: the only bytes a context may contain.
VALUE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

_DIGITS = frozenset(b"0123456789")

# Field keys in their required order.
_ORDER = b"gdckhim"
_REQUIRED = frozenset(b"gckh")


@dataclass(frozen=True)
class Context:
    """{GAT, deadline, class, fanout, hop}: what travels with a request.
    Times are integer nanoseconds on the edge's clock."""

    gat: int
    """Global arrival time, stamped once at the edge."""
    deadline: int = NEVER
    """When the task must leave its queue (TailGuard's t_D), or NEVER."""
    class_: int = 0
    """SLO class; 0 is the most stringent."""
    fanout: int = 1
    """Number of parallel tasks in the query (1 = none)."""
    hop: int = 0
    """Hops since the edge (the edge is hop 0)."""

    def __post_init__(self) -> None:
        for name, top in (("gat", _U64), ("deadline", _U64), ("class_", _U8), ("fanout", _U32), ("hop", _U8)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= top:
                raise ValueError(f"Context.{name} must be an int in 0..={top}, not {v!r}")

    @classmethod
    def stamped(cls, gat: int) -> "Context":
        """The context the edge stamps at ``gat``."""
        return cls(gat)

    def child(self) -> "Context":
        """The context an outgoing call inherits: one hop further (saturating)."""
        return replace(self, hop=min(self.hop + 1, _U8))

    def age(self, now: int) -> int:
        return max(now - self.gat, 0)


def encode(ctx: Context) -> str:
    """The canonical encoding of ``ctx``, unsigned."""
    d = "" if ctx.deadline == NEVER else f".d{ctx.deadline}"
    return f"1.g{ctx.gat}{d}.c{ctx.class_}.k{ctx.fanout}.h{ctx.hop}"


def _signed_prefix(ctx: Context, key_id: str) -> str:
    return f"{encode(ctx)}.i{key_id}"


def encode_signed(ctx: Context, key: Key) -> str:
    """The encoding of ``ctx`` signed with ``key``: ``.i<key id>.m<tag>`` appended,
    the tag being HMAC-SHA256 of every byte before ``.m``, first 128 bits, base64url."""
    prefix = _signed_prefix(ctx, key.id)
    return f"{prefix}.m{tag_to_base64url(key.tag(prefix.encode('ascii')))}"


@dataclass(frozen=True)
class Decoded:
    """A context as read off the wire, with its (unverified) MAC fields if signed."""

    context: Context
    key_id: Optional[str] = None
    tag: Optional[bytes] = None

    @property
    def signed(self) -> bool:
        return self.key_id is not None

    def verify(self, keys: Keyring) -> Context:
        """The context, if signed by a key in ``keys`` with a matching tag
        (constant-time compare). Raises WireError missing_mac, unknown_key, bad_mac."""
        if self.key_id is None or self.tag is None:
            raise WireError("missing_mac")
        key = keys.get(self.key_id)
        if key is None:
            raise WireError("unknown_key")
        want = key.tag(_signed_prefix(self.context, self.key_id).encode("ascii"))
        if not hmac.compare_digest(want, self.tag):
            raise WireError("bad_mac")
        return self.context

    def encode(self) -> str:
        """The exact bytes this was decoded from (decoding is canonical)."""
        if self.key_id is None or self.tag is None:
            return encode(self.context)
        return f"{_signed_prefix(self.context, self.key_id)}.m{tag_to_base64url(self.tag)}"


def as_bytes(value: Union[str, bytes, bytearray]) -> bytes:
    """Header values may arrive as str (encoded as UTF-8 here) or bytes."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _is_canonical_decimal(s: bytes) -> bool:
    return bool(s) and all(b in _DIGITS for b in s) and (s[0:1] != b"0" or len(s) == 1)


def _number(s: bytes, top: int) -> int:
    if not _is_canonical_decimal(s):
        raise WireError("invalid_number")
    n = int(s)  # at most 128 digits: bounded work
    if n > top:
        raise WireError("out_of_range")
    return n


# The shape of every canonical unsigned value (what almost every request carries): one
# regex match instead of the field-by-field walk below, which remains the reference and
# names the rule broken for anything that does not match.
_CANONICAL_UNSIGNED = re.compile(
    rb"1\.g(0|[1-9][0-9]{0,19})(?:\.d(0|[1-9][0-9]{0,19}))?\.c(0|[1-9][0-9]{0,2})\.k(0|[1-9][0-9]{0,9})\.h(0|[1-9][0-9]{0,2})"
)


def decode(value: Union[str, bytes, bytearray]) -> Decoded:
    """Decodes a context value (a tailor-context header or metadata entry, or an
    already percent-decoded baggage value). Strict and total: raises WireError
    naming the first rule broken (docs/wire-format.md, "Decoding")."""
    s = as_bytes(value)
    m = _CANONICAL_UNSIGNED.fullmatch(s)
    if m is not None:
        g, d, c, k, h = m.groups()
        gat, class_, fanout, hop = int(g), int(c), int(k), int(h)
        deadline = NEVER if d is None else int(d)
        if gat <= _U64 and deadline < NEVER and class_ <= _U8 and fanout <= _U32 and hop <= _U8:
            return Decoded(Context(gat, deadline, class_, fanout, hop))
        # Out of range: the walk below names the field.
    if len(s) > MAX_LEN:
        raise WireError("too_long")
    if not s:
        raise WireError("malformed")
    if not all(b in VALUE_BYTES for b in s):
        raise WireError("invalid_char")
    version, dot, fields = s.partition(b".")
    if not _is_canonical_decimal(version):
        raise WireError("malformed")
    if version != b"1":
        raise WireError("unsupported_version")
    if not dot:
        raise WireError("missing_field")
    vals: dict[int, int] = {}
    key_id: Optional[str] = None
    tag: Optional[bytes] = None
    seen: set[int] = set()
    for field in fields.split(b"."):
        if not field:
            raise WireError("malformed")
        key, rest = field[0], field[1:]
        pos = _ORDER.find(bytes([key]))
        if pos < 0:
            raise WireError("unknown_field")
        if key in seen:
            raise WireError("duplicate_field")
        if any(_ORDER.index(bytes([k])) > pos for k in seen):
            raise WireError("out_of_order")
        seen.add(key)
        if key == ord("g"):
            vals[key] = _number(rest, _U64)
        elif key == ord("d"):
            vals[key] = _number(rest, NEVER - 1)  # NEVER is written by omission
        elif key in (ord("c"), ord("h")):
            vals[key] = _number(rest, _U8)
        elif key == ord("k"):
            vals[key] = _number(rest, _U32)
        elif key == ord("i"):
            if not valid_key_id(rest):
                raise WireError("malformed")
            key_id = rest.decode("ascii")
        else:
            tag = tag_from_base64url(rest)
            if tag is None:
                raise WireError("malformed")
    if not _REQUIRED <= seen or (key_id is None) != (tag is None):
        raise WireError("missing_field")
    ctx = Context(
        gat=vals[ord("g")],
        deadline=vals.get(ord("d"), NEVER),
        class_=vals[ord("c")],
        fanout=vals[ord("k")],
        hop=vals[ord("h")],
    )
    return Decoded(ctx, key_id, tag)
