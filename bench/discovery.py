"""Discovery benchmark: heavy hitters without a candidate list (protocol = "discover").

Setup (issue #11, section 1): a Zipf(1.1) law over 10,000 generated host names of at most 16
UTF-8 bytes (estimators.simulation.host_names), n ∈ {10⁵, 10⁶}, ε ∈ {2, 4, 8}, registry
defaults (max_length 16, hash_range round(e^ε)+1, seeds by default_seeds), `--top 20`.
Reports are drawn with the real encoder (seeded), folded into the real sketch, decoded by
estimators.discovery.discover. Per setting (mean over seeds):

- recall@10, recall@20: share of the true top-10 / top-20 among the *detected* strings
- false: detected strings that no device holds
- TV: ½ Σ |f̂·1[detected] − f| over the true top-20 ∪ the detected strings (shares of n)
- coverage: share of the detected strings whose 95% interval covers the true count
- decode: server time of one decode (wall, single BLAS thread) and its peak memory (tracemalloc,
  first seed), sketch size, bytes per report (msgpack of one wire payload)

Side by side: the same population reported through RAPPOR (k=128, h=2, m=64, f=1/128 and
p = 1 − q with one-report ε₁ equal to the row's ε) and decoded by estimators.rappor.decode with
the true list of 10,000 strings as candidates — the ideal case for RAPPOR.

Bars (n = 10⁶, ε = 4): recall@10 ≥ 0.9, recall@20 ≥ 0.8, ≤ 1 false string, coverage ≥ 0.93,
decode ≤ 30 s on 2 cores.

Run: `python bench/discovery.py [--seeds S] [--quick] [--no-rappor]`.
"""

from __future__ import annotations

import os

from sketches import server_half

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
from _common import print_table  # noqa: E402

from client_sdk.registry import parse_registry  # noqa: E402
from estimators.discovery import discover  # noqa: E402
from estimators.simulation import draw_population, simulate_sketch  # noqa: E402

TOP = 20


RAPPOR_F = 1 / 128  # the smallest PRR noise on its 7-bit grid: RAPPOR at its most accurate


def rappor_options(epsilon: float) -> dict:
    """RAPPOR with h = 2, f = 1/128 and p = 1 − q, so q* = f/2 + (1−f)q = 1 − p* and the
    one-report ε₁ = 2h·ln(q*/(1−q*)) equals ε (Erlingsson et al. 2014)."""
    q_star = 1 / (1 + math.exp(-epsilon / 4))
    q = (q_star - RAPPOR_F / 2) / (1 - RAPPOR_F)
    return {"kind": "string", "protocol": "rappor", "bloom_bits": 128, "hashes": 2, "cohorts": 64,
            "prob_f": RAPPOR_F, "prob_p": round(1 - q, 6), "prob_q": round(q, 6)}


def score(df, truth: dict[str, int], n: int, ranked: list[str]) -> dict:
    reported = df[df.detected]
    found = set(reported.value)
    top10, top20 = set(ranked[:10]), set(ranked[:TOP])
    true_share = {v: truth.get(v, 0) / n for v in top20 | found}
    est_share = dict(zip(reported.value, reported.estimate / n))
    tv = 0.5 * sum(abs(est_share.get(v, 0.0) - f) for v, f in true_share.items())
    covered = [lo <= truth.get(v, 0) <= hi for v, lo, hi in zip(reported.value, reported.ci_low, reported.ci_high)]
    return {"recall10": len(found & top10) / 10, "recall20": len(found & top20) / TOP,
            "false": sum(truth.get(v, 0) == 0 for v in found), "tv": tv,
            "coverage": float(np.mean(covered)) if covered else math.nan, "detected": len(found)}


def peak_mib(func, *args, **kwargs) -> float:
    """Peak memory allocated while ``func`` runs (tracemalloc sees numpy's buffers), in MiB."""
    tracemalloc.start()
    try:
        func(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def wire_bytes(proto) -> int:
    """Size of one report's payload on the wire (msgpack)."""
    return len(msgpack.packb(proto.to_wire(proto.encode(["example.org"], np.random.default_rng(0)))[0]))


def run_setting(n: int, epsilon: float, seeds: int, with_rappor: bool) -> list[list]:
    reg = parse_registry({"metrics": {
        "home": {"kind": "string", "protocol": "discover", "epsilon": epsilon},
        "home_rappor": rappor_options(epsilon)}})
    spec, rspec = reg.get("home"), reg.get("home_rappor")
    proto = server_half(spec)
    rows = []
    results: dict[str, list[dict]] = {"discover": [], "rappor": []}
    times: dict[str, list[float]] = {"discover": [], "rappor": []}
    peaks: dict[str, float] = {}
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        pop = draw_population(spec, n, "hosts:1.1", rng)
        truth = dict(zip(pop.values, pop.counts.tolist()))
        ranked = [pop.values[i] for i in np.argsort(-pop.counts, kind="stable")]
        sketch = simulate_sketch(spec, pop, rng)
        start = time.perf_counter()
        df = discover(proto, sketch, top=TOP)
        times["discover"].append(time.perf_counter() - start)
        results["discover"].append(score(df, truth, n, ranked))
        if seed == 0:
            peaks["discover"] = peak_mib(discover, proto, sketch, top=TOP)
        if with_rappor:
            from estimators.rappor import decode

            rsketch = simulate_sketch(rspec, pop, rng)
            start = time.perf_counter()
            rdf = decode(rsketch, server_half(rspec), pop.values)
            times["rappor"].append(time.perf_counter() - start)
            top = rdf.nlargest(TOP, "estimate")
            results["rappor"].append(score(top, truth, n, ranked))
            if seed == 0:
                peaks["rappor"] = peak_mib(decode, rsketch, server_half(rspec), pop.values)
    for name, res in results.items():
        if not res:
            continue
        p = server_half(spec) if name == "discover" else server_half(rspec)
        cells = p.new_sketch().counts.size
        mean = {k: float(np.nanmean([r[k] for r in res])) for k in res[0]}
        rows.append([f"{n:,}", epsilon, name, round(p.epsilon, 3), mean["recall10"], mean["recall20"],
                     mean["false"], mean["detected"], mean["tv"], mean["coverage"],
                     float(np.median(times[name])), round(peaks[name]), f"{cells * 8 / 2**20:.1f} MiB",
                     wire_bytes(p)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeded populations per setting")
    parser.add_argument("--quick", action="store_true", help="n = 10^5 and 10^6 at epsilon 4 only")
    parser.add_argument("--no-rappor", action="store_true", help="skip the RAPPOR comparison")
    args = parser.parse_args()
    settings = [(n, e) for n in (100_000, 1_000_000) for e in ((4.0,) if args.quick else (2.0, 4.0, 8.0))]
    rows = []
    for n, e in settings:
        rows += run_setting(n, e, args.seeds, with_rappor=not args.no_rappor)
    print_table(["n", "eps", "method", "eps_real", "recall@10", "recall@20", "false", "detected", "TV",
                 "coverage", "decode s", "decode MiB", "sketch", "bytes/report"], rows,
                title=f"Discovery of the top-{TOP} of Zipf(1.1) over 10,000 host names "
                      f"(mean of {args.seeds} seeds; RAPPOR decodes the true list)")


if __name__ == "__main__":
    main()
