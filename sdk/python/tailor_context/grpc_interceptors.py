"""grpcio interceptors, server and client, sync and ``grpc.aio`` (install the ``grpc`` extra).

Server (``grpc.server(..., interceptors=[ServerInterceptor(config, gate)])``, or
``grpc.aio.server(interceptors=[AioServerInterceptor(config, gate)])``): each call's
context is read from its metadata and clamped (stamped at the edge), made the current
context while the handler runs, and, with a gate (a :class:`~tailor_context.gate.ThreadGate`
or :class:`~tailor_context.kernel.KernelRegistrar` for the sync server, whose handlers run
on its thread pool; an :class:`~tailor_context.gate.AsyncGate` for aio), the handler runs
once admitted. A call shed for its deadline ends with DEADLINE_EXCEEDED, one shed for a
full queue with RESOURCE_EXHAUSTED; both carry ``tailor-rejected: <reason>`` in the
trailing metadata.

The deadline and ``grpc-timeout``: grpcio consumes ``grpc-timeout`` itself and exposes
the time left as ``context.time_remaining()``. A hop call with no Tailor context but a
timeout gets ``now + time_remaining`` as its context's deadline (never before its GAT;
not at the edge: a client's timeout must not buy urgency there). The other way is opt-in,
as in the Rust runtime (a Tailor deadline is a queuing deadline; a gRPC peer cancels a call
whose timeout passes): ``ClientInterceptor(timeout_from_deadline=True)`` gives outgoing
calls the time left to the current deadline as their timeout, keeping a shorter one.
"""

from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from typing import Any, Callable, NamedTuple, Optional

import grpc
import grpc.aio

from ._codec import Context
from .gate import SHED_DEADLINE, Shed
from .propagation import _CURRENT, NANOS_PER_SEC, ServerSide, context_headers, current, timeout_for

REJECTED_KEY = "tailor-rejected"
_OURS = ("tailor-context", "baggage")


def _shed_status(shed: Shed) -> grpc.StatusCode:
    return grpc.StatusCode.DEADLINE_EXCEEDED if shed.reason == SHED_DEADLINE else grpc.StatusCode.RESOURCE_EXHAUSTED


def _remaining_ns(rpc_context: Any) -> Callable[[], Optional[int]]:
    def remaining() -> Optional[int]:
        seconds = rpc_context.time_remaining()
        return None if seconds is None else int(seconds * NANOS_PER_SEC)

    return remaining


_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def _rewrap(handler: Any, wrap: Callable[[Callable, bool], Callable]) -> Any:
    """A copy of ``handler`` (an RpcMethodHandler) whose behaviour is ``wrap(behaviour, streams)``."""
    for kind in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            streams = kind.endswith("stream")
            factory = getattr(grpc, f"{kind}_rpc_method_handler")
            return factory(wrap(behaviour, streams), handler.request_deserializer, handler.response_serializer)
    return handler


class ServerInterceptor(ServerSide, grpc.ServerInterceptor):
    """The sync server's interceptor (see the module doc)."""

    @contextmanager
    def _serving(self, metadata, rpc_context):
        ctx = self.config.incoming(metadata or (), self.clock(), _remaining_ns(rpc_context))
        token = _CURRENT.set(ctx)
        try:
            ticket = None
            if self.gate is not None:
                try:
                    ticket = self.gate.enter(ctx)
                except Shed as shed:
                    rpc_context.set_trailing_metadata(((REJECTED_KEY, shed.reason),))
                    rpc_context.abort(_shed_status(shed), f"tailor: request shed ({shed.reason}): {shed.detail}")
            try:
                yield ctx
            finally:
                if self.gate is not None:
                    self.gate.leave(ticket)
        finally:
            _CURRENT.reset(token)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        metadata = handler_call_details.invocation_metadata

        def wrap(behaviour, streams):
            if streams:

                def run_stream(request, rpc_context):
                    # The slot is held while the handler produces the stream.
                    with self._serving(metadata, rpc_context):
                        yield from behaviour(request, rpc_context)

                return run_stream

            def run(request, rpc_context):
                with self._serving(metadata, rpc_context):
                    return behaviour(request, rpc_context)

            return run

        return _rewrap(handler, wrap)


class AioServerInterceptor(ServerSide, grpc.aio.ServerInterceptor):
    """The ``grpc.aio`` server's interceptor (see the module doc). Coroutine handlers only."""

    @asynccontextmanager
    async def _serving(self, metadata, rpc_context):
        ctx = self.config.incoming(metadata or (), self.clock(), _remaining_ns(rpc_context))
        token = _CURRENT.set(ctx)
        try:
            if self.gate is not None:
                try:
                    await self.gate.enter(ctx)
                except Shed as shed:
                    rpc_context.set_trailing_metadata(((REJECTED_KEY, shed.reason),))
                    await rpc_context.abort(_shed_status(shed), f"tailor: request shed ({shed.reason}): {shed.detail}")
            try:
                yield ctx
            finally:
                if self.gate is not None:
                    self.gate.leave()
        finally:
            _CURRENT.reset(token)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        metadata = handler_call_details.invocation_metadata

        def wrap(behaviour, streams):
            if streams:

                async def run_stream(request, rpc_context):
                    async with self._serving(metadata, rpc_context):
                        async for item in behaviour(request, rpc_context):
                            yield item

                return run_stream

            async def run(request, rpc_context):
                async with self._serving(metadata, rpc_context):
                    return await behaviour(request, rpc_context)

            return run

        return _rewrap(handler, wrap)


class _Details(NamedTuple):
    method: str
    timeout: Optional[float]
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _SyncDetails(_Details, grpc.ClientCallDetails):
    pass


def _with_context(metadata: Any, parent: Context) -> list:
    """``metadata`` (None, a sequence of pairs, or grpc.aio.Metadata) with our two entries replaced."""
    pairs = [] if metadata is None else [(k, v) for k, v in metadata]
    baggage = ",".join(v for k, v in pairs if k.lower() == "baggage") or None
    kept = [(k, v) for k, v in pairs if k.lower() not in _OURS]
    return kept + context_headers(parent.child(), baggage)


def _timeout(timeout: Optional[float], parent: Context, enabled: bool) -> Optional[float]:
    if not enabled:
        return timeout
    ours = timeout_for(parent)
    if ours is None or (timeout is not None and timeout <= ours):
        return timeout
    return ours


class ClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Sync client: ``grpc.intercept_channel(channel, ClientInterceptor())``. Calls made
    while serving a request carry its child context (see the module doc)."""

    def __init__(self, timeout_from_deadline: bool = False) -> None:
        self.timeout_from_deadline = timeout_from_deadline

    def _details(self, d):
        parent = current()
        if parent is None:
            return d
        return _SyncDetails(
            d.method,
            _timeout(d.timeout, parent, self.timeout_from_deadline),
            _with_context(d.metadata, parent),
            d.credentials,
            getattr(d, "wait_for_ready", None),
            getattr(d, "compression", None),
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def _aio_details(d, timeout_from_deadline: bool):
    parent = current()
    if parent is None:
        return d
    return grpc.aio.ClientCallDetails(
        d.method,
        _timeout(d.timeout, parent, timeout_from_deadline),
        grpc.aio.Metadata(*_with_context(d.metadata, parent)),
        d.credentials,
        d.wait_for_ready,
    )


class AioUnaryUnaryClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """``grpc.aio.insecure_channel(target, interceptors=[AioUnaryUnaryClientInterceptor(), ...])``."""

    def __init__(self, timeout_from_deadline: bool = False) -> None:
        self.timeout_from_deadline = timeout_from_deadline

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_aio_details(client_call_details, self.timeout_from_deadline), request)


class AioUnaryStreamClientInterceptor(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, timeout_from_deadline: bool = False) -> None:
        self.timeout_from_deadline = timeout_from_deadline

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_aio_details(client_call_details, self.timeout_from_deadline), request)


def aio_client_interceptors(timeout_from_deadline: bool = False) -> list:
    """The aio client interceptors to pass to a channel (unary-unary and unary-stream)."""
    return [AioUnaryUnaryClientInterceptor(timeout_from_deadline), AioUnaryStreamClientInterceptor(timeout_from_deadline)]
