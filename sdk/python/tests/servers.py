"""Real servers on loopback for the integration tests: uvicorn (ASGI) and waitress (WSGI),
each on a port the kernel picks, started in a thread and ready when the call returns."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager


def wait_until(what, cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.0005)


def send_in_order_behind_a_holder(gate, send, gats, release):
    """Contention, made exact: ``send(1)`` (the holder, whose handler waits for
    ``release``) takes the gate's only slot; then ``send(gat)`` for each of ``gats``, one at
    a time, each once the previous one waits in the gate's queue (so the local arrival
    order is ``gats``); then the holder is released. Returns when every request is answered."""
    threads = [threading.Thread(target=send, args=(1,))]
    threads[0].start()
    wait_until("the holder's admission", lambda: gate.stats().admitted == 1)
    for i, gat in enumerate(gats):
        threads.append(threading.Thread(target=send, args=(gat,)))
        threads[-1].start()
        wait_until("the request to queue", lambda: gate.stats().waiting == i + 1)
    release.set()
    for t in threads:
        t.join()


def _listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextmanager
def uvicorn_server(app):
    """Serves ``app`` with uvicorn on 127.0.0.1; yields its base URL."""
    import uvicorn

    sock = _listener()
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    wait_until("uvicorn to start", lambda: server.started or not thread.is_alive())
    assert thread.is_alive(), "uvicorn exited at start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def waitress_server(app, threads=8):
    """Serves the WSGI ``app`` with waitress (``threads`` worker threads) on 127.0.0.1."""
    import waitress

    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=threads)
    stop = threading.Event()

    def serve():
        # waitress's own run() loops while any connection is open (kept-alive ones
        # too); this loop stops on request and closes everything on its own thread.
        while not stop.is_set():
            server.asyncore.loop(timeout=0.05, map=server._map, count=1)
        for channel in list(server._map.values()):
            channel.close()
        server.task_dispatcher.shutdown()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.effective_port}"
    # Ready when it accepts a connection (the socket listens once create_server returns).
    socket.create_connection(("127.0.0.1", server.effective_port), timeout=10).close()
    try:
        yield url
    finally:
        stop.set()
        thread.join(10)
        assert not thread.is_alive(), "waitress did not stop"
