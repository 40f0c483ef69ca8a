"""Numeric mean mechanisms: variance, measured MSE, encode speed and `auto`'s choice.

For ε ∈ {0.5, 1, 2, 4} and every mechanism (default options): the exact worst-case
per-report variance on [−1, 1]; the measured MSE of the mean over its exact theoretical
variance (Σ value_variance(t)/n²) on uniform, skewed (2·Beta(0.5, 4) − 1) and range-end
(half −1, half +1) data, through the real path (encode_values, accumulate, estimate; seeded
PCG64; R runs of n reports as one vectorised batch); vectorised encode throughput
(encode_values on 2M values: discretise + encode); the SDK path's encode_one latency
(OS CSPRNG, plain Python); and which mechanism `auto` picks, with its worst-case variance
over the best one's. Goals (issue 8): MSE/theory <= 1.1, encode >= 2M reports/s,
auto within 1.02× of the best.

Run from the repository root: `python bench/numeric.py` (``--runs`` R, ``--clients`` n).
"""

from __future__ import annotations

import argparse
import time
import zlib

import numpy as np
from _common import median_time, print_table

from client_sdk.protocols.factory import choose_numeric_protocol
from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES
from sketches import build_server

EPSILONS = (0.5, 1.0, 2.0, 4.0)
THROUGHPUT_BATCH = 2_000_000


def data_sets(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "uniform": rng.uniform(-1.0, 1.0, n),
        "skewed": 2.0 * rng.beta(0.5, 4.0, n) - 1.0,
        "ends": np.repeat([-1.0, 1.0], n // 2),
    }


def mse_ratio(proto, t: np.ndarray, runs: int, rng: np.random.Generator) -> float:
    """Measured MSE of the mean of ``t`` over R runs / exact Var of the mean."""
    n = t.shape[0]
    y = proto.encode_values(np.tile(t, runs), rng)["y"].reshape(runs, n)
    errors = []
    for row in y:  # R sketches (bincount is the collector's accumulate)
        sketch = proto.new_sketch()
        proto.accumulate(sketch, {"y": row})
        errors.append(proto.estimate(sketch).mean - t.mean())
    theory = float(proto.value_variance(t).mean()) / n
    return float(np.mean(np.square(errors))) / theory


def encode_one_latency(proto, draws: int = 20_000) -> tuple[float, float]:
    """(p50, p99) of discretise_one + encode_one in µs (OS CSPRNG)."""
    times = np.empty(draws)
    clock = time.perf_counter_ns
    for i in range(draws):
        start = clock()
        proto.randomise(proto.discretise_one(0.37))
        times[i] = clock() - start
    return float(np.percentile(times, 50)) / 1e3, float(np.percentile(times, 99)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="R runs per MSE point")
    parser.add_argument("--clients", type=int, default=500, help="n reports per run")
    args = parser.parse_args()
    rows, auto_rows, worst = [], [], {}
    values = np.random.default_rng(0).uniform(-1, 1, THROUGHPUT_BATCH)
    for eps in EPSILONS:
        variances = {}
        for name in NUMERIC_PROTOCOL_NAMES:
            proto = build_server(name, None, eps, {})
            variances[name] = proto.worst_case_variance()
            rng = np.random.default_rng(zlib.crc32(f"{name}/{eps}".encode()))
            ratios = {label: mse_ratio(proto, t, args.runs, rng)
                      for label, t in data_sets(rng, args.clients).items()}
            worst[name] = max(worst.get(name, 0.0), *ratios.values())
            seconds = median_time(lambda p=proto, g=rng: p.encode_values(values, g), repeat=3)
            p50, p99 = encode_one_latency(proto)
            rows.append((eps, name, proto.epsilon, proto.cells, variances[name], ratios["uniform"],
                         ratios["skewed"], ratios["ends"], THROUGHPUT_BATCH / seconds, p50, p99))
        chosen = choose_numeric_protocol(eps)
        best = min(variances, key=variances.get)
        auto_rows.append((eps, chosen, variances[chosen], best, variances[chosen] / variances[best]))
    print_table(["eps", "mechanism", "realised eps", "cells", "worst Var", "MSE/th uniform",
                 "MSE/th skewed", "MSE/th ends", "encode/s", "one p50 us", "one p99 us"], rows,
                f"Numeric mechanisms on [-1, 1]: n = {args.clients:,} reports, R = {args.runs} runs per "
                "MSE point (MSE/theory sd ~ sqrt(2/R))")
    print_table(["eps", "auto picks", "its worst Var", "best", "auto/best"], auto_rows,
                "auto: smallest worst-case per-report variance")
    print_table(["mechanism", "worst MSE/theory"], sorted(worst.items()), "Worst measured ratio")


if __name__ == "__main__":
    main()
