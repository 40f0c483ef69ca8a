"""RAPPOR decoder: honest intervals, controlled false positives, checks, and the estimate frame.

Statistical tests draw sketches from the exact per-bit model (``sample_sketch``: cohort sizes
multinomial, each (cohort, bit) count Binomial(Nⱼ, p* + (q*−p*)ρ)), which is fast and has the
same per-cell means and variances as encoding every report; one test runs the real encoder
end to end through the registry and ``estimate_frame``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import EstimationError
from client_sdk.protocols.rappor import RapporParams
from client_sdk.registry import parse_registry
from estimators.frequency import COLUMNS, estimate_frame
from estimators.rappor import CandidateMap, decode, sample_sketch
from estimators.simulation import Population, simulate_sketch
from sketches import build_server
from sketches.base import Sketch

DEFAULT = build_server("rappor", None, None, {})


def zipf(n_true: int) -> np.ndarray:
    w = 1.0 / np.arange(1, n_true + 1)
    return w / w.sum()


def setup(n_true: int, n_decoys: int, params: RapporParams = DEFAULT.params):
    values = [f"true-{i:03d}.example" for i in range(n_true)] + [f"decoy-{i:05d}.example" for i in range(n_decoys)]
    cmap = CandidateMap.from_strings(values, params)
    truth = np.r_[zipf(n_true), np.zeros(n_decoys)]
    return values, cmap, truth


def aligned(df, values):
    return df.set_index("value").loc[values]


def test_frame_columns_attrs_and_order():
    values, cmap, truth = setup(20, 20)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 200_000, np.random.default_rng(0))
    df = decode(sk, DEFAULT, values)
    assert list(df.columns) == COLUMNS + ["share", "share_low", "share_high", "reported"]
    assert sorted(df["value"]) == sorted(values)
    assert (np.diff(df["estimate"].to_numpy()) <= 0).all()          # largest first
    a = df.attrs
    assert a["protocol"] == "rappor" and a["n_reports"] == 200_000 and a["confidence"] == 0.95
    assert a["epsilon"] == pytest.approx(DEFAULT.epsilon) and a["control"] == "fwer"
    assert a["epsilon_longitudinal"] == pytest.approx(DEFAULT.epsilon_longitudinal)
    s = a["summary"]
    for key in ("reports", "allocated_mass", "detected", "explained_variance", "gof_statistic",
                "gof_p_value", "warning", "model_size", "screened", "mass_outside_model"):
        assert key in s
    assert s["reports"] == 200_000 and s["detected"] == int(df["detected"].sum()) and not s["screened"]
    assert s["allocated_mass"] == pytest.approx(df.loc[df["detected"], "proportion"].sum())
    assert s["warning"] is None
    np.testing.assert_allclose(df["proportion"] * 200_000, df["estimate"])
    assert (df["ci_low"] >= 0).all() and (df["ci_high"] <= 200_000).all()
    # the same sketch decoded with a CandidateMap or the strings gives the same frame
    again = decode(sk, DEFAULT.params, cmap)
    np.testing.assert_allclose(again["estimate"], df["estimate"])


@pytest.mark.statistical
def test_intervals_cover_and_decoys_stay_undetected():
    """100 Zipf(1) strings + 100 decoys, n = 100k: Google's decoder covers 64–71% here."""
    values, cmap, truth = setup(100, 100)
    rng = np.random.default_rng(2026)
    R, n = 200, 100_000
    covered, z, fp, any_fp, det, covered_detected = [], [], 0, 0, 0, []
    for _ in range(R):
        df = aligned(decode(sample_sketch(DEFAULT.params, cmap, truth, n, rng), DEFAULT, cmap), values)
        covered.append(((df["ci_low"] <= truth * n) & (truth * n <= df["ci_high"])).to_numpy())
        covered_detected.extend(covered[-1][:100][df["detected"].to_numpy()[:100]].tolist())
        z.append(((df["estimate"] - truth * n) / df["std_err"]).to_numpy())
        fp += int(df["detected"].to_numpy()[100:].sum())
        any_fp += bool(df["detected"].to_numpy()[100:].any())
        det += int(df["detected"].to_numpy()[:100].sum())
    covered, z = np.array(covered), np.array(z)
    per_item = covered[:, :100].mean(axis=0)
    # Margins from the sampling error of R runs (docs/math.md §12). Runs are independent; the
    # items of one run are not, so the average's standard error comes from the per-run shares.
    per_run_se = covered[:, :100].mean(axis=1).std(ddof=1) / math.sqrt(R)
    assert per_item.mean() >= 0.945 - 3 * per_run_se, (per_item.mean(), per_run_se)
    # One item's rate has SE √(0.95·0.05/R) = 1.5 %; the lowest of 100 items is allowed the
    # one-sided 0.1 %-family quantile (z = 4.26): a floor of 88.4 %, not a number at the edge.
    floor = 0.95 - stats.norm.isf(0.001 / 100) * math.sqrt(0.95 * 0.05 / R)
    assert per_item.min() >= floor, (per_item.min(), floor)
    zt = z[:, :100]
    assert abs(zt.mean()) < 3 * zt.std() / math.sqrt(R)  # (items within a run are correlated)
    assert abs(zt.var() - 1) < 0.06
    assert abs(z[:, 100:].var() - 1) < 0.06
    assert fp / R <= 1.0                                # at most 1 false positive per 100 decoys
    assert any_fp / R <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / R)  # Holm: family-wise error <= 5%
    assert det / R >= 5                                 # the heavy strings are found
    # detected strings were selected by the test: their (selective) intervals still cover,
    # within 4 binomial standard errors of nominal (≈ 1,200 detections: SE ≈ 0.6 %)
    se_detected = math.sqrt(0.95 * 0.05 / len(covered_detected))
    assert np.mean(covered_detected) >= 0.95 - 4 * se_detected, (np.mean(covered_detected), se_detected)


@pytest.mark.statistical
def test_screened_mode_keeps_coverage():
    """More candidates than rows/4: the model set is screened; coverage and calibration hold."""
    params = RapporParams(k=32, h=2, m=16, f=0.5, p=0.5, q=0.75)    # 512 rows -> 128 fitted at once
    values, cmap, truth = setup(40, 600, params)
    rng = np.random.default_rng(7)
    R, n = 60, 400_000
    covered, z_decoy, any_fp = [], [], 0
    for _ in range(R):
        out = decode(sample_sketch(params, cmap, truth, n, rng), params, cmap)
        assert out.attrs["summary"]["screened"]
        df = aligned(out, values)
        covered.append(((df["ci_low"] <= truth * n) & (truth * n <= df["ci_high"])).to_numpy()[:40])
        z_decoy.append((df["estimate"] / df["std_err"]).to_numpy()[40:])
        any_fp += bool(df["detected"].to_numpy()[40:].any())
    per_run_se = np.array(covered).mean(axis=1).std(ddof=1) / math.sqrt(R)   # runs are independent
    assert np.mean(covered) >= 0.945 - 3 * per_run_se, (np.mean(covered), per_run_se)
    # Decoy z-scores are ≈ 7 % overdispersed after screening (1.067 at this seed: selection on
    # noise leaves some variance unmodelled); the bound states that calibration, it is not a
    # sampling-error margin.
    assert abs(np.var(z_decoy) - 1) < 0.08
    assert any_fp / R <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / R)    # Holm: family-wise error <= 5 %


def test_fdr_detects_at_least_as_much_as_fwer():
    values, cmap, truth = setup(100, 100)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 1_000_000, np.random.default_rng(4))
    fwer = decode(sk, DEFAULT, cmap)
    fdr = decode(sk, DEFAULT, cmap, control="fdr")
    assert fdr["detected"].sum() >= fwer["detected"].sum() > 10
    assert fdr.attrs["summary"]["control"] == "fdr"
    # the one-sided p-value and the interval come from the same estimate and standard error
    row = fwer.iloc[0]
    assert row["p_value"] < 1e-12 and row["ci_low"] < row["estimate"] < row["ci_high"]


def test_missing_heavy_string_is_flagged():
    values, cmap, truth = setup(100, 100)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 1_000_000, np.random.default_rng(9))
    complete = decode(sk, DEFAULT, values)
    assert complete.attrs["summary"]["warning"] is None
    assert complete.attrs["summary"]["gof_p_value"] > 1e-3
    missing = decode(sk, DEFAULT, values[1:])               # the top string (19%) is not a candidate
    s = missing.attrs["summary"]
    assert s["gof_p_value"] < 1e-3 and "do not explain" in s["warning"]
    assert s["explained_variance"] < complete.attrs["summary"]["explained_variance"]
    assert s["collision_variance"] > complete.attrs["summary"]["collision_variance"]


def test_duplicates_and_indistinguishable_candidates():
    values, cmap, truth = setup(5, 5)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 100_000, np.random.default_rng(1))
    with pytest.raises(EstimationError, match="listed twice"):
        decode(sk, DEFAULT, values + [values[0]])
    rows = [cmap.design[:, j].indices for j in range(10)]
    twin = CandidateMap.from_rows(values + ["twin"], rows + [rows[0]], cmap.design.shape[0])
    df = aligned(decode(sk, DEFAULT, twin), values + ["twin"])
    assert np.isnan(df.loc["twin", "estimate"]) and not df.loc["twin", "detected"]
    assert "cannot be told apart" in decode(sk, DEFAULT, twin).attrs["summary"]["warning"]


def test_cohorts_without_reports_are_dropped():
    values, cmap, truth = setup(10, 10)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 100_000, np.random.default_rng(3))
    sk.counts[:8] = 0
    sk.reports[:8] = 0
    df = decode(sk, DEFAULT, cmap)
    assert df.attrs["summary"]["cohorts_with_reports"] == 56
    assert df["detected"].sum() >= 1


@pytest.mark.parametrize("kwargs,words", [
    ({"confidence": 1.5}, "confidence"), ({"control": "bonferroni"}, "control"), ({"alpha": 0}, "alpha"),
])
def test_bad_arguments(kwargs, words):
    values, cmap, truth = setup(3, 3)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 10_000, np.random.default_rng(0))
    with pytest.raises(EstimationError, match=words):
        decode(sk, DEFAULT, cmap, **kwargs)


def test_bad_sketches_and_candidates():
    good = DEFAULT.new_sketch()
    good.reports[:] = 10
    with pytest.raises(EstimationError, match="shape"):
        decode(Sketch(np.zeros((2, 3), dtype=np.int64), np.zeros(2, dtype=np.int64)), DEFAULT, ["a"])
    bad = good.copy()
    bad.counts[3, 5] = 11
    with pytest.raises(EstimationError, match="cohort 3"):
        decode(bad, DEFAULT, ["a"])
    with pytest.raises(EstimationError, match="no reports"):
        decode(DEFAULT.new_sketch(), DEFAULT, ["a"])
    with pytest.raises(EstimationError, match="no candidate"):
        decode(good, DEFAULT, [])
    with pytest.raises(EstimationError, match="strings"):
        decode(good, DEFAULT, ["a", 3])
    with pytest.raises(EstimationError, match="RAPPOR"):
        decode(good, object(), ["a"])


def test_simultaneous_intervals_are_wider():
    values, cmap, truth = setup(10, 10)
    sk = sample_sketch(DEFAULT.params, cmap, truth, 100_000, np.random.default_rng(5))
    plain = aligned(decode(sk, DEFAULT, cmap), values)
    simul = aligned(decode(sk, DEFAULT, cmap, simultaneous=True), values)
    assert ((simul["ci_high"] - simul["ci_low"]) >= (plain["ci_high"] - plain["ci_low"]) - 1e-9).all()
    np.testing.assert_allclose(simul["estimate"], plain["estimate"])


@pytest.mark.statistical
def test_end_to_end_with_the_real_encoder():
    """Registry -> real encode of every report -> accumulate -> estimate_frame with candidates."""
    reg = parse_registry('[metrics.home]\nkind = "string"\nbloom_bits = 32\ncohorts = 16\n')
    spec = reg.get("home")
    values = [f"site-{i}.example" for i in range(12)]
    counts = np.round(200_000 * zipf(12)).astype(np.int64)
    sketch = simulate_sketch(spec, Population(values, counts), np.random.default_rng(8))
    decoys = [f"decoy-{i}" for i in range(30)]
    df = aligned(estimate_frame(spec, sketch, candidates=values + decoys), values + decoys)
    assert df.attrs["metric"] == "home" and df.attrs["protocol"] == "rappor"
    z = ((df["estimate"].to_numpy()[:12] - counts) / df["std_err"].to_numpy()[:12])
    assert np.abs(z).max() < 3.5
    assert df["detected"].to_numpy()[:3].all() and not df["detected"].to_numpy()[12:].any()


@pytest.mark.statistical
def test_large_candidate_lists_are_screened():
    """Beyond ~2,000 candidates the decoder screens before fitting (its speed: bench/rappor.py)."""
    for n_decoys in (1000, 10_000):
        values, cmap, truth = setup(100, n_decoys)
        sk = sample_sketch(DEFAULT.params, cmap, truth, 1_000_000, np.random.default_rng(0))
        df = decode(sk, DEFAULT, values)
        assert df.attrs["summary"]["screened"] == (n_decoys > 2000)
