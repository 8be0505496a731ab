"""Does kernel registration help a threaded Python server? p50/p99 side by side.

    sudo target/release/tailor agent --table /dev/shm/tailor-bench --enforce priority --policy gfifo &
    sudo python3 sdk/python/bench/gil_priority.py --table /dev/shm/tailor-bench [--seconds 8] [--rho 0.7]

A threaded server in one process, as waitress runs one: ``--threads`` worker threads
take requests from one FIFO queue; an open-loop generator sends Poisson arrivals (mean
service ``--service-ms``) at utilisation ``--rho`` of ONE CPU; each request's GAT is its
arrival time and its latency is completion minus arrival. Two kinds of handler work:

- ``python``: pure-Python CPU work, which holds the GIL: only one handler runs at a time
  whatever the kernel does, and who runs next is whoever gets the GIL next;
- ``native``: CPU work in C that releases the GIL (hashlib over a large buffer), so
  handlers really run in parallel and the kernel's order decides.

Each under three orderings: ``none`` (Linux default), ``gate`` (the thread gate, orf,
c = 1 for python and CPUs for native) and ``kernel`` (registration with the node's
table; the worker threads wait at IO_PRIORITY like the Rust runtime's). Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import queue
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailor_context import Context  # noqa: E402
from tailor_context.gate import ThreadGate, default_c  # noqa: E402
from tailor_context.kernel import KernelRegistrar  # noqa: E402

BUF = os.urandom(1 << 16)


def burn_python(ns):
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def burn_native(ns):
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        hashlib.sha256(BUF).digest()  # releases the GIL for buffers over 2 KiB


def run(kind, ordering, a, table):
    rng = random.Random(a.seed)
    burn = burn_python if kind == "python" else burn_native
    mean_ns = a.service_ms * 1e6
    if ordering == "gate":
        gate = ThreadGate("orf", c=1 if kind == "python" else default_c())
    elif ordering == "kernel":
        gate = KernelRegistrar(table)
        if not gate.active:
            return None
    else:
        gate = None
    q: queue.Queue = queue.Queue()
    latencies = []
    lock = threading.Lock()

    def worker():
        if ordering == "kernel":
            gate.io_thread_started()
        while True:
            item = q.get()
            if item is None:
                break
            arrival_mono, gat, demand = item
            if gate is None:
                burn(demand)
            else:
                with gate.admit(Context(gat)):
                    burn(demand)
            done = time.monotonic_ns()
            with lock:
                latencies.append(done - arrival_mono)
        if ordering == "kernel":
            gate.io_thread_stopped()

    workers = [threading.Thread(target=worker) for _ in range(a.threads)]
    for w in workers:
        w.start()
    rate = a.rho / mean_ns  # arrivals per ns on one CPU's worth of service
    start = time.monotonic_ns()
    next_at = start
    sent = 0
    while next_at - start < a.seconds * 1e9:
        next_at += int(rng.expovariate(rate))
        delay = (next_at - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        q.put((next_at, time.time_ns() - (time.monotonic_ns() - next_at), int(rng.expovariate(1 / mean_ns))))
        sent += 1
    for _ in workers:
        q.put(None)
    for w in workers:
        w.join()
    lat = sorted(latencies)
    assert len(lat) == sent
    p = lambda q_: lat[min(int(q_ * len(lat)), len(lat) - 1)] / 1e6  # noqa: E731
    return len(lat), statistics.median(lat) / 1e6, p(0.99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", help="a running `tailor agent --enforce priority` table (else the kernel rows are skipped)")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rho", type=float, default=0.7)
    ap.add_argument("--service-ms", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="python,native")
    a = ap.parse_args()
    print(f"{a.threads} worker threads, Exp service mean {a.service_ms} ms, rho {a.rho} of one CPU, {a.seconds} s per row, seed {a.seed}\n")
    print("| handler work | ordering | requests | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for kind in a.kinds.split(","):
        for ordering in ("none", "gate", "kernel"):
            r = run(kind, ordering, a, a.table) if (ordering != "kernel" or a.table) else None
            if r is None:
                print(f"| {kind} | {ordering} | skipped (no --table / agent) | | |")
                continue
            n, p50, p99 = r
            print(f"| {kind} | {ordering} | {n} | {p50:.2f} | {p99:.2f} |", flush=True)


if __name__ == "__main__":
    main()
