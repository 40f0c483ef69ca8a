"""Statistics of the two-round memoised protocols (L-GRR, L-OSUE, LOLOHA).

Per protocol, R seeded windows of a fixed population go through the real path (encode,
accumulate, ``estimate_frame``; ``estimators.longitudinal.window_monte_carlo``):

- bias: |mean ĉ(v) − c(v)| <= z_B·sqrt(Var/R) for every value (Var = ``protocol.variance``;
  z_B the Bonferroni-adjusted 3σ quantile over the d values, as tests/test_protocol_statistics);
- MSE / Var <= 1.1 on average over the values, and within 1 ± z_B·sqrt(2/(R−1)) each;
- 95 % intervals cover >= 94.5 % of runs on average over the values.

Also: the pure estimator is the two-round estimator of Arcolezi et al. 2022 with its variance
σ(1−σ)/(n(p₁−q₁)²(p₂−q₂)²); the papers' variance ordering (L-OSUE below L-SUE, L-GRR best at
small d); LOLOHA's optimal-g formula against a search; and the --days simulation reuses each
device's memoised response and stays unbiased on the last day.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client_sdk.protocols.factory import choose_longitudinal_protocol, per_item_variance
from client_sdk.protocols.loloha import formula_hash_range, optimal_hash_range, random_hash_variance
from client_sdk.protocols.losue import l_sue_rates
from client_sdk.registry import parse_registry
from estimators.longitudinal import MemoTable, simulate_days, window_monte_carlo
from sketches import build_server, server_half
from sketches.randomness import as_random_source

R = 1500
FAMILY_ALPHA = 0.0027
COUNTS = np.array([6000, 2500, 1000, 400, 100, 0])
CASES = [("lgrr", 1.0, 4.0), ("lgrr", 0.5, 2.0), ("losue", 1.0, 4.0), ("losue", 2.0, 3.0),
         ("loloha", 1.0, 4.0), ("loloha", 1.0, 3.0), ("dbitflip", 1.0, 4.0), ("dbitflip", 2.0, 3.0)]


def spec_for(name: str, e1: float, ei: float, d: int = 6, **extra):
    cats = ", ".join(f'"v{i}"' for i in range(d))
    options = "".join(f"{k} = {v}\n" for k, v in extra.items())
    reg = parse_registry(f'[metrics.m]\nkind = "categorical"\ncategories = [{cats}]\nprotocol = "{name}"\n'
                         f"epsilon = {e1}\nepsilon_inf = {ei}\n{options}")
    return reg.get("m")


@pytest.mark.statistical
@pytest.mark.parametrize("name,e1,ei", CASES, ids=[f"{n}-{a}-{b}" for n, a, b in CASES])
def test_unbiased_mse_at_theory_and_nominal_coverage(name, e1, ei):
    extra = {"sampled_buckets": 2} if (name, e1) == ("dbitflip", 2.0) else {}
    mc = window_monte_carlo(spec_for(name, e1, ei, **extra), COUNTS, R, np.random.default_rng(20261201))
    d = COUNTS.shape[0]
    z_b = stats.norm.isf(FAMILY_ALPHA / (2 * d))
    assert (mc.bias_z <= z_b).all(), f"bias z {np.round(mc.bias_z, 2)}"
    assert mc.mse_ratio.mean() <= 1.1, f"MSE/theory {np.round(mc.mse_ratio, 3)}"
    tol = z_b * math.sqrt(2 / (R - 1))
    assert (np.abs(mc.mse_ratio - 1) <= tol).all(), f"MSE/theory {np.round(mc.mse_ratio, 3)} (±{tol:.3f})"
    assert mc.coverage.mean() >= 0.945, f"coverage {np.round(mc.coverage, 3)}"


@pytest.mark.parametrize("name", ["lgrr", "losue"])
def test_pure_estimator_is_the_two_round_estimator(name):
    proto = build_server(name, 5, 1.0, {"epsilon_inf": 3.0})
    pr = proto.params
    n = 10_000
    support = np.array([3000.0, 2000.0, 1500.0, 1000.0, 900.0])
    sketch = proto.new_sketch()
    sketch.counts[0] = support.astype(np.int64)
    sketch.reports[0] = n
    est = proto.estimate(sketch)
    f_hat = ((support / n - pr.q2) / (pr.p2 - pr.q2) - pr.q1) / (pr.p1 - pr.q1)
    np.testing.assert_allclose(est.counts / n, f_hat, rtol=1e-9)
    sigma = pr.q2 + (pr.p2 - pr.q2) * pr.q1          # σ at f = 0
    paper = sigma * (1 - sigma) / (n * (pr.p1 - pr.q1) ** 2 * (pr.p2 - pr.q2) ** 2)
    assert math.isclose(float(proto.variance(n, 0.0)) / n**2, paper, rel_tol=1e-9)


@pytest.mark.parametrize("e1,ei", [(0.5, 2.0), (1.0, 4.0), (2.0, 3.0), (1.0, 1.5)])
def test_l_osue_beats_l_sue(e1, ei):
    big, small = l_sue_rates(e1, ei)
    l_sue = small * (1 - small) / (big - small) ** 2        # n·Var[f̂] at f = 0
    losue = build_server("losue", 16, e1, {"epsilon_inf": ei})
    assert float(losue.variance(1, 0.0)) < l_sue


@pytest.mark.parametrize("e1,ei", [(0.5, 2.0), (1.0, 4.0), (2.0, 4.0)])
def test_l_grr_is_best_at_small_d_and_auto_follows_the_variance(e1, ei):
    for d in (2, 3):
        var = {n: per_item_variance(build_server(n, d, e1, {"epsilon_inf": ei}))
               for n in ("lgrr", "losue", "loloha")}
        assert var["lgrr"] == min(var.values()), (d, var)
        assert choose_longitudinal_protocol(d, e1, ei) == "lgrr"
    big = {n: per_item_variance(build_server(n, 200, e1, {"epsilon_inf": ei})) for n in ("lgrr", "losue")}
    assert big["losue"] < big["lgrr"]


@pytest.mark.parametrize("e1,ei", [(0.5, 2.0), (1.0, 4.0), (2.0, 4.0), (1.0, 6.0), (0.25, 1.0), (3.0, 8.0)])
def test_optimal_hash_range_formula_matches_a_search(e1, ei):
    g = optimal_hash_range(e1, ei)
    best = min(range(2, 400), key=lambda k: random_hash_variance(k, e1, ei))
    assert random_hash_variance(g, e1, ei) <= random_hash_variance(best, e1, ei) * 1.0001, (g, best)
    assert abs(formula_hash_range(e1, ei) - best) <= 1   # the published formula, ±1


def test_memo_table_reuses_each_devices_first_round():
    proto = build_server("lgrr", 4, 1.0, {"epsilon_inf": 2.0})
    table = MemoTable(proto, 4)
    source = as_random_source(np.random.default_rng(5))
    devices = np.arange(1000)
    keys = devices % 4
    first = table.lookup(devices, keys, source)
    again = table.lookup(devices[::-1], keys[::-1], source)
    np.testing.assert_array_equal(first, again[::-1])
    assert table.codes.shape[0] == 1000
    new = table.lookup(devices, (keys + 1) % 4, source)   # every device changes value: new draws
    assert table.codes.shape[0] == 2000
    kept = (new == (keys + 1) % 4).mean()
    assert abs(kept - proto.params.p1) < 4 * math.sqrt(proto.params.p1 * (1 - proto.params.p1) / 1000)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["lgrr", "losue", "loloha"])
def test_days_simulation_is_unbiased_on_the_last_day(name):
    spec = spec_for(name, 1.0, 3.0, d=4)
    runs, days, n = 40, 10, 5000
    last = []
    rng = np.random.default_rng(99)
    for _ in range(runs):
        result = list(simulate_days(spec, n, "zipf:1.1", days, 0.3, rng))[-1]
        est = server_half(spec).estimate(result.sketch)
        last.append((est.counts - result.true_counts, est.variances))
    err = np.array([e for e, _ in last])
    var = np.array([v for _, v in last]).mean(axis=0)
    z = np.abs(err.mean(axis=0)) / np.sqrt(var / runs)
    assert (z <= stats.norm.isf(FAMILY_ALPHA / 8)).all(), z
