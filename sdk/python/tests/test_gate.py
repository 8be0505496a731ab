"""The ordering gate has the Rust cooperative backend's properties (runtime/tests/cooperative.rs):
no request lost, at most c running, admission in policy order; plus the bounded queue and
deadline shedding. Real threads and a real event loop; hypothesis generates the workloads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis (CI installs it: .ci/run)")
from hypothesis import given, settings
from hypothesis import strategies as st

from tailor_context import NEVER, Context
from tailor_context.gate import POLICIES, SHED_DEADLINE, SHED_QUEUE_FULL, AsyncGate, Shed, ThreadGate


def wait_until(what, cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.0005)


def expected_order(policy, jobs):
    """The policy's order over jobs queued in list order: stable sort by key."""
    key = {
        "orf": lambda j: j.gat,
        "gfifo": lambda j: j.gat,
        "edf": lambda j: j.deadline,
        "priq": lambda j: j.class_,
        "fifo": lambda j: 0,
    }[policy]
    return sorted(range(len(jobs)), key=lambda i: key(jobs[i]))


contexts = st.builds(
    Context,
    gat=st.integers(0, 50),
    deadline=st.one_of(st.just(NEVER), st.integers(10**19, 10**19 + 50)),
    class_=st.integers(0, 3),
)


def thread_admission_order(gate, jobs):
    """One holder fills every slot; jobs queue one at a time (so local arrival order is
    list order); the holders leave; returns the job indices in the order they ran."""
    # Holders: this thread takes every slot.
    for _ in range(gate.c):
        gate.enter(Context(0))
    order, running, most, lock = [], [0], [0], threading.Lock()

    def job(i):
        try:
            with gate.admit(jobs[i]):
                with lock:
                    order.append(i)
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                time.sleep(0.0002)
                with lock:
                    running[0] -= 1
        except Shed:
            pass

    threads = []
    for i in range(len(jobs)):
        t = threading.Thread(target=job, args=(i,))
        t.start()
        threads.append(t)
        wait_until("the job to queue", lambda: gate.stats().waiting == i + 1)
    for _ in range(gate.c):
        gate.leave()
    for t in threads:
        t.join()
    return order, most[0]


@settings(max_examples=25, deadline=None)
@given(policy=st.sampled_from(POLICIES), jobs=st.lists(contexts, min_size=1, max_size=12))
def test_threads_are_admitted_in_policy_order_one_at_a_time(policy, jobs):
    gate = ThreadGate(policy, c=1)
    order, most = thread_admission_order(gate, jobs)
    assert order == expected_order(policy, jobs), policy
    assert most == 1
    s = gate.stats()
    assert (s.admitted, s.completed, s.waiting, s.running) == (len(jobs) + 1, len(jobs) + 1, 0, 0)


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    c=st.integers(1, 4),
    jobs=st.lists(contexts, min_size=1, max_size=20),
)
def test_async_admission_order_c_bound_and_nothing_lost(policy, c, jobs):
    async def main():
        gate = AsyncGate(policy, c=c)
        for _ in range(c):
            await gate.enter(Context(0))  # holders fill every slot
        order, running, most = [], [0], [0]

        async def job(i):
            async with gate.admit(jobs[i]):
                order.append(i)
                running[0] += 1
                most[0] = max(most[0], running[0])
                await asyncio.sleep(0)
                running[0] -= 1

        tasks = [asyncio.ensure_future(job(i)) for i in range(len(jobs))]
        await asyncio.sleep(0)  # every job queues, in list order
        assert gate.stats().waiting == len(jobs)
        for _ in range(c):
            gate.leave()
        await asyncio.gather(*tasks)
        return gate.stats(), order, most[0]

    stats, order, most = asyncio.run(main())
    assert order == expected_order(policy, jobs)
    assert most <= c
    assert stats.max_running <= c
    assert (stats.admitted, stats.completed, stats.running, stats.waiting) == (len(jobs) + c,) * 2 + (0, 0)


def test_never_more_than_c_threads_run_at_once_under_contention():
    for c in (1, 3):
        gate = ThreadGate("orf", c=c)
        inside, most, lock = [0], [0], threading.Lock()
        start = threading.Barrier(12)

        def job(i):
            start.wait()
            with gate.admit(Context(1000 + i)):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.002)
                with lock:
                    inside[0] -= 1

        threads = [threading.Thread(target=job, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s = gate.stats()
        assert most[0] <= c and s.max_running <= c, (c, most[0], s)
        assert (s.admitted, s.completed, s.waiting) == (12, 12, 0)


class FakeClockNs:
    """A settable clock, so that 'expired' does not depend on how fast this machine is."""

    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_an_expired_request_is_shed_at_arrival_and_when_its_turn_comes():
    clock = FakeClockNs(1_000)
    gate = ThreadGate("edf", c=1, clock=clock)
    with pytest.raises(Shed) as e:
        gate.enter(Context(gat=0, deadline=999))
    assert e.value.reason == SHED_DEADLINE
    gate.enter(Context(0))  # holds the slot
    outcomes = {}

    def job(name, deadline):
        try:
            with gate.admit(Context(gat=0, deadline=deadline)):
                outcomes[name] = "ran"
        except Shed as shed:
            outcomes[name] = shed.reason

    a = threading.Thread(target=job, args=("a", 1_500))
    b = threading.Thread(target=job, args=("b", 5_000))
    a.start()
    wait_until("a queued", lambda: gate.stats().waiting == 1)
    b.start()
    wait_until("b queued", lambda: gate.stats().waiting == 2)
    clock.now = 2_000  # a's deadline passes while it waits; b's does not
    gate.leave()
    a.join()
    b.join()
    assert outcomes == {"a": SHED_DEADLINE, "b": "ran"}
    s = gate.stats()
    assert (s.shed_deadline, s.admitted, s.completed, s.running) == (2, 2, 2, 0)


def test_a_full_queue_sheds_the_newcomer_at_once():
    gate = ThreadGate("orf", c=1, max_queue=1)
    gate.enter(Context(1))
    t = threading.Thread(target=gate.enter, args=(Context(2),))
    t.start()
    wait_until("one waiter", lambda: gate.stats().waiting == 1)
    with pytest.raises(Shed) as e:
        gate.enter(Context(0))
    assert e.value.reason == SHED_QUEUE_FULL
    gate.leave()  # the holder leaves; the waiter is admitted
    t.join()
    gate.leave()
    assert gate.stats().shed_queue_full == 1


def test_a_cancelled_async_waiter_leaves_the_queue_and_a_cancelled_admission_frees_its_slot():
    async def main():
        gate = AsyncGate("orf", c=1)
        await gate.enter(Context(0))
        waiter = asyncio.ensure_future(gate.enter(Context(5)))
        await asyncio.sleep(0)
        assert gate.stats().waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert gate.stats().waiting == 0
        # Admitted (its future resolved) but cancelled before it ran: the slot goes on.
        second = asyncio.ensure_future(gate.enter(Context(6)))
        third = asyncio.ensure_future(gate.enter(Context(7)))
        await asyncio.sleep(0)
        gate.leave()  # admits `second`...
        second.cancel()  # ...which is cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await second
        await asyncio.wait_for(third, 5)  # so `third` gets the slot
        gate.leave()
        return gate.stats()

    s = asyncio.run(main())
    assert (s.running, s.waiting) == (0, 0)


def test_bad_configuration_names_the_field():
    with pytest.raises(ValueError, match="c = 0"):
        ThreadGate("orf", c=0)
    with pytest.raises(ValueError, match="'lifo'.*orf, gfifo, edf, priq, fifo"):
        AsyncGate("lifo", c=1)
    with pytest.raises(ValueError, match="max_queue"):
        ThreadGate("orf", c=1, max_queue=-1)
