"""Kernel registration with a real `tailor agent --enforce priority`: an older request in
another worker process preempts a younger one on the same CPU (and, without registration,
does not: the test can tell them apart); every thread is restored; the table is left with
no live job; the WSGI middleware registers waitress's worker threads; and the fallback to
the gate when the table, the agent or key ordering is missing. Needs root (CAP_SYS_NICE):
skipped with a message without it."""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tailor_context import Context
from tailor_context.gate import ThreadGate
from tailor_context.kernel import (
    FREE,
    S_START,
    S_WORD,
    SLOT_SIZE,
    TOP_LEVEL,
    KernelRegistrar,
    _slots_offset,
)

from kernel_helpers import agent, has_cap_sys_nice, require_kernel

JOB = str(Path(__file__).with_name("kernel_job.py"))
MS = 1_000_000


def spawn(table, cpu, gat, burn_ms, lead_ms=0):
    p = subprocess.Popen(
        [sys.executable, JOB, table, str(cpu), str(gat), str(burn_ms), str(lead_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline().strip()
    assert line == "ready", line
    return p


def finish(p):
    out = p.communicate(timeout=60)[0].split()
    assert "done" in out, out
    i = out.index("done")
    return int(out[i + 1]), (int(out[i + 2]), int(out[i + 3]))


def older_arrives_later(table, cpu, t0):
    """A young request (GAT t0 + 10 ms) starts first and burns 60 ms; once it has run
    10 ms, an older one (GAT t0 + 5 ms) arrives and burns 120 ms; both pinned to ``cpu``,
    each in its own process. Returns the names in finishing order and the policies after."""
    young = spawn(table, cpu, t0 + 10 * MS, 60, lead_ms=10)
    old = spawn(table, cpu, t0 + 5 * MS, 120)
    young.stdin.write("go\n")
    young.stdin.flush()
    assert young.stdout.readline().startswith("started")
    old.stdin.write("go\n")
    old.stdin.flush()
    young_done, young_policy = finish(young)
    old_done, old_policy = finish(old)
    order = ["old", "young"] if old_done < young_done else ["young", "old"]
    return order, (young_policy, old_policy)


def live_slots(table):
    data = Path(table).read_bytes()
    slots = struct.unpack_from("<I", data, 12)[0]
    states = [struct.unpack_from("<Q", data, _slots_offset(slots) + i * SLOT_SIZE + S_WORD)[0] & 0xFF for i in range(slots)]
    return sum(s != FREE for s in states)


def test_an_older_request_preempts_a_younger_one_across_worker_processes():
    require_kernel()
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    # This thread (which says "go") stays off the jobs' CPU: a registered job there would
    # starve it. Restored at the end, whatever happens.
    os.sched_setaffinity(0, allowed - {cpu})
    try:
        _older_first_with_registration(cpu)
    finally:
        os.sched_setaffinity(0, allowed)


def _older_first_with_registration(cpu):
    t0 = time.time_ns() - 1_000 * MS
    # Baseline, same scenario without registration: CFS shares the CPU, so the young
    # request (less work left) finishes first. This shows the test can tell them apart.
    order, _ = older_arrives_later("none", cpu, t0)
    assert order == ["young", "old"], "Linux default: fair sharing finishes the young request first"
    with agent("--policy", "gfifo", "--enforce", "priority", "--bucket-us", "1000") as table:
        # An anchor job, older than both and blocked (as a handler waiting on a downstream
        # call): the agent's first shift puts its key at the top, so the two requests land
        # 5 and 10 levels below it, on distinct levels.
        registrar = KernelRegistrar(table)
        assert registrar.active, registrar.reason
        release, anchored, levels = threading.Event(), threading.Event(), []

        def anchor():
            before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
            with registrar.admit(Context(t0)):
                # The first key lands on the bottom level and rings; the agent shifts the
                # base to it and rewrites this thread to the top.
                end = time.monotonic() + 10
                while os.sched_getparam(0).sched_priority != TOP_LEVEL and time.monotonic() < end:
                    time.sleep(0.001)
                levels.append(os.sched_getparam(0).sched_priority)
                anchored.set()
                release.wait(60)
            levels.append((before, (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)))

        t = threading.Thread(target=anchor)
        t.start()
        assert anchored.wait(20)
        try:
            order, policies = older_arrives_later(table, cpu, t0)
            live_during = live_slots(table)
        finally:
            release.set()
            t.join()
        live_after = live_slots(table)
    assert levels[0] == TOP_LEVEL
    assert order == ["old", "young"], "key ordering: the older request runs first"
    assert policies == ((0, 0), (0, 0)), "every job thread back to SCHED_OTHER"
    assert levels[1][0] == levels[1][1], "the anchor thread restored"
    assert live_during == 1 and live_after == 0, "only the anchor was live between jobs; nothing after"


def test_waitress_worker_threads_are_registered_per_request_and_restored():
    require_kernel()
    requests = pytest.importorskip("requests", reason="pip install requests")
    pytest.importorskip("waitress", reason="pip install waitress")
    from tailor_context.wsgi import TailorWSGI

    from servers import waitress_server

    seen = []

    def app(environ, start_response):
        seen.append((threading.get_native_id(), os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK))
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with agent("--policy", "gfifo", "--enforce", "priority") as table:
        registrar = KernelRegistrar(table, fallback=ThreadGate("orf", c=2))
        with waitress_server(TailorWSGI(app, gate=registrar), threads=4) as url:
            session = requests.Session()
            statuses = [session.get(url).status_code for _ in range(20)]
            # A worker restores itself when the server closes the response, which can be
            # just after the client has read it: wait for that, up to 2 s.
            deadline = time.monotonic() + 2.0
            while True:
                after = {tid: os.sched_getscheduler(tid) for tid, _ in seen}
                if set(after.values()) == {os.SCHED_OTHER} or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        live = live_slots(table)
    assert statuses == [200] * 20
    assert {policy for _, policy in seen} == {os.SCHED_FIFO}, "handlers ran at a SCHED_FIFO level"
    assert set(after.values()) == {os.SCHED_OTHER}, "every worker thread restored after its request"
    assert registrar.registered == 20 and live == 0


def test_without_a_table_the_registrar_falls_back_to_the_gate_and_says_why_once(caplog):
    gate = ThreadGate("orf", c=1)
    with caplog.at_level(logging.WARNING, logger="tailor_context.kernel"):
        r = KernelRegistrar("/dev/shm/tailor-pytest-no-such-table", fallback=gate)
        for _ in range(3):
            with r.admit(Context(1)):
                assert gate.stats().running == 1
    assert not r.active and "no agent table" in r.reason and "tailor agent" in r.reason
    assert len(caplog.records) == 1
    assert gate.stats().completed == 3


def test_a_band_mode_agent_is_not_used_and_the_reason_names_the_fix():
    if not has_cap_sys_nice():
        pytest.skip("SKIPPED: the agent needs CAP_SYS_NICE (run as root)")
    with agent("--policy", "orf", "--enforce", "band") as table:
        r = KernelRegistrar(table, fallback=ThreadGate("orf", c=1))
        with r.admit(Context(time.time_ns())):
            pass
    assert not r.active and "--enforce priority" in r.reason


def test_a_table_that_is_not_one_is_refused_with_the_reason(tmp_path):
    bad = tmp_path / "table"
    bad.write_bytes(b"\0" * 4096)
    r = KernelRegistrar(str(bad))
    assert not r.active and "bad magic" in r.reason
    # Without a fallback, jobs simply run.
    with r.admit(Context(1)):
        pass


NS_JOB = str(Path(__file__).with_name("kernel_ns_job.py"))


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


def _host_policies(ids):
    out = {}
    for i in ids:
        try:
            out[i] = (os.sched_getscheduler(i), os.sched_getparam(i).sched_priority)
        except OSError:
            out[i] = None
    return out


def test_a_worker_in_its_own_pid_namespace_is_found_and_restored_by_the_host_agent():
    """A pod's worker registers ids numbered in its own PID namespace (it is pid 1 there).
    The host agent must translate them: when it stops mid-job it restores that thread (by
    its host id), and never touches the host threads that carry the pod's numbers."""
    require_kernel()
    if not _unshare_works():
        pytest.skip("SKIPPED: `unshare --pid --fork --mount-proc` is unavailable (needs root and util-linux)")
    decoys = list(range(1, 65))
    before = _host_policies(decoys)
    with agent("--enforce", "priority", "--policy", "gfifo") as table:
        child = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, NS_JOB, table, str(time.time_ns())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            running = child.stdout.readline().split()
            assert running[:1] == ["running"], running
            ns_pid, ns_tid, policy, priority = map(int, running[1:])
            assert ns_pid == 1, f"the worker is pid 1 of its own namespace: {running}"
            assert policy & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO and 1 <= priority <= TOP_LEVEL, f"registered at a job level: {running}"
            # The slot says which namespace the ids are numbered in.
            data = Path(table).read_bytes()
            slots = struct.unpack_from("<I", data, 12)[0]
            base = _slots_offset(slots)
            busy = [base + i * SLOT_SIZE for i in range(slots) if struct.unpack_from("<Q", data, base + i * SLOT_SIZE + S_WORD)[0] & 0xFF != FREE]
            assert len(busy) == 1, f"one live job: {busy}"
            word, pid, tid = struct.unpack_from("<QII", data, busy[0])
            start, pid_ns = struct.unpack_from("<QQ", data, busy[0] + S_START)
            assert (pid, tid) == (ns_pid, ns_tid)
            assert start > 0, "the thread's start time is written"
            assert pid_ns >> 32 == (word >> 8) & 0xFFFFFFFF, "tagged with this job's generation"
            assert pid_ns & 0xFFFFFFFF != os.stat("/proc/self/ns/pid").st_ino & 0xFFFFFFFF, "the pod's namespace, not the host's"
        except BaseException:
            child.kill()
            raise
    # The agent has stopped (SIGTERM) with the job still live: it restored the thread.
    try:
        out, _ = child.communicate("check\n", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    after = [line.split() for line in out.splitlines() if line.startswith("after")]
    assert after == [["after", str(os.SCHED_OTHER), "0"]], f"the host agent restored the pod's thread at its exit: {out!r}"
    assert _host_policies(decoys) == before, "host threads with the pod's ids were never touched"

