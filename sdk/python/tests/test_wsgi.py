"""WSGI middleware under a real threaded WSGI server (waitress) on loopback: an edge
calling a hop through an instrumented requests.Session, the thread gate's order under
contention, shedding with 503 + tailor-rejected, and the slot held while a streamed
response is iterated."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("waitress", reason="pip install waitress (CI installs it: .ci/run)")
requests = pytest.importorskip("requests", reason="pip install requests")

from tailor_context import NEVER, Context, EdgeRoute, decode, encode
from tailor_context.clients import instrument_requests
from tailor_context.gate import ThreadGate
from tailor_context.propagation import ContextConfig, current
from tailor_context.wsgi import ENVIRON_KEY, TailorWSGI

from servers import send_in_order_behind_a_holder, waitress_server, wait_until


def ok(start_response, body=b"ok"):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def test_an_edge_calls_a_hop_through_requests_and_the_hop_sees_the_same_gat():
    hop_seen = []

    def hop(environ, start_response):
        hop_seen.append((environ[ENVIRON_KEY], environ.get("HTTP_BAGGAGE")))
        return ok(start_response)

    session = instrument_requests(requests.Session())

    with waitress_server(TailorWSGI(hop)) as hop_url:

        def edge(environ, start_response):
            ctx = environ[ENVIRON_KEY]
            assert current() == ctx
            assert decode(environ["HTTP_TAILOR_CONTEXT"]).context == ctx, "the app sees the edge's stamp"
            r = session.get(hop_url, headers={"baggage": "userId=bob", "tailor-context": "1.g1.c0.k1.h0"})
            return ok(start_response, f"{ctx.gat} {r.status_code}".encode())

        with waitress_server(TailorWSGI(edge, ContextConfig.edge_of(EdgeRoute(class_=2)))) as edge_url:
            r = requests.get(edge_url, headers={"tailor-context": "1.g5.c0.k1.h0"})
    gat, status = map(int, r.text.split())
    assert status == 200 and gat != 5 and abs(gat - time.time_ns()) < 60 * 10**9
    ctx, baggage = hop_seen[0]
    assert ctx == Context(gat, NEVER, 2, 1, 1), "the caller's own tailor-context was replaced by the child"
    assert baggage.startswith("userId=bob,tailor=1.g")
    # Outside a request, nothing is injected.
    assert current() is None


def test_the_thread_gate_orders_requests_by_gat_under_contention_over_waitress():
    gate = ThreadGate("orf", c=1)
    order, release = [], threading.Event()

    def app(environ, start_response):
        ctx = environ[ENVIRON_KEY]
        if ctx.gat == 1:
            release.wait(30)
        order.append(ctx.gat)
        return ok(start_response)

    base = time.time_ns()
    gats = [base - 50, base - 10, base - 40, base - 20, base - 30]
    statuses = []
    with waitress_server(TailorWSGI(app, ContextConfig.hop(max_age_ns=2**63), gate=gate), threads=8) as url:

        def get(gat):
            statuses.append(requests.get(url, headers={"tailor-context": encode(Context(gat))}, timeout=30).status_code)

        send_in_order_behind_a_holder(gate, get, gats, release)
    assert order == [1] + sorted(gats)
    assert statuses == [200] * 6
    s = gate.stats()
    assert (s.max_running, s.completed, s.running) == (1, 6, 0)


def test_shed_requests_get_503_and_the_reason_over_waitress():
    gate = ThreadGate("edf", c=1, max_queue=0)
    entered, release = threading.Event(), threading.Event()

    def app(environ, start_response):
        entered.set()
        release.wait(30)
        return ok(start_response)

    now = time.time_ns()
    with waitress_server(TailorWSGI(app, gate=gate)) as url:
        late = requests.get(url, headers={"tailor-context": encode(Context(now - 10**9, now - 10**6))})
        holder = threading.Thread(target=requests.get, args=(url,))
        holder.start()
        entered.wait(30)
        full = requests.get(url)  # max_queue 0: no waiting at all
        release.set()
        holder.join()
    assert (late.status_code, late.headers["tailor-rejected"]) == (503, "deadline")
    assert (full.status_code, full.headers["tailor-rejected"]) == (503, "queue_full")
    assert gate.stats().running == 0


def test_the_slot_is_held_until_a_streamed_response_is_closed():
    gate = ThreadGate("orf", c=1)
    inside = []

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            for i in range(3):
                inside.append(gate.stats().running)
                yield b"x"

        return body()

    with waitress_server(TailorWSGI(app, gate=gate)) as url:
        assert requests.get(url).text == "xxx"
        wait_until("the slot to be freed", lambda: gate.stats().running == 0)
    assert inside == [1, 1, 1]
