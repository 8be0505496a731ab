"""A real `tailor agent` for the kernel-registration tests: found (or built) in the
repository's target/release, run on a table of its own, stopped by its pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def has_cap_sys_nice() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 23 & 1)
    return False


def require_kernel():
    if not has_cap_sys_nice():
        pytest.skip("SKIPPED: kernel registration needs CAP_SYS_NICE (run as root)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("SKIPPED: needs at least 2 CPUs (one for the jobs, one for the test)")


def tailor_binary() -> Path:
    binary = Path(os.environ.get("TAILOR_BIN", REPO / "target" / "release" / "tailor"))
    if not binary.exists():
        if shutil.which("cargo") is None:
            pytest.skip(f"SKIPPED: {binary} is missing and cargo is not installed (cargo build --release)")
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "tailor-cli"], cwd=REPO, check=True)
    return binary


def _running(table: str) -> bool:
    from tailor_context.kernel import AGENT_RUNNING, H_AGENT_STATE

    try:
        with open(table, "rb") as f:
            header = f.read(64)
    except FileNotFoundError:
        return False
    return len(header) == 64 and int.from_bytes(header[H_AGENT_STATE : H_AGENT_STATE + 4], "little") == AGENT_RUNNING


@contextmanager
def agent(*args: str):
    """Runs `tailor agent --table <own file> ARGS`; yields the table path; stops it with
    SIGTERM (the agent restores every thread and removes its table)."""
    table = f"/dev/shm/tailor-pytest-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [str(tailor_binary()), "agent", "--table", table, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Ready: its banner, then the table file in the RUNNING state (it prints the banner
        # before it creates the table).
        line = proc.stdout.readline()
        assert "tailor agent: pid" in line, f"the agent did not start: {line}{proc.stdout.read() if proc.poll() is not None else ''}"
        end = time.monotonic() + 20
        while not _running(table):
            assert proc.poll() is None, f"the agent exited: {proc.stdout.read()}"
            assert time.monotonic() < end, "the agent's table never came up"
            time.sleep(0.002)
        yield table
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if os.path.exists(table):
            os.unlink(table)
