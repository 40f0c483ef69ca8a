"""RAPPOR benchmark: decoder accuracy and speed, and the SDK's single-report encode rate.

Setup (issue #3): k=128, h=2, m=64, p=0.5, q=0.75, f=0.5; 100 true strings with Zipf(1)
frequencies plus 100 decoys; sketches drawn from the exact per-bit model
(estimators.rappor.sample_sketch); n = 100,000 and 1,000,000; several seeds. Per setting:

- TV: mean total variation, ½ Σ |f̂·1[detected] − f| over all candidates (min–max over seeds)
- detected true strings, false positives per 100 decoys
- coverage of the 95% intervals: of the detected true strings, and of all 100 true strings

for the default family-wise control (Holm, 5%) and for FDR (Benjamini–Hochberg, 5%). The
"oracle" row thresholds ideal unbiased estimates f̂ ~ N(f, SE²) with the decoder's own SEs
(Holm): the floor any unbiased estimator with the same noise and error control would reach.
Then decode time for 1,100 and 10,100 candidates, and single-report encode speed through
the SDK path (client secret given, rng=None: HMAC PRR + OS-CSPRNG IRR) on one core.

Goals: TV ≤ 0.28 (100k) and ≤ 0.15 (1M); ≤ 1 false positive per 100 decoys; coverage
≥ 0.93; decode ≤ 2 s (1,100) and ≤ 10 s (10,100); encode ≥ 50,000 reports/s.
Google's decoder on such inputs: TV 0.27–0.34 (mean 0.30) at 100k with 14–17 detected, 0–2 FP
and coverage 64–71%; at 1M TV 0.16 with 3 FP; 129 s for 1,100 candidates.

Run: `python bench/rappor.py [--seeds S] [--quick]`.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, as the goals state

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from _common import median_time, print_table  # noqa: E402
from scipy import stats  # noqa: E402

from client_sdk.protocols.factory import build_protocol  # noqa: E402
from estimators.multiple_testing import holm  # noqa: E402
from estimators.rappor import CandidateMap, decode, sample_sketch  # noqa: E402

N_TRUE = 100


def candidates(n_decoys: int) -> list[str]:
    return [f"true-{i:03d}.example.com" for i in range(N_TRUE)] + \
        [f"decoy-{i:05d}.example.org" for i in range(n_decoys)]


def truth_vector(n_decoys: int) -> np.ndarray:
    w = 1.0 / np.arange(1, N_TRUE + 1)
    return np.r_[w / w.sum(), np.zeros(n_decoys)]


def accuracy(n: int, seeds: int) -> list[list[object]]:
    proto = build_protocol("rappor", None, None, {})
    values = candidates(100)
    cmap = CandidateMap.from_strings(values, proto.params)
    truth = truth_vector(100)
    stats_by = {c: {"tv": [], "det": [], "fp": [], "cov_det": [], "cov_all": []} for c in ("fwer", "fdr", "oracle")}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        sketch = sample_sketch(proto.params, cmap, truth, n, rng)
        for control in ("fwer", "fdr"):
            df = decode(sketch, proto, cmap, control=control).set_index("value").loc[values]
            est, det = df["proportion"].to_numpy(), df["detected"].to_numpy()
            covered = ((df["ci_low"] <= truth * n) & (truth * n <= df["ci_high"])).to_numpy()
            s = stats_by[control]
            s["tv"].append(0.5 * np.abs(np.where(det, est, 0.0) - truth).sum())
            s["det"].append(det[:N_TRUE].sum())
            s["fp"].append(det[N_TRUE:].sum())
            s["cov_det"].extend(covered[:N_TRUE][det[:N_TRUE]].tolist())
            s["cov_all"].append(covered[:N_TRUE].mean())
            if control == "fwer":  # oracle: unbiased normal estimates with the decoder's SEs
                se = (df["std_err"] / n).to_numpy()
                ideal = truth + rng.normal(0.0, se)
                odet = holm(stats.norm.sf(ideal / se), 0.05)
                o = stats_by["oracle"]
                o["tv"].append(0.5 * np.abs(np.where(odet, ideal, 0.0) - truth).sum())
                o["det"].append(odet[:N_TRUE].sum())
                o["fp"].append(odet[N_TRUE:].sum())
    rows = []
    for control, s in stats_by.items():
        tv = np.array(s["tv"])
        rows.append([f"{n:,}", control, f"{tv.mean():.3f}", f"{tv.min():.3f}–{tv.max():.3f}",
                     f"{np.mean(s['det']):.1f}", f"{np.mean(s['fp']):.2f}",
                     f"{np.mean(s['cov_det']):.3f}" if s["cov_det"] else "-",
                     f"{np.mean(s['cov_all']):.3f}" if s["cov_all"] else "-"])
    return rows


def decode_times(repeat: int) -> list[list[object]]:
    proto = build_protocol("rappor", None, None, {})
    rows = []
    for n_decoys in (1_000, 10_000):
        values = candidates(n_decoys)
        cmap = CandidateMap.from_strings(values, proto.params)
        sketch = sample_sketch(proto.params, cmap, truth_vector(n_decoys), 1_000_000, np.random.default_rng(0))
        seconds = median_time(lambda sk=sketch, vs=values: decode(sk, proto, vs), repeat)  # hashing included
        df = decode(sketch, proto, values)
        s = df.attrs["summary"]
        rows.append([f"{len(values):,}", f"{seconds:.2f}", "screened" if s["screened"] else "all at once",
                     s["model_size"], s["detected"]])
    return rows


def encode_rate(reports: int) -> list[list[object]]:
    proto = build_protocol("rappor", None, None, {})
    secret = os.urandom(32)
    rows = []
    for label, values in (("one value (Bloom row cached)", ["www.example.com"] * reports),
                          ("a new value every report", [f"www.site-{i}.example" for i in range(reports)])):
        proto.encode(values[:10], secret=secret, metric="home_page")  # warm up
        start = time.perf_counter()
        for v in values:
            proto.encode([v], secret=secret, metric="home_page")
        elapsed = time.perf_counter() - start
        rows.append([label, f"{reports / elapsed:,.0f}", f"{elapsed / reports * 1e6:.1f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per sample size")
    parser.add_argument("--quick", action="store_true", help="5 seeds, fewer timing repeats")
    args = parser.parse_args()
    seeds = 5 if args.quick else args.seeds
    rows = accuracy(100_000, seeds) + accuracy(1_000_000, seeds)
    print_table(["n", "control", "mean TV", "TV range", "true detected", "FP / 100 decoys",
                 "coverage (detected)", "coverage (all true)"], rows,
                f"Accuracy: 100 Zipf(1) strings + 100 decoys, {seeds} seeds (goals: TV <= 0.28 / 0.15, "
                "FP <= 1, coverage >= 0.93)")
    print_table(["candidates", "decode s", "mode", "model size", "detected"], decode_times(1 if args.quick else 3),
                "Decode time at n = 1,000,000, one core, hashing included (goals: 2 s / 10 s)")
    print_table(["SDK path, k = 128", "reports/s", "µs/report"], encode_rate(5_000 if args.quick else 30_000),
                "Single-report encode: secret given, rng=None (goal >= 50,000 reports/s)")


if __name__ == "__main__":
    main()
