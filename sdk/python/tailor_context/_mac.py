"""HMAC-SHA256 tags for contexts that cross a trust boundary."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Iterable, Optional

from ._errors import KeyConfigError

TAG_LEN = 16  # bytes: the first 128 bits of the HMAC-SHA256
TAG_CHARS = 22  # unpadded base64url characters
MAX_KEY_ID_LEN = 16
MIN_SECRET_LEN = 16

_B64URL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def valid_key_id(s: bytes) -> bool:
    """1-16 bytes of A-Z a-z 0-9 - _."""
    return 0 < len(s) <= MAX_KEY_ID_LEN and all(b in _B64URL for b in s)


def tag_from_base64url(s: bytes) -> Optional[bytes]:
    """Exactly 22 base64url characters whose last carries zero padding bits
    (one of A Q g w): one string per tag."""
    if len(s) != TAG_CHARS or not all(b in _B64URL for b in s) or s[-1:] not in (b"A", b"Q", b"g", b"w"):
        return None
    return base64.urlsafe_b64decode(s + b"==")


def tag_to_base64url(tag: bytes) -> str:
    return base64.urlsafe_b64encode(tag).rstrip(b"=").decode("ascii")


class Key:
    """A shared secret and its id. ``secret`` is at least 16 bytes (use 32 random bytes)."""

    __slots__ = ("id", "_secret")

    def __init__(self, id: str, secret: bytes) -> None:
        if not valid_key_id(id.encode("utf-8")):
            raise KeyConfigError("invalid_id", "key id must be 1-16 characters of A-Z a-z 0-9 - _")
        if len(secret) < MIN_SECRET_LEN:
            raise KeyConfigError("short_secret", "secret must be at least 16 bytes (32 random bytes recommended)")
        self.id = id
        self._secret = bytes(secret)

    def tag(self, msg: bytes) -> bytes:
        return hmac.new(self._secret, msg, hashlib.sha256).digest()[:TAG_LEN]

    def __repr__(self) -> str:  # never the secret
        return f"Key(id={self.id!r}, ...)"


class Keyring:
    """The keys a hop accepts tags from, by id (unique)."""

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self._keys: dict[str, Key] = {}
        for k in keys:
            if k.id in self._keys:
                raise KeyConfigError("duplicate_id", "duplicate key id in keyring")
            self._keys[k.id] = k

    def get(self, key_id: str) -> Optional[Key]:
        return self._keys.get(key_id)
