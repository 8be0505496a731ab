"""Per-request cost of the Python middleware, side by side with the same app without it.

    python3 sdk/python/bench/overhead.py [--requests 20000] [--repeats 7] [--table /dev/shm/tailor-sched]

For ASGI and WSGI, runs the same trivial app bare and wrapped (extract + clamp + gate, no
contention: the gate always has a free slot), calling it in-process as a server would, so
the difference is the middleware and nothing else; the medians of ``--repeats`` runs of
``--requests`` requests each, in µs of this thread's CPU time per request (CPU time, not
wall time: on a shared machine wall time counts every other process's turn on the CPU;
the middleware never sleeps or waits without contention, so its cost is CPU time). With ``--table`` (a running ``tailor agent
--enforce priority``), also the cost of kernel registration per request (claim, level,
restore: two sched_setscheduler calls). Prints a markdown table (docs/sdk-python.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailor_context import Context, encode  # noqa: E402
from tailor_context.asgi import TailorASGI  # noqa: E402
from tailor_context.gate import AsyncGate, ThreadGate  # noqa: E402
from tailor_context.propagation import ContextConfig  # noqa: E402
from tailor_context.wsgi import TailorWSGI  # noqa: E402

CTX = encode(Context(time.time_ns(), time.time_ns() + 10**12, 1, 1, 2))
BAGGAGE = f"userId=alice,tailor={CTX},region=eu"


async def asgi_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def wsgi_app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def time_asgi(app, n):
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"host", b"svc"), (b"tailor-context", CTX.encode()), (b"baggage", BAGGAGE.encode())],
    }

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        pass

    async def run():
        start = time.thread_time_ns()
        for _ in range(n):
            await app(scope, receive, send)
        return (time.thread_time_ns() - start) / n / 1e3

    return asyncio.run(run())


def time_wsgi(app, n):
    base = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_HOST": "svc", "HTTP_TAILOR_CONTEXT": CTX, "HTTP_BAGGAGE": BAGGAGE}

    def start_response(status, headers):
        pass

    start = time.thread_time_ns()
    for _ in range(n):
        result = app(dict(base), start_response)
        for _chunk in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return (time.thread_time_ns() - start) / n / 1e3


def time_kernel(table, n):
    from tailor_context.kernel import KernelRegistrar

    registrar = KernelRegistrar(table)
    if not registrar.active:
        raise SystemExit(f"--table {table}: {registrar.reason}")
    ctx = Context(time.time_ns())
    start = time.thread_time_ns()
    for _ in range(n):
        registrar.leave(registrar.enter(ctx))
    return (time.thread_time_ns() - start) / n / 1e3


def median_of(repeats, f):
    """(best, median) of ``repeats`` runs: the best is the least disturbed by neighbours."""
    runs = [f() for _ in range(repeats)]
    return min(runs), statistics.median(runs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--table", help="a running `tailor agent --enforce priority` table: also time kernel registration")
    a = p.parse_args()
    n, r = a.requests, a.repeats
    rows = []
    bare = median_of(r, lambda: time_asgi(asgi_app, n))
    ctx_only = median_of(r, lambda: time_asgi(TailorASGI(asgi_app, ContextConfig.hop()), n))
    gated = median_of(r, lambda: time_asgi(TailorASGI(asgi_app, ContextConfig.hop(), gate=AsyncGate("orf", c=4)), n))
    rows += [("ASGI", bare, ctx_only, gated)]
    bare = median_of(r, lambda: time_wsgi(wsgi_app, n))
    ctx_only = median_of(r, lambda: time_wsgi(TailorWSGI(wsgi_app, ContextConfig.hop()), n))
    gated = median_of(r, lambda: time_wsgi(TailorWSGI(wsgi_app, ContextConfig.hop(), gate=ThreadGate("orf", c=4)), n))
    rows += [("WSGI", bare, ctx_only, gated)]
    print(f"Python {sys.version.split()[0]}, {n} requests x {r} runs, µs of CPU per request: best / median of the runs\n")
    print("| app | bare | + context (extract, clamp) | + context + gate | middleware overhead |")
    print("|---|---|---|---|---|")
    for name, b, c, g in rows:
        print(f"| {name} | {b[0]:.2f} / {b[1]:.2f} | {c[0]:.2f} / {c[1]:.2f} | {g[0]:.2f} / {g[1]:.2f} | **{g[0] - b[0]:.2f} / {g[1] - b[1]:.2f}** |")
    if a.table:
        k = median_of(r, lambda: time_kernel(a.table, max(n // 10, 100)))
        print(f"\nKernel registration (enter + leave, no contention): {k[0]:.1f} / {k[1]:.1f} µs per request (best / median)")


if __name__ == "__main__":
    main()
