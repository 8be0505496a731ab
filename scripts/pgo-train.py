#!/usr/bin/env python3
"""The training run of a profile-guided (PGO) release build: runs an instrumented `tailor`
through the work it does in production, so the compiler lays out and inlines for those
paths. `scripts/build-release.sh` calls it; run it alone to check a binary end to end:

    python3 scripts/pgo-train.py --tailor target/release/tailor [--seconds 20] [--no-demo]

What it runs, each part with its own processes (all on loopback, all stopped by pid):
- the proxies: a plain Python HTTP/1.1 service; in front of it a sidecar with the default
  config (`orf`, adaptive `c`, an egress listener) and one with `edf`, `c` = 1 and a
  short queue in front of a slow path (requests wait in line); an edge with two routes in front of both.
  Eight kept-alive clients send a mix for `--seconds`: GETs to the sidecar without and
  with a context (as a request from an edge or a `baggage` member), GETs through the edge,
  POST bodies, a 64 KiB response, slow requests that queue, calls out through egress,
  `/metrics` scrapes. The proxies get SIGTERM and drain (an instrumented binary writes
  its profile on exit).
- the simulator: the built-in chain and the TailGuard fan-out scenario.
- the runtime: `tailor demo --quick` (a real chain of `tailor` tiers; modes that need
  root are skipped by the demo itself without it).

It fails (exit 1, naming the part) when a request fails where it must not, so a broken
binary never yields a profile. Profiles go where LLVM_PROFILE_FILE says (the caller sets it).
"""
import argparse
import http.client
import http.server
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service(http.server.BaseHTTPRequestHandler):
    """The plain service behind the proxies: `/` answers `ok`, `/big` 64 KiB, `/slow`
    after 5 ms, POST the number of bytes it read."""

    protocol_version = "HTTP/1.1"
    # Head and body leave in one write, and without Nagle: a body sent after its head would
    # wait for the proxy's delayed ACK (40 ms).
    disable_nagle_algorithm = True
    big = b"x" * 65536

    def log_message(self, *args):
        pass

    def answer(self, body, status=200):
        head = f"HTTP/1.1 {status} OK\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n\r\n"
        self.wfile.write(head.encode() + body)

    def do_GET(self):
        if self.path.startswith("/big"):
            self.answer(self.big)
        elif self.path.startswith("/slow"):
            time.sleep(0.005)
            self.answer(b"slow")
        else:
            self.answer(b"ok")

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        self.answer(str(n).encode())


class Procs:
    """The processes this script started; stopped by pid, also on failure."""

    def __init__(self, out):
        self.out = out
        self.started = []

    def start(self, name, cmd):
        log = open(os.path.join(self.out, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started.append((name, p))
        return p

    def stop_all(self, within=15.0):
        """SIGTERM, then wait for each to exit (drain; the profile is written at exit)."""
        for _, p in self.started:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.time() + within
        problems = []
        for name, p in self.started:
            try:
                code = p.wait(timeout=max(0.1, end - time.time()))
                if code != 0:
                    problems.append(f"{name} exited with {code} after SIGTERM (log: {self.out}/{name}.log)")
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                problems.append(f"{name} did not exit within {within:.0f} s of SIGTERM (log: {self.out}/{name}.log)")
        self.started.clear()
        if problems:
            # Without a clean exit an instrumented binary writes no profile.
            raise SystemExit("pgo-train: " + "; ".join(problems))


def wait_listening(port, proc, name, out, within=20.0):
    end = time.time() + within
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"pgo-train: {name} exited with {proc.returncode} at start; see {out}/{name}.log")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"pgo-train: {name} not listening on 127.0.0.1:{port} within {within:.0f} s; see {out}/{name}.log")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def train_proxies(tailor, out, seconds):
    procs = Procs(out)
    try:
        return run_proxies(tailor, out, seconds, procs)
    finally:
        procs.stop_all()


def run_proxies(tailor, out, seconds, procs):
    # The service runs in a process of its own: in this one it would share the clients' GIL.
    service_port = free_port()
    service = procs.start("service", [sys.executable, os.path.abspath(__file__), "--serve", str(service_port)])
    wait_listening(service_port, service, "service", out)
    upstream = f"127.0.0.1:{service_port}"
    p = {name: free_port() for name in ("a", "a_admin", "a_egress", "b", "b_admin", "edge", "edge_admin")}
    conf_a = write(os.path.join(out, "sidecar-a.toml"), f"""
listen = "127.0.0.1:{p['a']}"
upstream = "{upstream}"
admin = "127.0.0.1:{p['a_admin']}"
order = "orf"
drain_timeout_ms = 2000
[[egress]]
listen = "127.0.0.1:{p['a_egress']}"
upstream = "{upstream}"
""")
    conf_b = write(os.path.join(out, "sidecar-b.toml"), f"""
listen = "127.0.0.1:{p['b']}"
upstream = "{upstream}"
admin = "127.0.0.1:{p['b_admin']}"
order = "edf"
c = 1
max_queue = 16
drain_timeout_ms = 2000
""")
    conf_edge = write(os.path.join(out, "edge.toml"), f"""
listen = "127.0.0.1:{p['edge']}"
admin = "127.0.0.1:{p['edge_admin']}"
drain_timeout_ms = 2000
[[routes]]
name = "slow"
path_prefix = "/slow"
class = 1
slo_ms = 50
upstreams = ["127.0.0.1:{p['b']}"]
[[routes]]
name = "default"
path_prefix = "/"
class = 0
slo_ms = 200
upstreams = ["127.0.0.1:{p['a']}"]
""")
    for name, conf, port in (("sidecar-a", conf_a, p["a"]), ("sidecar-b", conf_b, p["b"]), ("edge", conf_edge, p["edge"])):
        kind = "edge" if name == "edge" else "sidecar"
        proc = procs.start(name, [tailor, "proxy", kind, "--config", conf])
        wait_listening(port, proc, name, out)
    counts = drive(p, seconds)
    # The mix trains the context's read path only if its contexts are valid ones.
    metrics = http.client.HTTPConnection("127.0.0.1", p["a_admin"], timeout=10)
    metrics.request("GET", "/metrics")
    text = metrics.getresponse().read().decode()
    accepted = metric_sum(text, "tailor_proxy_context_accepted")
    stamped = metric_sum(text, "tailor_proxy_context_stamped")
    errors = metric_sum(text, "tailor_proxy_context_errors")
    if accepted == 0 or stamped == 0 or errors > 0:
        sys.exit(f"pgo-train: sidecar-a accepted {accepted:.0f} contexts, stamped {stamped:.0f} requests and "
                 f"rejected {errors:.0f} contexts; the mix sends valid contexts and requests without one")
    return counts


def metric_sum(text, name):
    """The sum of a Prometheus text exposition's samples of `name` (a counter's `_total` too)."""
    total = 0.0
    for line in text.splitlines():
        metric = line.split("{", 1)[0].split(" ", 1)[0]
        if metric in (name, f"{name}_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def mix():
    """(weight, target port key, method, path, headers factory, body). A context as an edge
    writes it and as a `baggage` member, so the sidecar's read path is trained too."""
    now_ns = time.time_ns
    return [
        (50, "a", "GET", "/", lambda: {}, None),
        (10, "a", "GET", "/", lambda: {"tailor-context": f"1.g{now_ns()}.d{now_ns() + 500_000_000}.c0.k1.h1"}, None),
        (5, "a", "GET", "/", lambda: {"baggage": f"userId=alice,tailor=1.g{now_ns()}.c1.k1.h1"}, None),
        (15, "edge", "GET", "/", lambda: {}, None),
        (8, "a", "POST", "/submit", lambda: {"content-type": "application/json"}, b'{"k": 1}' * 128),
        (3, "a", "GET", "/big", lambda: {}, None),
        (4, "edge", "GET", "/slow", lambda: {}, None),
        (3, "a_egress", "GET", "/", lambda: {"baggage": f"tailor=1.g{now_ns()}.d{now_ns() + 500_000_000}.c0.k1.h1"}, None),
        (2, "a_admin", "GET", "/metrics", lambda: {}, None),
    ]


def client_process(ports, stop, seed, results):
    """Two kept-alive clients (threads) in this process; puts (counts, failures) on `results`."""
    requests = mix()
    weights = [m[0] for m in requests]
    counts, failures, lock = {}, [], threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        conns = {}
        while time.time() < stop:
            _, key, method, path, headers, body = rng.choices(requests, weights)[0]
            conn = conns.get(key) or conns.setdefault(key, http.client.HTTPConnection("127.0.0.1", ports[key], timeout=10))
            try:
                conn.request(method, path, body=body, headers=headers())
                r = conn.getresponse()
                r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                conns.pop(key).close()
                status = f"error: {e}"
            with lock:
                counts[(key, path, status)] = counts.get((key, path, status), 0) + 1
                # Only the slow route may shed (its sidecar's queue is short by design).
                if status != 200 and not (path == "/slow" and status in (503, 504)):
                    failures.append(f"{method} {path} via {key}: {status}")

    threads = [threading.Thread(target=client, args=(seed * 2 + i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put((counts, failures[:10], len(failures)))


def drive(ports, seconds):
    """Eight clients in four processes (Python's GIL would cap one process's clients at a
    few hundred requests a second) sending the mix for `seconds`."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    stop = time.time() + seconds
    clients = [ctx.Process(target=client_process, args=(ports, stop, i, results)) for i in range(4)]
    for c in clients:
        c.start()
    while time.time() < stop:
        time.sleep(min(5.0, max(0.0, stop - time.time())))
        print(f"  proxies: {max(0, stop - time.time()):.0f} s left", flush=True)
    counts, failures, failed = {}, [], 0
    for _ in clients:
        c_counts, c_failures, c_failed = results.get(timeout=60)
        for k, n in c_counts.items():
            counts[k] = counts.get(k, 0) + n
        failures += c_failures
        failed += c_failed
    for c in clients:
        c.join()
    if failed:
        sys.exit(f"pgo-train: {failed} requests failed through the proxies, e.g. {failures[:3]}")
    return counts


def run(cmd, what, timeout):
    print(f"  {what}: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"pgo-train: {what} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Service)
        server.daemon_threads = True
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        server.serve_forever()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tailor", required=True, help="the (instrumented) tailor binary to train")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the clients drive the proxies")
    ap.add_argument("--no-demo", action="store_true", help="skip `tailor demo --quick` (the runtime)")
    ap.add_argument("--out", help="directory for configs and logs (default: a temporary one, removed after a run that passed)")
    args = ap.parse_args()
    tailor = os.path.abspath(args.tailor)
    if not os.access(tailor, os.X_OK):
        sys.exit(f"pgo-train: --tailor {args.tailor}: not an executable file")
    out = args.out or tempfile.mkdtemp(prefix="tailor-pgo-train-")
    os.makedirs(out, exist_ok=True)
    print(f"pgo-train: proxies for {args.seconds:.0f} s (logs in {out})", flush=True)
    counts = train_proxies(tailor, out, args.seconds)
    total = sum(counts.values())
    shed = sum(n for (_, _, status), n in counts.items() if status != 200)
    print(f"  proxies: {total} requests ({shed} shed on the slow route)", flush=True)
    if total < 1000:
        sys.exit(f"pgo-train: only {total} requests in {args.seconds:.0f} s: too few to train on; see {out}")
    print("pgo-train: the simulator", flush=True)
    run([tailor, "sim", "--out", os.path.join(out, "sim-chain")], "built-in chain", 300)
    run([tailor, "sim", os.path.join(ROOT, "scenarios/tailguard-masstree.toml"), "--out", os.path.join(out, "sim-fanout")],
        "TailGuard fan-out", 300)
    if not args.no_demo:
        print("pgo-train: the runtime", flush=True)
        run([tailor, "demo", "--quick", "--out", os.path.join(out, "demo")], "demo --quick", 900)
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    print("pgo-train: done", flush=True)


if __name__ == "__main__":
    main()
