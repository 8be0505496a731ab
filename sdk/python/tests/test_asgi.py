"""ASGI middleware: raw ASGI scopes (bytes headers, as servers give them), then real
uvicorn servers on loopback: a Starlette edge calling a plain-ASGI hop through httpx,
gate ordering under contention, and shedding with 503 + tailor-rejected."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tailor_context import NEVER, Context, EdgeRoute, decode, decode_baggage, encode
from tailor_context.asgi import SCOPE_KEY, TailorASGI
from tailor_context.gate import AsyncGate
from tailor_context.propagation import ContextConfig, current

from servers import send_in_order_behind_a_holder, uvicorn_server

NOW = 1_732_272_000_000_000_000


def recording_app(seen):
    async def app(scope, receive, send):
        seen.append((scope[SCOPE_KEY], current(), dict(scope["headers"])))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def call(app, headers):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": headers}
    asyncio.run(app(scope, receive, send))
    return sent


def test_raw_scope_bytes_headers_are_read_and_clamped():
    seen = []
    config = ContextConfig.hop(max_age_ns=10**9)
    app = TailorASGI(recording_app(seen), config, clock=lambda: NOW)
    # Header names as raw ASGI bytes: the bug this fixes treated them as absent.
    call(app, [(b"tailor-context", b"1.g%d.c2.k4.h1" % (NOW - 5)), (b"host", b"x")])
    # Too old: clamped to now - max_age.
    call(app, [(b"baggage", b"a=1,tailor=1.g%d.c0.k1.h3" % (NOW - 5 * 10**9))])
    call(app, [])
    call(app, [(b"tailor-context", b"garbage:")])
    got = [s[0] for s in seen]
    assert got[0] == Context(NOW - 5, NEVER, 2, 4, 1)
    assert got[1] == Context(NOW - 10**9, NEVER, 0, 1, 3)
    assert got[2] == Context.stamped(NOW) and got[3] == Context.stamped(NOW)
    assert all(scope_ctx == cur for scope_ctx, cur, _ in seen), "current() is the scope's context"
    assert (config.stats.accepted, config.stats.absent) == (2, 1)
    assert dict(config.stats.rejected())["invalid_char"] == 1
    assert dict(config.stats.clamped())["gat_stale"] == 1
    assert current() is None, "the context does not leak out of the request"


def test_raw_scope_at_the_edge_strips_and_restamps_every_carrier():
    seen = []
    route = EdgeRoute(class_=1, budget=2_000_000)
    app = TailorASGI(recording_app(seen), ContextConfig.edge_of(route), clock=lambda: NOW)
    call(app, [(b"tailor-context", b"1.g5.c0.k1.h0"), (b"baggage", b"u=alice,tailor=1.g5.c0.k1.h0"), (b"x", b"y")])
    ctx, _, headers = seen[0]
    assert ctx == Context(NOW, NOW + 2_000_000, 1)
    assert decode(headers[b"tailor-context"]).context == ctx
    assert headers[b"baggage"].startswith(b"u=alice,tailor=")
    assert decode_baggage(headers[b"baggage"]).context == ctx
    assert headers[b"x"] == b"y"


def test_non_http_scopes_pass_through():
    got = []

    async def app(scope, receive, send):
        got.append(scope)

    asyncio.run(TailorASGI(app)({"type": "lifespan"}, None, None))
    assert got == [{"type": "lifespan"}]


def test_a_starlette_edge_calls_a_plain_asgi_hop_over_uvicorn_with_the_same_gat():
    httpx = pytest.importorskip("httpx", reason="pip install httpx")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    pytest.importorskip("starlette", reason="pip install starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tailor_context.clients import httpx_async_request_hook

    hop_seen = []
    hop = TailorASGI(recording_app(hop_seen), ContextConfig.hop())
    with uvicorn_server(hop) as hop_url:

        async def edge_handler(request):
            async with httpx.AsyncClient(event_hooks={"request": [httpx_async_request_hook]}) as client:
                r = await client.get(hop_url, headers={"baggage": "userId=alice"})
            mine = request.scope[SCOPE_KEY]
            return JSONResponse({"gat": str(mine.gat), "hop_status": r.status_code})

        edge = TailorASGI(Starlette(routes=[Route("/", edge_handler)]), ContextConfig.edge_of(EdgeRoute()))
        with uvicorn_server(edge) as edge_url:
            # A client's forged context is stripped at the edge.
            r = httpx.get(edge_url, headers={"tailor-context": "1.g5.c0.k1.h0"})
    assert r.status_code == 200 and r.json()["hop_status"] == 200
    gat = int(r.json()["gat"])
    assert gat != 5 and abs(gat - time.time_ns()) < 60 * 10**9
    ctx, _, headers = hop_seen[0]
    assert ctx == Context(gat, NEVER, 0, 1, 1), "the hop sees the edge's GAT, one hop further"
    assert headers[b"baggage"].decode().startswith("userId=alice,tailor=1.g")


def test_the_gate_orders_requests_by_gat_under_contention_over_uvicorn():
    httpx = pytest.importorskip("httpx", reason="pip install httpx")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    gate = AsyncGate("orf", c=1)
    order, release = [], threading.Event()

    async def app(scope, receive, send):
        ctx = current()
        if ctx.gat == 1:  # the holder: keeps the only slot until released
            while not release.is_set():
                await asyncio.sleep(0.001)
        order.append(ctx.gat)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gats = [NOW + 50, NOW + 10, NOW + 40, NOW + 20, NOW + 30]
    results = {}
    with uvicorn_server(TailorASGI(app, ContextConfig.hop(max_age_ns=2**63), gate=gate, clock=lambda: NOW + 100)) as url:

        def get(gat):
            results[gat] = httpx.get(url, headers={"tailor-context": encode(Context(gat))}, timeout=30).status_code

        send_in_order_behind_a_holder(gate, get, gats, release)
    assert order == [1] + sorted(gats)
    assert set(results.values()) == {200}
    assert gate.stats().max_running == 1


def test_a_request_past_its_deadline_gets_503_with_the_reason_over_uvicorn():
    httpx = pytest.importorskip("httpx", reason="pip install httpx")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    seen = []
    app = TailorASGI(recording_app(seen), ContextConfig.hop(), gate=AsyncGate("edf", c=2))
    now = time.time_ns()
    with uvicorn_server(app) as url:
        late = httpx.get(url, headers={"tailor-context": encode(Context(now - 10**9, now - 10**6))})
        fine = httpx.get(url, headers={"tailor-context": encode(Context(now, now + 60 * 10**9))})
    assert late.status_code == 503 and late.headers["tailor-rejected"] == "deadline"
    assert "deadline" in late.text
    assert fine.status_code == 200 and len(seen) == 1
