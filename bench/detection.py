"""False detections at tiny support counts: the exact binomial p-value against the normal one.

Devices hold only the first five values of a large domain, so every other detection is false.
For each cell, R seeded runs simulate the sketch from its exact law (GRR: kept reports are
Binomial(c, p), the others uniform over the d − 1 other values; OUE: independent binomial bit
counts) and print the family-wise error rate of Holm and the mean false-discovery proportion
of Benjamini–Hochberg at α = 0.05, with the frame's p-values (the exact tail
P(Binomial(n, q*) ≥ S), estimators.intervals.zero_count_p_values) and with the normal ones
used before, 1 − Φ(ĉ/SE). Bar: α + 2·√(α(1 − α)/R) (0.0695 at R = 500).

A second table runs the protocols that keep the normal p-value (multi-cohort OLH, LOLOHA,
dBitFlipPM) through the real encoders and ``estimate_frame`` at d = 200, ε = 8, n = 500, R/5
runs each.

Run: `python bench/detection.py` (``--runs R``, default 500).
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import print_table
from scipy import stats

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from estimators.intervals import zero_count_p_values
from estimators.multiple_testing import benjamini_hochberg, holm
from estimators.simulation import Population, simulate_sketch
from sketches import build_server
from sketches.base import pure_estimate

HELD = 5
ALPHA = 0.05
CELLS = (("grr", 200, 8.0, 500), ("grr", 200, 8.0, 2000), ("grr", 10_000, 1.0, 2000),
         ("grr", 100_000, 1.0, 10_000), ("oue", 200, 8.0, 500))


def support_counts(proto, n: int, rng: np.random.Generator) -> np.ndarray:
    """One sketch's support counts, n devices spread evenly over values 0..4."""
    d = proto.domain_size
    if proto.name == "grr":
        held = np.repeat(np.arange(HELD), n // HELD)
        other = rng.integers(0, d - 1, size=held.shape[0])
        y = np.where(rng.random(held.shape[0]) < proto.p, held, other + (other >= held))
        return np.bincount(y, minlength=d)
    counts = rng.binomial(n, proto.q, size=d)
    c = n // HELD
    counts[:HELD] = rng.binomial(c, proto.p, size=HELD) + rng.binomial(n - c, proto.q, size=HELD)
    return counts


def rates(p_values: list[np.ndarray]) -> tuple[float, float, float]:
    """(Holm's family-wise error rate, Holm's false detections per run, BH's mean FDP)."""
    holm_false = np.array([holm(p, ALPHA)[HELD:].sum() for p in p_values])
    fdp = []
    for p in p_values:
        bh = benjamini_hochberg(p, ALPHA)
        fdp.append(bh[HELD:].sum() / max(1, bh.sum()))
    return float((holm_false > 0).mean()), float(holm_false.mean()), float(np.mean(fdp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    rows = []
    for name, d, eps, n in CELLS:
        proto = build_server(name, d, eps, {})
        rng = np.random.default_rng(17)
        exact, normal = [], []
        for _ in range(args.runs):
            support = support_counts(proto, n, rng)
            exact.append(zero_count_p_values(support, n, proto.q))
            counts, variances = pure_estimate(support, n, proto.p, proto.q)
            with np.errstate(divide="ignore", invalid="ignore"):
                normal.append(stats.norm.sf(counts / np.sqrt(variances)))
        rows.append((name, f"{d:,}", eps, f"{n:,}", *rates(normal), *rates(exact)))
    print_table(("protocol", "d", "ε", "n", "normal: Holm FWER", "false/run", "BH FDR",
                 "exact: Holm FWER", "false/run", "BH FDR"), rows,
                f"False detections, {args.runs} runs per cell (bar {ALPHA + 2 * (ALPHA * (1 - ALPHA) / args.runs) ** 0.5:.4f})")
    runs = max(1, args.runs // 5)
    rows = [normal_protocol_rates(name, runs) for name in ("olh", "loloha", "dbitflip")]
    print_table(("protocol", "Holm FWER", "false/run", "BH FDR"), rows,
                f"Normal p-values through estimate_frame, d = 200, ε = 8, n = 500, {runs} runs "
                f"(bar {ALPHA + 2 * (ALPHA * (1 - ALPHA) / runs) ** 0.5:.4f})")


def normal_protocol_rates(protocol: str, runs: int) -> tuple:
    """Holm's and BH's false detections for a protocol with a normal p-value, end to end."""
    categories = ", ".join(f'"c{i}"' for i in range(200))
    memo = "epsilon_inf = 10.0\n" if protocol != "olh" else ""
    spec = parse_registry(f'[metrics.m]\nkind = "categorical"\ncategories = [{categories}]\n'
                          f'protocol = "{protocol}"\nepsilon = 8.0\n{memo}').get("m")
    counts = np.zeros(200, dtype=np.int64)
    counts[:HELD] = 500 // HELD
    rng = np.random.default_rng(3)
    p_values = []
    for _ in range(runs):
        sketch = simulate_sketch(spec, Population(list(spec.domain), counts), rng)
        p_values.append(estimate_frame(spec, sketch)["p_value"].to_numpy())
    return (protocol, *rates(p_values))


if __name__ == "__main__":
    main()
