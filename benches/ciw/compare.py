#!/usr/bin/env python3
"""Tailor vs Ciw on the same M/M/c queue, side by side in one run.

Both simulators run an M/M/c FCFS queue with the same rates, warm-up and
number of measured customers; both report the mean and the p99 response time
with batch-means 95% confidence intervals computed the same way (20 batches in
arrival order, Student t with 19 d.o.f., centred on the whole-sample value),
and their speed in simulated customers per second of wall time. The
Erlang-C values are printed as the ground truth.

Run from the repository root (it builds Tailor and makes a venv for Ciw):

    python3 benches/ciw/compare.py            # c = 4, rho = 0.8, 200k customers
    python3 benches/ciw/compare.py --servers 2 --rho 0.8 --customers 100000
"""

import argparse
import json
import math
import os
import subprocess
import sys
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def erlang_c(c, a):
    """Probability of waiting in M/M/c with offered load a = lambda/mu (via Erlang B)."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1.0 - rho + rho * b)


def mmc_response_cdf(lam, mu, c, t):
    """P(T <= t) for FCFS M/M/c: T = S + W, W = 0 w.p. 1-C else Exp(c mu - lam)."""
    pc = erlang_c(c, lam / mu)
    theta = c * mu - lam
    # P(S + W > t) = (1-C) e^{-mu t} + C * P(S + Exp(theta) > t)
    if abs(theta - mu) < 1e-12:
        tail_sum = math.exp(-mu * t) * (1 + mu * t)
    else:
        tail_sum = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
    return 1.0 - ((1 - pc) * math.exp(-mu * t) + pc * tail_sum)


def mmc_theory(lam, mu, c):
    pc = erlang_c(c, lam / mu)
    mean = 1 / mu + pc / (c * mu - lam)
    lo, hi = 0.0, 1.0
    while mmc_response_cdf(lam, mu, c, hi) < 0.99:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mmc_response_cdf(lam, mu, c, mid) < 0.99:
            lo = mid
        else:
            hi = mid
    return mean, hi


def ensure_ciw_python():
    env_dir = os.path.join(HERE, ".venv")
    py = os.path.join(env_dir, "bin", "python")
    if not os.path.exists(py):
        venv.create(env_dir, with_pip=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "-r", os.path.join(HERE, "requirements.txt")], check=True)
    return py


def run_tailor(lam, mu, c, customers, warmup, seed):
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "tailor-cli"], cwd=ROOT, check=True)
    scenario = f"""
name = "mmc-compare"
seed = {seed}
requests = {customers}
warmup = {warmup}
[load]
rps = {lam * 1000.0}
[[service]]
name = "server"
cores = {c}
policy = {{ kind = "fifo" }}
service_time = {{ kind = "exp", mean_ms = {1.0 / mu} }}
"""
    path = os.path.join(ROOT, "target", "mmc-compare.toml")
    with open(path, "w") as f:
        f.write(scenario)
    out = subprocess.run([os.path.join(ROOT, "target", "release", "tailor"), "sim", path, "--json", "-"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    run = json.loads(out)["runs"][0]
    s = run["summary"]
    return {
        "tool": "tailor",
        "mean_ms": s["latency_ms"]["mean"],
        "p99_ms": s["latency_ms"]["p99"],
        "mean_ci95_ms": s["ci95"]["mean_ms"],
        "p99_ci95_ms": s["ci95"]["p99_ms"],
        "wall_seconds": run["wall_seconds"],
        "customers_per_sec": run["arrivals_per_sec"],
        "events_per_sec": run["events_per_sec"],
    }


def run_ciw(py, lam, mu, c, customers, warmup, seed):
    out = subprocess.run([py, os.path.join(HERE, "mmc.py"), "--lambda", str(lam), "--mu", str(mu),
                          "--servers", str(c), "--customers", str(customers), "--warmup", str(warmup),
                          "--seed", str(seed)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--rho", type=float, default=0.8)
    ap.add_argument("--mu", type=float, default=1.0, help="service rate per ms")
    ap.add_argument("--customers", type=int, default=200_000)
    ap.add_argument("--warmup", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    c, mu = args.servers, args.mu
    lam = args.rho * c * mu
    py = ensure_ciw_python()
    mean_t, p99_t = mmc_theory(lam, mu, c)
    ciw = run_ciw(py, lam, mu, c, args.customers, args.warmup, args.seed)
    tailor = run_tailor(lam, mu, c, args.customers, args.warmup, args.seed)

    def inside(ci, x):
        return ci[0] <= x <= ci[1]

    def overlap(a, b):
        return a[0] <= b[1] and b[0] <= a[1]

    print(f"M/M/{c} FCFS, rho = {args.rho}, mu = {mu}/ms, {args.customers} customers after {args.warmup} warm-up, seed {args.seed}")
    print(f"theory (Erlang C): mean {mean_t:.4f} ms, p99 {p99_t:.4f} ms\n")
    print(f"{'tool':>7} {'customers/s':>12} {'mean_ms':>8} {'mean 95% CI':>19} {'p99_ms':>8} {'p99 95% CI':>19}")
    for r in (tailor, ciw):
        m, p = r["mean_ci95_ms"], r["p99_ci95_ms"]
        print(f"{r['tool']:>7} {r['customers_per_sec']:>12,.0f} {r['mean_ms']:>8.4f} [{m[0]:>7.4f}, {m[1]:>7.4f}] "
              f"{r['p99_ms']:>8.4f} [{p[0]:>7.4f}, {p[1]:>7.4f}]")
    print()
    print(f"speed ratio Tailor / Ciw: {tailor['customers_per_sec'] / ciw['customers_per_sec']:,.0f}x "
          f"(Tailor {tailor['events_per_sec'] / 1e6:.1f} M events/s)")
    print(f"mean: CIs overlap: {overlap(tailor['mean_ci95_ms'], ciw['mean_ci95_ms'])}; "
          f"theory inside Tailor's: {inside(tailor['mean_ci95_ms'], mean_t)}, Ciw's: {inside(ciw['mean_ci95_ms'], mean_t)}")
    print(f"p99:  CIs overlap: {overlap(tailor['p99_ci95_ms'], ciw['p99_ci95_ms'])}; "
          f"theory inside Tailor's: {inside(tailor['p99_ci95_ms'], p99_t)}, Ciw's: {inside(ciw['p99_ci95_ms'], p99_t)}")


if __name__ == "__main__":
    sys.exit(main())
