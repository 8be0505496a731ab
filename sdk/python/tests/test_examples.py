"""The example services run as a user would start them: the ASGI edge (uvicorn) in front of
the WSGI hop (waitress), each its own process; one request through both carries one GAT."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="pip install uvicorn")
pytest.importorskip("waitress", reason="pip install waitress")
httpx = pytest.importorskip("httpx", reason="pip install httpx")

from tailor_context import decode  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_accepting(port, proc):
    end = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"the example exited: {proc.communicate()[0]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < end, f"port {port} never accepted"
            time.sleep(0.01)


def test_the_asgi_edge_example_calls_the_wsgi_example_with_the_same_gat(tmp_path):
    hop_port, edge_port = free_port(), free_port()
    # No agent table here: the WSGI example falls back to its gate and says so.
    hop = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "wsgi_service.py"), "--port", str(hop_port), "--table", str(tmp_path / "none")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    edge = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "asgi_service.py"), "--port", str(edge_port), "--edge", "--downstream", f"http://127.0.0.1:{hop_port}/"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_accepting(hop_port, hop)
        wait_accepting(edge_port, edge)
        text = httpx.get(f"http://127.0.0.1:{edge_port}/", timeout=30).text
    finally:
        for p in (edge, hop):
            p.terminate()
            p.wait(10)
    lines = [line.split()[-1] for line in text.splitlines()]
    edge_ctx, hop_ctx = decode(lines[0]).context, decode(lines[1]).context
    assert (edge_ctx.hop, hop_ctx.hop) == (0, 1)
    assert hop_ctx.gat == edge_ctx.gat
    assert "thread gate" in hop.stdout.read()
