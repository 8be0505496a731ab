"""A minimal WSGI service with Tailor on a threaded server (waitress), ordered by the
node's kernel scheduler when a `tailor agent --enforce priority` runs, else by the gate.

    pip install waitress                 # or: pip install -e 'sdk/python[examples]'
    sudo tailor agent --enforce priority --policy gfifo &   # optional: kernel-enforced order
    python3 sdk/python/examples/wsgi_service.py --port 8001 [--table /dev/shm/tailor-sched] [--downstream http://127.0.0.1:8002/]
    curl -i -H 'tailor-context: 1.g1732272000123456789.c0.k1.h0' http://127.0.0.1:8001/

Each request burns the CPU it carries (value --index of the ``tailor-demand-us`` header,
µs; 1 ms without it) in its turn, then calls --downstream with the child context. The
turn (gate or kernel registration) covers the CPU work only, not the wait for the next
tier. The reply's ``tailor-seen-gat`` header lists the GAT this tier saw, then the next
tier's. Without the agent (or without root) the registrar says why once and the thread
gate orders the handlers instead (``--ordering gate`` always, ``none`` never).
"""

import argparse
import http.client
import logging
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tailor_context import encode  # noqa: E402
from tailor_context.gate import Shed, ThreadGate  # noqa: E402
from tailor_context.kernel import DEFAULT_TABLE, KernelRegistrar  # noqa: E402
from tailor_context.propagation import ContextConfig, current, inject  # noqa: E402
from tailor_context.wsgi import REJECTED_HEADER, TailorWSGI  # noqa: E402

DEMAND_ENV = "HTTP_TAILOR_DEMAND_US"  # the demo chain's per-tier CPU demand header
SEEN_GAT = "tailor-seen-gat"


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:  # CPU-bound work (this thread's CPU time)
        pass


def demand_of(environ, index):
    """This tier's CPU demand (s): value ``index`` of tailor-demand-us, else 1 ms."""
    header = environ.get(DEMAND_ENV)
    if header is None:
        return 0.001
    fields = header.split(",")
    if index >= len(fields):
        raise ValueError(f"header tailor-demand-us: {header!r} has no value for tier {index}; give one µs value per tier")
    try:
        return int(fields[index]) / 1e6
    except ValueError:
        raise ValueError(f"header tailor-demand-us: {fields[index]!r} (tier {index}) is not a whole number of µs") from None


class Downstream:
    """Keep-alive calls to the next tier, one connection per server thread; each call
    carries the child of the context being served."""

    def __init__(self, url):
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port or 80, parts.path or "/"
        self.local = threading.local()

    def get(self, headers):
        inject(headers)
        for attempt in (0, 1):  # a kept-alive connection the server closed: retry once on a new one
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request("GET", self.path, headers=headers)
                r = conn.getresponse()
                return r.status, r.getheader(SEEN_GAT), r.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise


def make_app(turn, index, downstream):
    def app(environ, start_response):
        try:
            demand = demand_of(environ, index)
        except ValueError as e:
            body = f"{e}\n".encode()
            start_response("400 Bad Request", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        ctx = current()
        if turn is None:
            burn(demand)
        else:
            try:
                with turn.admit(ctx):
                    burn(demand)
            except Shed as shed:
                body = f"shed: {shed.detail}\n".encode()
                start_response("503 Service Unavailable", [(REJECTED_HEADER, shed.reason), ("Content-Length", str(len(body)))])
                return [body]
        seen = str(ctx.gat)
        body = f"context {encode(ctx)}\n".encode()
        if downstream is not None:
            headers = {"tailor-demand-us": environ[DEMAND_ENV]} if DEMAND_ENV in environ else {}
            status, below, text = downstream.get(headers)
            if status != 200:
                body = f"downstream: status {status}: ".encode() + text
                start_response("502 Bad Gateway", [("Content-Length", str(len(body)))])
                return [body]
            if below:
                seen += "," + below
            body = text + body
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), (SEEN_GAT, seen)])
        return [body]

    return app


def main():
    logging.basicConfig(level=logging.INFO)
    p = argparse.ArgumentParser(description="a minimal Tailor WSGI service")
    p.add_argument("--port", type=int, default=8001, help="0: any free port (printed)")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--ordering", choices=["kernel", "gate", "none"], default="kernel", help="kernel: register with the agent, else the gate")
    p.add_argument("--c", type=int, default=2, help="the gate's handlers at once")
    p.add_argument("--table", default=DEFAULT_TABLE, help="the node agent's table")
    p.add_argument("--index", type=int, default=0, help="which value of tailor-demand-us is this tier's demand")
    p.add_argument("--downstream", help="the next tier's URL")
    p.add_argument(
        "--switch-interval-ms",
        type=float,
        default=5.0,
        help="sys.setswitchinterval: how long a CPU-bound handler keeps the GIL while the server's I/O thread waits for it",
    )
    a = p.parse_args()
    sys.setswitchinterval(a.switch_interval_ms / 1000)
    turn = None
    if a.ordering == "gate":
        turn = ThreadGate("orf", c=a.c)
    elif a.ordering == "kernel":
        turn = KernelRegistrar(a.table, fallback=ThreadGate("orf", c=a.c))
        logging.info("ordering: %s", "kernel (key ordering)" if turn.active else f"thread gate ({turn.reason})")
    app = make_app(turn, a.index, Downstream(a.downstream) if a.downstream else None)

    import waitress

    server = waitress.create_server(TailorWSGI(app, ContextConfig.hop()), host="127.0.0.1", port=a.port, threads=a.threads)
    print(f"listening on 127.0.0.1:{server.effective_port}", flush=True)
    server.run()


if __name__ == "__main__":
    main()
