#!/usr/bin/env python3
"""Run an M/M/c FCFS queue in Ciw and print its response-time statistics as JSON.

This is the reference side of the Tailor-vs-Ciw comparison: the same queue,
simulated by an independent, established simulator. Rates are per ms, so Ciw's
clock runs in ms and every output time is in ms.

Customers are numbered in arrival order (Ciw's ``id_number``). The first
``--warmup`` are discarded; the next ``--customers`` are recorded. To make sure
every recorded customer has finished, the run continues until ``slack`` more
customers have left (FCFS with c servers lets later arrivals finish first, but
only the ones the other c-1 servers serve meanwhile); the script fails loudly
rather than report a sample with holes.

Confidence intervals use batch means: the recorded customers, in arrival order,
are cut into ``--batches`` equal consecutive batches, the statistic is computed
on each batch, and a Student-t interval is formed from the spread of the batch
statistics. The interval is centred on the statistic of the whole sample
("sectioning", Asmussen & Glynn, *Stochastic Simulation*, 2007, III.5a); for the
mean this is identical to classic batch means. The p99 interval takes the p99
of each batch. Tailor's side of the comparison must use the same method, the
same batch count and the same quantile estimator (nearest rank, see
``quantile``) for the intervals to be comparable; ``batch_means_ci`` is
standalone so it can be reused or ported as is.
"""

import argparse
import json
import math
import statistics
import sys
import time

import ciw


def quantile(sorted_values, p):
    """Nearest-rank p-quantile: the smallest value with at least a fraction p of
    the sample at or below it. ``sorted_values`` must be sorted ascending."""
    if not sorted_values:
        raise ValueError("quantile of an empty sample")
    rank = max(1, math.ceil(p * len(sorted_values)))
    return sorted_values[rank - 1]


def mean(values):
    return math.fsum(values) / len(values)


def p99(values):
    return quantile(sorted(values), 0.99)


def student_t_quantile(q, df):
    """The q-quantile (q > 0.5) of Student's t with df degrees of freedom, by
    bisection on the CDF, itself integrated from the density (Simpson's rule).
    Standard library only; accurate to ~1e-9, e.g. 2.093024 for q=0.975, df=19."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(x):
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))

    def cdf(x):
        steps = 2000
        h = x / steps
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
        return 0.5 + (density(0.0) + inner + density(x)) * h / 3

    lo, hi = 0.0, 1.0
    while cdf(hi) < q:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf(mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def batch_means_ci(values, statistic, batches=20, confidence=0.95):
    """Batch-means confidence interval for ``statistic`` over ``values``.

    ``values`` are in time order (here: arrival order). They are cut into
    ``batches`` consecutive batches of equal size (a remainder of fewer than
    ``batches`` values is left out of the batches, not of the point estimate).
    Returns ``(point, lo, hi)``: point is ``statistic(values)``, and the
    half-width is ``t_{(1+confidence)/2, batches-1} * s / sqrt(batches)``, with
    s the sample standard deviation of the per-batch statistics. Batches must be
    long compared with the autocorrelation of the values for the batch
    statistics to be roughly independent; 20 batches of thousands of customers
    each is the usual choice."""
    if batches < 2:
        raise ValueError("batch means needs at least 2 batches")
    size = len(values) // batches
    if size < 1:
        raise ValueError(f"{len(values)} values cannot fill {batches} batches")
    per_batch = [statistic(values[i * size:(i + 1) * size]) for i in range(batches)]
    point = statistic(values)
    half = student_t_quantile((1 + confidence) / 2, batches - 1) * statistics.stdev(per_batch) / math.sqrt(batches)
    return point, point - half, point + half


def run(lam, mu, servers, customers, warmup, seed):
    """Simulate and return (response times of the recorded customers in arrival
    order, customers that left during the run, wall seconds of the run)."""
    network = ciw.create_network(
        arrival_distributions=[ciw.dists.Exponential(rate=lam)],
        service_distributions=[ciw.dists.Exponential(rate=mu)],
        number_of_servers=[servers],
    )
    # Ciw draws from global generators; ciw.seed sets both (random and numpy).
    ciw.seed(seed)
    simulation = ciw.Simulation(network)
    # A recorded customer can be overtaken only by customers the other
    # servers serve during its own Exp(mu) service: on average (c-1) of them
    # per mean service time, so 50c + 1000 extra departures cover it with
    # overwhelming probability (and the check below catches the rest).
    slack = 50 * servers + 1000
    target = warmup + customers + slack
    start = time.perf_counter()
    simulation.simulate_until_max_customers(target, method="Finish")
    wall = time.perf_counter() - start

    first, last = warmup + 1, warmup + customers
    response = {}
    for record in simulation.get_all_records(only=["service"]):
        if first <= record.id_number <= last:
            response[record.id_number] = record.exit_date - record.arrival_date
    if len(response) != customers:
        sys.exit(f"only {len(response)} of customers {first}..{last} finished; increase slack")
    left = simulation.nodes[-1].number_of_individuals
    return [response[i] for i in range(first, last + 1)], left, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lambda", dest="lam", type=float, required=True, help="arrival rate, per ms")
    parser.add_argument("--mu", type=float, required=True, help="service rate of one server, per ms")
    parser.add_argument("--servers", type=int, required=True, help="number of servers c")
    parser.add_argument("--customers", type=int, default=100_000, help="customers to record after warm-up")
    parser.add_argument("--warmup", type=int, default=10_000, help="customers to discard first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batches", type=int, default=20, help="batches for the confidence intervals")
    args = parser.parse_args()
    if args.lam <= 0 or args.mu <= 0 or args.servers < 1 or args.customers < args.batches or args.warmup < 0:
        parser.error("need lambda > 0, mu > 0, servers >= 1, customers >= batches, warmup >= 0")
    if args.lam >= args.servers * args.mu:
        parser.error(f"unstable: lambda {args.lam} >= servers * mu {args.servers * args.mu}")

    times, left, wall = run(args.lam, args.mu, args.servers, args.customers, args.warmup, args.seed)
    mean_ms, mean_lo, mean_hi = batch_means_ci(times, mean, args.batches)
    p99_ms, p99_lo, p99_hi = batch_means_ci(times, p99, args.batches)
    print(json.dumps({
        "tool": "ciw",
        "ciw_version": ciw.__version__,
        "customers": len(times),
        "mean_ms": mean_ms,
        "p99_ms": p99_ms,
        "mean_ci95_ms": [mean_lo, mean_hi],
        "p99_ci95_ms": [p99_lo, p99_hi],
        "wall_seconds": wall,
        # Simulation speed counts every customer that left during the timed
        # run (warm-up and slack included), since Ciw simulated all of them.
        "customers_per_sec": left / wall,
        "simulated_customers": left,
    }))


if __name__ == "__main__":
    main()
