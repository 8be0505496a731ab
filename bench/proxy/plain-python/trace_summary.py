"""Summarizes a plain-python ``--trace`` file (service.py): how long each request's CPU burn
took on the clock against the CPU it burned, how many requests were inside the same worker
when it started, and for how much of the run two or more requests were burning in the tier
while only one worker was (one GIL: a CPU the tier could have used idles, or runs another
tier). Requests that burned under 0.1 ms (the benchmark's zero-demand calibration) are left
out.

Usage: python3 trace_summary.py TRACE
"""

import collections
import sys


def quantile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def main(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) != 7:
                sys.exit(f"{path}:{number}: expected 7 fields (service.py's --trace line), got {len(fields)}")
            rows.append(tuple(map(int, fields)))
    rows = [r for r in rows if r[3] > 100_000]
    if not rows:
        sys.exit(f"{path}: no request burned 0.1 ms of CPU; is it a --trace of a run with demand?")
    stretch = [r[2] / r[3] for r in rows]
    waits = [(r[4] - r[2] - r[6]) / 1e6 for r in rows]
    print(f"requests {len(rows)}, workers {len(set(r[0] for r in rows))}")
    print("burn wall / CPU: p50 %.2f p90 %.2f p99 %.2f" % tuple(quantile(stretch, p) for p in (0.5, 0.9, 0.99)))
    inside = collections.Counter(min(r[5], 4) for r in rows)
    print(
        "requests inside its worker when one started (itself included, 4 = 4 or more):",
        ", ".join(f"{k}: {100 * v / len(rows):.1f}%" for k, v in sorted(inside.items())),
    )
    print("handler time outside burn and downstream call (ms): mean %.2f p99 %.2f" % (sum(waits) / len(waits), quantile(waits, 0.99)))
    events = sorted([(r[1], 1, r[0]) for r in rows] + [(r[1] + r[2], -1, r[0]) for r in rows])
    burning = collections.Counter()
    share = collections.Counter()
    last = events[0][0]
    for t, d, pid in events:
        n = sum(burning.values())
        workers = sum(1 for v in burning.values() if v > 0)
        share[(min(n, 3), min(workers, 3))] += t - last
        last = t
        burning[pid] += d
    total = last - events[0][0]
    print(
        "share of the run by (requests burning, workers burning; 3 = 3 or more):",
        ", ".join(f"{k}: {100 * v / total:.1f}%" for k, v in sorted(share.items()) if v / total >= 0.001),
    )
    one = sum(v for (n, w), v in share.items() if n >= 2 and w == 1)
    two = sum(v for (n, w), v in share.items() if n >= 2)
    print(f"two or more burning on one worker only: {100 * one / total:.1f}% of the run, {100 * one / max(two, 1):.1f}% of the time two or more burn")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1])
