"""Exact privacy audit of every frequency oracle (docs/design.md, "Privacy rules of the house"; docs/math.md §12).

For small parameters a protocol enumerates P(y | x) over all its outputs
(``output_probabilities``); test_protocols_basic checks by chi-square that encode samples that
very distribution. Here, over a grid of d and ε, we check

    max_{y, x, x'} P(y|x) / P(y|x') <= e^{protocol.epsilon}        (1e-9 relative slack)
    protocol.epsilon <= target ε

and that the first bound is attained (within 1e-9) by the pure protocols, i.e. the epsilon
we quote is the mechanism's exact one, computed from the realised (quantised) probabilities.
Cohort protocols return one conditional distribution per cohort, shape (m, outputs); the
cohort does not depend on x, so ratios compare the same (cohort, y) cell across inputs.

A negative control shows the audit catches a broken mechanism: unary encoding whose true
bit is always reported (P[report 0 | true bit] = 0, the bug pure-LDP shipped) has an
infinite ratio whatever epsilon it claims.

The numeric mean mechanisms (docs/protocols-numeric.md) are audited the same way, input grid
point by output cell, with their own negative control: a floating-point Laplace sampler,
whose reachable doubles depend on the input (Mironov 2012).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from client_sdk.protocols import PROTOCOL_NAMES
from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES
from client_sdk.protocols.unary import UnaryEncoding, check_thresholds
from client_sdk.randomness import SCALE, threshold_ceil
from sketches import build_server
from sketches.unary import UnaryServer

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DOMAINS = (2, 3, 5, 8, 12)
#: Protocols whose worst-case ratio must equal e^ε exactly (pure ε-LDP, no slack in the quote).
PURE = {"rr", "grr", "oue", "sue", "olh", "hr", "ss"}
RELATIVE_SLACK = 1e-9




def output_matrix(protocol) -> np.ndarray:
    """P[x, *outputs] = P(y | x) for every domain value x (float64)."""
    return np.stack([np.asarray(protocol.output_probabilities(x), dtype=np.float64)
                     for x in range(protocol.domain_size)])


def worst_ratio(probs: np.ndarray) -> float:
    """max over outputs y (cells) and inputs x, x' of P(y|x)/P(y|x'); inf if some P(y|x') = 0 < P(y|x)."""
    hi, lo = probs.max(axis=0), probs.min(axis=0)
    possible = hi > 0
    if np.any(possible & (lo <= 0)):
        return math.inf
    return float((hi[possible] / lo[possible]).max())


def audit(protocol, target: float) -> tuple[float, float]:
    """Check the distributions are proper and the ratio bound holds; return (ratio, e^ε)."""
    probs = output_matrix(protocol)
    assert np.all(probs >= 0)
    row_sums = probs.sum(axis=-1)  # per x (and per cohort for cohort protocols)
    np.testing.assert_allclose(row_sums, 1.0, rtol=0, atol=1e-9)
    bound = math.exp(protocol.epsilon)
    ratio = worst_ratio(probs)
    assert ratio <= bound * (1 + RELATIVE_SLACK), (ratio, bound)
    assert protocol.epsilon <= target * (1 + 1e-12), (protocol.epsilon, target)
    return ratio, bound


#: RAPPOR's inputs are Bloom patterns and its outputs 2^k bit vectors; tests/test_rappor.py
#: audits its ε₁ and ε∞ exactly, so it is not part of this (d, ε) grid. Neither is discover, whose
#: inputs are strings (tests/test_discover.py enumerates its output distributions).
GRID = [(name, d, eps) for name in PROTOCOL_NAMES if name not in ("rappor", "discover")
        for d in ((2,) if name == "rr" else DOMAINS) for eps in EPSILONS]


@pytest.mark.parametrize("name,d,eps", GRID, ids=[f"{n}-d{d}-e{e}" for n, d, e in GRID])
def test_exact_privacy_audit(name, d, eps):
    protocol = build_server(name, d, eps, {})
    ratio, bound = audit(protocol, eps)
    if name in PURE:
        assert math.isclose(ratio, bound, rel_tol=RELATIVE_SLACK), f"bound not tight: {ratio} vs {bound}"


@pytest.mark.parametrize("name", [n for n in PROTOCOL_NAMES if n != "rappor"])
def test_quoted_epsilon_is_realised_and_close_to_target(name):
    """Quantisation rounds the safe way (ε' <= ε) and costs almost nothing (ε ≤ 8, any d)."""
    for d in ((2,) if name == "rr" else (2, 7, 64, 1000)):
        for eps in (0.05, 0.3, 0.5, 1.0, math.log(3), 2.0, 4.0, 6.5, 8.0):
            try:
                protocol = build_server(name, d, eps, {})
            except ValueError:
                continue  # e.g. a domain the protocol does not support
            assert protocol.epsilon <= eps * (1 + 1e-12), (d, eps, protocol.epsilon)
            assert protocol.epsilon >= eps - 1e-5, (d, eps, protocol.epsilon)


# --- negative control ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class AlwaysKeepParams:
    """OUE with the true bit always reported: P[1 | Bᵢ=1] = 1 (no params guard)."""

    d: int
    epsilon: float

    @property
    def p_threshold(self) -> int:
        return SCALE

    @property
    def q_threshold(self) -> int:
        return threshold_ceil(1.0 / (math.exp(self.epsilon) + 1.0))


class AlwaysKeepUE(UnaryEncoding):
    """The broken mechanism, which still *claims* the target epsilon."""

    name = "broken-ue"

    @property
    def epsilon(self) -> float:
        return self.params.epsilon


def test_audit_catches_a_broken_mechanism():
    broken = UnaryServer(AlwaysKeepUE(AlwaysKeepParams(d=4, epsilon=1.0)))
    # its output_probabilities tells the truth about its encoder: the true bit is always set
    bits = broken.encode(np.full(2000, 2), np.random.default_rng(0))["bits"]
    assert np.all(bits[:, 0] & (1 << 2))
    probs = output_matrix(broken)
    assert worst_ratio(probs) == math.inf
    with pytest.raises(AssertionError):
        audit(broken, 1.0)
    # the real params refuse these thresholds up front
    with pytest.raises(ValueError):
        check_thresholds(4, 1.0, SCALE, threshold_ceil(1.0 / (math.e + 1.0)))


def test_audit_catches_an_understated_epsilon():
    """A correct mechanism quoting less than its real epsilon fails the ratio bound."""
    honest = build_server("grr", 5, 2.0, {})

    class Understated(type(honest)):
        @property
        def epsilon(self) -> float:
            return 0.99 * honest.epsilon

    with pytest.raises(AssertionError):
        audit(Understated(honest.device), 2.0)


@pytest.mark.parametrize("name", [n for n in PROTOCOL_NAMES if n != "rappor"])
def test_tiny_epsilon_is_refused_or_realised_safely(name):
    """Down to the registry's smallest ε, a protocol either refuses the grid or has 0 < ε' <= ε.

    GRR and OLH used to round p down below q = (1−p)/(d−1): ε' < 0, i.e. a privacy loss |ε'|
    above the target (GRR at d = 10⁶, ε = 10⁻⁶ leaked 2.3·10⁻⁴), or p' = q' and a division by 0.
    """
    for d in ((2,) if name == "rr" else (2, 3, 5, 16, 33, 1000, 1_000_000)):
        for eps in (1e-300, 1e-12, 1e-10, 1e-9, 3e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4):
            try:
                protocol = build_server(name, d, eps, {})
            except ValueError:
                continue
            assert 0 < protocol.epsilon <= eps * (1 + 1e-12), (d, eps, protocol.epsilon)
            assert np.isfinite(protocol.variance(1000, 10.0)).all()


def test_auto_with_an_unrealisable_epsilon_is_a_registry_error():
    from client_sdk.errors import RegistryError
    from client_sdk.registry import parse_registry

    with pytest.raises(RegistryError, match="epsilon"):
        parse_registry('[metrics.m]\nkind = "categorical"\ncategories = ["a", "b", "c"]\nepsilon = 1e-300\n')


# --- numeric mean mechanisms -----------------------------------------------------------------------
# Their inputs are the K+1 grid points and their outputs the cells of the sketch histogram, so
# the same audit applies row by row: the quoted ε is the realised table's own max log-ratio
# (tight), at most the target, and at most 1e-6 below it.

NUMERIC_GRID = [(name, eps) for name in NUMERIC_PROTOCOL_NAMES for eps in EPSILONS]


@pytest.mark.parametrize("name,eps", NUMERIC_GRID, ids=[f"{n}-e{e}" for n, e in NUMERIC_GRID])
def test_exact_privacy_audit_numeric(name, eps):
    protocol = build_server(name, None, eps, {})
    ratio, bound = audit(protocol, eps)
    assert math.isclose(ratio, bound, rel_tol=RELATIVE_SLACK), f"bound not tight: {ratio} vs {bound}"
    assert protocol.epsilon >= eps - 1e-6, (protocol.epsilon, eps)


@pytest.mark.parametrize("name", NUMERIC_PROTOCOL_NAMES)
def test_numeric_epsilon_is_realised_over_the_registry_range(name):
    """ε ∈ (0, 20]: each mechanism realises 0 < ε' <= ε (close to ε) or refuses with ValueError."""
    for eps in (1e-9, 1e-6, 1e-3, 0.02, 0.3, 0.61, math.log(3), 3.0, 6.5, 12.0, 20.0):
        try:
            protocol = build_server(name, None, eps, {})
        except ValueError:
            continue
        assert 0 < protocol.epsilon <= eps * (1 + 1e-12), (eps, protocol.epsilon)
        if eps >= 0.02:
            assert protocol.epsilon >= eps * (1 - 1e-6), (eps, protocol.epsilon)


class FloatLaplace:
    """NEGATIVE CONTROL: the textbook floating-point Laplace mechanism, x + Laplace(2/ε).

    It samples by inverse CDF, Y = x − b·sgn(U − ½)·ln(1 − 2|U − ½|), in float64. The real
    sampler draws U from 2^53 doubles; on this tiny example U takes the 2^8 − 1 values k/2^8,
    so every output double can be enumerated with its exact probability. Mironov (2012): the
    set of doubles reachable from x depends on x, so some output is possible for one input
    and impossible for its neighbour, an infinite privacy loss, whatever ε it claims.
    """

    def __init__(self, epsilon: float, inputs: tuple[float, ...], bits: int = 8) -> None:
        self.claimed = epsilon
        self.inputs = inputs
        u = np.arange(1, 1 << bits) / float(1 << bits)
        b = 2.0 / epsilon
        self.samples = [x - b * np.sign(u - 0.5) * np.log(1 - 2 * np.abs(u - 0.5)) for x in inputs]
        self.support = np.unique(np.concatenate(self.samples))

    @property
    def domain_size(self) -> int:
        return len(self.inputs)

    @property
    def epsilon(self) -> float:
        return self.claimed

    def output_probabilities(self, index: int) -> np.ndarray:
        values, counts = np.unique(self.samples[index], return_counts=True)
        probs = np.zeros(self.support.shape[0])
        probs[np.searchsorted(self.support, values)] = counts / counts.sum()
        return probs


def test_audit_flags_a_floating_point_laplace_sampler():
    broken = FloatLaplace(1.0, (0.0, 0.3))
    probs = output_matrix(broken)
    reachable = probs > 0
    assert (reachable[0] & ~reachable[1]).any()   # a double only input 0.0 can produce
    assert worst_ratio(probs) == math.inf
    with pytest.raises(AssertionError):
        audit(broken, 1.0)
    # the discrete mechanism on the same budget passes the same audit
    audit(build_server("laplace", None, 1.0, {}), 1.0)


# --- exact ε of the numeric samplers ----------------------------------------------------------------
# The audit above compares the float table with an ε computed from that same table, and its link
# to the sampler is a chi-square that cannot see laplace's 1e-14 cells. Here the table is the
# sampler's own integer law (``integer_table``), checked against the sampler by probing its
# thresholds, and the quoted ε must be an upper bound of its exact worst ratio — and the
# smallest float that is (three of eight tables once exceeded e^ε by ~1e-16).

EXACT_GRID = [(name, eps, {"grid": 4}) for name in NUMERIC_PROTOCOL_NAMES for eps in EPSILONS] + \
    [("memobitmean", eps, {"grid": 4, "epsilon_inf": 2 * eps}) for eps in (0.5, 1.0, 2.0, 4.0)]


@pytest.mark.parametrize("name,eps,options", EXACT_GRID, ids=[f"{n}-e{e}" for n, e, _ in EXACT_GRID])
def test_quoted_epsilon_bounds_the_exact_table(name, eps, options):
    from client_sdk.protocols._epsilon import exp_at_least
    from sketches.numeric import max_column_ratio

    protocol = build_server(name, None, eps, options)
    weights, total = protocol.integer_table()
    assert all(sum(row) == total for row in weights) and (weights >= 0).all()   # a law, exactly
    # the float table the estimators and the audit above read is this law, to a few roundings
    np.testing.assert_allclose(protocol.probability_table(),
                               np.vectorize(lambda w: w / total)(weights).astype(float), rtol=4e-15, atol=0)
    ratio = max_column_ratio(weights)
    assert exp_at_least(protocol.epsilon, ratio), (protocol.epsilon, float(ratio))
    assert not exp_at_least(math.nextafter(protocol.epsilon, 0.0), ratio)       # and the tightest
    assert protocol.epsilon <= eps * (1 + 1e-12)


class Words:
    """A randomness source that hands out chosen 64-bit words (as pairs of 32-bit words)."""

    def __init__(self, words64: np.ndarray) -> None:
        self.u = np.ascontiguousarray(words64, dtype=np.uint64)

    def words(self, shape):
        return self.u.view(np.uint32).reshape(shape)


@pytest.mark.parametrize("name", ["laplace", "duchi", "bitmean"])
def test_integer_table_is_the_samplers_law(name):
    """Each input's output is monotone in the sampler's 64-bit word u, so the first u of every
    output cell (found by bisection through ``encode`` itself) gives the number of words out of
    2^64 mapping to each cell: exactly ``integer_table`` — down to the 1e-14 cells."""
    protocol = build_server(name, None, 1.0, {"grid": 4})
    weights, total = protocol.integer_table()
    assert total == 1 << 64
    k1, cells = weights.shape

    def output(j: np.ndarray, u: np.ndarray) -> np.ndarray:
        return protocol.encode(j, Words(u))["y"]

    j = np.repeat(np.arange(k1), cells - 1)
    c = np.tile(np.arange(1, cells), k1)
    increasing = output(np.array([0]), np.array([0], dtype=np.uint64))[0] == 0
    lo = np.zeros(j.shape[0], dtype=object)
    hi = np.full(j.shape[0], 1 << 64, dtype=object)
    for _ in range(65):   # smallest u with y(u) >= c (increasing) or y(u) < c (decreasing)
        mid = (lo + hi) // 2
        y = output(j, np.array([min(int(m), (1 << 64) - 1) for m in mid], dtype=np.uint64))
        past = (y >= c) if increasing else (y < c)
        hi = np.where(past, mid, hi)
        lo = np.where(past, lo, mid)
    first = hi.reshape(k1, cells - 1)
    edges = np.concatenate([np.zeros((k1, 1), dtype=object), first, np.full((k1, 1), 1 << 64, dtype=object)],
                           axis=1)
    # decreasing (duchi: y = 1 iff u < T_j): the words below an edge map to the higher cell
    counts = np.diff(edges, axis=1) if increasing else np.diff(edges, axis=1)[:, ::-1]
    assert (counts == weights).all()


def exact_worst_ratio(probs: np.ndarray) -> Fraction | float:
    """``worst_ratio`` over the realised float probabilities taken as exact rationals."""
    flat = probs.reshape(probs.shape[0], -1)
    worst: Fraction | float = Fraction(1)
    for col in flat.T:
        hi, lo = Fraction(col.max()), Fraction(col.min())
        if hi > 0:
            if lo <= 0:
                return math.inf
            worst = max(worst, hi / lo)
    return worst


@pytest.mark.parametrize("name,d,eps", GRID, ids=[f"{n}-d{d}-e{e}" for n, d, e in GRID])
def test_quoted_epsilon_is_an_exact_upper_bound(name, d, eps):
    """max P(y|x)/P(y|x') <= exp(quoted ε) exactly (Fractions; 60-digit exp), no slack: the
    quote is the ratio's logarithm rounded up (client_sdk/protocols/_epsilon.py)."""
    from client_sdk.protocols._epsilon import exp_at_least

    protocol = build_server(name, d, eps, {})
    if isinstance(protocol, UnaryServer):
        if d > 5:
            pytest.skip("the exact product table is enumerated for d <= 5")
        ratio = exact_worst_ratio(exact_unary_table(protocol))
    elif name == "hr":   # its float table divides p' and q' by m, a rounding the law does not have
        ratio = Fraction(protocol.params.p) / Fraction(protocol.q_prime)
    else:   # every entry is one realised probability (a multiple of 2^-32 or its exact complement)
        ratio = exact_worst_ratio(output_matrix(protocol))
    assert ratio != math.inf and exp_at_least(protocol.epsilon, ratio), (protocol.epsilon, ratio)


def exact_unary_table(protocol) -> np.ndarray:
    """P(bits | x) as Fractions of the realised per-bit rates (the float table rounds products)."""
    d, p, q = protocol.domain_size, Fraction(protocol.p), Fraction(protocol.q)
    rows = []
    for x in range(d):
        row = []
        for pattern in range(1 << d):
            prob = Fraction(1)
            for i in range(d):
                one = p if i == x else q
                prob *= one if pattern >> i & 1 else 1 - one
            row.append(prob)
        rows.append(row)
    return np.array(rows, dtype=object)
