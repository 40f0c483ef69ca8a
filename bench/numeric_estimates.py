"""Numeric metrics' estimates: the cost of estimating from a sketch, and interval coverage.

1. Estimate time: a sketch holding 10^7 reports (and 10^10: no scan could finish) is turned
   into the estimate frame (mean metric: mean/sum/n; histogram metric: buckets, mean,
   quantiles). The work is arithmetic on the sketch's cells, so the time does not grow with n.
2. Coverage: seeded simulations (the real encoders, numpy Generator) of a skewed population
   (Gamma(3, 9) on a range of [0, 100]); for each run, whether each 95% interval holds the
   population's value — the mean metric's mean, and a 10-bucket histogram metric's mean and
   quantiles p10 ... p99 — per frequency oracle.

Run: `python bench/numeric_estimates.py` (``--quick`` for fewer runs).
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import median_time, print_table

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from estimators.numeric import QUANTILES
from estimators.simulation import NumericPopulation, numeric_truth, simulate_sketch
from sketches import server_half

MEAN = '[metrics.m]\nkind = "numeric"\nrange = [0, 100]\nprotocol = "{p}"\nepsilon = 1.0\n'
HIST = '[metrics.h]\nkind = "numeric"\nrange = [0, 100]\nbuckets = {b}\nprotocol = "{p}"\nepsilon = 1.0\n'


def sketch_of(spec, n: int, rng: np.random.Generator):
    """A sketch of n reports without encoding n values: a mean metric's cells drawn from the
    mechanism's exact output distribution; a histogram's counters those of 10,000 encoded
    uniform values scaled to n (every counter grows in proportion to the reports)."""
    proto = server_half(spec)
    sketch = proto.new_sketch()
    if spec.is_mean:
        probs = proto.probability_table()[proto.grid // 3]
        sketch.counts[0] = rng.multinomial(n, probs / probs.sum())
    else:
        proto.accumulate(sketch, proto.encode(rng.integers(0, proto.domain_size, 10_000), rng))
        sketch.counts = np.round(sketch.counts * (n / 10_000)).astype(np.int64)
        sketch.reports = np.round(sketch.reports * (n / 10_000)).astype(np.int64)  # per cohort
        return sketch
    sketch.reports[0] = n
    return sketch


def estimate_times() -> list[tuple]:
    rng = np.random.default_rng(1)
    rows = []
    for text in (MEAN.format(p="hybrid"), MEAN.format(p="duchi"), HIST.format(b=10, p="grr"),
                 HIST.format(b=100, p="oue"), HIST.format(b=100, p="olh")):
        spec = next(iter(parse_registry(text)))
        for n in (10**7, 10**10):
            sketch = sketch_of(spec, n, rng)
            seconds = median_time(lambda spec=spec, sketch=sketch: estimate_frame(spec, sketch), 7)
            kind = "mean" if spec.is_mean else f"histogram ({spec.domain_size} buckets)"
            rows.append((kind, spec.protocol, f"{sketch.total_reports:.2g}", seconds * 1e3))
    return rows


def coverage(runs: int) -> list[tuple]:
    rows = []
    specs = [next(iter(parse_registry(MEAN.format(p=p)))) for p in ("hybrid", "laplace")]
    specs += [next(iter(parse_registry(HIST.format(b=10, p=p)))) for p in ("grr", "oue", "olh")]
    for spec in specs:
        rng = np.random.default_rng(20261201)
        names = ["mean"] + ([] if spec.is_mean else [name for name, _ in QUANTILES])
        hits = dict.fromkeys(names, 0)
        for _ in range(runs):
            pop = NumericPopulation(rng.gamma(3.0, 9.0, 5000))
            truth = dict(numeric_truth(spec, pop))
            df = estimate_frame(spec, simulate_sketch(spec, pop, rng)).set_index("statistic")
            for name in names:
                hits[name] += bool(df.loc[name, "ci_low"] <= truth[name] <= df.loc[name, "ci_high"])
        kind = "mean metric" if spec.is_mean else "histogram (10 buckets)"
        cells = [f"{hits[name] / runs:.3f}" if name in hits else "" for name in
                 ["mean"] + [name for name, _ in QUANTILES]]
        rows.append((kind, spec.protocol, *cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer coverage runs")
    args = parser.parse_args()
    print_table(["metric", "protocol", "reports", "estimate ms"], estimate_times(),
                "estimate from a sketch (median of 7; ε = 1, range [0, 100])")
    runs = 200 if args.quick else 1000
    print_table(["metric", "protocol", "mean", *[name for name, _ in QUANTILES]], coverage(runs),
                f"95% interval coverage over {runs} seeded runs of 5,000 clients (Gamma(3, 9) values)")


if __name__ == "__main__":
    main()
