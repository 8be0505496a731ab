"""grpcio interceptors against real grpcio servers on loopback (generic handlers over raw
bytes, so no protoc): sync and grpc.aio, propagation through a client interceptor, the
deadline from grpc-timeout and back, gate order, and shedding as DEADLINE_EXCEEDED."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc", reason="pip install grpcio (CI installs it: .ci/run)")
import grpc.aio  # noqa: E402

from tailor_context import NEVER, Context, decode, encode  # noqa: E402
from tailor_context.gate import AsyncGate, ThreadGate  # noqa: E402
from tailor_context.grpc_interceptors import (  # noqa: E402
    AioServerInterceptor,
    ClientInterceptor,
    ServerInterceptor,
    aio_client_interceptors,
)
from tailor_context.propagation import ContextConfig, current, serving  # noqa: E402

from servers import send_in_order_behind_a_holder  # noqa: E402

METHOD = "/tailor.test.Echo/Call"


def sync_server(behaviour, interceptors):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=interceptors)
    handler = grpc.method_handlers_generic_handler("tailor.test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(behaviour)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def describe(ctx):
    return f"{encode(ctx)}".encode()


def test_sync_server_reads_the_context_a_client_interceptor_sends():
    seen = []

    def behaviour(request, rpc_context):
        seen.append((current(), dict(rpc_context.invocation_metadata())))
        return describe(current())

    server, target = sync_server(behaviour, [ServerInterceptor()])
    try:
        channel = grpc.intercept_channel(grpc.insecure_channel(target), ClientInterceptor())
        call = channel.unary_unary(METHOD)
        parent = Context(time.time_ns() - 1000, NEVER, 3, 2, 4)
        with serving(parent):
            reply = call(b"x", metadata=(("baggage", "k=v"),), timeout=30)
        outside = call(b"x", timeout=30)  # no current context: the server stamps it
    finally:
        server.stop(None)
    assert decode(reply).context == Context(parent.gat, NEVER, 3, 2, 5)
    assert seen[0][1]["baggage"].startswith("k=v,tailor=1.g")
    assert decode(outside).context.hop == 0 and seen[1][0].gat != parent.gat


def test_a_grpc_timeout_becomes_the_deadline_and_the_deadline_becomes_a_timeout():
    remaining = []

    def behaviour(request, rpc_context):
        remaining.append(rpc_context.time_remaining())
        return describe(current())

    server, target = sync_server(behaviour, [ServerInterceptor()])
    try:
        plain = grpc.insecure_channel(target).unary_unary(METHOD)
        before = time.time_ns()
        no_context = decode(plain(b"x", timeout=5.0)).context
        # A caller serving a request with a deadline 2 s away: with the opt-in, the call's
        # timeout is the time left, and the server reads it back as (about) the same deadline.
        forwarding = grpc.intercept_channel(grpc.insecure_channel(target), ClientInterceptor(timeout_from_deadline=True))
        parent_deadline = time.time_ns() + 2 * 10**9
        with serving(Context(time.time_ns(), parent_deadline)):
            carried = decode(forwarding.unary_unary(METHOD)(b"x", timeout=30)).context
    finally:
        server.stop(None)
    # grpc-timeout carries the time left rounded up to its unit, and the server adds it to its
    # own receive time: allow half a second over the caller's 5 s (a default or a lost timeout
    # would be far off either way).
    assert before + 4 * 10**9 < no_context.deadline <= time.time_ns() + 5_500_000_000
    assert carried.deadline == parent_deadline, "the context's own deadline wins when it is carried"
    # About 2 s (grpc-timeout rounds up, and the clocks move), far from the caller's 30 s.
    assert remaining[1] < 5.0, f"the 30 s timeout was cut to the deadline's 2 s: {remaining[1]}"


def test_sync_gate_orders_calls_by_gat_and_sheds_expired_ones_as_deadline_exceeded():
    gate = ThreadGate("orf", c=1)
    order, release = [], threading.Event()

    def behaviour(request, rpc_context):
        if current().gat == 1:
            release.wait(30)
        order.append(current().gat)
        return b""

    server, target = sync_server(behaviour, [ServerInterceptor(ContextConfig.hop(max_age_ns=2**63), gate)])
    try:
        call = grpc.insecure_channel(target).unary_unary(METHOD)
        base = time.time_ns()
        gats = [base - 5, base - 1, base - 4, base - 2, base - 3]
        def send(gat):
            call(b"", metadata=(("tailor-context", encode(Context(gat))),), timeout=30)

        send_in_order_behind_a_holder(gate, send, gats, release)
        now = time.time_ns()
        with pytest.raises(grpc.RpcError) as e:
            call(b"", metadata=(("tailor-context", encode(Context(now - 10**9, now - 10**6))),), timeout=30)
    finally:
        server.stop(None)
    assert order == [1] + sorted(gats)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert dict(e.value.trailing_metadata())["tailor-rejected"] == "deadline"


def test_aio_server_and_client_propagate_order_and_shed():
    async def main():
        gate = AsyncGate("orf", c=1)
        order, release = [], asyncio.Event()

        async def behaviour(request, rpc_context):
            if current().gat == 1:
                await release.wait()
            order.append(current().gat)
            return describe(current())

        server = grpc.aio.server(interceptors=[AioServerInterceptor(ContextConfig.hop(max_age_ns=2**63), gate)])
        handler = grpc.method_handlers_generic_handler(
            "tailor.test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(behaviour)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=aio_client_interceptors()) as ch:
                call = ch.unary_unary(METHOD)
                parent = Context(time.time_ns(), NEVER, 1, 1, 0)
                with serving(parent):
                    propagated = decode(await call(b"", timeout=30)).context

                async def with_gat(gat):
                    with serving(Context(gat)):  # the client interceptor sends its child
                        return await call(b"", timeout=30)

                holder = asyncio.ensure_future(with_gat(1))
                while gate.stats().admitted < 2:
                    await asyncio.sleep(0.001)
                base = time.time_ns()
                gats = [base - 5, base - 1, base - 4]
                tasks = []
                for i, gat in enumerate(gats):
                    tasks.append(asyncio.ensure_future(with_gat(gat)))
                    while gate.stats().waiting < i + 1:
                        await asyncio.sleep(0.001)
                release.set()
                await asyncio.gather(holder, *tasks)
                now = time.time_ns()
                with serving(Context(now - 10**9, now - 10**6)):
                    try:
                        await call(b"", timeout=30)
                        shed = None
                    except grpc.aio.AioRpcError as e:
                        shed = e
        finally:
            await server.stop(None)
        return propagated, parent, order, gats, shed

    propagated, parent, order, gats, shed = asyncio.run(main())
    assert propagated == parent.child()
    assert order[1:] == [1] + sorted(gats)
    assert shed is not None and shed.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert dict(shed.trailing_metadata())["tailor-rejected"] == "deadline"
