"""Atomic operations on shared memory for the kernel table, through GCC's libatomic.

Why libatomic: claiming a table slot races with every other service on the node, Rust
ones included, which claim with a 64-bit compare-and-swap. No lock-free claim built
from plain stores can exclude a CAS claimer (both may see FREE and both "win"), and
changing the claim for everyone would change a versioned protocol. Python has no CAS of
its own, and libc exports none, but libatomic (``libatomic1``, installed with gcc and on
most distributions by default; ``apt-get install libatomic1`` otherwise) exports the
``__atomic_*_N`` functions the compiler would have inlined: the very same instructions
(``lock cmpxchg``, ``xchg``) Rust's ``AtomicU64`` uses. Called through ctypes, no code is
compiled at install. Without it, registration is unavailable and the caller falls back to
the ordering gate (logged once, naming the fix).

Memory-ordering assumptions (documented in docs/sdk-python.md too):

- every protocol word is naturally aligned (the table's layout guarantees it), so the
  8- and 4-byte operations here are single-copy atomic;
- every operation here is SEQ_CST, as the Rust side's are for the words that carry the
  protocol (slot word, base, agent_busy, doorbell, newest): on x86-64 a SEQ_CST store is
  ``xchg`` (a full barrier), which is what makes "store RUNNABLE, then load base" and
  "store FREE, then load agent_busy" safe against the agent's "store base, then scan" and
  "store agent_busy, then load word" (store-load order, the one x86 TSO does not give);
- the fields the Rust side writes with Relaxed stores before publishing a state (pid,
  tid, key, original policy) are written here with plain ``struct.pack_into`` stores
  before the SEQ_CST publish: under x86-64 TSO stores are never reordered with later
  stores, and on weaker CPUs the SEQ_CST store is at least a release, so a reader that
  sees the new state sees those fields. Nobody reads them while the slot is CLAIMED.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Optional

SEQ_CST = 5  # __ATOMIC_SEQ_CST


class Atomics:
    """Typed wrappers of libatomic's entry points. Addresses are ints (ctypes.addressof)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        def fn(name, restype, *argtypes):
            f = getattr(lib, name)
            f.restype, f.argtypes = restype, list(argtypes)
            return f

        vp, u64, u32, i = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
        self._load8 = fn("__atomic_load_8", u64, vp, i)
        self._store8 = fn("__atomic_store_8", None, vp, u64, i)
        self._cas8 = fn("__atomic_compare_exchange_8", ctypes.c_bool, vp, vp, u64, i, i)
        self._load4 = fn("__atomic_load_4", u32, vp, i)
        self._store4 = fn("__atomic_store_4", None, vp, u32, i)
        self._add4 = fn("__atomic_fetch_add_4", u32, vp, u32, i)

    def load64(self, addr: int) -> int:
        return self._load8(addr, SEQ_CST)

    def store64(self, addr: int, value: int) -> None:
        self._store8(addr, value, SEQ_CST)

    def cas64(self, addr: int, expected: int, desired: int) -> bool:
        """Stores ``desired`` if the word is ``expected``; whether it did."""
        exp = ctypes.c_uint64(expected)  # per call: threads must not share it
        return bool(self._cas8(addr, ctypes.addressof(exp), desired, SEQ_CST, SEQ_CST))

    def fetch_max64(self, addr: int, value: int) -> None:
        current = self.load64(addr)
        while current < value and not self.cas64(addr, current, value):
            current = self.load64(addr)

    def load32(self, addr: int) -> int:
        return self._load4(addr, SEQ_CST)

    def store32(self, addr: int, value: int) -> None:
        self._store4(addr, value, SEQ_CST)

    def fetch_add32(self, addr: int, value: int) -> int:
        return self._add4(addr, value, SEQ_CST)


_LOADED: Optional[Atomics] = None


def load() -> Atomics:
    """libatomic's operations; raises OSError naming the fix when it is not installed."""
    global _LOADED
    if _LOADED is None:
        name = ctypes.util.find_library("atomic") or "libatomic.so.1"
        try:
            _LOADED = Atomics(ctypes.CDLL(name))
        except (OSError, AttributeError) as e:
            raise OSError(f"libatomic ({name}): {e}. Fix: install it (Debian/Ubuntu: apt-get install libatomic1)") from e
    return _LOADED
