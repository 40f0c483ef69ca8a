"""OLH's linear family with empty cohorts (too few reports for its m cohorts): an estimate from
the cohorts present whose intervals and tests include the bound on what the empty ones leave
unidentified (client_sdk/protocols/olh.py, ``_estimate_linear``), and `ldpt plan` saying so."""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from sketches import server_half

D = 200
REGISTRY = f"""
[metrics.m]
kind = "categorical"
categories = {{ ids = {D} }}
protocol = "olh"
epsilon = 1.5
hash_family = "linear"
hash_range = 5
"""


def population(n: int) -> np.ndarray:
    """Realised counts of a Zipf(1.2) population of n devices over D values (heavy head, many zeros)."""
    w = 1 / np.arange(1, D + 1) ** 1.2
    c = np.floor(w / w.sum() * n).astype(np.int64)
    c[0] += n - c.sum()
    return c


def test_empty_cohorts_give_an_estimate_with_a_bias_bound():
    spec = parse_registry(REGISTRY).get("m")
    proto = server_half(spec)
    assert proto.cohorts == 156   # F_5^4: 156 directions
    c = population(300)
    sketch = proto.new_sketch()
    proto.accumulate(sketch, proto.encode(np.repeat(np.arange(D), c), np.random.default_rng(3)))
    empty = int((sketch.reports == 0).sum())
    assert empty > 0
    df = estimate_frame(spec, sketch)
    lo, hi = df.attrs["bias_bounds"]
    share = 5.0 ** (1 - 4) * empty * 300
    assert lo == pytest.approx(-share * 0.8) and hi == pytest.approx(share / 5)
    assert f"{empty:,} of 156 olh cohorts have no reports" in df.attrs["warning"]
    assert np.all(df.ci_low <= np.maximum(df.estimate - hi, 0) + 1e-9)     # shifted by the bound
    assert np.all(df.ci_high >= np.minimum(df.estimate - lo, 300) - 1e-9)
    # with every cohort filled the estimate is the unbiased one, without a bound
    full = proto.new_sketch()
    proto.accumulate(full, proto.encode(np.repeat(np.arange(D), population(20_000)), np.random.default_rng(4)))
    assert (full.reports > 0).all() and "bias_bounds" not in estimate_frame(spec, full).attrs


@pytest.mark.statistical
def test_intervals_with_empty_cohorts_reach_their_coverage():
    """300 seeded runs of n = 400 devices over 156 cohorts (~12 empty each run): every value's
    95 % interval covers its realised count in at least 95 % − 3 standard errors of the runs,
    the test of "count = 0" keeps its level on the values nobody holds, and intervals without
    the bias bound would miss the heavy values (so this test can fail on that defect)."""
    spec = parse_registry(REGISTRY).get("m")
    proto = server_half(spec)
    c = population(400)
    values = np.repeat(np.arange(D), c)
    rng = np.random.default_rng(20261201)
    runs = 300
    covered, naive, null_rejections, empties = np.zeros(D), np.zeros(D), [], []
    for _ in range(runs):
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(values, rng))
        df = estimate_frame(spec, sketch)
        est = proto.estimate(sketch)
        empties.append(est.extra.get("empty_cohorts", 0))
        covered += (df["ci_low"].to_numpy() <= c) & (c <= df["ci_high"].to_numpy())
        sd = np.sqrt(est.variances)
        naive += (est.counts - 1.96 * sd <= c) & (c <= est.counts + 1.96 * sd)
        null_rejections.append(np.mean(df["p_value"].to_numpy()[c == 0] < 0.05))
    assert min(empties) > 0
    tolerance = 3 * np.sqrt(0.95 * 0.05 / runs)
    assert (covered / runs).min() >= 0.95 - tolerance
    assert np.mean(null_rejections) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / (runs * (c == 0).sum()))
    assert (naive / runs)[:5].min() < 0.95 - tolerance   # the bound is what makes them honest


def test_plan_says_how_many_olh_cohorts_stay_empty():
    from click.testing import CliRunner

    from cli.main import main

    result = CliRunner().invoke(main, ["plan", "--epsilon", "2", "--domain", "1000000", "--clients", "1000000",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    import json
    rows = {r["protocol"]: r for r in json.loads(result.output)["protocols"]}
    olh = rows["olh"]
    assert 500 < olh["empty_cohorts"] < 800
    assert "use hr" in olh["note"] and "2,2" in olh["note"]   # ~2.2-2.3 M reports fill them
    assert rows["hr"].get("empty_cohorts", 0) == 0
