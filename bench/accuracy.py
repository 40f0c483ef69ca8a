"""Accuracy benchmark: empirical MSE of the frequency vector over its theoretical value.

For ε ∈ {0.5, 1, 2, 4} × d ∈ {2, 16, 128, 1024}, n = 100,000 (Zipf 1.1 truth), every protocol
and `auto`: ratio = mean over items and R runs of (f̂ − f)² divided by the protocol's own
theoretical Σ Var[f̂]/d (docs/math.md §2), and `auto`'s MSE over the best protocol's MSE.
Goals: every protocol within 1.1× of its theory (OLH within 1.5× of *plain* OLH theory),
auto within 1.1× of the best.

Large domains, d ∈ {10⁴, 10⁵, 10⁶} × ε ∈ {1, 2, 4}, n = 200,000 (issue 14): one run each of
`auto` with max_report_bytes = 64, HR and OLH; MSE over the optimum 4e^ε/(n(e^ε−1)²) per value
(goal ≤ 1.25 for auto) and over the protocol's own theory (one run averages d squared errors:
±3·sqrt(2/d) is 4 % at d = 10⁴). OLH's fixed cohorts need reports in every cohort, which
n = 200,000 cannot give its largest designs ("n/a").
Run: `python bench/accuracy.py [--runs R] [--quick] [--large-only | --no-large]`.
"""

from __future__ import annotations

import argparse
import math
import zlib

import numpy as np
from _common import print_table

from client_sdk.errors import EstimationError
from client_sdk.protocols.factory import AUTO_CANDIDATES, applicable, choose_protocol
from sketches import build_server

EPSILONS = (0.5, 1.0, 2.0, 4.0)
DOMAINS = (2, 16, 128, 1024)
LARGE_DOMAINS = (10_000, 100_000, 1_000_000)
LARGE_EPSILONS = (1.0, 2.0, 4.0)
LARGE_CLIENTS = 200_000
MOBILE_BUDGET = 64  # max_report_bytes for the large-domain `auto` rows


def plain_olh_variance(n: int, counts: np.ndarray, eps: float) -> np.ndarray:
    """Per-item variance of OLH with per-user hashes (docs/math.md §2 pure formula, g = round(e^ε)+1)."""
    g = round(math.exp(eps)) + 1
    p = math.exp(eps) / (math.exp(eps) + g - 1)
    q = 1 / g
    return n * q * (1 - q) / (p - q) ** 2 + counts * (1 - p - q) / (p - q)


def run_point(name: str, d: int, eps: float, n: int, runs: int, seed: int) -> tuple[float, float, float]:
    """(empirical MSE of f̂, its ratio to theory, theoretical MSE) for one protocol at one point."""
    proto = build_server(name, d, eps, {})
    rng = np.random.default_rng(seed)
    weights = np.arange(1, d + 1, dtype=float) ** -1.1
    truth = rng.multinomial(n, weights / weights.sum())
    labels = np.repeat(np.arange(d), truth)
    runs = max(runs, math.ceil(2000 / d))  # >= 2000 squared errors: ratio known to ~±3%
    sq = 0.0
    for _ in range(runs):
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(labels, rng))
        est = proto.estimate(sketch)
        sq += float(np.mean((est.counts - truth) ** 2)) / n**2
    mse = sq / runs
    theory_var = plain_olh_variance(n, truth, eps) if name == "olh" else proto.variance(n, truth)
    return mse, mse / (float(np.mean(theory_var)) / n**2), float(np.mean(proto.variance(n, truth))) / n**2


def optimum(eps: float) -> float:
    """n·Var[f̂] per value at the OUE/OLH optimum, 4e^ε/(e^ε−1)² (docs/math.md §2)."""
    e = math.exp(eps)
    return 4 * e / (e - 1) ** 2


def large_rows(seed: int = 14) -> list[tuple]:
    """One run per (d, ε, protocol): n·MSE, MSE/optimum, MSE/theory, report bits, seconds."""
    import time

    rows = []
    for d in LARGE_DOMAINS:
        rng = np.random.default_rng(seed)
        weights = np.arange(1, d + 1, dtype=float) ** -1.1
        truth = rng.multinomial(LARGE_CLIENTS, weights / weights.sum())
        labels = np.repeat(np.arange(d), truth)
        for eps in LARGE_EPSILONS:
            auto = choose_protocol(d, eps, MOBILE_BUDGET)
            for name in dict.fromkeys((auto, "hr", "olh")):
                label = f"{name} (auto, {MOBILE_BUDGET} B)" if name == auto else name
                try:
                    proto = build_server(name, d, eps, {})
                    start = time.perf_counter()
                    sketch = proto.new_sketch()
                    proto.accumulate(sketch, proto.encode(labels, rng))
                    est = proto.estimate(sketch)
                    seconds = time.perf_counter() - start
                except (ValueError, EstimationError) as exc:
                    rows.append((d, eps, label, "n/a", "n/a", "n/a", "-", str(exc)[:48]))
                    continue
                n_mse = float(np.mean((est.counts - truth) ** 2)) / LARGE_CLIENTS
                theory = float(np.mean(proto.variance(LARGE_CLIENTS, truth.astype(float)))) / LARGE_CLIENTS
                rows.append((d, eps, label, n_mse, n_mse / optimum(eps), n_mse / theory,
                             proto.payload_bits, f"{seconds:.2f} s"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="repetitions per point")
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="only ε ∈ {1, 4}, d ∈ {16, 128}")
    parser.add_argument("--large-only", action="store_true", help="only the d ∈ {10⁴, 10⁵, 10⁶} table")
    parser.add_argument("--no-large", action="store_true", help="skip the d ∈ {10⁴, 10⁵, 10⁶} table")
    args = parser.parse_args()
    if not args.no_large:
        print_table(["d", "eps", "protocol", "n*MSE(f)", "MSE/optimum", "MSE/theory", "report bits",
                     "encode+estimate"], large_rows(),
                    f"Large domains, n = {LARGE_CLIENTS:,}, Zipf(1.1), one run per point "
                    "(optimum = 4e^eps/(e^eps-1)^2 per value)")
    if args.large_only:
        return
    epsilons = (1.0, 4.0) if args.quick else EPSILONS
    domains = (16, 128) if args.quick else DOMAINS
    rows, worst = [], {}
    auto_rows = []
    for eps in epsilons:
        for d in domains:
            mses, theories = {}, {}
            for name in AUTO_CANDIDATES:
                if not applicable(name, d):
                    continue
                try:
                    mse, ratio, theory = run_point(name, d, eps, args.clients, args.runs, seed=zlib.crc32(f"{name}/{d}/{eps}".encode()))
                except ValueError as exc:
                    rows.append((eps, d, name, "n/a", "n/a", str(exc)[:40]))
                    continue
                mses[name] = mse
                theories[name] = theory
                worst[name] = max(worst.get(name, 0.0), ratio)
                rows.append((eps, d, name, mse * args.clients, ratio, ""))
            auto = choose_protocol(d, eps)
            best = min(mses, key=mses.get)
            best_theory = min(theories, key=theories.get)
            auto_rows.append((eps, d, auto, best, mses[auto] / mses[best], best_theory,
                              theories[auto] / theories[best_theory]))
    print_table(["eps", "d", "protocol", "n*MSE(f)", "MSE/theory", "note"], rows,
                f"Accuracy, n = {args.clients:,}, Zipf(1.1), {args.runs} runs per point "
                "(OLH ratio is against plain per-user-hash OLH theory)")
    print_table(["eps", "d", "auto picks", "empirically best", "MSE(auto)/MSE(best)",
                 "best in theory", "theory(auto)/theory(best)"], auto_rows,
                "auto vs the best protocol at each point")
    print_table(["protocol", "worst MSE/theory"], sorted(worst.items()), "Worst ratio per protocol")


if __name__ == "__main__":
    main()
