"""A plain Python service for the proxy benchmark (docs/proxy.md): stdlib only, it knows
nothing of Tailor. ``--workers`` processes (pre-forked, sharing one listening socket, as
gunicorn's workers do, so the GIL does not make it one CPU) each run a
ThreadingHTTPServer. Each request burns the CPU it asks for (value ``--index`` of the
``tailor-demand-us`` header, µs) and, with ``--downstream``, then calls the next tier
forwarding only the W3C ``baggage`` header (and the benchmark's demand header). The reply
body is one line per tier, this tier's first:
``tier <index> seq <order this worker started serving it> baggage <baggage it got>``.

A kept-alive connection stays with the worker that accepted it, and the requests inside one
worker take turns on its GIL (5 ms slices): ``--trace FILE`` (or the environment's
``PLAIN_PYTHON_TRACE``, to trace a benchmark's chain) appends one line per request to FILE,
``pid start_ns burn_wall_ns burn_cpu_ns handler_wall_ns in_worker downstream_ns``: times
from CLOCK_MONOTONIC (the handler's, from the request read to the response written),
``in_worker`` the requests inside this worker when it started (itself included),
``downstream_ns`` the wall time of the call to the next tier. docs/results/proxy.md
(Effect) reads it.
"""

import argparse
import http.client
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEMAND_HEADER = "tailor-demand-us"


def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:  # this thread's CPU time
        pass


def demand_of(value, index):
    parts = (value or "").split(",")
    try:
        return int(parts[index].strip()) / 1e6 if index < len(parts) else 0.0
    except ValueError:
        return 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--downstream", default="", help="http://host:port/ of the next tier (the sidecar's egress)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--trace", default=os.environ.get("PLAIN_PYTHON_TRACE", ""), help="append a line per request here")
    args = p.parse_args()
    trace = None  # opened in each worker (O_APPEND: every line is one write, whole)
    inside = [0]  # requests inside this worker now
    down = urllib.parse.urlsplit(args.downstream) if args.downstream else None
    local = threading.local()
    seq = iter(range(1, 1 << 62))
    seq_lock = threading.Lock()

    def call_down(headers):
        for attempt in (0, 1):  # a kept-alive connection the peer closed: reconnect once
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(down.hostname, down.port, timeout=30)
            try:
                conn.request("GET", down.path or "/", headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                local.conn = None
                if attempt:
                    raise

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The response goes out in two writes (headers, then body); with Nagle on, the body
        # waits for the ACK of the headers, which the caller delays by up to 40 ms on a
        # kept-alive connection: every request of the chain paid it (p50 42 ms at zero demand).
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def do_GET(self):
            start = time.monotonic_ns()
            with seq_lock:
                n = next(seq)
                inside[0] += 1
                in_worker = inside[0]
            demand_header = self.headers.get(DEMAND_HEADER)
            cpu0 = time.thread_time_ns()
            burn(demand_of(demand_header, args.index))
            burnt = time.monotonic_ns()
            cpu = time.thread_time_ns() - cpu0
            baggage = self.headers.get("baggage")
            body = f"tier {args.index} seq {n} baggage {baggage or ''}\n".encode()
            status = 200
            down_start = time.monotonic_ns()
            if down is not None:
                headers = {DEMAND_HEADER: demand_header or ""}
                if baggage:
                    headers["baggage"] = baggage
                try:
                    status, below = call_down(headers)
                except (http.client.HTTPException, OSError) as e:
                    status, below = 502, f"downstream: {e}\n".encode()
                body += below
            down_wall = time.monotonic_ns() - down_start
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with seq_lock:
                inside[0] -= 1
            if trace is not None:
                end = time.monotonic_ns()
                line = f"{os.getpid()} {start} {burnt - start} {cpu} {end - start} {in_worker} {down_wall}\n"
                os.write(trace, line.encode())

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    children = []
    for _ in range(max(1, args.workers)):
        pid = os.fork()
        if pid == 0:
            try:  # die with the parent, even if it is killed with SIGKILL
                import ctypes

                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
            if args.trace:
                trace = os.open(args.trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
            server.socket.close()
            server.socket = sock
            server.daemon_threads = True
            server.serve_forever()
            os._exit(0)
        children.append(pid)

    def stop(*_):
        for c in children:
            try:
                os.kill(c, signal.SIGTERM)
            except ProcessLookupError:
                pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"plain-python tier {args.index} listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    for c in children:
        os.waitpid(c, 0)


if __name__ == "__main__":
    main()
