"""Estimate frame, intervals and Norm-Sub consistency."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk.errors import EstimationError
from client_sdk.registry import parse_registry
from estimators.consistency import norm_sub
from estimators.frequency import COLUMNS, estimate_frame
from estimators.intervals import wald_interval, z_value
from estimators.simulation import draw_population, simulate_sketch
from sketches import server_half

REG = parse_registry('[metrics.m]\nkind = "categorical"\ncategories = ["a", "b", "c", "d"]\n'
                     'protocol = "grr"\nepsilon = 2.0\n')


def frame(**kw):
    spec = REG.get("m")
    rng = np.random.default_rng(3)
    pop = draw_population(spec, 20_000, "zipf:1.1", rng)
    return spec, pop, estimate_frame(spec, simulate_sketch(spec, pop, rng), **kw)


def test_frame_columns_and_attrs():
    spec, pop, df = frame()
    assert list(df.columns) == COLUMNS
    assert list(df["value"]) == ["a", "b", "c", "d"]
    assert df.attrs["n_reports"] == 20_000 and df.attrs["protocol"] == "grr"
    assert df.attrs["epsilon"] == pytest.approx(2.0, abs=1e-8)
    assert df.attrs["post_processed"] is None
    assert np.allclose(df["proportion"], df["estimate"] / 20_000)
    assert (df["ci_low"] <= df["ci_high"]).all()
    z = np.abs(df["estimate"] - pop.counts) / df["std_err"]
    assert (z < 4.5).all()  # Bonferroni-safe sanity bound for 4 items at fixed seed
    assert df["detected"].all()


def test_simultaneous_intervals_are_wider():
    _, _, plain = frame()
    _, _, simul = frame(simultaneous=True)
    assert (simul["ci_high"] - simul["ci_low"] >= plain["ci_high"] - plain["ci_low"] - 1e-9).all()
    assert z_value(0.95, 10) == pytest.approx(2.807, abs=2e-3)
    assert z_value(0.95, 1000) == pytest.approx(4.056, abs=2e-3)


def test_consistent_is_marked_and_keeps_the_raw_estimate():
    _, _, raw = frame()
    _, _, con = frame(consistent=True)
    assert con.attrs["post_processed"] == "norm-sub"
    assert np.allclose(con["raw_estimate"], raw["estimate"])
    assert con["proportion"].sum() == pytest.approx(1.0)
    assert (con["proportion"] >= 0).all()


def test_interval_clipped_to_zero_and_n():
    low, high = wald_interval(np.array([-50.0, 990.0]), np.array([100.0, 400.0]), 1000)
    assert low[0] == 0 and high[1] == 1000


def test_empty_sketch_is_an_error():
    spec = REG.get("m")
    with pytest.raises(EstimationError, match="no reports"):
        estimate_frame(spec, server_half(spec).new_sketch())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-2, 2, allow_nan=False), min_size=1, max_size=50))
def test_norm_sub_is_the_simplex_projection(values):
    f = np.asarray(values)
    out = norm_sub(f)
    assert out.min() >= 0 and out.sum() == pytest.approx(1.0)
    # projection property: <f - out, y - out> <= 0 for simplex vertices y
    for i in range(len(f)):
        y = np.zeros(len(f))
        y[i] = 1
        assert np.dot(f - out, y - out) <= 1e-9


def test_norm_sub_never_increases_l2_error():
    rng = np.random.default_rng(0)
    truth = rng.dirichlet(np.ones(30))
    for _ in range(100):
        noisy = truth + rng.normal(0, 0.05, 30)
        assert np.linalg.norm(norm_sub(noisy) - truth) <= np.linalg.norm(noisy - truth) + 1e-12


def test_norm_sub_large_domain_fast_enough():
    f = np.random.default_rng(1).normal(0, 1e-3, 1_000_000)
    out = norm_sub(f)
    assert out.sum() == pytest.approx(1.0)


def test_control_and_alpha_are_validated():
    """A misspelt control used to fall through to Benjamini–Hochberg (FDR) silently."""
    for bad in ("FWER", "holm", "bh"):
        with pytest.raises(EstimationError, match="control must be one of fwer, fdr"):
            frame(control=bad)
    for alpha in (0.0, 1.0, -0.1):
        with pytest.raises(EstimationError, match="alpha"):
            frame(alpha=alpha)


def test_controls_are_holm_and_benjamini_hochberg():
    spec, pop, fwer = frame(alpha=0.05)
    _, _, fdr = frame(alpha=0.05, control="fdr")
    p = fdr["p_value"].to_numpy()
    order = np.sort(p)
    passing = np.flatnonzero(order <= 0.05 * np.arange(1, len(p) + 1) / len(p))
    cut = order[passing[-1]] if passing.size else -1.0
    assert (fdr["detected"].to_numpy() == (p <= cut)).all()
    assert (fwer["detected"].to_numpy() == holm_by_hand(fwer["p_value"].to_numpy(), 0.05)).all()


def holm_by_hand(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm (1979) written as the textbook loop: reject in p order until p(i) > alpha/(M-i+1)."""
    out = np.zeros(len(p), dtype=bool)
    for rank, idx in enumerate(np.argsort(p, kind="stable")):
        if p[idx] > alpha / (len(p) - rank):
            break
        out[idx] = True
    return out


def test_norm_sub_of_all_negative_estimates():
    out = norm_sub(np.full(1_000_000, -1.0))
    assert out.sum() == pytest.approx(1.0) and np.ptp(out) == 0
    assert norm_sub(np.array([-5.0, -1.0, -3.0])).tolist() == [0.0, 1.0, 0.0]


def test_consistent_rappor_frame_with_unidentifiable_candidates():
    """Aliased candidates have NaN estimates; Norm-Sub used to raise IndexError on them."""
    from estimators.rappor import CandidateMap, sample_sketch

    spec = parse_registry('[metrics.s]\nkind = "string"\nbloom_bits = 8\nhashes = 2\ncohorts = 1\n').get("s")
    params = server_half(spec).params
    cands = [f"c{i}" for i in range(40)]  # 40 strings in 8 bits: many share a Bloom pattern
    sketch = sample_sketch(params, CandidateMap.from_strings(cands, params), np.r_[0.5, 0.3, np.zeros(38)],
                           20_000, np.random.default_rng(0))
    raw = estimate_frame(spec, sketch, candidates=cands)
    assert raw["estimate"].isna().any()
    con = estimate_frame(spec, sketch, candidates=cands, consistent=True)
    assert con.attrs["post_processed"] == "norm-sub"
    assert (con["proportion"].isna() == raw["proportion"].isna()).all()
    assert np.nansum(con["proportion"]) == pytest.approx(1.0) and np.nanmin(con["proportion"]) >= 0
