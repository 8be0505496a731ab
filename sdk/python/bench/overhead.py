"""Per-request cost of the Python middleware, side by side with the same app without it.

    python3 sdk/python/bench/overhead.py [--requests 20000] [--repeats 7] [--table /dev/shm/tailor-sched]
    python3 sdk/python/bench/overhead.py --compare REV [--requests 20000] [--repeats 7]

For ASGI and WSGI, runs the same trivial app bare and wrapped (extract + clamp + gate, no
contention: the gate always has a free slot), calling it in-process as a server would, so
the difference is the middleware and nothing else; the medians of ``--repeats`` runs of
``--requests`` requests each, in µs of this thread's CPU time per request (CPU time, not
wall time: on a shared machine wall time counts every other process's turn on the CPU;
the middleware never sleeps or waits without contention, so its cost is CPU time). With ``--table`` (a running ``tailor agent
--enforce priority``), also the cost of kernel registration per request (claim, level,
restore: two sched_setscheduler calls). Prints a markdown table (docs/sdk-python.md).

``--compare REV`` measures the package as it was at git revision REV side by side with
this checkout's: each repetition runs both, in alternating order, each in a fresh
process, so both see the same machine load; it prints both overheads and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

# `--lib DIR`: import tailor_context from DIR (the --compare children), else this checkout.
_LIB = sys.argv[sys.argv.index("--lib") + 1] if "--lib" in sys.argv else str(Path(__file__).resolve().parents[1])
sys.path.insert(0, _LIB)

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


def one_run(n):
    """One run of every variant: {app: [bare, context, context + gate]} in µs per request."""
    return {
        "ASGI": [
            time_asgi(asgi_app, n),
            time_asgi(TailorASGI(asgi_app, ContextConfig.hop()), n),
            time_asgi(TailorASGI(asgi_app, ContextConfig.hop(), gate=AsyncGate("orf", c=4)), n),
        ],
        "WSGI": [
            time_wsgi(wsgi_app, n),
            time_wsgi(TailorWSGI(wsgi_app, ContextConfig.hop()), n),
            time_wsgi(TailorWSGI(wsgi_app, ContextConfig.hop(), gate=ThreadGate("orf", c=4)), n),
        ],
    }


def compare(rev, n, repeats):
    """This checkout's middleware against the one at ``rev``, interleaved (module doc)."""
    import json
    import subprocess
    import tempfile

    repo = Path(__file__).resolve().parents[3]
    old = tempfile.mkdtemp(prefix="tailor-overhead-")
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "sdk/python/tailor_context"], capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--compare {rev}: git archive failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
    libs = {rev: str(Path(old) / "sdk/python"), "this checkout": str(Path(__file__).resolve().parents[1])}
    runs = {label: [] for label in libs}
    for i in range(repeats):
        for label in list(libs) if i % 2 == 0 else list(libs)[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, "--lib", libs[label], "--json", "--requests", str(n)], capture_output=True, text=True, check=True
            )
            runs[label].append(json.loads(out.stdout))
    print(f"Python {sys.version.split()[0]}, {n} requests x {repeats} interleaved runs each, µs of CPU per request: best / median of the runs\n")
    print(f"| app | bare | overhead at {rev} | overhead now | now / before (median) |")
    print("|---|---|---|---|---|")
    for app in ("ASGI", "WSGI"):
        over = {label: [r[app][2] - r[app][0] for r in rs] for label, rs in runs.items()}
        bare = [r[app][0] for rs in runs.values() for r in rs]
        before, now = over[rev], over["this checkout"]
        ratio = statistics.median(now) / statistics.median(before)
        print(
            f"| {app} | {min(bare):.2f} / {statistics.median(bare):.2f} | {min(before):.2f} / {statistics.median(before):.2f} "
            f"| **{min(now):.2f} / {statistics.median(now):.2f}** | {ratio:.2f} |"
        )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--table", help="a running `tailor agent --enforce priority` table: also time kernel registration")
    p.add_argument("--compare", metavar="REV", help="also measure the package at git revision REV, interleaved (module doc)")
    p.add_argument("--lib", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    n, r = a.requests, a.repeats
    if a.json:
        import json

        print(json.dumps(one_run(n)))
        return
    if a.compare:
        compare(a.compare, n, r)
        return
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
