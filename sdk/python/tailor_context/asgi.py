"""ASGI middleware: the request's context, and optionally the ordering gate, for any
ASGI app (plain ASGI, Starlette, FastAPI). Standard library only.

::

    app = TailorASGI(app, ContextConfig.hop(), gate=AsyncGate("orf", c=4))

For each HTTP request: the context is read from the raw (bytes) headers, clamped (or
stamped, at the edge, where the app then sees the new context in its headers), made the
current context (:func:`tailor_context.current`, so outgoing calls carry its child) and
put in ``scope["tailor.context"]``. With a gate, the app runs only once admitted; a
request the gate sheds gets 503 with ``tailor-rejected: <reason>`` and never reaches the
app. Other scope types (lifespan, websocket) pass through untouched.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, List, Optional, Tuple

from ._baggage import BAGGAGE_HEADER
from ._codec import HEADER
from .gate import AsyncGate, Shed
from .propagation import _CURRENT, ContextConfig, ServerSide, context_headers

Scope = dict
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

#: The header a shed request's 503 names its reason in (as the fanout server does).
REJECTED_HEADER = "tailor-rejected"
SCOPE_KEY = "tailor.context"

_CTX_B, _BAGGAGE_B = HEADER.encode(), BAGGAGE_HEADER.encode()


def _edge_headers(headers: List[Tuple[bytes, bytes]], ctx) -> List[Tuple[bytes, bytes]]:
    """The request's headers with every carrier replaced by ``ctx`` (the edge's stamp)."""
    kept, baggage = [], []
    for name, value in headers:
        n = name.lower()
        if n == _BAGGAGE_B:
            baggage.append(value.decode("latin-1"))
        elif n != _CTX_B:
            kept.append((name, value))
    joined = ",".join(baggage) if baggage else None
    kept.extend((n.encode(), v.encode("latin-1")) for n, v in context_headers(ctx, joined))
    return kept


async def send_shed(send: Callable[[Any], Awaitable[None]], shed: Shed) -> None:
    """Answers 503 with ``tailor-rejected: <reason>`` and the detail as the body."""
    body = f"tailor: request shed ({shed.reason}): {shed.detail}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (REJECTED_HEADER.encode(), shed.reason.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class TailorASGI(ServerSide):
    """Wraps an ASGI app (see the module doc)."""

    def __init__(
        self, app: ASGIApp, config: Optional[ContextConfig] = None, gate: Optional[AsyncGate] = None, clock: Callable[[], int] = time.time_ns
    ) -> None:
        super().__init__(config, gate, clock)
        self.app = app

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        ctx = self.config.incoming(scope.get("headers") or (), self.clock())
        scope = dict(scope)
        if self.config.edge is not None:
            scope["headers"] = _edge_headers(list(scope.get("headers") or ()), ctx)
        scope[SCOPE_KEY] = ctx
        token = _CURRENT.set(ctx)
        try:
            if self.gate is None:
                await self.app(scope, receive, send)
                return
            try:
                await self.gate.enter(ctx)
            except Shed as shed:
                await send_shed(send, shed)
                return
            try:
                await self.app(scope, receive, send)
            finally:
                self.gate.leave()
        finally:
            _CURRENT.reset(token)
