"""Breakdowns benchmark (issue #22): private joint reports (part 2 of the issue).

Private joint of a 10-value attribute (``os``, each value ~10 % of devices) and a boolean
(``crashed``), n = 10⁶, ε = 2, the protocol `auto` chooses for the 20-cell product; sketches
are drawn from the protocol's exact law (estimators.exact_sketch), so hundreds of runs take
seconds. Crash rates per os: 20 %, 25 % (the 5-point gap), then 10, 15, 30, 5, 12, 18, 22, 8 %.

Every run draws its n devices from the population (a multinomial draw of the cells, as `ldpt
simulate --joint-counts` does), and shares, means and tests are judged against the population —
the hypothesis an analyst means (docs/math.md §13); cells and marginals against the drawn counts.

- coverage of every 95 % interval: cells, marginals, and the conditional shares P(crashed | os)
  and P(os | crashed) (Fieller); the worst share and the mean over shares;
- power of the two-sided 5 % Wald test of "P(crashed | os0) = P(crashed | os1)" (gap 5 points),
  the expected z (gap / theoretical std err, randomisation and sampling) for our protocol and for
  the others;
- the independence test: its size on an independent population (every rate 18 %) and its power
  here; and the size of both tests for a 10 × 2 grr joint at n = 20,000 over ε = 1 … 20;
- means per category: a 10-value os × start-up time in 5 buckets (0, 250, 500, 1000, 2000,
  5000 ms; d = 50), coverage of the 95 % interval of the mean per os (Fieller, widened by the
  bucketing bias) for the population's mean of midpoints.

Goals: every share's coverage >= 0.93; power >= 0.80; every mean's coverage >= 0.93.

Run: `python bench/breakdowns.py [--runs R] [--quick]`.
"""

from __future__ import annotations

import os

from sketches import server_half

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core

import argparse  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
from _common import print_table  # noqa: E402
from scipy import stats  # noqa: E402

from client_sdk.registry import parse_registry  # noqa: E402
from estimators.exact_sketch import draw_sketch  # noqa: E402
from estimators.joint import JointEstimate, count_covariance, estimate_joint, sampling_covariance  # noqa: E402
from sketches import build_server  # noqa: E402

N = 1_000_000
EPSILON = 2.0
RATES = np.array([0.20, 0.25, 0.10, 0.15, 0.30, 0.05, 0.12, 0.18, 0.22, 0.08])
OS = [f"os{i}" for i in range(10)]
CRASH = f"""[metrics.crash_by_os]
kind = "joint"
epsilon = {EPSILON}
of = [{{ name = "os", kind = "categorical", categories = {OS!r} }},
      {{ name = "crashed", kind = "boolean" }}]
""".replace("'", '"')
STARTUP = CRASH.replace("crash_by_os", "startup_by_os").replace(
    '{ name = "crashed", kind = "boolean" }',
    '{ name = "startup_ms", kind = "numeric", range = [0, 5000], buckets = [0, 250, 500, 1000, 2000, 5000] }')


def crash_counts(rates: np.ndarray) -> np.ndarray:
    """Row-major (os, crashed) counts: n/10 devices per os, round(rate · n/10) crashed."""
    per = N // 10
    crashed = np.round(rates * per).astype(np.int64)
    return np.column_stack([per - crashed, crashed]).reshape(-1)


def startup_counts() -> np.ndarray:
    """(os, bucket) counts: os i's start-up times shift to slower buckets as i grows."""
    per = N // 10
    out = []
    for i in range(10):
        w = np.array([4.0, 3.0, 2.0, 1.0, 0.5]) * np.array([1, 1 + i / 10, 1 + i / 5, 1 + i / 3, 1 + i / 2])
        c = np.floor(per * w / w.sum()).astype(np.int64)
        c[0] += per - c.sum()
        out.append(c)
    return np.concatenate(out)


def _truth(spec, counts: np.ndarray, proto=None) -> JointEstimate:
    """The population's cell shares (as counts of N) with the covariance of an estimate from N
    devices drawn from it: randomisation plus sampling."""
    c = counts.astype(np.float64)
    return JointEstimate(spec.joint, c, count_covariance(proto or server_half(spec), N, c), N,
                         sampling=sampling_covariance(c, N))


def _drawn(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """N devices drawn from the population whose cell shares are counts/N."""
    return rng.multinomial(N, counts / counts.sum())


def share_runs(runs: int, seed: int) -> tuple[list[list[object]], dict[str, float]]:
    spec = parse_registry(CRASH).get("crash_by_os")
    proto = server_half(spec)
    counts = crash_counts(RATES)
    truth = _truth(spec, counts)
    z = stats.norm.isf(0.025)
    shares = [(t, a, g, b) for t, g in ((1, 0), (0, 1)) for b in range(truth.domain.shape[g])
              for a in range(truth.domain.shape[t])]
    true_shares = np.array([truth.share(t, a, g, b, z)[0] for t, a, g, b in shares])
    cover_share = np.zeros(len(shares))
    cover_cell = np.zeros(counts.size)
    cover_marg = np.zeros(sum(spec.joint.shape))
    rejected = 0
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        drawn = _drawn(counts, rng)
        je = estimate_joint(spec, draw_sketch(proto, drawn, rng))
        sd = np.sqrt(np.diag(je.cov))
        cover_cell += np.abs(je.counts - drawn) <= z * sd
        m = [je.marginal(k) for k in (0, 1)]
        est_m = np.concatenate([x[0] for x in m])
        sd_m = np.sqrt(np.concatenate([x[1] for x in m]))
        drawn_marg = np.concatenate([JointEstimate(spec.joint, drawn.astype(float), je.cov, N).marginal(k)[0]
                                     for k in (0, 1)])
        cover_marg += np.abs(est_m - drawn_marg) <= z * sd_m
        for i, (t, a, g, b) in enumerate(shares):
            _, _, lo, hi, _ = je.share(t, a, g, b, z)
            cover_share[i] += lo <= true_shares[i] <= hi
        rejected += je.share_difference(1, 1, 0, 0, 1)[2] < 0.05
    n_sh = len(shares) // 2
    rows = [
        ["cells (20)", f"{(cover_cell / runs).min():.3f}", f"{(cover_cell / runs).mean():.3f}"],
        ["marginals (10 + 2)", f"{(cover_marg / runs).min():.3f}", f"{(cover_marg / runs).mean():.3f}"],
        ["P(crashed | os) (20, Fieller)", f"{(cover_share[:n_sh] / runs).min():.3f}",
         f"{(cover_share[:n_sh] / runs).mean():.3f}"],
        ["P(os | crashed) (20, Fieller)", f"{(cover_share[n_sh:] / runs).min():.3f}",
         f"{(cover_share[n_sh:] / runs).mean():.3f}"],
    ]
    _, se, _ = truth.share_difference(1, 1, 0, 0, 1)
    facts = {"protocol": proto.name, "power": rejected / runs, "z": 0.05 / se,
             "min_share_coverage": float((cover_share / runs).min())}
    return rows, facts


def protocol_z() -> list[list[object]]:
    """Expected gap / std err (and the power it implies) per protocol, same population."""
    spec = parse_registry(CRASH).get("crash_by_os")
    counts = crash_counts(RATES).astype(np.float64)
    rows = []
    for name in ("grr", "oue", "ss"):
        proto = build_server(name, 20, EPSILON, {})
        je = _truth(spec, counts, proto)
        _, se, _ = je.share_difference(1, 1, 0, 0, 1)
        zz = 0.05 / se
        power = stats.norm.sf(1.959964 - zz) + stats.norm.cdf(-1.959964 - zz)
        rows.append([name + (" (auto)" if name == spec.protocol else ""), f"{se * 100:.2f} pts", f"{zz:.2f}",
                     f"{power:.4f}"])
    return rows


def independence_runs(runs: int, seed: int) -> list[list[object]]:
    spec = parse_registry(CRASH).get("crash_by_os")
    proto = server_half(spec)
    rng = np.random.default_rng(seed)
    rows = []
    for label, rates in (("independent (every rate 18 %)", np.full(10, 0.18)), ("the rates above", RATES)):
        counts = crash_counts(rates)
        rej = sum(estimate_joint(spec, draw_sketch(proto, _drawn(counts, rng), rng)).independence(0, 1)[2] < 0.05
                  for _ in range(runs))
        rows.append([label, f"{rej / runs:.3f}"])
    return rows


SIZE_EPSILONS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0)


def size_grid(runs: int, seed: int) -> list[list[object]]:
    """Size of both 5 % tests for a 10 × 2 grr joint, n = 20,000 devices drawn from an
    independent population, over ε; beside it the former tests (randomisation noise only)."""
    import dataclasses

    rows = []
    wa, wb = np.arange(1, 11) ** -1.1, np.array([1.0, 2.0])
    w = np.outer(wa / wa.sum(), wb / wb.sum()).reshape(-1)
    for eps in SIZE_EPSILONS:
        spec = parse_registry(CRASH.replace(f"epsilon = {EPSILON}", f'epsilon = {eps}\nprotocol = "grr"')
                              ).get("crash_by_os")
        proto = server_half(spec)
        rng = np.random.default_rng(seed + int(eps * 10))
        counts = np.zeros(4, dtype=np.int64)    # rejections: independence, gap, former independence, former gap
        for _ in range(runs):
            je = estimate_joint(spec, draw_sketch(proto, rng.multinomial(20_000, w), rng))
            old = dataclasses.replace(je, sampling=None)
            counts += [je.independence(0, 1)[2] < 0.05, je.share_difference(1, 1, 0, 0, 1)[2] < 0.05,
                       old.independence(0, 1)[2] < 0.05, old.share_difference(1, 1, 0, 0, 1)[2] < 0.05]
        rows.append([f"{eps:g}", *(f"{x / runs:.3f}" for x in counts)])
    return rows


def mean_runs(runs: int, seed: int) -> list[list[object]]:
    spec = parse_registry(STARTUP).get("startup_by_os")
    proto = server_half(spec)
    counts = startup_counts()
    truth = _truth(spec, counts)
    z = stats.norm.isf(0.025)
    true_means = np.array([truth.mean(1, 0, b, z)[0] for b in range(10)])
    cover = np.zeros(10)
    widths = np.zeros(10)
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        je = estimate_joint(spec, draw_sketch(proto, _drawn(counts, rng), rng))
        for b in range(10):
            _, _, lo, hi, _ = je.mean(1, 0, b, z)
            cover[b] += lo <= true_means[b] <= hi
            widths[b] += (hi - lo) / 2
    return [[OS[b], f"{true_means[b]:.0f}", f"{widths[b] / runs:.1f}", f"{cover[b] / runs:.3f}"]
            for b in range(10)] + [[f"({proto.name}, d = 50)", "", "min", f"{(cover / runs).min():.3f}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="seeded runs per scenario")
    parser.add_argument("--quick", action="store_true", help="100 runs")
    args = parser.parse_args()
    runs = 100 if args.quick else args.runs
    mc = math.sqrt(0.95 * 0.05 / runs)
    rows, facts = share_runs(runs, 1)
    print_table(["95 % intervals", "worst coverage", "mean coverage"], rows,
                f"Private joint os (10) × crashed, n = 10^6, ε = 2, {facts['protocol']}, {runs} runs "
                f"(MC sd of a coverage {mc:.3f}; goal: every share >= 0.93)")
    print_table(["test", "value"], [
        ["P(crashed | os0) = P(crashed | os1), gap 5 points: power at 5 %", f"{facts['power']:.3f}"],
        ["expected z = gap / std err", f"{facts['z']:.2f}"],
    ], "Detecting a 5-point gap between two 10 % categories (goal: power >= 0.80)")
    print_table(["protocol", "std err of the gap", "expected z", "power"], protocol_z(),
                "The same gap under each joint protocol (theory, covariance of docs/math.md)")
    print_table(["population", "rejections at 5 %"], independence_runs(runs, 2),
                f"Wald test of independence (χ², 9 df), {runs} runs")
    print_table(["ε", "independence", "share difference", "former independence", "former share difference"],
                size_grid(runs, 4),
                f"Size of the 5 % tests, 10 × 2 grr joint, n = 20,000 devices from an independent population, "
                f"{runs} runs (MC sd {math.sqrt(0.05 * 0.95 / runs):.3f}; goal <= 0.05 + 2 sd)")
    print_table(["os", "population mean (ms, midpoints)", "mean half-width (ms)", "coverage"], mean_runs(runs, 3),
                f"Mean start-up time per os (5 buckets; intervals widened by the plug-in bucketing bias, "
                f"at most 1500 ms), {runs} runs (goal >= 0.93)")


if __name__ == "__main__":
    main()
