"""A plain Python service for the proxy's integration tests (standard library only).

GET /echo       -> the request's headers as JSON; the response also carries a
                   `tailor-context` header, which an edge must strip.
GET /work?ms=N  -> sleeps N ms, then answers; the start order is recorded.
GET /log        -> the `x-id` headers of /work requests, in the order they started.
GET /call?to=P  -> calls http://127.0.0.1:P/echo forwarding only `baggage`, as an
                   OpenTelemetry-instrumented service does; returns that answer.
GET /healthz    -> ok

Prints `READY <port>` once listening on 127.0.0.1 (port 0: the kernel picks).
"""

import json
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

started = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, extra=()):
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/echo":
            headers = {k.lower(): v for k, v in self.headers.items()}
            self.answer(json.dumps(headers), [("tailor-context", "1.g1.c0.k1.h9")])
        elif url.path == "/work":
            with lock:
                started.append(self.headers.get("x-id", ""))
            time.sleep(int(query.get("ms", ["10"])[0]) / 1000)
            self.answer("done")
        elif url.path == "/log":
            with lock:
                self.answer(json.dumps(started))
        elif url.path == "/call":
            req = urllib.request.Request(f"http://127.0.0.1:{query['to'][0]}/echo")
            if self.headers.get("baggage"):
                req.add_header("baggage", self.headers["baggage"])
            with urllib.request.urlopen(req, timeout=5) as r:
                self.answer(r.read().decode())
        elif url.path == "/healthz":
            self.answer("ok")
        else:
            self.send_error(404)


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
server.daemon_threads = True
print(f"READY {server.server_address[1]}", flush=True)
server.serve_forever()
