"""The ordering gate: at most ``c`` handlers at once, admitted in the policy's order.

The same semantics as the Rust runtime's cooperative backend (runtime/src/cooperative.rs),
for Python handlers: a request waits until fewer than ``c`` are running and no request
the policy puts ahead of it is waiting. Nobody is preempted; a handler keeps its slot
until it returns. The order is one static key per request, smallest first, ties in
local arrival order (core/src/policy/queue.rs):

========  ==========================================
policy    key
========  ==========================================
``orf``   the GAT (oldest request first)
``gfifo`` the GAT
``edf``   the deadline (earliest first; none = last)
``priq``  the class (0 first), arrival within a class
``fifo``  local arrival
========  ==========================================

Two things the cooperative backend does not do, because a service without them is not
safe to expose: the queue is bounded (``max_queue``: a request that finds it full is
shed at once, reason ``queue_full``) and a request whose deadline has passed when its
turn comes is shed instead of run (reason ``deadline``: TailGuard's deadline is when a
task must leave its queue, and running it anyway only delays the ones behind it). Shed
requests get a clear status from the integrations: HTTP 503 with ``tailor-rejected:
<reason>``, gRPC DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED.

:class:`ThreadGate` is for threaded servers (WSGI, sync grpcio), :class:`AsyncGate` for
one asyncio event loop (ASGI, grpc.aio). Both share :class:`_Queue`, which decides;
they differ only in how a waiter sleeps and is woken.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator, List, Optional, Tuple

from ._codec import NEVER, Context

POLICIES = ("orf", "gfifo", "edf", "priq", "fifo")

#: Reasons a request is shed, as sent in ``tailor-rejected``.
SHED_DEADLINE = "deadline"
SHED_QUEUE_FULL = "queue_full"


class Shed(Exception):
    """The gate refused the request: ``reason`` is ``deadline`` or ``queue_full``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _key_of(policy: str) -> Callable[[Context, int], int]:
    if policy in ("orf", "gfifo"):
        return lambda ctx, seq: ctx.gat
    if policy == "edf":
        return lambda ctx, seq: ctx.deadline
    if policy == "priq":
        return lambda ctx, seq: ctx.class_
    if policy == "fifo":
        return lambda ctx, seq: seq
    raise ValueError(f"gate policy {policy!r}: unknown; use one of {', '.join(POLICIES)}")


@dataclass
class GateStats:
    """Counters of one gate (a snapshot)."""

    admitted: int = 0
    completed: int = 0
    shed_deadline: int = 0
    shed_queue_full: int = 0
    running: int = 0
    waiting: int = 0
    max_running: int = 0
    waited_ns: int = 0


class _Waiter:
    """A queued request; ``outcome`` is None while it waits, then ``admitted`` or a shed reason."""

    __slots__ = ("ctx", "outcome", "wake", "cancelled")

    def __init__(self, ctx: Context, wake: object) -> None:
        self.ctx = ctx
        self.outcome: Optional[str] = None
        self.wake = wake
        self.cancelled = False


ADMITTED = "admitted"


class _Queue:
    """The decisions, without any waiting: callers hold a lock (ThreadGate) or run on
    one event loop (AsyncGate). Returns the waiters to wake; the caller wakes them."""

    def __init__(self, policy: str, c: int, max_queue: int, clock: Callable[[], int], shed_expired: bool) -> None:
        if not isinstance(c, int) or c < 1:
            raise ValueError(f"gate: c = {c!r}; it must be an int >= 1 (handlers running at once)")
        if not isinstance(max_queue, int) or max_queue < 0:
            raise ValueError(f"gate: max_queue = {max_queue!r}; it must be an int >= 0 (0 = never queue)")
        self.policy = policy
        self.key = _key_of(policy)
        self.c = c
        self.max_queue = max_queue
        self.clock = clock
        self.shed_expired = shed_expired
        self.heap: List[Tuple[int, int, _Waiter]] = []
        self.queued = 0  # waiters in the heap not cancelled
        self.seq = 0
        self.stats = GateStats()

    def _expired(self, ctx: Context, now: int) -> bool:
        return self.shed_expired and ctx.deadline != NEVER and now > ctx.deadline

    def arrive(self, ctx: Context, wake: object) -> Optional[_Waiter]:
        """None: admitted now. Else the waiter to sleep on. Raises Shed."""
        st = self.stats
        if self._expired(ctx, self.clock()):
            st.shed_deadline += 1
            raise Shed(SHED_DEADLINE, f"deadline passed {self.clock() - ctx.deadline} ns before admission")
        if st.running < self.c and self.queued == 0:
            st.running += 1
            st.admitted += 1
            st.max_running = max(st.max_running, st.running)
            return None
        if self.queued >= self.max_queue:
            st.shed_queue_full += 1
            raise Shed(SHED_QUEUE_FULL, f"{self.queued} requests already wait (max_queue {self.max_queue})")
        w = _Waiter(ctx, wake)
        heapq.heappush(self.heap, (self.key(ctx, self.seq), self.seq, w))
        self.seq += 1
        self.queued += 1
        st.waiting = self.queued
        return w

    def dispatch(self) -> List[_Waiter]:
        """Admits (or sheds, if expired) waiting requests while a slot is free."""
        st, woken, now = self.stats, [], None
        while st.running < self.c and self.heap:
            _, _, w = heapq.heappop(self.heap)
            if w.cancelled:
                continue
            self.queued -= 1
            now = self.clock() if now is None else now
            if self._expired(w.ctx, now):
                w.outcome = SHED_DEADLINE
                st.shed_deadline += 1
            else:
                w.outcome = ADMITTED
                st.running += 1
                st.admitted += 1
                st.max_running = max(st.max_running, st.running)
            woken.append(w)
        st.waiting = self.queued
        return woken

    def leave(self) -> List[_Waiter]:
        self.stats.running -= 1
        self.stats.completed += 1
        return self.dispatch()

    def cancel(self, w: _Waiter) -> List[_Waiter]:
        """A waiter gave up (its task was cancelled): drop it, or give back the slot it was just given."""
        if w.outcome is None:
            w.cancelled = True
            self.queued -= 1
            self.stats.waiting = self.queued
            return []
        if w.outcome == ADMITTED:
            self.stats.running -= 1
            self.stats.admitted -= 1  # it never ran
            return self.dispatch()
        return []


def _shed_error(w: _Waiter, clock: Callable[[], int]) -> Shed:
    return Shed(SHED_DEADLINE, f"deadline passed {clock() - w.ctx.deadline} ns while queued")


def default_c() -> int:
    """The CPUs this process may run on: a natural ``c`` for CPU-bound handlers."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Gate:
    """What both gates are configured with: ``policy`` (see the module doc), ``c``
    handlers at once (default: this process's CPUs), ``max_queue`` waiting at most,
    ``clock`` (ns, the clock deadlines are on), ``shed_expired``."""

    def __init__(
        self,
        policy: str = "orf",
        c: Optional[int] = None,
        max_queue: int = 1024,
        clock: Callable[[], int] = time.time_ns,
        shed_expired: bool = True,
    ) -> None:
        self._q = _Queue(policy, default_c() if c is None else c, max_queue, clock, shed_expired)

    @property
    def c(self) -> int:
        return self._q.c

    @property
    def policy(self) -> str:
        return self._q.policy

class ThreadGate(_Gate):
    """The gate for handlers on threads. ``with gate.admit(ctx): handle()``; raises :class:`Shed`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()

    def enter(self, ctx: Context) -> int:
        """Waits for admission; returns the ns waited. Call :meth:`leave` after the handler."""
        with self._lock:
            w = self._q.arrive(ctx, None)
            if w is None:
                return 0
            # Made under the gate's lock, so no dispatch can look for it before it exists.
            w.wake = threading.Lock()
            w.wake.acquire()
        start = time.monotonic_ns()
        w.wake.acquire()  # released by dispatch, which set the outcome first
        waited = time.monotonic_ns() - start
        if w.outcome != ADMITTED:
            raise _shed_error(w, self._q.clock)
        with self._lock:
            self._q.stats.waited_ns += waited
        return waited

    def leave(self, token: object = None) -> None:
        """The handler is done: frees its slot (``token``, what enter returned, is unused
        here; the kernel registrar's ``leave`` needs its own)."""
        with self._lock:
            woken = self._q.leave()
        for w in woken:
            w.wake.release()

    @contextmanager
    def admit(self, ctx: Context) -> Iterator[int]:
        """Admitted for the ``with`` body (yields the ns waited); the slot is freed on exit, even on error."""
        waited = self.enter(ctx)
        try:
            yield waited
        finally:
            self.leave()

    def stats(self) -> GateStats:
        with self._lock:
            return GateStats(**vars(self._q.stats))


class AsyncGate(_Gate):
    """The gate for coroutines on ONE event loop (an ASGI app, a grpc.aio server).
    ``async with gate.admit(ctx): await handle()``; raises :class:`Shed`. A request
    cancelled while waiting (client gone) leaves the queue; one cancelled after its
    admission gives its slot on."""

    @staticmethod
    def _wake(woken: List[_Waiter]) -> None:
        for w in woken:
            if not w.wake.done():
                w.wake.set_result(None)

    async def enter(self, ctx: Context) -> int:
        """Waits for admission; returns the ns waited. Call :meth:`leave` after the handler."""
        w = self._q.arrive(ctx, None)
        if w is None:
            return 0
        w.wake = asyncio.get_running_loop().create_future()
        start = time.monotonic_ns()
        try:
            await w.wake
        except BaseException:
            self._wake(self._q.cancel(w))
            raise
        waited = time.monotonic_ns() - start
        if w.outcome != ADMITTED:
            raise _shed_error(w, self._q.clock)
        self._q.stats.waited_ns += waited
        return waited

    def leave(self) -> None:
        self._wake(self._q.leave())

    @asynccontextmanager
    async def admit(self, ctx: Context) -> AsyncIterator[int]:
        waited = await self.enter(ctx)
        try:
            yield waited
        finally:
            self.leave()

    def stats(self) -> GateStats:
        return GateStats(**vars(self._q.stats))
