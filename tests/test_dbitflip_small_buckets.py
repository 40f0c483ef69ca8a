"""dBitFlipPM with one sampled bucket: intervals and tests at a few reports per bucket (issue 27 §4).

With ``sampled_buckets = 1`` a bucket is seen by the n_v ≈ n/k devices whose window holds it, so
its bit count C_v is a sum of ~20 Bernoullis whose holders H_v ~ Hypergeometric(n, c, n_v) are a
handful. The estimator is unbiased (E[H_v | n_v] = n_v·c/n), but C_v's law is discrete and skewed
and the plug-in SD falls with the estimate: the Wald interval covered held values in 0.49–0.96
of runs at 20 reports per bucket (0.66 over five small shares) and 0.48–0.78 at 5. The exact
mixture interval (estimators/intervals.py ``sampled_exact_counts``) covers at every n.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from estimators.intervals import sampled_exact_counts
from estimators.simulation import Population, simulate_sketch
from sketches import server_half

K = 50


def spec_of(sampled: int = 1):
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(K)], "protocol": "dbitflip",
             "epsilon": 5.0, "epsilon_inf": 7.0, "sampled_buckets": sampled}
    return parse_registry({"metrics": {"m": table}}).get("m")


def held_coverage(spec, per_bucket: int, shares: list[float], runs: int, seed: int) -> tuple[float, float]:
    """(coverage of the held values' true counts, runs flagging any value nobody holds)."""
    n = per_bucket * K // server_half(spec).params.sampled
    truth = np.zeros(K, dtype=np.int64)
    truth[:len(shares)] = np.round(np.array(shares) * n).astype(np.int64)
    rng = np.random.default_rng(seed)
    hits, flagged = [], 0
    for _ in range(runs):
        df = estimate_frame(spec, simulate_sketch(spec, Population(list(spec.domain), truth), rng))
        inside = (df.ci_low.to_numpy() <= truth) & (truth <= df.ci_high.to_numpy())
        hits.append(inside[:len(shares)])
        flagged += bool(df.detected.to_numpy()[len(shares):].astype(bool).any())
    return float(np.mean(hits)), flagged / runs


@pytest.mark.statistical
@pytest.mark.parametrize("per_bucket, shares, runs", [
    (20, [0.1, 0.05, 0.03, 0.02, 0.01], 120),      # Wald: 0.664
    (5, [0.3, 0.25, 0.2, 0.15, 0.1], 100),         # Wald: 0.635
], ids=["20-per-bucket", "5-per-bucket"])
def test_one_sampled_bucket_covers_at_a_few_reports_per_bucket(per_bucket, shares, runs):
    """≥ 0.95 − 2 SE of the held values' intervals cover (600 / 500 intervals: SE ≈ 0.01), and
    values nobody holds are flagged (Holm) in at most 5 % + 2 SE of runs."""
    cover, flagged = held_coverage(spec_of(), per_bucket, shares, runs, seed=4)
    size = runs * len(shares)
    assert cover >= 0.95 - 2 * math.sqrt(0.95 * 0.05 / size), cover
    assert flagged <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs), flagged


def test_sampled_exact_counts_is_exact_on_a_small_case():
    """The interval inverts the exact law: summed over every outcome C of a tiny bucket (n = 12
    devices, n_v = 4 sample it), the interval holds the true c with probability ≥ 0.95 for
    every c in [0, n]."""
    from scipy import stats

    n, size, p, q = 12, 4, 0.9, 0.1
    ones = np.arange(size + 1, dtype=np.float64)
    low, high = sampled_exact_counts(ones, np.full(size + 1, float(size)), n, p, q, 0.95)
    for c in range(n + 1):
        law = np.zeros(size + 1)
        for h in range(size + 1):
            w = stats.hypergeom.pmf(h, n, c, size)
            if w == 0:
                continue
            law += w * np.convolve(stats.binom.pmf(np.arange(h + 1), h, p),
                                   stats.binom.pmf(np.arange(size - h + 1), size - h, q))[:size + 1]
        covered = law[(low <= c) & (c <= high)].sum()
        assert covered >= 0.95 - 1e-9, (c, covered)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)
