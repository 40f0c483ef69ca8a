"""Coverage of the mean metrics' 95 % intervals by mechanism, ε and n, at and near the range's ends.

For every mean mechanism (and the one `auto` picks at each ε) and n from 10 to 3,000 it prints
the worst coverage over five populations on the normalised scale [−1, 1] — every device at the
end, at 0.1 of [0, 100] (t = −0.998), 1 % from the end (t = −0.98), away from the ends
(t = 0.3), and half at each end — for the intervals ``estimate`` reports
(estimators.mean_intervals) and for the Wald interval they replaced (mean ± z·SE with the
floored spread), with the mean width of the new interval over Wald's. The last table is the
smallest n from which the worst coverage stays at or above 0.94 (the figures
docs/protocols-numeric.md quotes).

Two-cell mechanisms (duchi, bitmean, memobitmean per window): exact coverage, summed over the
law of the count of ones (binomial per group, convolved). The others: R seeded runs of the
sketch drawn from its exact law (a device at t reports from the two neighbouring grid rows
mixed by the randomised rounding); the coverage's standard error is √(0.95·0.05/R) (0.005 at
the default R = 2,000).

Run: `python bench/mean_coverage.py` (``--quick``: R = 400 and fewer n).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from _common import print_table
from scipy import stats

from client_sdk.protocols.factory import choose_numeric_protocol
from estimators.intervals import z_value
from estimators.mean_intervals import mean_interval
from sketches import build_server
from sketches.base import Sketch

SCENARIOS = {"end": ((-1.0, 1.0),), "0.1 of 100": ((-0.998, 1.0),), "1% from end": ((-0.98, 1.0),),
             "away": ((0.3, 1.0),), "both ends": ((-1.0, 0.5), (1.0, 0.5))}
MECHANISMS = ("laplace", "duchi", "bitmean", "piecewise", "hybrid", "memobitmean")
BAR = 0.94


def cell_law(proto, t: float) -> np.ndarray:
    """P(y) of one report of a device at t (randomised rounding between two grid rows)."""
    table, k = proto.probability_table(), proto.grid
    pos = (t + 1.0) * k / 2
    low = min(int(math.floor(pos)), k - 1)
    law = (1 - (pos - low)) * table[low] + (pos - low) * table[low + 1]
    return law / law.sum()


def wald(proto, sketch: Sketch) -> tuple[float, float]:
    """The interval the estimates reported before: mean ± z·SE (floored spread), clipped."""
    est = proto.estimate(sketch)
    half = z_value(0.95) * math.sqrt(est.variance)
    return max(-1.0, est.mean - half), min(1.0, est.mean + half)


def _sketch(counts: np.ndarray, n: int) -> Sketch:
    return Sketch(np.asarray(counts, dtype=np.int64).reshape(1, -1), np.array([n], dtype=np.int64))


def coverage(proto, scenario, n: int, runs: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """(new coverage, Wald coverage, mean width new/Wald) for one population and n."""
    truth = sum(t * share for t, share in scenario)
    groups = [(cell_law(proto, t), round(share * n)) for t, share in scenario]
    if proto.cells == 2:   # exact: enumerate the count of ones
        law = np.ones(1)
        for p, size in groups:
            law = np.convolve(law, stats.binom.pmf(np.arange(size + 1), size, p[1]))
        ks = np.flatnonzero(law > 1e-15)
        weights = law[ks] / law[ks].sum()
        sketches = [_sketch([n - k, k], n) for k in ks]
    else:
        weights = np.full(runs, 1.0 / runs)
        sketches = [_sketch(sum(rng.multinomial(size, p) for p, size in groups), n) for _ in range(runs)]
    new = np.array([mean_interval(proto, s, 0.95) for s in sketches])
    old = np.array([wald(proto, s) for s in sketches])
    hit_new = (new[:, 0] <= truth) & (truth <= new[:, 1])
    hit_old = (old[:, 0] <= truth) & (truth <= old[:, 1])
    width = float(weights @ (new[:, 1] - new[:, 0])) / max(float(weights @ (old[:, 1] - old[:, 0])), 1e-300)
    return float(weights @ hit_new), float(weights @ hit_old), width


def _nominal_from(lows: list[tuple], column: int, largest: int) -> str:
    """Smallest measured n from which every larger measured n has worst coverage >= BAR."""
    first = None
    for row in lows:
        first = (first or row[0]) if row[column] >= BAR else None
    return f"{first:,}" if first is not None else f"> {largest:,}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="R = 400 runs and fewer n")
    args = parser.parse_args()
    runs = 400 if args.quick else 2000
    sizes = (30, 100, 1000) if args.quick else (10, 30, 100, 300, 1000, 3000)
    rng = np.random.default_rng(2026)
    rows, smallest = [], []
    for eps in (2.0, 4.0, 8.0):
        auto = choose_numeric_protocol(eps)
        for name in MECHANISMS:
            options = {"epsilon_inf": 2 * eps} if name == "memobitmean" else {}
            proto = build_server(name, None, eps, options)
            label = f"{name} (auto)" if name == auto else name
            lows = []
            for n in sizes:
                results = {s: coverage(proto, sc, n, runs, rng) for s, sc in SCENARIOS.items()}
                worst_new = min(results, key=lambda s: results[s][0])
                worst_old = min(results, key=lambda s: results[s][1])
                low_new, low_old = results[worst_new][0], results[worst_old][1]
                widths = [r[2] for r in results.values()]
                rows.append((label, eps, n, low_new, worst_new, low_old, worst_old,
                             min(widths), max(widths)))
                lows.append((n, low_new, low_old))
            smallest.append((label, eps, _nominal_from(lows, 1, sizes[-1]), _nominal_from(lows, 2, sizes[-1])))
    print_table(("mechanism", "ε", "n", "worst coverage", "where", "Wald worst", "where",
                 "width/Wald min", "width/Wald max"), rows,
                f"95% mean intervals: worst coverage over {len(SCENARIOS)} populations "
                f"(two-cell mechanisms exact, others {runs} runs)")
    print_table(("mechanism", "ε", f"nominal (>= {BAR}) from n =", "Wald from n ="), smallest,
                "Smallest n from which the worst coverage stays >= 0.94 (n in " + ", ".join(map(str, sizes)) + ")")


if __name__ == "__main__":
    main()
