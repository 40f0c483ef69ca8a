"""Joint-metric estimates (estimators/joint.py): the covariance of the cell counts, the exact
sketch sampler, and the coverage/power bars of issue #22 at fewer runs than bench/breakdowns.py.

Tolerances come from the Monte-Carlo error: a coverage over R runs has sd √(0.95·0.05/R), a
variance ratio over R runs sd √(2/(R−1)); margins are 4 such sd (one-sided where the bar is)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client_sdk.registry import parse_registry
from estimators.exact_sketch import draw_sketch
from estimators.joint import (
    JointEstimate,
    count_covariance,
    estimate_joint,
    fieller,
    joint_frame,
    joint_truth,
)
from sketches import server_half

N = 1_000_000
OS = [f"os{i}" for i in range(10)]
RATES = np.array([0.20, 0.25, 0.10, 0.15, 0.30, 0.05, 0.12, 0.18, 0.22, 0.08])
Z = stats.norm.isf(0.025)


def _registry(protocol: str = "auto", epsilon: float = 2.0, second: str = '{ name = "crashed", kind = "boolean" }',
              first: list[str] = OS):
    cats = ", ".join(f'"{c}"' for c in first)
    return parse_registry(f'[metrics.j]\nkind = "joint"\nepsilon = {epsilon}\nprotocol = "{protocol}"\n'
                          f'of = [{{ name = "os", kind = "categorical", categories = [{cats}] }}, {second}]\n').get("j")


def _crash_counts(rates: np.ndarray) -> np.ndarray:
    per = N // len(rates)
    crashed = np.round(rates * per).astype(np.int64)
    return np.column_stack([per - crashed, crashed]).reshape(-1)


# --- covariance and sampler ------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["grr", "ss"])
def test_a_report_supporting_a_fixed_number_of_values_makes_the_total_exact(protocol):
    # Σ_v S(v) = n·|S(y)| is fixed for GRR (1) and SS (s), so Σ ĉ = n exactly: 1ᵀΣ1 must be 0.
    spec = _registry(protocol, epsilon=0.5)
    c = np.arange(1, 21) * 1000.0
    cov = count_covariance(server_half(spec), int(c.sum()), c)
    assert abs(cov.sum()) < 1e-6 * np.trace(cov)
    assert (cov[~np.eye(20, dtype=bool)] < 0).all()


def test_unary_encoding_cells_are_uncorrelated():
    spec = _registry("oue")
    cov = count_covariance(server_half(spec), 1000, np.full(20, 50.0))
    assert np.allclose(cov[~np.eye(20, dtype=bool)], 0.0)


@pytest.mark.statistical
@pytest.mark.parametrize(("protocol", "epsilon"), [("grr", 2.0), ("oue", 2.0), ("sue", 1.0), ("ss", 0.5)])
def test_covariance_and_exact_sampler_match_the_encoder(protocol, epsilon):
    spec = _registry(protocol, epsilon, first=["x", "y", "z"])
    proto = server_half(spec)
    assert protocol != "ss" or proto.s >= 2          # exercise SS's pair term
    c = np.array([50, 10, 30, 5, 80, 25])
    n, reps = int(c.sum()), 1500
    rng = np.random.default_rng(7)
    values = np.repeat(np.arange(6), c)
    enc, exact = [], []
    for _ in range(reps):
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(values, rng))
        enc.append(proto.estimate(sketch).counts)
        exact.append(proto.estimate(draw_sketch(proto, c, rng)).counts)
    theory = count_covariance(proto, n, c)
    tol = 4 * math.sqrt(2 / (reps - 1))
    # a marginal (two cells); four cells, whose variance is about half the sum of theirs for GRR and
    # SS (negative covariances: leaving them out fails this); a contrast; one cell
    for w in (np.array([1, 1, 0, 0, 0, 0.]), np.array([1, 1, 1, 1, 0, 0.]), np.array([1, 0, -1, 0, 1, 0.]),
              np.array([0, 0, 0, 1, 0, 0.])):
        want = w @ theory @ w
        for sample in (np.array(enc), np.array(exact)):
            got = np.var(sample @ w, ddof=1)
            assert abs(got / want - 1) < tol, (w, got, want)
            assert abs((sample @ w).mean() - w @ c) < 4 * math.sqrt(want / reps)


# --- estimators, deterministic ----------------------------------------------------------------------
def test_fieller_reduces_to_the_delta_interval_when_the_denominator_is_exact():
    lo, hi, unbounded = fieller(20.0, 100.0, 16.0, 0.0, 0.0, 1.96, (-math.inf, math.inf))
    assert lo == pytest.approx(0.2 - 1.96 * 0.04) and hi == pytest.approx(0.2 + 1.96 * 0.04) and not unbounded
    assert fieller(1.0, 2.0, 1.0, 4.0, 0.0, 1.96, (0.0, 1.0)) == (0.0, 1.0, True)  # D not significant: unbounded


def test_marginals_shares_means_and_truth_from_exact_counts():
    spec = _registry(second='{ name = "t", kind = "numeric", range = [0, 40], buckets = [0, 10, 20, 40] }',
                     first=["a", "b"])
    counts = np.array([10, 30, 60, 50, 25, 25], dtype=np.float64)   # a: 100 devices, b: 100
    je = JointEstimate(spec.joint, counts, np.eye(6), 200)
    assert je.marginal(0)[0].tolist() == [100, 100] and je.marginal(0)[1].tolist() == [3, 3]
    assert je.share(1, 2, 0, 0, Z)[0] == pytest.approx(0.6)
    assert je.mean(1, 0, 0, Z)[0] == pytest.approx(0.1 * 5 + 0.3 * 15 + 0.6 * 30)
    rows = joint_truth([p.to_toml() for p in spec.parts], dict(zip(spec.domain, counts)),
                       ["count t", "P(t | os)", "mean t | os", "count"], ["[20, 40]", "[0, 10) | b", "b", "a|[0, 10)"])
    assert rows == pytest.approx([85, 0.5, 0.5 * 5 + 0.25 * 15 + 0.25 * 30, 10])


# --- the bars (issue #22, part 2), fewer runs than the bench -----------------------------------------
@pytest.mark.statistical
def test_every_conditional_share_covers_and_a_five_point_gap_is_detected():
    spec = _registry()
    proto = server_half(spec)
    counts = _crash_counts(RATES)
    truth = JointEstimate(spec.joint, counts.astype(float), np.zeros((20, 20)), N)
    shares = [(t, a, g, b) for t, g in ((1, 0), (0, 1)) for b in range(spec.joint.shape[g])
              for a in range(spec.joint.shape[t])]
    true = np.array([truth.share(t, a, g, b, Z)[0] for t, a, g, b in shares])
    runs = 200
    cover = np.zeros(len(shares))
    detected = 0
    rng = np.random.default_rng(22)
    for _ in range(runs):
        je = estimate_joint(spec, draw_sketch(proto, counts, rng))
        cover += [lo <= v <= hi for v, (_, _, lo, hi, _) in zip(true, (je.share(*s, Z) for s in shares))]
        detected += je.share_difference(1, 1, 0, 0, 1)[2] < 0.05
    sd = math.sqrt(0.95 * 0.05 / runs)
    assert (cover / runs).min() >= 0.95 - 4 * sd              # every share (0.88 at 200 runs)
    assert cover.sum() / (runs * len(shares)) >= 0.95 - 4 * sd / math.sqrt(len(shares) / 4)  # pooled
    assert detected / runs >= 0.80 + 4 * math.sqrt(0.8 * 0.2 / runs)  # the bar, with margin


@pytest.mark.statistical
def test_no_gap_no_dependence_rejects_at_the_nominal_rate():
    spec = _registry()
    proto = server_half(spec)
    counts = _crash_counts(np.full(10, 0.18))
    runs = 300
    rng = np.random.default_rng(5)
    gap = indep = 0
    for _ in range(runs):
        je = estimate_joint(spec, draw_sketch(proto, counts, rng))
        gap += je.share_difference(1, 1, 0, 0, 1)[2] < 0.05
        indep += je.independence(0, 1)[2] < 0.05
    limit = 0.05 + 4 * math.sqrt(0.05 * 0.95 / runs)
    assert gap / runs <= limit and indep / runs <= limit
    dependent = estimate_joint(spec, draw_sketch(proto, _crash_counts(RATES), rng))
    assert dependent.independence(0, 1)[2] < 1e-6


@pytest.mark.statistical
def test_mean_per_category_intervals_cover():
    spec = _registry(second='{ name = "ms", kind = "numeric", range = [0, 5000], '
                            'buckets = [0, 250, 500, 1000, 2000, 5000] }')
    proto = server_half(spec)
    per = N // 10
    rows = []
    for i in range(10):
        w = np.array([4.0, 3.0, 2.0, 1.0, 0.5]) * np.array([1, 1 + i / 10, 1 + i / 5, 1 + i / 3, 1 + i / 2])
        c = np.floor(per * w / w.sum()).astype(np.int64)
        c[0] += per - c.sum()
        rows.append(c)
    counts = np.concatenate(rows)
    truth = JointEstimate(spec.joint, counts.astype(float), np.zeros((50, 50)), N)
    true = np.array([truth.mean(1, 0, b, Z)[0] for b in range(10)])
    runs = 200
    cover = np.zeros(10)
    rng = np.random.default_rng(3)
    for _ in range(runs):
        je = estimate_joint(spec, draw_sketch(proto, counts, rng))
        cover += [lo <= t <= hi for t, (_, _, lo, hi, _) in zip(true, (je.mean(1, 0, b, Z) for b in range(10)))]
    sd = math.sqrt(0.95 * 0.05 / runs)
    assert (cover / runs).min() >= 0.95 - 4 * sd
    assert cover.sum() / (runs * 10) >= 0.95 - 4 * sd / math.sqrt(10 / 4)


def test_joint_frame_has_every_statistic():
    spec = _registry(first=["a", "b", "c"])
    counts = np.array([9000, 1000, 8000, 2000, 5000, 5000])
    df = joint_frame(spec, draw_sketch(server_half(spec), counts, np.random.default_rng(1)))
    stats_ = set(df["statistic"])
    assert {"count", "count os", "count crashed", "P(crashed | os)", "P(os | crashed)",
            "independence os, crashed"} <= stats_
    assert df.attrs["kind"] == "joint" and df.attrs["n_reports"] == 30000
    shares = df[df["statistic"] == "P(crashed | os)"]
    assert ((shares["ci_low"] >= 0) & (shares["ci_high"] <= 1) & (shares["ci_low"] <= shares["ci_high"])).all()
    cells = df[df["statistic"] == "count"]["estimate"].to_numpy()
    marg = df[df["statistic"] == "count os"]["estimate"].to_numpy()
    assert marg == pytest.approx(cells.reshape(3, 2).sum(axis=1))


def test_dashboard_draws_a_joint_metrics_cells():
    from collector.ui_svg import estimates_svg

    spec = _registry(first=["a", "b", "c"])
    df = joint_frame(spec, draw_sketch(server_half(spec), np.array([9000, 1000, 8000, 2000, 5000, 5000]),
                                       np.random.default_rng(2)))
    assert df["detected"][df["statistic"] == "count"].all() and df["detected"][df["statistic"] != "count"].isna().all()
    svg = estimates_svg(df)
    assert all(label in svg for label in spec.domain) and "largest" not in svg


def test_three_parts_give_every_pair_its_breakdown():
    spec = parse_registry('[metrics.j]\nkind = "joint"\nepsilon = 3.0\nof = ['
                          '{ name = "os", kind = "categorical", categories = ["a", "b"] }, '
                          '{ name = "crashed", kind = "boolean" }, '
                          '{ name = "ms", kind = "numeric", range = [0, 30], buckets = 3 }]\n').get("j")
    assert spec.joint.shape == (2, 2, 3) and spec.domain[1] == "a|false|[10, 20)"
    counts = np.arange(1, 13) * 2000
    df = joint_frame(spec, draw_sketch(server_half(spec), counts, np.random.default_rng(4)))
    stats_ = set(df["statistic"])
    assert {"P(crashed | os)", "P(os | ms)", "mean ms | os", "mean ms | crashed", "independence crashed, ms"} <= stats_
    truth = joint_truth([p.to_toml() for p in spec.parts], dict(zip(spec.domain, counts.astype(float))),
                        list(df["statistic"]), list(df["value"]))
    rows = df.assign(truth=truth)
    means = rows[rows["statistic"].str.startswith("mean")]
    assert ((means["ci_low"] <= means["truth"]) & (means["truth"] <= means["ci_high"])).mean() >= 0.75
