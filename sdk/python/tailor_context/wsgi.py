"""WSGI middleware: the request's context, and optionally the ordering gate or kernel
registration, for any WSGI app on a threaded server (waitress, gunicorn's gthread,
wsgiref with a threading mix-in). Standard library only.

::

    app = TailorWSGI(app, ContextConfig.hop(), gate=ThreadGate("orf", c=4))
    # or kernel-enforced, falling back to the gate when no agent serves the table:
    app = TailorWSGI(app, ContextConfig.hop(), gate=KernelRegistrar(fallback=ThreadGate("orf", c=4)))

For each request: the context is read from ``HTTP_TAILOR_CONTEXT`` and ``HTTP_BAGGAGE``
(a WSGI server joins repeated headers with ``,``: two ``tailor-context`` headers then fail
to decode and are counted, as ``ambiguous`` would be), clamped (or stamped at the edge,
which rewrites both in the environ), made the current context and put in
``environ["tailor.context"]``. The gate slot (or the kernel registration) is held until
the response iterable is closed, since a streaming app works while it is iterated. A shed
request gets 503 with ``tailor-rejected: <reason>``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional

from .gate import Shed
from .propagation import _CURRENT, ContextConfig, ServerSide, context_headers

REJECTED_HEADER = "tailor-rejected"
ENVIRON_KEY = "tailor.context"
_ENV_NAMES = {"tailor-context": "HTTP_TAILOR_CONTEXT", "baggage": "HTTP_BAGGAGE"}


class _Held:
    """The app's response iterable; closing it frees the slot and ends the current context."""

    def __init__(self, result: Iterable[bytes], done: Callable[[], None]) -> None:
        self._result = result
        self._done: Optional[Callable[[], None]] = done

    def __iter__(self):
        return iter(self._result)

    def close(self) -> None:
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


class TailorWSGI(ServerSide):
    """Wraps a WSGI app (see the module doc). ``gate``: anything with ``enter(ctx) ->
    token`` and ``leave(token)`` (:class:`~tailor_context.gate.ThreadGate`,
    :class:`~tailor_context.kernel.KernelRegistrar`), or None."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], config: Optional[ContextConfig] = None, gate: Any = None, clock: Callable[[], int] = time.time_ns
    ) -> None:
        super().__init__(config, gate, clock)
        self.app = app

    def __call__(self, environ: dict, start_response):
        carried = [(name, environ[key]) for name, key in _ENV_NAMES.items() if key in environ]
        ctx = self.config.incoming(carried, self.clock())
        if self.config.edge is not None:
            for name, value in context_headers(ctx, environ.get("HTTP_BAGGAGE")):
                environ[_ENV_NAMES[name]] = value
        environ[ENVIRON_KEY] = ctx
        token = _CURRENT.set(ctx)
        gate, ticket = self.gate, None
        if gate is not None:
            try:
                ticket = gate.enter(ctx)
            except Shed as shed:
                _CURRENT.reset(token)
                body = f"tailor: request shed ({shed.reason}): {shed.detail}\n".encode()
                start_response(
                    "503 Service Unavailable",
                    [
                        ("Content-Type", "text/plain; charset=utf-8"),
                        ("Content-Length", str(len(body))),
                        (REJECTED_HEADER, shed.reason),
                    ],
                )
                return [body]

        def done() -> None:
            try:
                if gate is not None:
                    gate.leave(ticket)
            finally:
                try:
                    _CURRENT.reset(token)
                except ValueError:  # closed from another thread than it was called on
                    pass

        try:
            result = self.app(environ, start_response)
        except BaseException:
            done()
            raise
        return _Held(result, done)
