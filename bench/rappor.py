"""RAPPOR benchmark: the decoded distribution and detection against Google's decoder, and speed.

Default set (issue #11): k=128, h=2, m=64, p=0.5, q=0.75, f=0.5; 100 true strings with Zipf(1)
frequencies plus 100 decoys; sketches drawn from the exact per-bit model
(estimators.rappor.sample_sketch); n = 100,000 and 1,000,000; several seeds. Per method:

- ``shares``: the decoded distribution (``share`` column, docs/rappor.md); ``fwer`` / ``fdr``:
  the unbiased estimates of the strings detected by Holm / Benjamini–Hochberg at 5%
- TV: mean total variation ½ Σ |f̂ − f| over all candidates (f̂ = 0 where not reported /
  not detected), with its min–max over seeds
- true strings reported, false strings per 100 decoys, coverage of the 95% intervals of the
  reported strings (share_low/share_high for shares, ci_low/ci_high for detections)

Google's decoder on the default set (issue #11; its R decoder, not run here): mean TV 0.299 at
100k (0.27–0.34, 14–17 detected, 0–2 false, intervals covering 64–71%) and 0.162 at 1M (3 false).

Then the same for other laws (Zipf(1.5), uniform, exponential), decoy ratios (10, 1,000) and
parameter sets (Chromium's NORMAL_NOISE, the google/rappor demo); the winner's-curse case
(uniform law: reporting none gives TV 0.50); the calibration of the outside-the-list mass when
every string is listed (share of runs whose 95% interval covers 0, per-bit model and the real
encoder); decode time for 1,100 and 10,100 candidates; the SDK's single-report encode rate.

Goals: shares TV <= 0.28 (100k) and <= 0.15 (1M); <= 1 false string per 100 decoys;
coverage >= 0.93; outside-mass coverage >= 0.95; decode <= 2 s (1,100) and <= 10 s (10,100);
encode >= 50,000 reports/s.

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

from estimators.rappor import CandidateMap, decode, sample_sketch  # noqa: E402
from sketches import build_server  # noqa: E402

N_TRUE = 100
#: Parameter sets beside the default (docs/rappor.md's table).
PARAMS = {"default": {}, "chromium-normal": {"cohorts": 128, "prob_p": 0.25},
          "google-demo": {"bloom_bits": 16}}
METHODS = ("shares", "fwer", "fdr")


def candidates(n_decoys: int, n_true: int = N_TRUE) -> list[str]:
    return [f"true-{i:03d}.example.com" for i in range(n_true)] + \
        [f"decoy-{i:05d}.example.org" for i in range(n_decoys)]


def law(name: str, n_true: int = N_TRUE) -> np.ndarray:
    """Proportions of the true strings: zipf:S, uniform or exponential (π ∝ e^(−i/20))."""
    rank = np.arange(1, n_true + 1, dtype=np.float64)
    if name.startswith("zipf:"):
        w = rank ** -float(name[5:])
    elif name == "uniform":
        w = np.ones(n_true)
    elif name == "exponential":
        w = np.exp(-rank / 20)
    else:
        raise ValueError(name)
    return w / w.sum()


def truth_vector(n_decoys: int, name: str = "zipf:1") -> np.ndarray:
    return np.r_[law(name), np.zeros(n_decoys)]


def scenario(n: int, seeds: int, name: str = "zipf:1", n_decoys: int = 100,
             setting: str = "default") -> dict[str, dict[str, float]]:
    """Mean TV, TV range, true reported, false per 100 decoys and coverage, per method."""
    proto = build_server("rappor", None, None, PARAMS[setting])
    values = candidates(n_decoys)
    cmap = CandidateMap.from_strings(values, proto.params)
    truth = truth_vector(n_decoys, name)
    acc = {m: {"tv": [], "true": [], "false": [], "cov": []} for m in METHODS}
    for seed in range(seeds):
        sketch = sample_sketch(proto.params, cmap, truth, n, np.random.default_rng(seed))
        df = decode(sketch, proto, cmap).set_index("value").loc[values]
        est = df["proportion"].to_numpy()
        picks = {"shares": (df["reported"].to_numpy(), df["share"].to_numpy(),
                            df["share_low"].to_numpy(), df["share_high"].to_numpy()),
                 "fwer": (df["detected"].to_numpy(), est, (df["ci_low"] / n).to_numpy(),
                          (df["ci_high"] / n).to_numpy())}
        # Benjamini–Hochberg on the same p-values, with its own selective intervals
        fdr = decode(sketch, proto, cmap, control="fdr").set_index("value").loc[values]
        picks["fdr"] = (fdr["detected"].to_numpy(), est, (fdr["ci_low"] / n).to_numpy(),
                        (fdr["ci_high"] / n).to_numpy())
        for method, (chosen, value, low, high) in picks.items():
            a = acc[method]
            a["tv"].append(0.5 * np.abs(np.where(chosen, value, 0.0) - truth).sum())
            a["true"].append(chosen[:N_TRUE].sum())
            a["false"].append(100.0 * chosen[N_TRUE:].sum() / max(n_decoys, 1))
            a["cov"].extend(((low <= truth) & (truth <= high))[chosen].tolist())
    return {m: {"tv": float(np.mean(a["tv"])), "tv_min": float(np.min(a["tv"])), "tv_max": float(np.max(a["tv"])),
                "true": float(np.mean(a["true"])), "false": float(np.mean(a["false"])),
                "cov": float(np.mean(a["cov"])) if a["cov"] else float("nan")} for m, a in acc.items()}


GOOGLE = {100_000: "0.299 (0.27–0.34), 14–17 det., 0–2 false, cov. 0.64–0.71", 1_000_000: "0.162, 3 false"}


def accuracy(seeds: int) -> list[list[object]]:
    rows = []
    for n in (100_000, 1_000_000):
        res = scenario(n, seeds)
        for method, r in res.items():
            rows.append([f"{n:,}", method, f"{r['tv']:.3f}", f"{r['tv_min']:.3f}–{r['tv_max']:.3f}",
                         f"{r['true']:.1f}", f"{r['false']:.2f}", f"{r['cov']:.3f}"])
        rows.append([f"{n:,}", "google", GOOGLE[n], "", "", "", ""])
    return rows


def generality(seeds: int) -> list[list[object]]:
    cases = [("zipf:1.5", 100, "default"), ("uniform", 100, "default"), ("exponential", 100, "default"),
             ("zipf:1", 10, "default"), ("zipf:1", 1_000, "default"),
             ("zipf:1", 100, "chromium-normal"), ("zipf:1", 100, "google-demo")]
    rows = []
    for name, n_decoys, setting in cases:
        for n in (100_000, 1_000_000):
            r = scenario(n, seeds, name, n_decoys, setting)
            sh = r["shares"]
            rows.append([setting, name, n_decoys, f"{n:,}", f"{sh['tv']:.3f}", f"{r['fwer']['tv']:.3f}",
                         f"{r['fdr']['tv']:.3f}", f"{sh['true']:.1f}", f"{sh['false']:.2f}",
                         f"{r['fdr']['false']:.2f}", f"{sh['cov']:.3f}"])
    return rows


def outside_calibration(seeds: int) -> list[list[object]]:
    """Share of runs whose outside-the-list interval covers 0 when every true string is listed."""
    proto = build_server("rappor", None, None, {})
    rows = []
    for n_true, scale in ((200, 20), (1_000, 100)):
        values = [f"s{i}.example" for i in range(n_true)]
        w = np.exp(-np.arange(n_true) / scale)
        w /= w.sum()
        cmap = CandidateMap.from_strings(values, proto.params)
        for mode in ("per-bit model", "real encoder"):
            est, cover = [], []
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                if mode == "real encoder":
                    drawn = rng.choice(n_true, size=100_000, p=w)
                    sketch = proto.new_sketch()
                    proto.accumulate(sketch, proto.encode([values[i] for i in drawn], rng=rng))
                else:
                    sketch = sample_sketch(proto.params, cmap, w, 100_000, rng)
                s = decode(sketch, proto, cmap).attrs["summary"]
                est.append(s["mass_outside_model"])
                cover.append(abs(s["mass_outside_model"]) <= 1.96 * s["mass_outside_model_se"])
            rows.append([f"exponential, {n_true} strings", mode, f"{np.mean(est):+.3f}", f"{np.std(est):.3f}",
                         f"{np.mean(cover):.3f}"])
    return rows


def decode_times(repeat: int) -> list[list[object]]:
    proto = build_server("rappor", None, None, {})
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
    proto = build_server("rappor", None, None, {})
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
    print_table(["n", "method", "mean TV", "TV range", "true reported", "false / 100 decoys",
                 "coverage (reported)"], accuracy(seeds),
                f"Default set: 100 Zipf(1) strings + 100 decoys, {seeds} seeds (goals: shares TV <= 0.28 / 0.15, "
                "false <= 1, coverage >= 0.93)")
    print_table(["params", "law", "decoys", "n", "TV shares", "TV fwer", "TV fdr", "true reported",
                 "false/100 shares", "false/100 fdr", "coverage shares"], generality(max(3, seeds // 2)),
                f"Other laws, decoy ratios and parameter sets, {max(3, seeds // 2)} seeds "
                "(uniform: reporting nothing gives TV 0.50)")
    print_table(["population (all listed)", "sketch", "mean outside mass", "sd", "interval covers 0"],
                outside_calibration(seeds), f"Outside-the-list mass at n = 100,000, {seeds} seeds (goal >= 0.95)")
    print_table(["candidates", "decode s", "mode", "model size", "detected"], decode_times(1 if args.quick else 3),
                "Decode time at n = 1,000,000, one core, hashing included (goals: 2 s / 10 s)")
    print_table(["SDK path, k = 128", "reports/s", "µs/report"], encode_rate(5_000 if args.quick else 30_000),
                "Single-report encode: secret given, rng=None (goal >= 50,000 reports/s)")


if __name__ == "__main__":
    main()
