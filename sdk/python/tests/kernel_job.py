"""One request in a process of its own (a worker of a multi-process Python service):
``kernel_job.py TABLE|none CPU GAT_NS BURN_MS LEAD_MS``. Pins itself to CPU, attaches to
the table, prints ``ready``; on a ``go`` line registers its thread with that GAT (unless
TABLE is ``none``), burns BURN_MS of its own CPU time, printing ``started <priority>`` after the
first LEAD_MS of it, leaves, and prints
``done <CLOCK_MONOTONIC ns when the work ended> <policy> <priority>`` (the policy after
the restore)."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailor_context import Context  # noqa: E402
from tailor_context.kernel import KernelRegistrar  # noqa: E402


def main():
    table, cpu, gat, burn_ms, lead_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    os.sched_setaffinity(0, {cpu})
    registrar = None if table == "none" else KernelRegistrar(table)
    if registrar is not None and not registrar.active:
        print(f"error {registrar.reason}", flush=True)
        return
    if registrar is not None:
        # As a server's accepting thread: above every job, so it can take the request and
        # register it while a registered job keeps this CPU busy.
        assert registrar.io_thread_started()
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    token = registrar.enter(Context(gat)) if registrar else None
    start = time.thread_time_ns()
    lead, end = start + int(lead_ms * 1e6), start + int(burn_ms * 1e6)
    while time.thread_time_ns() < lead:
        pass
    print(f"started {os.sched_getparam(0).sched_priority}", flush=True)
    while time.thread_time_ns() < end:
        pass
    # Finished when the work is: after leave() this thread is back at SCHED_OTHER and
    # waits for the CPU like any other, which says nothing about the order.
    done = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    if registrar:
        registrar.leave(token)
        registrar.io_thread_stopped()
    print(f"done {done} {os.sched_getscheduler(0)} {os.sched_getparam(0).sched_priority}", flush=True)


main()
