"""Public dimensions (issue 22, part 1): per-segment estimates at their theoretical variance.

A GRR metric (d = 4, ε = 1) broken down by os: three segments of different sizes and value
mixes, and one below min_reports (1,000) that must never appear. R seeded runs draw every
segment's sketch from its exact law (estimators.dimension_sim.grr_sketches_exact) and estimate
through the product's own path (estimators.breakdown: group, suppress, estimate_frame). Per
segment and value it prints MSE / exact variance (bar: 0.9–1.1) and the coverage of the 95 %
intervals (bar: ≥ 0.93); the last line checks that no run ever showed the small segment.
(That the stored total is exactly the sum of the segments is checked where it could fail, on
the collector's ingestion and `ldpt simulate`: tests/test_dimensions.py.)

The MSE ratio's standard error is about √(2/R) (0.022 at R = 4,000), the coverage's
√(0.95·0.05/R) (0.0034).

Then what clear dimensions reveal (docs/privacy.md, "Public dimensions"): for the example
registry docs/examples/dimensions.toml, and for it with a 30-value country added, the bits of
the combinations (log2 of their number, what `ldpt metrics check` limits), the entropy of the
combination in a simulated population of 10⁶ devices drawing each value independently with
the weights below, and the share of devices whose combination is held by fewer than 1 in 1,000.

Run: `python bench/breakdowns_public.py` (``--reps N``; ``--quick``: R = 1,000).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _common import print_table

from client_sdk.dimensions import combination_bits, combination_count
from client_sdk.registry import load_registry, parse_registry
from estimators.breakdown import breakdown_frame
from estimators.dimension_sim import grr_count_variance, grr_sketches_exact, rare_combination_share
from sketches import server_half
from sketches.base import Sketch

REGISTRY = """
[dimensions.os]
values = ["android", "ios", "web"]

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system", "contrast"]
protocol = "grr"
epsilon = 1.0
dimensions = ["os"]
"""
#: true counts per segment: (light, dark, system, contrast); "web" is below min_reports
SEGMENTS = {"android": [12_000, 5_000, 2_500, 500], "ios": [3_000, 3_000, 1_500, 500],
            "other": [1_500, 800, 600, 100], "web": [400, 300, 150, 50]}
MIN_REPORTS = 1000


def run(reps: int, seed: int = 2026) -> tuple[list[list[object]], bool]:
    spec = parse_registry(REGISTRY).get("theme")
    proto = server_half(spec)
    rng = np.random.default_rng(seed)
    truth = {s: np.asarray(c, dtype=np.int64) for s, c in SEGMENTS.items()}
    draws = {s: grr_sketches_exact(proto, c, reps, rng) for s, c in truth.items()}
    shown = {s: [] for s in SEGMENTS}
    leaked = False
    for r in range(reps):
        groups = {(s,): Sketch(draws[s][r][None, :].copy(), np.array([int(truth[s].sum())])) for s in SEGMENTS}
        df = breakdown_frame(spec, groups, ["os"], MIN_REPORTS)
        leaked |= "web" in set(df["os"]) or df.attrs["suppressed"] != 1
        for s, part in df.groupby("os"):
            shown[s].append(part[["estimate", "ci_low", "ci_high"]].to_numpy())
    rows = []
    for s in ("android", "ios", "other"):
        est = np.stack(shown[s])                       # (reps, d, 3)
        theory = grr_count_variance(proto, truth[s])
        mse = ((est[:, :, 0] - truth[s]) ** 2).mean(axis=0)
        cover = ((est[:, :, 1] <= truth[s]) & (truth[s] <= est[:, :, 2])).mean(axis=0)
        for v, value in enumerate(spec.categories or ()):
            rows.append([s, value, int(truth[s].sum()), f"{mse[v] / theory[v]:.3f}", f"{cover[v]:.3f}"])
    return rows, leaked


#: Simulated populations' value weights, in the order of each dimension's domain (its values,
#: then other, then unknown: devices whose SDK sends no value).
POPULATION = {"os": [0.70, 0.285, 0.01, 0.005],
              "app_version": [0.04, 0.11, 0.30, 0.50, 0.04, 0.01],
              "channel": [0.94, 0.05, 0.005, 0.005]}
COUNTRIES = 30  # the wider registry's country: Zipf(1) over 30 values, then other and unknown


def privacy_rows(devices: int = 1_000_000, seed: int = 7) -> list[list[object]]:
    reg = load_registry(Path(__file__).resolve().parent.parent / "docs" / "examples" / "dimensions.toml")
    dims = list(reg.dimension_table.dimensions.values())
    weights = [POPULATION[d.name] for d in dims]
    zipf = [1 / (i + 1) for i in range(COUNTRIES)] + [0.02, 0.005]
    rows = []
    for label, w, count in (("docs/examples/dimensions.toml", weights, combination_count(dims)),
                            (f"+ country ({COUNTRIES} values)", weights + [zipf],
                             combination_count(dims) * (COUNTRIES + 2))):
        share, entropy = rare_combination_share(w, devices, np.random.default_rng(seed))
        bits = float(np.log2(count))
        rows.append([label, f"{count:,}", f"{bits:.2f}", f"{entropy:.2f}", f"{100 * share:.2f} %",
                     "refused" if bits > reg.dimension_table.max_bits else "accepted"])
    assert abs(combination_bits(dims) - float(rows[0][2])) < 0.01
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 1000 if args.quick else args.reps
    rows, leaked = run(reps)
    print(f"GRR d=4 eps=1, by os, R = {reps:,} seeded runs; bars: MSE/theory in [0.9, 1.1], coverage >= 0.93")
    print_table(["segment", "value", "n", "MSE/theory", "coverage"], rows)
    ratios = [float(r[3]) for r in rows]
    covers = [float(r[4]) for r in rows]
    print(f"MSE/theory from {min(ratios):.3f} to {max(ratios):.3f}; coverage from {min(covers):.3f} "
          f"to {max(covers):.3f}; the segment under min_reports shown in a run: "
          f"{'YES' if leaked else 'never'}")
    print()
    print_table(["registry", "combinations", "bits (log2)", "entropy (simulated)", "rarer than 1/1000",
                 "ldpt metrics check"], privacy_rows(),
                title="What clear dimensions reveal (10^6 simulated devices, seed 7)")


if __name__ == "__main__":
    main()
