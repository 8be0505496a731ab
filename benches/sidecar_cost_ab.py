#!/usr/bin/env python3
"""The sidecar's cost per request, side by side: nginx and two `tailor` sidecars (this
tree's build and another binary, e.g. one built from an older commit) up at once in
front of one plain Go upstream, one open-loop generator (`target/release/openloop`)
taking turns between them, so the machine's drift hits all three alike. A full
`tailor bench proxy --cost` run moves by about +-0.07 in its CPU ratio; this probe
resolves about 2% between two sidecar builds.

    cargo build --release -p tailor-cli -p tailor-bench
    python3 benches/sidecar_cost_ab.py --against OLD_TAILOR [--new target/release/tailor]
        [--bare target/release/bare_relay] [--rates 6000,1000] [--rounds 4] [--seconds 3]
        [--malloc-rate 2000] [--out DIR]

`--instructions N` also counts user-space instructions per request under callgrind for
the sidecars (and the bare relay): N GETs back to back on one kept-alive connection,
deterministic to about 1% where CPU time moves by 2-5%.

`--bare` adds a fourth relay: `bare_relay` (bench/src/bin/bare_relay.rs), hyper's
HTTP/1.1 server and client on tokio's current-thread runtime with nothing of Tailor's —
the floor the sidecar's stack sets, so its row says how much of the sidecar's cost is
Tailor's own.

On a shared machine run it through the measurement lock (it builds nothing):
`flock /work/wt/MEASURE.lock python3 /work/wt/quiet.py python3 benches/sidecar_cost_ab.py ...`.

Per relay and rate it prints CPU microseconds per request (on-CPU time of all its
threads from /proc/PID/task/*/schedstat), of it user and system time (/proc/PID/stat,
10 ms ticks), each round's value and the ratios to nginx and new/old. Then, when perf
uprobes work (root, a kernel with uprobes), calls to libc's `malloc` per request at
`--malloc-rate` (a uprobe on libc.so.6's `malloc`, counted with `perf stat -p PID`); the
probe is removed again if this script added it. Without perf the column is skipped with
the reason. Every process it starts is stopped at the end, also when it is killed.
"""
import argparse
import ctypes
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PR_SET_PDEATHSIG = 1
RELAYS = ("nginx", "sidecar-old", "sidecar-new")


def die_with_parent():
    # The children get SIGTERM when this script dies, also when a signal kills it.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, name, log, within=10):
    deadline = time.time() + within
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{name} exited ({proc.returncode}) before listening; see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{name} did not listen on 127.0.0.1:{port} within {within} s; see {log}")


def cpu_ns(pid):
    """On-CPU time of every thread of `pid`, ns (scheduler statistics: exact, not ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended in between
    return total


def user_sys_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (fields 14, 15)


class Procs:
    def __init__(self, out):
        self.out, self.procs = out, []

    def start(self, name, cmd, env=None):
        log = os.path.join(self.out, f"{name}.log")
        p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.procs.append(p)
        return p, log

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()


def start_all(args, procs):
    out = args.out
    go_dir = os.path.join(out, "plain-go")
    shutil.copytree(os.path.join(ROOT, "bench/proxy/plain-go"), go_dir, dirs_exist_ok=True)
    go_bin = os.path.join(go_dir, "plain-go")
    r = subprocess.run(["go", "build", "-o", go_bin, "."], cwd=go_dir, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"go build in {go_dir} failed (Go 1.22+ is needed): {r.stderr}")
    up, log = procs.start("upstream", [go_bin, "-addr", "127.0.0.1:0"])
    deadline, upstream = time.time() + 10, None
    while upstream is None and time.time() < deadline:
        m = re.search(r"listening on (\S+)", open(log).read())
        upstream = m and m.group(1)
        time.sleep(0.05)
    if not upstream:
        sys.exit(f"the upstream did not start; see {log}")

    relays = []
    port = free_port()
    tmp = os.path.join(out, "nginx-tmp")
    os.makedirs(tmp, exist_ok=True)
    conf = os.path.join(out, "nginx.conf")
    # The same nginx as `tailor bench proxy --cost` (bench/src/proxybench/cost.rs).
    with open(conf, "w") as f:
        f.write(f"""daemon off;
master_process off;
worker_processes 1;
pid {out}/nginx.pid;
error_log {out}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  upstream up {{ server {upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}
}}
""")
    p, log = procs.start("nginx", ["nginx", "-p", out, "-e", f"{out}/nginx-error.log", "-c", conf])
    wait_listening(port, p, "nginx", log)
    relays.append(("nginx", port, p.pid))
    env = dict(os.environ, TOKIO_WORKER_THREADS="1")
    for name, binary in (("old", args.against), ("new", args.new)):
        port = free_port()
        conf = os.path.join(out, f"sidecar-{name}.toml")
        with open(conf, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}"\nupstream = "{upstream}"\norder = "orf"\ndrain_timeout_ms = 100\n')
        p, log = procs.start(f"sidecar-{name}", [binary, "proxy", "sidecar", "--config", conf], env)
        wait_listening(port, p, f"sidecar {name} ({binary})", log)
        relays.append((f"sidecar-{name}", port, p.pid))
    if args.bare:
        port = free_port()
        p, log = procs.start("bare-hyper", [args.bare, "--listen", f"127.0.0.1:{port}", "--upstream", upstream])
        wait_listening(port, p, f"bare relay ({args.bare})", log)
        relays.append(("bare-hyper", port, p.pid))
    args.upstream = upstream
    return relays


def callgrind_instructions(args, procs):
    """User-space instructions per request of each relay under callgrind, from one kept-alive
    client sending GETs back to back: `--instructions` requests after 200 of warm-up (the
    counters zeroed in between with `callgrind_control -z`). Deterministic to about 1%, where
    CPU time moves by 2-5% between runs; instructions are not time (cache misses, system
    calls), so a cut shows here first and in CPU only when it is large enough."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return None, "valgrind is not installed (Debian package `valgrind`)"
    env = dict(os.environ, TOKIO_WORKER_THREADS="1")
    targets = [("sidecar-old", args.against), ("sidecar-new", args.new)] + ([("bare-hyper", None)] if args.bare else [])
    per_request = {}
    for name, binary in targets:
        port = free_port()
        if binary is None:
            cmd = [args.bare, "--listen", f"127.0.0.1:{port}", "--upstream", args.upstream]
        else:
            conf = os.path.join(args.out, f"callgrind-{name}.toml")
            with open(conf, "w") as f:
                f.write(f'listen = "127.0.0.1:{port}"\nupstream = "{args.upstream}"\norder = "orf"\ndrain_timeout_ms = 100\n')
            cmd = [binary, "proxy", "sidecar", "--config", conf]
        dump = os.path.join(args.out, f"callgrind-{name}.out")
        p, log = procs.start(f"callgrind-{name}", ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}", *cmd], env)
        wait_listening(port, p, f"{name} under valgrind", log, within=60)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def get(n):
            for _ in range(n):
                conn.request("GET", "/")
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    sys.exit(f"{name} under valgrind answered {r.status}; see {log}")

        get(200)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True, check=True)
        get(args.instructions)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True, check=True)
        conn.close()
        p.terminate()
        p.wait(30)
        with open(dump + ".1") as f:
            summary = next((line for line in f if line.startswith(("summary:", "totals:"))), None)
        if summary is None:
            return None, f"no instruction total in {dump}.1"
        per_request[name] = int(summary.split()[1]) / args.instructions
        print(f"  callgrind {name}: {per_request[name]:,.0f} instructions/request", file=sys.stderr)
    return per_request, None


def openloop(args, port, rate, seconds, seed):
    r = subprocess.run([args.openloop, "http", f"http://127.0.0.1:{port}/", "--rate", str(rate),
                        "--seconds", str(seconds), "--seed", str(seed)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"openloop failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure_cpu(args, relays):
    # (relay, rate) -> list of per-round (cpu_ns, user_ticks, sys_ticks, requests, p50_ms, errors)
    rows = {}
    for rnd in range(args.rounds):
        for ri, rate in enumerate(args.rates):
            for k in range(len(relays)):
                # A different relay first at every step: none always runs right after another.
                name, port, pid = relays[(k + rnd + ri) % len(relays)]
                c0, (u0, s0) = cpu_ns(pid), user_sys_ticks(pid)
                res = openloop(args, port, rate, args.seconds, 1 + rnd * 100 + ri)
                c1, (u1, s1) = cpu_ns(pid), user_sys_ticks(pid)
                n = round(rate * args.seconds)
                failed = res["dropped"] + res["timeouts"] + res["errors"]
                rows.setdefault((name, rate), []).append((c1 - c0, u1 - u0, s1 - s0, n, res["p50_ms"], failed))
                print(f"  round {rnd + 1} {rate} req/s {name}: {(c1 - c0) / n / 1e3:.1f} µs/request, "
                      f"p50 {res['p50_ms']:.3f} ms", file=sys.stderr)
    return rows


def perf_malloc(args, relays):
    """malloc calls per request for each relay, or the reason they cannot be counted."""
    if shutil.which("perf") is None:
        return None, "perf is not installed"
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True)
    added = False
    if "probe_libc:malloc" not in listed.stdout:
        r = subprocess.run(["perf", "probe", "-q", "-x", LIBC, "malloc"], capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"`perf probe -x {LIBC} malloc` failed: {r.stderr.strip()}"
        added = True
    try:
        counts = {}
        for name, port, pid in relays:
            stat = subprocess.Popen(["perf", "stat", "-x,", "-e", "probe_libc:malloc", "-p", str(pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=die_with_parent)
            time.sleep(0.3)
            n = round(args.malloc_rate * args.malloc_seconds)
            openloop(args, port, args.malloc_rate, args.malloc_seconds, 7)
            time.sleep(0.2)
            stat.send_signal(signal.SIGINT)
            err = stat.communicate(timeout=10)[1]
            m = re.search(r"^(\d+),+probe_libc:malloc", err, re.M)
            if not m:
                return None, f"perf stat printed no malloc count: {err.strip()}"
            counts[name] = int(m.group(1)) / n
        return counts, None
    finally:
        if added:
            subprocess.run(["perf", "probe", "-q", "-d", "probe_libc:malloc"], capture_output=True)


def report_instructions(args, per_request, why_not):
    if per_request is None:
        print(f"\ninstructions per request: skipped ({why_not})")
        return
    print(f"\nuser-space instructions per request under callgrind ({args.instructions} GETs on one kept-alive connection):")
    print("| relay | instructions/request | new ÷ old | ÷ bare-hyper |")
    print("|---|---|---|---|")
    for name, n in per_request.items():
        vs_old = f"{n / per_request['sidecar-old']:.3f}" if name == "sidecar-new" else "-"
        vs_bare = f"{n / per_request['bare-hyper']:.3f}" if "bare-hyper" in per_request else "-"
        print(f"| {name} | {n:,.0f} | {vs_old} | {vs_bare} |")


def report(args, rows, mallocs, why_not):
    print(f"\nside by side: {args.rounds} rounds x {args.seconds} s per rate; new = {args.new}, old = {args.against}")
    print("| relay | rate req/s | CPU µs/request | per round | user / sys µs | ÷ nginx | new ÷ old | p50 ms (median round) | failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    per = {}
    for (name, rate), rs in rows.items():
        n = sum(r[3] for r in rs)
        per[(name, rate)] = sum(r[0] for r in rs) / n / 1e3
    for rate in args.rates:
        for name in RELAYS + (("bare-hyper",) if args.bare else ()):
            rs = rows[(name, rate)]
            n = sum(r[3] for r in rs)
            cpu = per[(name, rate)]
            user = sum(r[1] for r in rs) / TICK * 1e6 / n
            sys_ = sum(r[2] for r in rs) / TICK * 1e6 / n
            rounds = " / ".join(f"{r[0] / r[3] / 1e3:.1f}" for r in rs)
            vs_nginx = cpu / per[("nginx", rate)]
            vs_old = f"{cpu / per[('sidecar-old', rate)]:.3f}" if name == "sidecar-new" else "-"
            p50 = statistics.median(r[4] for r in rs)
            failed = sum(r[5] for r in rs)
            print(f"| {name} | {rate} | {cpu:.1f} | {rounds} | {user:.1f} / {sys_:.1f} | {vs_nginx:.3f} | {vs_old} | {p50:.3f} | {failed} |")
    if mallocs is None:
        print(f"\nmalloc calls per request: skipped ({why_not})")
    else:
        print(f"\nmalloc calls per request at {args.malloc_rate} req/s ({args.malloc_seconds} s, perf uprobe on libc malloc): "
              + ", ".join(f"{k} {v:.1f}" for k, v in mallocs.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", required=True, help="the other `tailor` binary (e.g. built from the base commit)")
    p.add_argument("--new", default=os.path.join(ROOT, "target/release/tailor"))
    p.add_argument("--openloop", default=os.path.join(ROOT, "target/release/openloop"))
    p.add_argument("--rates", default="6000,1000", help="open-loop rates, req/s, comma-separated")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--malloc-rate", type=float, default=2000.0)
    p.add_argument("--malloc-seconds", type=float, default=2.0)
    p.add_argument("--no-malloc", action="store_true", help="skip the malloc count")
    p.add_argument("--instructions", type=int, default=0, metavar="N",
                   help="also count user-space instructions per request under callgrind, N GETs per relay (e.g. 2000; needs valgrind)")
    p.add_argument("--bare", help="also run this bare hyper relay (`target/release/bare_relay`): the stack's own floor")
    p.add_argument("--out", help="directory for configs and logs (default: a fresh temporary one)")
    args = p.parse_args()
    args.rates = [int(r) for r in args.rates.split(",")]
    binaries = [("--against", args.against), ("--new", args.new), ("--openloop", args.openloop)]
    for what, path in binaries + ([("--bare", args.bare)] if args.bare else []):
        if not os.access(path, os.X_OK):
            sys.exit(f"{what} {path}: not an executable; build with `cargo build --release -p tailor-cli -p tailor-bench`")
    if shutil.which("nginx") is None:
        sys.exit("nginx is not installed (Debian package `nginx`)")
    args.out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="sidecar-cost-ab-"))
    os.makedirs(args.out, exist_ok=True)
    procs = Procs(args.out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        relays = start_all(args, procs)
        for _, port, _ in relays:
            openloop(args, port, 500, 0.5, 99)  # warm every relay's connections
        load = open("/proc/loadavg").read().split()[:3]
        rows = measure_cpu(args, relays)
        mallocs, why_not = (None, "--no-malloc") if args.no_malloc else perf_malloc(args, relays)
        report(args, rows, mallocs, why_not)
        if args.instructions > 0:
            report_instructions(args, *callgrind_instructions(args, procs))
        print(f"load average before: {' '.join(load)}, after: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
