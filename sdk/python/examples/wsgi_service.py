"""A minimal WSGI service with Tailor on a threaded server (waitress), ordered by the
node's kernel scheduler when a `tailor agent --enforce priority` runs, else by the gate.

    pip install waitress requests        # or: pip install -e 'sdk/python[requests]' waitress
    sudo tailor agent --enforce priority --policy gfifo &   # optional: kernel-enforced order
    python3 sdk/python/examples/wsgi_service.py --port 8001 [--table /dev/shm/tailor-sched]
    curl -i -H 'tailor-context: 1.g1732272000123456789.c0.k1.h0' http://127.0.0.1:8001/

Without the agent (or without root) the registrar says why once and the thread gate
orders the handlers instead.
"""

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tailor_context import encode  # noqa: E402
from tailor_context.gate import ThreadGate  # noqa: E402
from tailor_context.kernel import DEFAULT_TABLE, KernelRegistrar  # noqa: E402
from tailor_context.propagation import ContextConfig, current  # noqa: E402
from tailor_context.wsgi import TailorWSGI  # noqa: E402


def app(environ, start_response):
    end = time.thread_time() + 0.001
    while time.thread_time() < end:  # stands for 1 ms of CPU-bound work
        pass
    body = f"context {encode(current())}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def main():
    logging.basicConfig(level=logging.INFO)
    p = argparse.ArgumentParser(description="a minimal Tailor WSGI service")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--c", type=int, default=2, help="the fallback gate's handlers at once")
    p.add_argument("--table", default=DEFAULT_TABLE, help="the node agent's table")
    a = p.parse_args()
    gate = KernelRegistrar(a.table, fallback=ThreadGate("orf", c=a.c))
    logging.info("ordering: %s", "kernel (key ordering)" if gate.active else f"thread gate ({gate.reason})")

    import waitress

    waitress.serve(TailorWSGI(app, ContextConfig.hop(), gate=gate), host="127.0.0.1", port=a.port, threads=a.threads)


if __name__ == "__main__":
    main()
