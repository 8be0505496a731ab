"""Kernel registration: a handler's thread joins the node's shared scheduler table, so the
kernel runs Python handlers by GAT (or deadline) together with every other registered
thread on the node, Rust ones included.

This is the client side of runtime/src/kernel (table.rs, by_key.rs, the service side in
mod.rs) in its **key-ordering** mode (``tailor agent --enforce priority``, header field
``ordering == ORDER_BY_KEY``), table version 6. Per request, on the handler's thread:

1. claim a FREE slot (64-bit CAS of its word to ``(generation + 1) << 8 | CLAIMED``);
2. write pid, tid (``threading.get_native_id()``), GAT, deadline, class and the thread's
   policy before the job; ``admitted = SELF_ADMITTED``, ``successor = 0``;
3. publish ``RUNNABLE`` (SEQ_CST), then read ``base`` and set the thread's own SCHED_FIFO
   level (``os.sched_setscheduler(0, ...)`` applies to the calling thread on Linux) from
   the key with the same :func:`level` formula as the Rust code; re-read ``base`` and set
   it again if the agent shifted meanwhile; if the level is at or below ``SHIFT_LEVEL``,
   raise ``newest`` to the key and ring the doorbell so the agent shifts;
4. on return: store ``FREE`` (SEQ_CST), wait while ``agent_busy`` names this job (the
   agent's write fence: its write can then never land after ours), and restore the
   thread's own policy.

The band mode (``--enforce band``) needs an admission wait, hand-offs and a watchdog
thread per process; it is not implemented here: against a band agent, as without a
table, a running agent, libatomic or CAP_SYS_NICE, :class:`KernelRegistrar` uses its
fallback (an ordering gate, or nothing) and says why once in the log.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import platform
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Tuple

from contextlib import contextmanager

from ._codec import NEVER, Context

log = logging.getLogger("tailor_context.kernel")

DEFAULT_TABLE = "/dev/shm/tailor-sched"

MAGIC = int.from_bytes(b"TAILORSC", "little")
VERSION = 8
FREE, CLAIMED, RUNNABLE, BLOCKED = 0, 1, 2, 3
SELF_ADMITTED = 2
ORDER_BY_BAND, ORDER_BY_KEY = 0, 1
KEY_GAT, KEY_DEADLINE = 0, 1
TOP_LEVEL = 40
SHIFT_LEVEL = 4
#: SCHED_FIFO priority of threads that accept requests (runtime/src/kernel, IO_PRIORITY):
#: above every job, so a newly arrived (possibly older) request is read and registered
#: while registered jobs keep every CPU busy.
IO_PRIORITY = TOP_LEVEL + 1
AGENT_STARTING, AGENT_RUNNING, AGENT_STOPPED = 0, 1, 2

# Layout (runtime/src/kernel/table.rs; every struct is repr(C, align(64)), native endian).
HEADER_SIZE = 128
H_MAGIC, H_VERSION, H_SLOTS, H_AGENT_PID, H_AGENT_STATE, H_HEARTBEAT = 0, 8, 12, 16, 20, 24
H_DOORBELL, H_AGENT_SLEEPING, H_ORDERING, H_KEY, H_BUCKET_NS, H_BASE, H_NEWEST = 32, 36, 56, 60, 64, 72, 80
#: Version 8: the inode of the agent's PID namespace (its pid means nothing from another one).
H_AGENT_PID_NS = 88
SLOT_SIZE = 128
S_WORD, S_PID, S_TID, S_GAT, S_DEADLINE, S_CLASS = 0, 8, 12, 16, 24, 32
S_ORIG_POLICY, S_ORIG_PRIORITY, S_ADMITTED, S_AGENT_BUSY, S_SUCCESSOR = 36, 40, 44, 48, 56
#: Version 8: the thread's start time (field 22 of /proc/self/task/<tid>/stat, clock ticks
#: since boot; 0 = unknown): with the tid it names the thread for good, so the agent never
#: writes a later thread given the same id.
S_START = 72
#: Version 8: ``(generation & 0xffffffff) << 32 | (PID-namespace inode & 0xffffffff)``, the
#: namespace ``pid`` and ``tid`` are numbered in: a worker in a pod with its own PID
#: namespace registers ids the host's agent translates to its own.
S_PID_NS = 80

#: How long a silent heartbeat means a dead agent (the agent beats every 20 ms; Rust's
#: watchdog default is 500 ms).
WATCHDOG_NS = 500_000_000

_FUTEX_WAKE = 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_LIBC = ctypes.CDLL(None, use_errno=True)


def level(key: int, base: int, bucket_ns: int) -> int:
    """The SCHED_FIFO level of a job with ``key`` when ``base`` maps to TOP_LEVEL: one
    level lower per whole ``bucket_ns`` after ``base``, clamped to 1..=TOP_LEVEL."""
    steps = max(key - base, 0) // max(bucket_ns, 1)
    return max(TOP_LEVEL - min(steps, TOP_LEVEL), 1)


_identity = threading.local()
_pid_ns: Tuple[int, int] = (0, 0)  # (pid that read it, inode): a fork re-reads


def thread_start_ticks(tid: int) -> int:
    """The calling thread's start time (clock ticks since boot), read once per thread;
    0 when /proc does not say."""
    cached = getattr(_identity, "start", None)
    if cached is not None and cached[0] == tid:
        return cached[1]
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            stat = f.read()
        # The command name (field 2) may hold spaces and parentheses: count after the last ')'.
        start = int(stat[stat.rindex(b")") + 1 :].split()[19])
    except (OSError, ValueError, IndexError):
        start = 0
    _identity.start = (tid, start)
    return start


def own_pid_ns() -> int:
    """The inode of this process's PID namespace (0 = unknown), read once per process."""
    global _pid_ns
    pid = os.getpid()
    if _pid_ns[0] != pid:
        try:
            _pid_ns = (pid, os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            _pid_ns = (pid, 0)
    return _pid_ns[1]


def pack_pid_ns(generation: int, inode: int) -> int:
    """The ``pid_ns`` slot value of job ``generation`` registered from namespace ``inode``."""
    return ((generation & 0xFFFFFFFF) << 32) | (inode & 0xFFFFFFFF)


def _slots_offset(slots: int) -> int:
    return HEADER_SIZE + (slots + 511) // 512 * 64


def _pack(generation: int, state: int) -> int:
    return ((generation << 8) | state) & 0xFFFF_FFFF_FFFF_FFFF


class TableUnavailable(Exception):
    """Why a registrar cannot register threads (the message names the fix)."""


def _agent_alive_by_pid(t: "Table") -> Optional[bool]:
    """Whether the table's agent lives, by its pid, when this process shares its PID
    namespace; None from another namespace (a pod), where that pid names nothing or
    another process: watch the heartbeat there."""
    agent_ns = t.read64(H_AGENT_PID_NS)
    if agent_ns == 0 or agent_ns != own_pid_ns():
        return None
    return _process_alive(t.read32(H_AGENT_PID))


def _agent_serving(t: "Table") -> bool:
    """RUNNING and alive: by its pid where we can see it, else its heartbeat moving within
    five heartbeats (the agent beats every 20 ms)."""
    alive = _agent_alive_by_pid(t)
    if alive is not None:
        return alive
    beat, end = t.read64(H_HEARTBEAT), time.monotonic() + 0.1
    while time.monotonic() < end:
        if t.read64(H_HEARTBEAT) != beat:
            return True
        time.sleep(0.002)
    return False


def _process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Table:
    """The mapped table file; raises TableUnavailable with the reason and the fix."""

    def __init__(self, path: str) -> None:
        from . import _atomics

        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise TableUnavailable(f"{path}: no agent table. Fix: start the node agent: `tailor agent --table {path} --enforce priority`")
        except OSError as e:
            raise TableUnavailable(f"{path}: {e}")
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_SIZE:
                raise TableUnavailable(f"{path}: not a tailor agent table ({size} bytes)")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        magic, version, slots = struct.unpack_from("<QII", self.mm, 0)
        if magic != MAGIC:
            raise TableUnavailable(f"{path}: not a tailor agent table (bad magic). Fix: point at the file `tailor agent --table` created")
        if version != VERSION:
            raise TableUnavailable(f"{path}: table version {version}, this SDK speaks {VERSION}. Fix: upgrade the SDK or the agent")
        if size < _slots_offset(slots) + slots * SLOT_SIZE:
            raise TableUnavailable(f"{path}: {size} bytes is too small for {slots} slots")
        self.path, self.slots = path, slots
        try:
            self.atomics = _atomics.load()
        except OSError as e:
            raise TableUnavailable(str(e))
        # The mapping's address, held for the table's life (the mmap then cannot be closed
        # under us: ctypes keeps an export of its buffer).
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.base = ctypes.addressof(self._anchor)
        self._slots_at = self.base + _slots_offset(slots)

    def h(self, offset: int) -> int:
        return self.base + offset

    def slot(self, i: int, offset: int = 0) -> int:
        return self._slots_at + i * SLOT_SIZE + offset

    def slot_offset(self, i: int, offset: int = 0) -> int:
        return self._slots_at - self.base + i * SLOT_SIZE + offset

    def read32(self, offset: int) -> int:
        return self.atomics.load32(self.base + offset)

    def read64(self, offset: int) -> int:
        return self.atomics.load64(self.base + offset)

    def ring(self) -> None:
        a = self.atomics
        a.fetch_add32(self.h(H_DOORBELL), 1)
        if a.load32(self.h(H_AGENT_SLEEPING)) != 0 and _SYS_FUTEX is not None:
            # No FUTEX_PRIVATE_FLAG: the agent sleeps on this word from another process.
            _LIBC.syscall(_SYS_FUTEX, ctypes.c_void_p(self.h(H_DOORBELL)), _FUTEX_WAKE, 1, None, None, 0)


@dataclass(frozen=True)
class Registration:
    """A job registered in the table: what :meth:`KernelRegistrar.leave` undoes."""

    slot: int
    generation: int
    tid: int
    orig_policy: int
    orig_priority: int


class _Fallback:
    """The token of a job that went through the fallback."""

    __slots__ = ("token",)

    def __init__(self, token: Any) -> None:
        self.token = token


class KernelRegistrar:
    """Registers handler threads with the node's table (key ordering), or uses
    ``fallback`` (e.g. a :class:`~tailor_context.gate.ThreadGate`; None: no ordering)
    when it cannot, logging the reason once. ``enter(ctx) -> token`` / ``leave(token)``
    and ``with registrar.admit(ctx):`` on the handler's own thread; a drop-in ``gate`` for
    :class:`~tailor_context.wsgi.TailorWSGI` and the sync grpcio interceptor."""

    def __init__(self, table: str = DEFAULT_TABLE, fallback: Any = None, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.fallback = fallback
        self.clock = clock
        self.table: Optional[Table] = None
        self.reason: Optional[str] = None
        self._next_slot = 0
        self._beat = (-1, 0)
        self.registered = 0
        self._io_threads: dict = {}
        try:
            self.table = self._attach(table)
        except TableUnavailable as e:
            self._give_up(str(e))

    def _attach(self, path: str) -> Table:
        t = Table(path)
        deadline = time.monotonic() + 2.0
        while t.read32(H_AGENT_STATE) == AGENT_STARTING and time.monotonic() < deadline:
            time.sleep(0.005)  # an agent creates its table a moment before it serves it
        pid = t.read32(H_AGENT_PID)
        if t.read32(H_AGENT_STATE) != AGENT_RUNNING or not _agent_serving(t):
            raise TableUnavailable(f"{path}: the agent (pid {pid}) is not running. Fix: start `tailor agent --table {path} --enforce priority`")
        if t.read32(H_ORDERING) != ORDER_BY_KEY:
            raise TableUnavailable(
                f"{path}: the agent runs band mode, which this SDK does not implement. Fix: `tailor agent --enforce priority` "
                "(orf with --c = CPUs, gfifo or edf)"
            )
        self.key_is_deadline = t.read32(H_KEY) == KEY_DEADLINE
        self.bucket_ns = t.read64(H_BUCKET_NS)
        return t

    @property
    def active(self) -> bool:
        """Whether jobs register with the table (False: they go through the fallback)."""
        return self.table is not None

    def _give_up(self, reason: str) -> None:
        if self.reason is None:
            what = "the fallback gate" if self.fallback is not None else "no ordering"
            log.warning("tailor kernel registration off (%s); handlers use %s", reason, what)
        self.reason = reason
        self.table = None

    def _agent_alive(self, t: Table) -> bool:
        """The agent still beats (checked per job: one load, no thread needed)."""
        if t.read32(H_AGENT_STATE) != AGENT_RUNNING:
            self._give_up(f"{t.path}: the agent stopped")
            return False
        beat, now = t.read64(H_HEARTBEAT), self.clock()
        if beat != self._beat[0]:
            self._beat = (beat, now)
        elif now - self._beat[1] > WATCHDOG_NS:
            self._give_up(f"{t.path}: the agent's heartbeat stopped for {(now - self._beat[1]) // 1_000_000} ms")
            return False
        return True

    def enter(self, ctx: Context) -> Any:
        t = self.table
        if t is not None and self._agent_alive(t):
            reg = self._register(t, ctx)
            if reg is not None:
                return reg
        return _Fallback(None if self.fallback is None else self.fallback.enter(ctx))

    def leave(self, token: Any) -> None:
        if isinstance(token, _Fallback):
            if self.fallback is not None:
                self.fallback.leave(token.token)
            return
        self._unregister(token)

    @contextmanager
    def admit(self, ctx: Context) -> Iterator[Any]:
        token = self.enter(ctx)
        try:
            yield token
        finally:
            self.leave(token)

    def _claim(self, t: Table, ctx: Context) -> Optional[Registration]:
        a, n = t.atomics, t.slots
        start = self._next_slot % n
        self._next_slot += 1  # a hint only: races under threads cost nothing
        for k in range(n):
            i = (start + k) % n
            addr = t.slot(i, S_WORD)
            word = a.load64(addr)
            if word & 0xFF != FREE:
                continue
            generation = (word >> 8) + 1
            if a.cas64(addr, word, _pack(generation, CLAIMED)):
                break
        else:
            return None
        tid = threading.get_native_id()
        orig_policy = os.sched_getscheduler(0)
        orig_priority = os.sched_getparam(0).sched_priority
        # Plain stores before the SEQ_CST publish (see _atomics for why that is enough).
        struct.pack_into(
            "<IIQQIii",
            t.mm,
            t.slot_offset(i, S_PID),
            os.getpid(),
            tid,
            ctx.gat,
            ctx.deadline,
            ctx.class_,
            orig_policy,
            orig_priority,
        )
        struct.pack_into("<I", t.mm, t.slot_offset(i, S_ADMITTED), SELF_ADMITTED)
        struct.pack_into("<Q", t.mm, t.slot_offset(i, S_SUCCESSOR), 0)
        # With the ids as this process sees them, the namespace they are numbered in and
        # the thread's start time, the agent finds (and only ever writes) this thread even
        # from another PID namespace.
        struct.pack_into("<QQ", t.mm, t.slot_offset(i, S_START), thread_start_ticks(tid), pack_pid_ns(generation, own_pid_ns()))
        return Registration(i, generation, tid, orig_policy, orig_priority)

    def _register(self, t: Table, ctx: Context) -> Optional[Registration]:
        reg = self._claim(t, ctx)
        if reg is None:
            self._log_once("full", f"{t.path}: every slot is taken; this job uses the fallback")
            return None
        a = t.atomics
        # RUNNABLE before reading base: a shift that stores a new base after our read
        # finds us in its scan and rewrites our level to the same value we compute.
        a.store64(t.slot(reg.slot, S_WORD), _pack(reg.generation, RUNNABLE))
        key = ctx.deadline if self.key_is_deadline else ctx.gat
        while True:
            base = a.load64(t.h(H_BASE))
            lvl = level(key, base, self.bucket_ns)
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(lvl))
            except OSError as e:
                # No CAP_SYS_NICE (or an RT limit): every job would fail alike; stop trying.
                self._unregister(reg, restore=False)
                self._give_up(f"cannot take SCHED_FIFO/{lvl}: {e}. Fix: run as root or grant CAP_SYS_NICE")
                return None
            if a.load64(t.h(H_BASE)) == base:
                break
        if lvl <= SHIFT_LEVEL and key != NEVER:
            a.fetch_max64(t.h(H_NEWEST), key)
            t.ring()
        self.registered += 1
        return reg

    def _unregister(self, reg: Registration, restore: bool = True) -> None:
        t = self.table
        if t is not None:
            a = t.atomics
            a.store64(t.slot(reg.slot, S_WORD), _pack(reg.generation, FREE))
            busy = t.slot(reg.slot, S_AGENT_BUSY)
            spins = 0
            while a.load64(busy) == reg.generation:
                # The agent (above every job) holds this for one syscall.
                spins += 1
                time.sleep(0)
                if spins % 1000 == 0 and (
                    t.read32(H_AGENT_STATE) != AGENT_RUNNING or _agent_alive_by_pid(t) is False
                ):
                    break
        if restore:
            target = 0 if reg.tid == threading.get_native_id() else reg.tid
            try:
                os.sched_setscheduler(target, reg.orig_policy, os.sched_param(reg.orig_priority))
            except OSError as e:
                log.error("tailor: cannot restore thread %d to policy %d/%d: %s", reg.tid, reg.orig_policy, reg.orig_priority, e)

    def io_thread_started(self) -> bool:
        """Raises the calling thread above every job level (:data:`IO_PRIORITY`), as the
        Rust runtime does for its I/O and pool threads: call it on the threads that accept
        requests and wait for them (a server's accept loop, idle workers). Without it, on a
        node whose CPUs registered jobs keep busy, a SCHED_OTHER thread holding a new,
        older request cannot run to register it. A job on a raised thread returns to
        IO_PRIORITY when it ends. Returns whether the thread was raised."""
        if self.table is None:
            return False
        orig = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(IO_PRIORITY))
        except OSError as e:
            self._log_once("io", f"cannot raise an I/O thread to SCHED_FIFO/{IO_PRIORITY}: {e}")
            return False
        self._io_threads[threading.get_native_id()] = orig
        return True

    def io_thread_stopped(self) -> None:
        """Puts a thread raised by :meth:`io_thread_started` back to its own policy."""
        orig = self._io_threads.pop(threading.get_native_id(), None)
        if orig is not None:
            os.sched_setscheduler(0, orig[0], os.sched_param(orig[1]))

    _logged: set = set()

    def _log_once(self, what: str, message: str) -> None:
        if what not in self._logged:
            self._logged.add(what)
            log.warning("tailor kernel registration: %s", message)
