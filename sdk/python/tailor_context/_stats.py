"""Counters of what arrived on the wire, for metrics."""

from __future__ import annotations

import threading
from typing import List, Optional, Tuple

from ._clamp import Clamped
from ._errors import ERROR_KINDS, WireError


class Stats:
    """Contexts accepted, absent, rejected (by kind) and clamped. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted = 0
        self.absent = 0
        self._rejected = dict.fromkeys(ERROR_KINDS, 0)
        self._clamped = {"gat_ahead": 0, "gat_stale": 0, "deadline_early": 0}

    def record(self, found: bool, error: Optional[WireError] = None) -> None:
        """Counts the outcome of extract / decode_baggage."""
        with self._lock:
            if error is not None:
                self._rejected[error.kind] += 1
            elif found:
                self.accepted += 1
            else:
                self.absent += 1

    def record_clamp(self, c: Clamped) -> None:
        with self._lock:
            for name in self._clamped:
                if getattr(c, name):
                    self._clamped[name] += 1

    def rejected(self) -> List[Tuple[str, int]]:
        """(kind, count) for every kind, zeros included, in ERROR_KINDS order."""
        with self._lock:
            return list(self._rejected.items())

    def clamped(self) -> List[Tuple[str, int]]:
        with self._lock:
            return list(self._clamped.items())
