"""What every integration does with the context: read it at the server, keep it as the
current context while the handler runs, and write its child on outgoing calls.

The rules are core/src/wire's and runtime/src/http's (docs/wire-format.md): the edge
strips any incoming context and stamps a new one from its route; every other hop
extracts, counts, and clamps what it received, and serves a request with a missing or
malformed context as if it arrived now. Outgoing calls carry ``ctx.child()`` in
``tailor-context`` and as the ``tailor`` member of ``baggage``.
"""

from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, List, MutableMapping, Optional, Tuple, Union

from ._baggage import BAGGAGE_HEADER, baggage_with, extract
from ._clamp import EdgeRoute, clamp
from ._codec import HEADER, NEVER, Context, encode
from ._errors import WireError
from ._stats import Stats

Headers = Iterable[Tuple[Union[str, bytes], Union[str, bytes]]]

NANOS_PER_SEC = 1_000_000_000

_CURRENT: contextvars.ContextVar[Optional[Context]] = contextvars.ContextVar("tailor_context", default=None)


def current() -> Optional[Context]:
    """The context of the request this thread or task is serving, or None outside one."""
    return _CURRENT.get()


@contextmanager
def serving(ctx: Context) -> Iterator[Context]:
    """Makes ``ctx`` the current context for the ``with`` body (threads and asyncio
    tasks each see their own: it is a contextvar)."""
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)


@dataclass
class ContextConfig:
    """How a service treats the context of incoming requests.

    ``edge``: this service is the edge; any incoming context is replaced by one stamped
    from the route. None: a hop, which trusts and clamps what it receives, GATs older
    than ``max_age_ns`` (default 10 s) being clamped. ``stats`` counts what arrived."""

    edge: Optional[EdgeRoute] = None
    max_age_ns: int = 10 * NANOS_PER_SEC
    stats: Stats = field(default_factory=Stats)

    @classmethod
    def hop(cls, max_age_ns: int = 10 * NANOS_PER_SEC) -> "ContextConfig":
        return cls(None, max_age_ns)

    @classmethod
    def edge_of(cls, route: EdgeRoute) -> "ContextConfig":
        return cls(route)

    def incoming(self, headers: Headers, now: int, remaining_ns: Optional[Callable[[], Optional[int]]] = None) -> Context:
        """The context of a request with ``headers`` arriving at ``now`` (ns, the edge's
        clock: time.time_ns()). ``remaining_ns`` (a gRPC server: the time left to the
        call's ``grpc-timeout``, None without one): a hop request with no Tailor context
        but a timeout gets ``now + remaining`` as its deadline, never before its GAT (not at
        the edge: a client's timeout must not buy it urgency there)."""
        if self.edge is not None:
            return self.edge.stamp(now)
        try:
            decoded = extract(headers)
            self.stats.record(decoded is not None)
        except WireError as e:
            self.stats.record(True, e)
            return Context.stamped(now)
        if decoded is None:
            remaining = None if remaining_ns is None else remaining_ns()
            if remaining is None:
                return Context.stamped(now)
            return Context(now, min(now + max(remaining, 0), NEVER - 1))
        ctx, clamped = clamp(decoded.context, now, self.max_age_ns)
        self.stats.record_clamp(clamped)
        return ctx


class ServerSide:
    """What every server integration holds: how it treats incoming contexts (``config``,
    default a hop), what orders its handlers (``gate``: a gate, a kernel registrar, or
    None) and the clock contexts are stamped and clamped with (ns, realtime)."""

    def __init__(self, config: Optional[ContextConfig] = None, gate: Any = None, clock: Callable[[], int] = time.time_ns) -> None:
        self.config = ContextConfig.hop() if config is None else config
        self.gate = gate
        self.clock = clock


def context_headers(ctx: Context, baggage: Optional[str]) -> List[Tuple[str, str]]:
    """The two carriers of ``ctx``: ``tailor-context`` and ``baggage`` (``baggage``, the
    request's existing baggage list or None, keeps every other member)."""
    value = encode(ctx)
    return [(HEADER, value), (BAGGAGE_HEADER, baggage_with(baggage, value))]


def inject(headers: MutableMapping[str, str], parent: Optional[Context] = None) -> None:
    """Sets the child of ``parent`` (default: the current context) in an outgoing call's
    ``headers`` (a dict-like with case-insensitive keys, such as requests' or httpx's),
    replacing any context already there. Outside a request, nothing is set."""
    parent = current() if parent is None else parent
    if parent is None:
        return
    existing = None
    for name in list(headers.keys()):
        if name.lower() == BAGGAGE_HEADER:
            existing = headers[name]
            del headers[name]
        elif name.lower() == HEADER:
            del headers[name]
    for name, value in context_headers(parent.child(), existing):
        headers[name] = value


def timeout_for(ctx: Optional[Context], now: Optional[int] = None) -> Optional[float]:
    """Seconds left to ``ctx``'s deadline (0 if passed), or None without one: what to give
    a client library's timeout (grpcio's ``timeout=``) for a call made while serving."""
    if ctx is None or ctx.deadline == NEVER:
        return None
    now = time.time_ns() if now is None else now
    return max(ctx.deadline - now, 0) / NANOS_PER_SEC
