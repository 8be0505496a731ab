"""A worker in a PID namespace of its own (run under ``unshare --pid --fork --mount-proc``,
as a pod without hostPID): ``kernel_ns_job.py TABLE GAT_NS``. Registers its thread with
the host agent's TABLE, prints ``running <pid> <tid> <policy> <priority>`` (ids as this
namespace numbers them), waits for a line on stdin (the host stops the agent meanwhile),
then prints ``after <policy> <priority>`` and leaves."""

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailor_context import Context  # noqa: E402
from tailor_context.kernel import KernelRegistrar  # noqa: E402


def main():
    table, gat = sys.argv[1], int(sys.argv[2])
    registrar = KernelRegistrar(table)
    if not registrar.active:
        print(f"error {registrar.reason}", flush=True)
        return
    token = registrar.enter(Context(gat))
    tid = threading.get_native_id()
    print(f"running {os.getpid()} {tid} {os.sched_getscheduler(0)} {os.sched_getparam(0).sched_priority}", flush=True)
    sys.stdin.readline()
    print(f"after {os.sched_getscheduler(0)} {os.sched_getparam(0).sched_priority}", flush=True)
    registrar.leave(token)


main()
