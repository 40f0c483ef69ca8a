"""Ranges of memoised metrics: false detections of values nobody holds, and their coverage.

d = 300 categories of which 5 are held (weights 5:4:3:2:1), ε₁/ε∞ = 5/7, every device reporting
every day with no change; seeded runs of ``estimators.longitudinal.simulate_days``, estimated by
``estimators.memo_range.range_frame``. Columns: the share of runs in which Holm (α = 0.05)
flags any value nobody held (and its binomial SE), the coverage of those values' 95 % range
intervals and of the held values', and the share of runs detecting each held value (power;
``--held`` sets their weights). docs/math.md §10a ("Tests of 'nobody holds v' over a range") and docs/benchmarks.md
quote the table.

Run: `python bench/memo_detection.py [--runs R] [--cells loloha:500:7 lgrr:500:7 ...] [--held 5,4,3,2,1]`.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
from _common import print_table

from client_sdk.registry import parse_registry
from estimators.longitudinal import simulate_days
from estimators.memo_range import range_frame

CELLS = ("loloha:500:7", "loloha:5000:7", "loloha:500:14", "biloloha:500:7", "lgrr:500:7", "losue:500:7")
D = 300


def spec_of(protocol: str):
    extra = {"hash_range": 2} if protocol == "biloloha" else {}
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(D)],
             "protocol": "loloha" if protocol == "biloloha" else protocol,
             "epsilon": 5.0, "epsilon_inf": 7.0, **extra}
    return parse_registry({"metrics": {"m": table}}).get("m")


def cell(protocol: str, clients: int, days: int, runs: int, truth_csv: Path, held: list[int]) -> list[object]:
    spec = spec_of(protocol)
    flagged, absent_cov, held_cov, power = 0, [], [], []
    for r in range(runs):
        windows = list(simulate_days(spec, clients, f"csv:{truth_csv}", days, 0.0, np.random.default_rng(5000 + r)))
        truth = np.sum([w.true_counts for w in windows], axis=0)
        df = range_frame(spec, [(str(w.day), w.sketch) for w in windows])
        absent = truth == 0
        flagged += bool(df.detected.to_numpy().astype(bool)[absent].any())
        inside = (df.ci_low.to_numpy() <= truth) & (truth <= df.ci_high.to_numpy())
        absent_cov.append(inside[absent].mean())
        held_cov.extend(inside[~absent])
        power.append(df.detected.to_numpy().astype(bool)[held])
    se = math.sqrt(max(flagged, 1) / runs * (1 - flagged / runs) / runs)
    detected = " ".join(f"{x:.2f}" for x in np.mean(power, axis=0))
    return [protocol, clients, days, runs, flagged / runs, se, float(np.mean(absent_cov)), float(np.mean(held_cov)),
            detected]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--cells", nargs="*", default=list(CELLS), help="protocol:clients:days")
    parser.add_argument("--held", default="5,4,3,2,1",
                        help="weights of the 5 held values (e.g. 200,4,2,1,1 for a few weak ones: power)")
    args = parser.parse_args()
    weights = [int(w) for w in args.held.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        truth_csv = Path(tmp) / "five.csv"
        truth_csv.write_text("value,count\n" + "".join(f"v{i * (D // len(weights))},{w}\n"
                                                        for i, w in enumerate(weights)))
        rows = []
        for text in args.cells:
            protocol, clients, days = text.split(":")
            rows.append(cell(protocol, int(clients), int(days), args.runs, truth_csv,
                             [i * (D // len(weights)) for i in range(len(weights))]))
    print_table(("protocol", "devices", "days", "runs", "Holm false-detect", "SE", "absent cov", "held cov",
                 "held detected"), rows,
                title=f"memoised ranges, d = {D}, held values weighted {args.held}, eps 5/7")


if __name__ == "__main__":
    main()
