"""The decoded distribution of RAPPOR (estimators.rappor_shares): shares, support and intervals.

Bars (docs/rappor.md, "The decoded distribution"): at most one false string per 100 absent
candidates on average, intervals of the reported strings covering >= 0.93 (nominal 0.95), no
winner's curse (a uniform law: reporting some strings must not make TV worse than reporting
none), a lower TV than thresholded unbiased estimates, and an outside-the-list mass whose
interval is calibrated when every string is listed. Seeds are fixed; tolerances are 3 standard
errors of the Monte-Carlo estimate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from estimators import rappor_shares as rs
from estimators.rappor import CandidateMap, decode, sample_sketch
from sketches import build_server

DEFAULT = build_server("rappor", None, None, {})


def population(law: str, n_true: int = 100, n_decoys: int = 100):
    values = [f"true-{i:03d}.example" for i in range(n_true)] + [f"decoy-{i:05d}.example" for i in range(n_decoys)]
    rank = np.arange(1, n_true + 1, dtype=np.float64)
    w = {"zipf": 1 / rank, "uniform": np.ones(n_true), "exponential": np.exp(-rank / 20)}[law]
    return values, CandidateMap.from_strings(values, DEFAULT.params), np.r_[w / w.sum(), np.zeros(n_decoys)]


def decode_many(law: str, n: int, seeds: range, n_decoys: int = 100):
    values, cmap, truth = population(law, n_decoys=n_decoys)
    for seed in seeds:
        df = decode(sample_sketch(DEFAULT.params, cmap, truth, n, np.random.default_rng(seed)), DEFAULT, cmap)
        yield df.set_index("value").loc[values], truth


# --- the empirical-Bayes pieces -------------------------------------------------------------------

def test_prior_recovers_a_two_atom_law():
    rng = np.random.default_rng(11)
    n = 4_000
    truth = np.where(rng.random(n) < 0.6, 0.0, 0.05)
    s = np.full(n, 0.01)
    x = truth + rng.normal(0, s)
    grid = rs.prior_grid(x, s)
    w = rs.fit_prior(x, s, grid)
    near_zero = w[grid < 0.015].sum()
    # the NPMLE's mass near 0 estimates the 60% share; binomial SE sqrt(.24/4000) ≈ 0.008
    assert abs(near_zero - 0.6) < 0.04
    assert abs((w * grid).sum() - 0.4 * 0.05) < 4 * 0.01 / math.sqrt(n) + 0.002


def test_posterior_median_is_monotone_and_null_crossing_is_the_half_point():
    grid = np.linspace(0, 0.1, 41)
    w = np.r_[0.5, np.full(40, 0.5 / 40)]
    x = np.linspace(-0.02, 0.12, 200)
    s = np.full(x.shape, 0.01)
    med = rs.posterior_medians(x, s, grid, w)
    assert (np.diff(med) >= 0).all() and med[0] == 0 and med[-1] > 0.09
    c = rs.null_crossing(np.array([0.01]), np.array([0.2]), grid, w)
    assert rs._null_posterior(c, np.array([0.01]), grid, w)[0] == pytest.approx(0.5, abs=1e-6)
    assert rs.posterior_medians(c + 1e-6, np.array([0.01]), grid, w)[0] > 0
    assert rs.posterior_medians(c - 1e-6, np.array([0.01]), grid, w)[0] == 0


def test_decoded_shares_edge_cases():
    # nothing estimable: all shares 0, nothing reported
    out = rs.decoded_shares(np.array([np.nan, np.nan]), np.array([np.nan, 1.0]), np.ones(2), np.ones(2), 0.95)
    assert not out.reported.any() and (out.share == 0).all()
    # every estimate at or below 0: the prior is the atom at 0
    out = rs.decoded_shares(np.array([-0.01, 0.0]), np.full(2, 0.01), np.full(2, 0.01), np.full(2, 0.5), 0.95)
    assert not out.reported.any()
    # one clear string among noise: reported, its share inside its interval, the noise not
    x = np.r_[0.3, np.random.default_rng(0).normal(0, 0.01, 50)]
    s = np.full(x.shape, 0.01)
    out = rs.decoded_shares(x, s, s, stats.norm.sf(x / s), 0.95)
    assert out.reported[0] and out.low[0] <= out.share[0] <= out.high[0]
    assert out.share[0] == pytest.approx(0.3, abs=0.02)
    assert out.reported[1:].sum() <= 2


def test_frame_has_the_distribution_and_units():
    values, cmap, truth = population("zipf", 50, 50)
    df = decode(sample_sketch(DEFAULT.params, cmap, truth, 300_000, np.random.default_rng(1)), DEFAULT, cmap)
    rep = df["reported"].to_numpy()
    assert rep.any() and ((df["share"] > 0) == df["reported"]).all()
    assert (df.loc[rep, "share_low"] <= df.loc[rep, "share"]).all()
    assert (df.loc[rep, "share"] <= df.loc[rep, "share_high"]).all()
    s = df.attrs["summary"]
    assert s["reported"] == int(rep.sum()) and s["reported_mass"] == pytest.approx(df["share"].sum())
    assert df.attrs["units"]["estimate"] == "count" and df.attrs["units"]["share"] == "proportion"
    assert df.attrs["support_alpha"] == rs.SUPPORT_ALPHA
    with pytest.raises(Exception, match="support_alpha"):
        decode(sample_sketch(DEFAULT.params, cmap, truth, 1_000, np.random.default_rng(1)), DEFAULT, cmap,
               support_alpha=1.5)


# --- the bars, by simulation ------------------------------------------------------------------------

@pytest.mark.statistical
def test_false_strings_coverage_and_tv_on_the_default_set():
    """100 Zipf(1) strings + 100 decoys at 10⁵: <= 1 false string per 100 decoys, coverage, TV."""
    R = 40
    false = 0
    covered = []
    tv_shares, tv_fwer = [], []
    for df, truth in decode_many("zipf", 100_000, range(100, 100 + R)):
        rep = df["reported"].to_numpy()
        false += int(rep[100:].sum())
        covered.extend(((df["share_low"] <= truth) & (truth <= df["share_high"])).to_numpy()[rep].tolist())
        tv_shares.append(0.5 * np.abs(df["share"].to_numpy() - truth).sum())
        det = df["detected"].to_numpy()
        tv_fwer.append(0.5 * np.abs(np.where(det, df["proportion"], 0.0) - truth).sum())
    trials = R * 100
    # false strings: Binomial(trials, rate <= 1%): at most the mean at 1% plus 3 SE
    assert false <= 0.01 * trials + 3 * math.sqrt(0.01 * 0.99 * trials)
    cov = np.mean(covered)
    assert cov >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / len(covered))
    # paired over seeds: the distribution's TV is not worse than the Holm-detected estimates'
    diff = np.array(tv_fwer) - np.array(tv_shares)
    assert diff.mean() > -3 * diff.std(ddof=1) / math.sqrt(R)


@pytest.mark.statistical
def test_no_winners_curse_on_a_uniform_law():
    """Uniform over 100 strings (+100 decoys) at 10⁵: reporting some strings beats reporting none (TV 0.5)."""
    R = 30
    tv, covered, reported = [], [], 0
    for df, truth in decode_many("uniform", 100_000, range(200, 200 + R)):
        rep = df["reported"].to_numpy()
        reported += int(rep[:100].sum())
        tv.append(0.5 * np.abs(df["share"].to_numpy() - truth).sum())
        covered.extend(((df["share_low"] <= truth) & (truth <= df["share_high"])).to_numpy()[rep].tolist())
    assert reported > 0
    assert np.mean(tv) + 3 * np.std(tv, ddof=1) / math.sqrt(R) < 0.5
    assert np.mean(covered) >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / len(covered))


def outside_z(real_encoder: bool, seeds: range) -> np.ndarray:
    """mass_outside_model / its SE for an exponential law over 200 strings, all listed, n = 10⁵."""
    values = [f"s{i}.example" for i in range(200)]
    w = np.exp(-np.arange(200) / 20)
    w /= w.sum()
    cmap = CandidateMap.from_strings(values, DEFAULT.params)
    z = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        if real_encoder:  # values drawn per report, every report through the encoder
            drawn = rng.choice(200, size=100_000, p=w)
            sketch = DEFAULT.new_sketch()
            DEFAULT.accumulate(sketch, DEFAULT.encode([values[i] for i in drawn], rng=rng))
        else:
            sketch = sample_sketch(DEFAULT.params, cmap, w, 100_000, rng)
        s = decode(sketch, DEFAULT, cmap).attrs["summary"]
        z.append(s["mass_outside_model"] / s["mass_outside_model_se"])
    return np.array(z)


@pytest.mark.statistical
def test_outside_mass_is_calibrated_when_every_string_is_listed():
    """Exponential law, all 200 strings listed, 10⁵ reports: z = mass/SE is N(0, 1)."""
    R = 60
    z = outside_z(False, range(300, 300 + R))
    assert abs(z.mean()) < 3 / math.sqrt(R)
    assert z.var(ddof=1) < 1 + 3 * math.sqrt(2 / (R - 1))     # the interval is not too narrow
    assert np.mean(np.abs(z) <= 1.96) >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / R)


@pytest.mark.statistical
def test_outside_mass_with_the_real_encoder():
    """The same with reports from the encoder: not too narrow there either (grouped jackknife)."""
    R = 30
    z = outside_z(True, range(400, 400 + R))
    assert abs(z.mean()) < 3 / math.sqrt(R)
    assert z.var(ddof=1) < 1 + 3 * math.sqrt(2 / (R - 1))
