"""Numeric mean mechanisms: exact sampling, unbiasedness, variance, coverage, auto, bounds.

Privacy (the exact ε audit and the float-Laplace negative control) lives in
test_privacy_audit.py. Everything statistical here uses fixed seeds and tolerances from the
sampling error: means within 4 standard errors, variance ratios within 1 ± 3·sqrt(2/(R−1)).
Repeated sketches are simulated exactly from the realised table: for inputs on the grid,
a sketch of c_j reports of grid point j is Σ_j Multinomial(c_j, P(· | j)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.factory import choose_numeric_protocol
from client_sdk.protocols.hybrid import Hybrid, HybridParams, paper_alpha
from client_sdk.protocols.laplace import TAIL_MASS, Laplace, LaplaceParams
from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES
from client_sdk.protocols.piecewise import Piecewise, PiecewiseParams, paper_window
from sketches import build_server, server_half

from .test_protocols_basic import assert_cells_fit

EPSILONS = (0.5, 1.0, 2.0, 4.0)
NAMES = NUMERIC_PROTOCOL_NAMES


def build(name: str, eps: float):
    return build_server(name, None, eps, {})


# --- exact sampling --------------------------------------------------------------------------------

def chi_square_p(observed: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value of counts against probabilities; cells expected < 5 are pooled."""
    n = observed.sum()
    expected = probs * n
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:  # pool the remainder into the smallest kept cell
        i = int(np.argmin(exp[:-1]))
        obs[i] += obs[-1]
        exp[i] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", (1.0, 4.0))
def test_encode_samples_the_table(name, eps):
    proto = build(name, eps)
    rng = np.random.default_rng(11)
    table = proto.probability_table()
    for j in (0, proto.grid // 3, proto.grid):
        y = proto.encode(np.full(200_000, j), rng)["y"]
        assert y.dtype.kind in "iu" and y.min() >= 0 and y.max() < proto.cells
        p = chi_square_p(np.bincount(y, minlength=proto.cells), table[j])
        assert p > 1e-4, (name, eps, j, p)


def mass_bins(probs: np.ndarray, parts: int) -> np.ndarray:
    """Each cell's bin: consecutive cells pooled until a bin holds >= 1/parts of the mass (a
    lighter remainder joins the last full bin), so every bin's expected count is large."""
    bins, b, acc = np.empty(len(probs), dtype=np.int64), 0, 0.0
    for i, p in enumerate(probs):
        bins[i], acc = b, acc + float(p)
        if acc >= 1 / parts:
            b, acc = b + 1, 0.0
    if acc > 0 and b > 0:
        bins[bins == b] = b - 1
    return bins


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
def test_encode_one_samples_the_table(name):
    """The plain-Python SDK path draws from the same table on the OS CSPRNG (test_pure_path checks
    it on a seeded source). Unseeded, so each count is checked against its exact binomial law,
    Bonferroni over the bins, at two scales: adjacent cells pooled into bins of >= 1/16 and of
    >= 1/(4 cells) of the mass. 20 checks at size 5e-9, 1e-7 per run (was chi-square at p > 1e-6
    each: 1e-5, more where expected counts are small). Over 50,000 draws (were 20,000) the table
    of grid point j + 1 for j fails it on piecewise and hybrid (p < 1e-40), j + 4 on laplace,
    duchi and bitmean (p < 1e-12; duchi's cell moves by 8 σ)."""
    proto = build(name, 2.0)
    table = proto.probability_table()
    for j in (1, proto.grid - 1):
        got = np.bincount([proto.randomise(j) for _ in range(50_000)], minlength=proto.cells)
        for parts in sorted({16, max(16, 4 * proto.cells)}):   # one scale where cells are few
            bins = mass_bins(table[j], parts)
            assert bins.max() >= 1   # two bins at least: the check can fail
            assert_cells_fit(np.bincount(bins, weights=got).astype(np.int64),
                             np.bincount(bins, weights=table[j]), 5e-9, (name, j, parts))


# --- unbiasedness on real data, through the full encode path -------------------------------------

def datasets(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "low end": np.full(n, -1.0),
        "high end": np.full(n, 1.0),
        "both ends": np.repeat([-1.0, 1.0], n // 2),
        "uniform": rng.uniform(-1.0, 1.0, n),
        "skewed": 2.0 * rng.beta(0.5, 4.0, n) - 1.0,
    }


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", EPSILONS)
def test_mean_is_unbiased_for_every_shape_of_data(name, eps):
    proto = build(name, eps)
    rng = np.random.default_rng(int(eps * 100) + NAMES.index(name))
    n = 100_000
    for label, t in datasets(rng, n).items():
        sketch = proto.new_sketch()
        payloads = proto.encode_values(t, rng)
        proto.validate(payloads)
        proto.accumulate(sketch, payloads)
        est = proto.estimate(sketch)
        se = math.sqrt(float(proto.value_variance(t).mean()) / n)
        assert abs(est.mean - t.mean()) <= 4 * se, (label, est.mean, t.mean(), se)
        # the self-normalised variance estimate: the reports' spread, i.e. the mechanism's
        # variance plus the data's own (so it is honest whatever the data), to ~1% at n = 1e5
        expected = se * se + float(t.var()) / n
        assert est.variance == pytest.approx(expected, rel=0.05), label


# --- variance and coverage from many exactly simulated sketches ---------------------------------

GRID_DATA = {  # (grid position as a fraction of K, share of the reports)
    "ends": ((0.0, 0.5), (1.0, 0.5)),
    "skewed": ((0.0, 0.55), (0.125, 0.25), (0.25, 0.12), (1.0, 0.08)),
}


def simulate(proto, data, n: int, runs: int, rng: np.random.Generator):
    """(estimated means, their estimated SEs, true mean, theoretical Var of the mean)."""
    k = proto.grid
    js = np.array([round(frac * k) for frac, _ in data])
    counts = np.array([round(share * n) for _, share in data])
    counts[-1] = n - counts[:-1].sum()
    table = proto.probability_table()
    h = np.zeros((runs, proto.cells), dtype=np.int64)
    for j, c in zip(js, counts):
        p = table[j] / table[j].sum()
        h += rng.multinomial(c, p, size=runs)
    v = proto.debiased_values()
    means = h @ v / n
    second = h @ (v * v) / n
    sample_var = (second - means**2) * n / (n - 1)
    t = proto.grid_points()[js]
    truth = float(counts @ t) / n
    theory = float(counts @ proto.report_variance()[js]) / n**2
    return means, np.sqrt(sample_var / n), truth, theory


COVERAGE = {}


@pytest.mark.statistical
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", EPSILONS)
def test_variance_of_the_mean_matches_theory_and_intervals_cover(name, eps):
    proto = build(name, eps)
    rng = np.random.default_rng(1000 + int(eps * 10) + 100 * NAMES.index(name))
    runs, n = 2000, 1000
    tolerance = 3 * math.sqrt(2 / (runs - 1))
    for label, data in GRID_DATA.items():
        means, ses, truth, theory = simulate(proto, data, n, runs, rng)
        assert abs(means.mean() - truth) <= 4 * math.sqrt(theory / runs), (label, means.mean(), truth)
        ratio = float(np.mean((means - truth) ** 2)) / theory
        assert abs(ratio - 1) <= tolerance, (label, ratio)
        covered = float(np.mean(np.abs(means - truth) <= 1.96 * ses))
        COVERAGE[(name, eps, label)] = covered
        assert covered >= 0.93, (label, covered)  # each point; the average is checked below


@pytest.mark.statistical
def test_average_coverage_of_95_percent_intervals():
    """Over every (mechanism, ε, data) point of the test above: ≥ 94.5% on average."""
    if len(COVERAGE) < len(NAMES) * len(EPSILONS) * len(GRID_DATA):
        rng = np.random.default_rng(7)
        for name in NAMES:
            for eps in EPSILONS:
                proto = build(name, eps)
                for label, data in GRID_DATA.items():
                    means, ses, truth, _ = simulate(proto, data, 1000, 2000, rng)
                    COVERAGE[(name, eps, label)] = float(np.mean(np.abs(means - truth) <= 1.96 * ses))
    assert np.mean(list(COVERAGE.values())) >= 0.945, COVERAGE


@pytest.mark.statistical
@pytest.mark.parametrize("eps,bound", [(1.0, 0.58), (4.0, 0.48)])
def test_hybrid_beats_laplace_on_the_same_data(eps, bound):
    """Empirical MSE of the mean, same data (both ends: the hardest for Piecewise), R = 2000."""
    rng = np.random.default_rng(42)
    mse = {}
    for name in ("hybrid", "laplace"):
        means, _, truth, _ = simulate(build(name, eps), GRID_DATA["ends"], 1000, 2000, rng)
        mse[name] = float(np.mean((means - truth) ** 2))
    assert mse["hybrid"] / mse["laplace"] <= bound, mse
    theory = build("hybrid", eps).worst_case_variance() / build("laplace", eps).worst_case_variance()
    assert theory <= bound


# --- published values and bounds ---------------------------------------------------------------

PUBLISHED_HYBRID = {1.0: 4.29, 2.0: 1.04, 4.0: 0.219}  # Wang et al. 2019, worst case on [−1, 1]


@pytest.mark.statistical
@pytest.mark.parametrize("eps", sorted(PUBLISHED_HYBRID))
def test_hybrid_reproduces_the_published_worst_case_variance(eps):
    """With the paper's α and window, the discrete HM's worst case is the published figure;
    measured at t = ±1 by R exact simulations. The default (optimised) HM is never worse."""
    paper = server_half(Hybrid(HybridParams(eps, alpha=paper_alpha(eps), window=paper_window(eps, 256))))
    published = PUBLISHED_HYBRID[eps]
    assert paper.worst_case_variance() == pytest.approx(published, rel=0.005)
    runs, n = 4000, 500
    rng = np.random.default_rng(5)
    for data in (((0.0, 1.0),), ((1.0, 1.0),)):
        means, _, truth, _ = simulate(paper, data, n, runs, rng)
        per_report = float(np.mean((means - truth) ** 2)) * n
        assert abs(per_report / published - 1) <= 3 * math.sqrt(2 / (runs - 1)), per_report
    assert Hybrid(HybridParams(eps)).worst_case_variance() <= paper.worst_case_variance()


@pytest.mark.parametrize("eps", (0.5, 1.0, 2.0, 4.0))
def test_piecewise_paper_window_is_the_continuous_mechanism(eps):
    """At K = 256 the paper's window reproduces 4a/(3(a−1)²) within 1%; the optimised one is lower."""
    a = math.exp(eps / 2)
    continuous = 4 * a / (3 * (a - 1) ** 2)
    paper = Piecewise(PiecewiseParams(eps, 256, paper_window(eps, 256)))
    assert paper.worst_case_variance() == pytest.approx(continuous, rel=0.01)
    assert Piecewise(PiecewiseParams(eps)).worst_case_variance() <= paper.worst_case_variance()


@pytest.mark.parametrize("eps", (0.05, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0))
def test_laplace_clamp_and_bias_are_negligible(eps):
    proto = server_half(Laplace(LaplaceParams(eps)))
    assert proto.clamped_mass() <= TAIL_MASS
    assert np.abs(proto.bias()).max() <= 1e-12
    # the variance is the textbook 8/ε² plus the grid's rounding (at most 1/K² per report)
    k = proto.grid
    alpha = math.exp(-proto.epsilon / k)
    geometric = 2 * alpha / (1 - alpha) ** 2 * (2 / k) ** 2
    assert proto.worst_case_variance() == pytest.approx(geometric + 1 / k**2, rel=1e-6)
    if eps <= 4:
        assert proto.worst_case_variance() == pytest.approx(8 / eps**2, rel=0.002)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", (0.5, 1.0, 4.0, 8.0, 20.0))
def test_debiased_values_are_exactly_unbiased_on_the_grid(name, eps):
    proto = build(name, eps)
    bias = proto.probability_table() @ proto.debiased_values() - proto.grid_points()
    assert np.abs(bias).max() <= 1e-9 * max(1.0, float(np.abs(proto.debiased_values()).max()))


# --- auto --------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", (0.05, 0.1, 0.3, 0.5, 0.61, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 20.0))
def test_auto_is_within_two_percent_of_the_best(eps):
    variances = {}
    for name in NAMES:
        try:
            variances[name] = build(name, eps).worst_case_variance()
        except ValueError:
            continue
    chosen = choose_numeric_protocol(eps)
    assert variances[chosen] <= 1.02 * min(variances.values()), (chosen, variances)
    if eps < 0.61:  # the optimised hybrid is pure Duchi here: the one-bit report wins the tie
        assert chosen == "duchi"


@pytest.mark.parametrize("eps", (1e-300, 1e-12, 1e-9, 1e-8, 1e-7, 1e-6, 1e-4, 1e-3, 0.01))
def test_tiny_epsilon_is_realised_or_refused(eps):
    try:
        name = choose_numeric_protocol(eps)
    except ValueError as exc:
        assert "epsilon" in str(exc)
    else:
        assert 0 < build(name, eps).epsilon <= eps
    for name in NAMES:
        try:
            proto = build(name, eps)
        except ValueError:
            continue
        assert 0 < proto.epsilon <= eps * (1 + 1e-12), (name, proto.epsilon)
        assert math.isfinite(proto.worst_case_variance())


# --- collector-side checks ---------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_validate_rejects_cells_out_of_range(name):
    proto = build(name, 1.0)
    for bad in (-1, proto.cells):
        with pytest.raises(InvalidPayload):
            proto.validate({"y": np.array([0, bad], dtype=np.int64)})
    with pytest.raises(InvalidPayload):
        proto.validate({"y": np.array([0.5])})
    assert proto.payload_bits == max(1, math.ceil(math.log2(proto.cells)))


@pytest.mark.parametrize("name", NAMES)
def test_grid_option_is_checked(name):
    """Odd, tiny or huge grids are refused with the protocol's name (tables stay small)."""
    for grid in (3, 0, 1 << 17, "64", True):
        with pytest.raises(ValueError, match=name if name != "bitmean" else "duchi"):
            build_server(name, None, 1.0, {"grid": grid})
    assert build_server(name, None, 1.0, {"grid": 64}).grid == 64
    if name in ("laplace", "piecewise", "hybrid"):  # (K+1) × cells tables: capped
        with pytest.raises(ValueError, match=name):
            build_server(name, None, 1.0, {"grid": 2048})


def test_hybrid_without_piecewise_rejects_piecewise_cells():
    proto = build("hybrid", 0.5)  # below ε* the mixture is pure Duchi
    assert proto.alpha == 0
    proto.validate({"y": np.array([proto.cells - 2, proto.cells - 1])})
    with pytest.raises(InvalidPayload, match="never reports"):
        proto.validate({"y": np.array([0])})


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0])
def test_duchi_smallest_low_is_the_one_step_search(eps):
    # duchi.smallest_low jumps to the exact bound 2^64/(e^ε + 1); it must land on the A that
    # stepping up one by one with realised_epsilon (the former code) finds, from every start.
    from client_sdk.protocols.duchi import SCALE64, realised_epsilon, smallest_low

    estimate = max(1, math.ceil(SCALE64 / (2.0 + math.expm1(eps))))
    for start in (estimate, estimate - 1500, estimate + 3):
        low = start
        while realised_epsilon(low) > eps:
            low += 1
        assert smallest_low(eps, start) == low
