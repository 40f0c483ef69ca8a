"""The poisoning figures (estimators/poisoning.py) against the estimators they describe.

The count estimators are linear in the reports, so m forged reports of the best payload
must move the target's count estimate by exactly m·g; the figure `ldpt plan` prints is then
the smallest m that moves the share by one point when the target's true share is 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from estimators.poisoning import POINT, poisoning_bound
from sketches import build_server
from sketches.olh import hash_values

N_HONEST = 20_000


def best_payloads(proto, target: int, m: int) -> dict:
    """m copies of the payload that supports ``target`` (and, for unary encodings, all)."""
    if proto.name in ("rr", "grr"):
        return {"y": np.full(m, target, dtype=np.int64)}
    if proto.name in ("oue", "sue", "losue"):  # every bit set (padding bits stay 0)
        d = proto.domain_size
        return proto.from_wire([((1 << d) - 1).to_bytes((d + 7) // 8, "little")] * m)
    if proto.name == "olh":  # spread over the cohorts, each in the cell its hash gives the target
        cohort = np.arange(m, dtype=np.int64) % proto.cohorts
        y = hash_values(proto.seeds[cohort], np.full(m, target), proto.params.g).astype(np.int64)
        return {"cohort": cohort, "y": y}
    raise AssertionError(proto.name)


@pytest.mark.parametrize("name,d,epsilon", [("rr", 2, 1.0), ("grr", 3, 1.0), ("grr", 16, 2.0),
                                            ("oue", 20, 2.0), ("sue", 8, 1.0), ("olh", 64, 1.0),
                                            ("losue", 20, 1.0)])
def test_forged_reports_move_the_count_by_exactly_the_gain(name, d, epsilon):
    """m forged reports move the count by m·g; an all-ones unary report (OUE, SUE and L-OSUE,
    whose wire and estimator are unary encoding's) moves every value by g, so the bound counts d."""
    proto = build_server(name, d, epsilon, {"epsilon_inf": 3.0} if name == "losue" else {})
    rng = np.random.default_rng(11)
    honest = proto.encode(rng.integers(1, d, N_HONEST), rng)  # nobody holds value 0
    sketch = proto.new_sketch()
    proto.accumulate(sketch, honest)
    before = proto.estimate(sketch).counts.copy()
    bound = poisoning_bound(proto)
    m = bound.forged_for_one_point(N_HONEST)
    forged = best_payloads(proto, 0, m)
    proto.validate(forged)  # an honest client could have sent each of them
    proto.accumulate(sketch, forged)
    after = proto.estimate(sketch).counts
    moved = after - before
    # OLH's decoder corrects the frozen hash collisions (protocols-olh.md), so its realised
    # gain differs from the pure-OLH (1 - q*)/(p* - q*) that `ldpt plan` prints by a few percent,
    # depending on the cohort design (2.6% here with the inflation-1.1 sizing)
    assert moved[0] == pytest.approx(m * bound.gain, rel=0.05 if name == "olh" else 1e-9)
    if name in ("oue", "sue", "losue"):   # an all-ones report: every value moves by the full gain
        assert bound.values_per_report == d
    if bound.values_per_report > 1:
        assert np.allclose(moved, m * bound.gain)
    # the share moves by m (g - f)/(n + m); with f = 0 that is one point at the printed m
    share_shift = lambda k: k * bound.gain / (N_HONEST + k)  # noqa: E731
    assert share_shift(m) >= POINT > share_shift(m - 1)


@pytest.mark.parametrize("name,d,epsilon", [("rr", 2, 1.0), ("grr", 3, 1.0), ("grr", 16, 2.0),
                                            ("oue", 20, 2.0), ("sue", 8, 1.0)])
def test_forged_reports_lower_a_count_by_exactly_the_deflation(name, d, epsilon):
    """Downwards (issue 26 §4): a report that supports nothing of the target leaves its support
    alone and grows N, so m of them lower its count by exactly m·q*/(p* − q*)."""
    proto = build_server(name, d, epsilon, {})
    rng = np.random.default_rng(12)
    sketch = proto.new_sketch()
    proto.accumulate(sketch, proto.encode(rng.integers(0, d, N_HONEST), rng))
    before = proto.estimate(sketch).counts.copy()
    bound = poisoning_bound(proto)
    assert 0 < bound.deflation < bound.gain
    m = 500
    if name in ("rr", "grr"):
        forged = {"y": np.full(m, 1, dtype=np.int64)}          # supports value 1 only
    else:
        forged = proto.from_wire([bytes((d + 7) // 8)] * m)   # all zeros: supports nothing
    proto.validate(forged)
    proto.accumulate(sketch, forged)
    assert proto.estimate(sketch).counts[0] - before[0] == pytest.approx(-m * bound.deflation, rel=1e-9)


def test_numeric_mean_bound_is_the_largest_debiased_output():
    proto = build_server("duchi", None, 1.0, {}) if _has("duchi") else None
    if proto is None:
        pytest.skip("no numeric mechanism in this checkout")
    bound = poisoning_bound(proto)
    v = proto.debiased_values()
    assert bound.gain == pytest.approx(max(v.max() + 1, 1 - v.min()))
    n = 10_000
    m = bound.forged_for_one_point(n)
    shift = lambda k: k * bound.gain / (n + k)  # noqa: E731 - mean moves on [-1, 1] from -1
    assert shift(m) >= 2 * POINT > shift(m - 1)


def _has(name: str) -> bool:
    try:
        build_server(name, None, 1.0, {})
        return True
    except Exception:
        return False


def test_rappor_gain_is_positive_and_equals_a_direct_simulation():
    """RAPPOR's bit-count estimate t̂ = (c − p*N)/(q* − p*) uses RAPPOR's own names (q* is
    P(1 | Bloom bit 1)); read the other way round the gain was printed as −2.5 (issue 18).
    m all-ones reports in cohort 0 must move every bit estimate of cohort 0 by m·g, g = 3.5
    at the defaults, and leave the other cohorts alone."""
    proto = build_server("rappor", None, 2.0, {})
    bound = poisoning_bound(proto)
    assert bound.gain == pytest.approx(3.5)
    rng = np.random.default_rng(5)
    sketch = proto.new_sketch()
    proto.accumulate(sketch, proto.encode([f"s{i % 50}" for i in range(N_HONEST)], rng))
    before = proto.estimate(sketch).counts.reshape(proto.params.m, proto.params.k).copy()
    m = 37
    width = (proto.params.k + 7) // 8
    forged = proto.from_wire([[0, b"\xff" * width]] * m)
    proto.validate(forged)
    proto.accumulate(sketch, forged)
    moved = proto.estimate(sketch).counts.reshape(proto.params.m, proto.params.k) - before
    assert np.allclose(moved[0], m * bound.gain) and np.allclose(moved[1:], 0.0)


def test_loloha_and_dbitflip_have_bounds_that_match_a_direct_simulation():
    """`poisoning_bound` used to raise for LOLOHA and dBitFlipPM. LOLOHA is local hashing with
    the composed p' (its decoder is OLH's: within 5%, as OLH); dBitFlipPM's estimate divides
    by the reports whose window holds v, so one report moves it by (k/d)(1 − Q)/(P − Q)
    (first order at f_v = 0: the growth of n_v, (n + m)/(n + m·k/d) = 0.993 here, and the
    honest bits' own noise, C_v/n_v − Q of sd √(Q(1 − Q)/n_v) ≈ 1% of 1 − Q, move it by a few
    percent: 5% tolerance)."""
    lol = build_server("loloha", 64, 1.0, {"epsilon_inf": 4.0})
    rng = np.random.default_rng(7)
    sketch = lol.new_sketch()
    lol.accumulate(sketch, lol.encode(rng.integers(1, 64, N_HONEST), rng))
    before = lol.estimate(sketch).counts.copy()
    bound = poisoning_bound(lol)
    m = bound.forged_for_one_point(N_HONEST)
    cohort = np.arange(m, dtype=np.int64) % lol.cohorts
    forged = {"cohort": cohort, "y": hash_values(lol.seeds[cohort], np.zeros(m, np.int64), lol.params.g).astype(np.int64)}
    lol.validate(forged)
    lol.accumulate(sketch, forged)
    assert lol.estimate(sketch).counts[0] - before[0] == pytest.approx(m * bound.gain, rel=0.05)

    k, d = 16, 4
    dbf = build_server("dbitflip", k, 1.0, {"epsilon_inf": 4.0, "sampled_buckets": d})
    sketch = dbf.new_sketch()
    dbf.accumulate(sketch, dbf.encode(rng.integers(1, k, N_HONEST), rng))
    before = dbf.estimate(sketch).counts.copy()
    bound = poisoning_bound(dbf)
    assert bound.values_per_report == d
    m = bound.forged_for_one_point(N_HONEST)
    windows = np.array([(-i) % k for i in range(d)])     # the d windows that hold bucket 0
    forged = {"cohort": windows[np.arange(m) % d].astype(np.int64), "y": np.full(m, (1 << d) - 1, np.int64)}
    dbf.validate(forged)
    dbf.accumulate(sketch, forged)
    moved = dbf.estimate(sketch).counts - before
    assert moved[0] == pytest.approx(m * bound.gain, rel=0.05)
