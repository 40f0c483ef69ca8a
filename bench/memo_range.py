"""Ranges of days of memoised metrics: coverage before/after the bound, and its price in width.

For each memoised frequency protocol, change rate and range length, seeded runs of
``estimators.longitudinal.simulate_days`` (first rounds drawn once per device and memo key,
second rounds fresh every day) give the device-days holding each value and the windows'
sketches, estimated two ways:

- summed: the windows' merged sketch as if its reports were independent (the old path);
- range:  ``estimators.memo_range.range_frame`` (Minkowski bound on the permanent part).

Columns: coverage of the 95 % intervals (runs × values), the range SE over the summed SE, and
the range SE over the empirical SD of the range estimate (its price: 1.00 is an exact SE).
docs/math.md, "Ranges of memoised metrics", quotes the table.

Run: `python bench/memo_range.py [--runs R] [--clients N]`.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import print_table

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from estimators.longitudinal import simulate_days
from estimators.memo_range import range_frame
from sketches import server_half

PROTOCOLS = (("lgrr", {}), ("losue", {}), ("loloha", {}), ("loloha", {"hash_range": 2}),
             ("dbitflip", {"sampled_buckets": 2}))
LENGTHS = (7, 30)


def spec(protocol: str, extra: dict, epsilon: float, epsilon_inf: float, d: int = 8):
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(d)], "protocol": protocol,
             "epsilon": epsilon, "epsilon_inf": epsilon_inf, **extra}
    return parse_registry({"metrics": {"m": table}}).get("m")


def cell(sp, rate: float, runs: int, clients: int) -> dict[int, tuple[float, float, float, float]]:
    """length -> (summed coverage, range coverage, range SE / summed SE, range SE / empirical SD)."""
    out: dict[int, list] = {n: [] for n in LENGTHS}
    for r in range(runs):
        days = list(simulate_days(sp, clients, "zipf:1.1", max(LENGTHS), rate, np.random.default_rng(r)))
        for n in LENGTHS:
            truth = np.sum([d.true_counts for d in days[:n]], axis=0)
            total = server_half(sp).new_sketch()
            for d in days[:n]:
                total = total.merge(d.sketch)
            old = estimate_frame(sp, total)
            new = range_frame(sp, [(str(d.day), d.sketch) for d in days[:n]])
            out[n].append((new.estimate.to_numpy() - truth, old.std_err.to_numpy(), new.std_err.to_numpy(),
                           (old.ci_low.to_numpy() <= truth) & (truth <= old.ci_high.to_numpy()),
                           (new.ci_low.to_numpy() <= truth) & (truth <= new.ci_high.to_numpy())))
    result = {}
    for n, rows in out.items():
        err, se_old, se_new, hit_old, hit_new = (np.array([row[i] for row in rows]) for i in range(5))
        result[n] = (float(hit_old.mean()), float(hit_new.mean()), float(np.mean(se_new / se_old)),
                     float(np.mean(se_new.mean(axis=0) / err.std(axis=0))))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--epsilon-inf", type=float, default=3.0)
    args = ap.parse_args()
    rows = []
    for protocol, extra in PROTOCOLS:
        sp = spec(protocol, extra, args.epsilon, args.epsilon_inf)
        label = "biloloha" if extra.get("hash_range") == 2 else protocol
        for rate in (0.0, 0.05, 0.5):
            for n, (c_old, c_new, widen, price) in cell(sp, rate, args.runs, args.clients).items():
                rows.append((label, rate, n, f"{c_old:.3f}", f"{c_new:.3f}", f"{widen:.2f}", f"{price:.2f}"))
    print_table(("protocol", "change/day", "days", "summed cov", "range cov", "SE range/summed",
                 "SE range/true SD"), rows,
                f"memoised ranges: {args.clients:,} devices, d = 8 (Zipf 1.1), eps1 = {args.epsilon}, "
                f"eps_inf = {args.epsilon_inf}, {args.runs} runs x 8 values per cell")


if __name__ == "__main__":
    main()
