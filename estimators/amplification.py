"""Central (ε, δ) bought by shuffling: upper bounds from published amplification theorems.

n devices each send one report of an ε₀-LDP randomiser; a shuffler strips every address, header
and arrival time and forwards the n reports in a uniformly random order (the collector sees the
multiset). Feldman, McMillan and Talwar (FOCS 2021, "Hiding Among the Clones") prove that the
shuffled output is (ε, δ)-DP with ε far below ε₀. This module computes that ε as an UPPER bound —
never an approximation from below — from three statements:

``fmt21_closed_form`` — their Theorem 3.1. For ε₀ < ln(n / (16 ln(4/δ))),

    ε ≤ ln(1 + (1 − e^−ε₀)/(1 + e^(−ε₀−ε')) · (a + b)),   a = 8 √(e^ε₀ ln(4/δ)) / √n,
                                                          b = 8 e^ε₀ / n,  e^ε' = 1 + a + b.

    This is the form the authors' released code evaluates (apple/ml-shuffling-amplification,
    ``closedformanalysis``); its factor is at least the theorem's (e^ε₀ − 1)/(e^ε₀ + 1) and its
    range condition (4/δ) is at least as strict as the theorem's (2/δ), so it is never tighter.

``fmt21_numerical`` — their numerical bound (Theorem 3.2 and Appendix E; the figures of the paper
use it). Every other report is, with probability p = e^−ε₀, a "clone": a draw, half and half,
from the two output distributions of the target device's two candidate values. With
C ~ Bin(n − 1, p) clones, A ~ Bin(C, ½) and α = e^ε₀/(e^ε₀ + 1), the shuffled mechanism is
(ε, δ)-DP if the two mixtures

    P_C = α·A + (1 − α)·(A + 1),     Q_C = (1 − α)·A + α·(A + 1)

are: δ(ε) = E_C[D_{e^ε}(P_C ‖ Q_C)], the hockey-stick divergence D_{e^ε}(P‖Q) = Σ_x (P(x) − e^ε
Q(x))₊ (C is visible in the output, so the divergence averages over it). Q_C is P_C reflected
(x ↦ C + 1 − x), so the two directions are equal. The smallest ε with δ(ε) ≤ δ is searched.

``krr_clones`` — the same reduction with the exact decomposition of k-ary randomised response
(RR is k = 2), whose every report puts at least q = 1/(e^ε₀ + k − 1) on each value: any other
device's report is, with probability 2q, uniform on the target's two candidate values x, x'
(a clone); the target's own report is x or x' with probability p + q = (e^ε₀ + 1)/(e^ε₀ + k − 1)
— then x with probability α under x, and with 1 − α under x' — and otherwise a uniform other
value, the same under both. Showing the adversary which reports are clones, what the rest
reported and whether the target's report left {x, x'} can only help it (the real view is a
function of that one), and the last branch is identical under both hypotheses, so

    δ(ε) = (p + q) · E_{C ~ Bin(n − 1, 2q)}[D_{e^ε}(P_C ‖ Q_C)].

This is the decomposition of Feldman, McMillan and Talwar (SODA 2023, "stronger clones": k-RR
is in the class their erratum keeps) and Wang et al. (VLDB 2024, the variation-ratio parameters
β = (e^ε₀ − 1)/(e^ε₀ + k − 1) of k-RR); both papers compute the mixture without revealing the
last branch, which is tighter still, so this bound is never below theirs. It applies only when
the whole envelope is one report of ``rr`` or ``grr``; for k > e^ε₀ + 1 the generic clones are
likelier and ``fmt21_numerical`` wins (``central_epsilon`` takes the smaller of all that apply).

Why the numbers are upper bounds (the computation errs upward at every step):

- D_C is non-increasing in C: P_{C+1} is P_C plus an independent fair coin, the same Markov
  kernel applied under both hypotheses, so the data-processing inequality applies. The sum over
  C is kept on [lo, hi] = μ ∓ t with μ = (n − 1)p and t solving t²/(2(μ + t/3)) = L,
  L = ln(1/δ) + 25; Bernstein's inequality bounds each dropped tail's mass by e^−L, and the
  dropped terms are charged at D_0 = α − e^ε(1 − α) (below lo) and D_hi (above hi).
- The cut of the hockey-stick sum (the largest x with P_C(x) > e^ε Q_C(x)) is found in floats,
  then the partial sums at that cut and its two neighbours are taken and the largest kept:
  the divergence is the maximum of these partial sums, so a float error in the cut cannot
  lower it. Binomial CDFs are regularised incomplete beta functions (scipy/Boost), weights
  binomial pmfs (Boost); both are accurate to ~1e-14 relative, and the sum is inflated by a
  relative 1e-6 plus 1e-10 of the magnitudes that cancel in each term (and 1e-300 for underflow) — margins more than
  10⁴ times those errors (tests/test_amplification.py checks them against 50-digit decimal
  arithmetic).
- The inputs are nudged in the direction that raises δ: ε₀ up by a relative 1e-12 (covering
  any rounding of the protocol's quoted ε), then α and the (p + q) factor up, the clone
  probability down and e^ε down, each by two ulps. δ(ε) grows with ε₀ (fewer clones, a larger
  α), so a larger ε₀ is always safe.
- ε is located by Brent's method, rounded up to a dyadic grid of relative resolution 2^−20,
  and what is returned is always a grid point where δ(ε) ≤ δ was verified (never an
  interpolated or last-iterate value). ε₀ itself always holds (δ = 0): when no grid point below
  ε₀ is certified the answer is None — "no amplification certified".

Beyond one report per device in one batch (``central_claim`` and docs/privacy.md, "The central
claim of shuffled reports"): the policy for what the collector records per window —
envelopes per device, memoised metrics, public dimensions, permanent cohorts, reports that did
not come shuffled, and collusion of the shuffler with the collector.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math

import numpy as np

from sketches import server_half

__all__ = [
    "DEFAULT_DELTA",
    "EPSILON0_MAX",
    "AmplificationBound",
    "CentralClaim",
    "ShuffledWindow",
    "Theorem",
    "central_claim",
    "central_epsilon",
    "clone_delta",
    "fmt21_closed_form",
    "fmt21_numerical",
    "krr_clones",
    "krr_size",
    "largest_epsilon0",
    "smallest_batch_for",
]

#: The δ central claims are quoted at unless told otherwise (about 1/n² for n ≈ 10⁴ devices;
#: the convention is δ well below 1/n).
DEFAULT_DELTA = 1e-8
#: The largest per-report ε₀ the inverse search considers (the registry's bound on epsilon).
EPSILON0_MAX = 20.0

#: ε is rounded up to a dyadic grid of relative resolution 2^-GRID_BITS (``_Clones.epsilon``).
GRID_BITS = 20
#: Relative margin on the δ sum (pmf and CDF rounding, summation), and on the magnitudes that
#: cancel in each hockey-stick term; see the module docstring.
RELATIVE_MARGIN = 1e-6
CANCELLATION_MARGIN = 1e-10
#: Added to every δ sum: the divergences of large clone counts underflow to 0 below ~1e-308.
UNDERFLOW_MARGIN = 1e-300
#: ε₀ is raised by this relative amount before use (rounding of a quoted ε).
EPSILON0_NUDGE = 1e-12
#: Bernstein tails beyond the kept clone counts weigh at most δ·e^−TAIL_SLACK each.
TAIL_SLACK = 25.0
#: Above this many clone counts, counts are grouped (each group charged at its smallest count's
#: divergence, an upper bound since D_C does not increase with C) to bound the work.
MAX_TERMS = 20_000


class Theorem(str, enum.Enum):
    """Which published statement a central ε comes from (the value is what outputs print)."""

    FMT21_CLOSED = "Feldman-McMillan-Talwar 2021, Thm 3.1 (closed form)"
    FMT21_NUMERICAL = "Feldman-McMillan-Talwar 2021, numerical bound"
    KRR_CLONES = "k-RR clones (Feldman-McMillan-Talwar 2023; Wang et al. 2024)"
    LOCAL = "local (no amplification)"


@dataclasses.dataclass(frozen=True)
class AmplificationBound:
    """A certified central (ε, δ) for n shuffled reports of an ε₀-LDP randomiser."""

    epsilon: float
    delta: float
    theorem: Theorem
    n: int
    epsilon0: float

    def as_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "theorem": self.theorem.value,
                "n": self.n, "epsilon0": self.epsilon0}


# --- the hockey-stick divergence of the clone mixtures ----------------------------------------------


def _up(x: float, steps: int = 2) -> float:
    for _ in range(steps):
        x = math.nextafter(x, math.inf)
    return x


def _down(x: float, steps: int = 2) -> float:
    for _ in range(steps):
        x = math.nextafter(x, 0.0)
    return x


def _half_cdf(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """P(Bin(c, ½) <= x) for integer-valued float arrays (I_{1/2}(c − x, x + 1) inside [0, c))."""
    from scipy import special

    inside = (x >= 0) & (x < c)
    safe_x = np.where(inside, x, 0.0)
    safe_c = np.where(inside, c, 1.0)
    out = special.betainc(safe_c - safe_x, safe_x + 1.0, 0.5)
    return np.where(inside, out, np.where(x >= c, 1.0, 0.0))


def _divergences(c: np.ndarray, a0: float, b0: float) -> tuple[np.ndarray, np.ndarray]:
    """D_{e^ε}(P_c ‖ Q_c) for each clone count c, and the magnitudes that cancel in it.

    P_c(x) − e^ε Q_c(x) = a0·b_c(x) + b0·b_c(x − 1) with b_c the Bin(c, ½) pmf, a0 = α − e^ε(1 − α)
    > 0 and b0 = (1 − α) − e^ε α < 0: positive exactly while x/(c + 1 − x) < ρ = a0/|b0|. The sum
    of the positive terms is a0·F(t) + b0·F(t − 1) at the last such x = t; the partial sums at
    t − 1, t, t + 1 are all at most the divergence and one of them is it, so their maximum is
    taken (a float error in t cannot lower the result). F(t − 2) is one incomplete beta function;
    the next three CDF values add pmf terms to it (sums of positive numbers)."""
    from scipy import stats

    rho = a0 / -b0
    t = np.ceil(rho * (c + 1.0) / (1.0 + rho)) - 1.0
    cdf = {-2: _half_cdf(t - 2.0, c)}
    for k in (-1, 0, 1):
        x = t + k
        cdf[k] = np.minimum(1.0, cdf[k - 1] + np.where((x >= 0) & (x <= c), stats.binom.pmf(x, c, 0.5), 0.0))
    best = np.zeros_like(c)
    scale = np.zeros_like(c)
    for k in (-1, 0, 1):
        best = np.maximum(best, a0 * cdf[k] + b0 * cdf[k - 1])
        scale = np.maximum(scale, a0 * cdf[k] - b0 * cdf[k - 1])
    return best, scale


@dataclasses.dataclass(frozen=True)
class _Clones:
    """One clone reduction: n reports, α, clone probability, weight of the differing branch."""

    n: int
    epsilon0: float
    alpha: float
    clone_p: float
    weight: float

    @classmethod
    def fmt21(cls, n: int, epsilon0: float) -> _Clones:
        e0 = _up(epsilon0 * (1 + EPSILON0_NUDGE))
        return cls(n, e0, _up(1.0 / (1.0 + math.exp(-e0))), _down(math.exp(-e0)), 1.0)

    @classmethod
    def krr(cls, n: int, epsilon0: float, k: int) -> _Clones:
        e0 = _up(epsilon0 * (1 + EPSILON0_NUDGE))
        e = math.exp(e0)
        return cls(n, e0, _up(1.0 / (1.0 + math.exp(-e0))), _down(2.0 / (e + k - 1)),
                   min(1.0, _up((e + 1.0) / (e + k - 1))))

    def delta(self, epsilon: float, target_delta: float) -> float:
        """An upper bound on δ(ε) (the module docstring: truncation, rounding and margins)."""
        from scipy import stats

        if epsilon >= self.epsilon0:
            return 0.0
        big = _down(math.exp(epsilon))
        a0 = self.alpha - big * (1.0 - self.alpha)
        b0 = (1.0 - self.alpha) - big * self.alpha
        if a0 <= 0.0:
            return 0.0
        d0 = _up(a0)        # D at zero clones: only x = 0 is positive
        m = self.n - 1
        if m == 0:
            return self.weight * d0
        mu = m * self.clone_p
        big_l = math.log(1.0 / target_delta) + TAIL_SLACK
        t = big_l / 3.0 + math.sqrt(big_l * big_l / 9.0 + 2.0 * mu * big_l)
        lo, hi = max(0, math.floor(mu - t)), min(m, math.ceil(mu + t))
        tail_lo = math.exp(-big_l) if lo > 0 else 0.0
        tail_hi = math.exp(-big_l) if hi < m else 0.0
        counts = np.arange(lo, hi + 1, dtype=float)
        weights = stats.binom.pmf(counts, m, self.clone_p)
        if counts.size > MAX_TERMS:   # group counts; charge each group at its first count
            width = math.ceil(counts.size / MAX_TERMS)
            starts = np.arange(0, counts.size, width)
            weights = np.add.reduceat(weights, starts)
            counts = counts[starts]
        div, scale = _divergences(counts, a0, b0)
        div_hi = float(div[-1] + CANCELLATION_MARGIN * scale[-1])
        total = ((1.0 + RELATIVE_MARGIN) * float(weights @ div) + CANCELLATION_MARGIN * float(weights @ scale)
                 + UNDERFLOW_MARGIN)
        return _up(self.weight * (total + tail_lo * d0 + tail_hi * min(1.0, div_hi)), 4)

    def epsilon(self, delta: float) -> float | None:
        """The smallest point of the search grid with δ(ε) <= delta verified; None if only ε₀.

        Brent's method finds where log δ(ε) crosses log δ; the answer is then rounded up to the
        dyadic grid of step 2^(⌊log₂ ε⌋ − GRID_BITS) (relative resolution below 2^−GRID_BITS),
        and that grid point is checked — stepping up until one is verified — so only a verified
        point is ever returned."""
        from scipy import optimize

        if self.delta(0.0, delta) <= delta:
            return 0.0
        log_delta = math.log(delta)

        def gap(eps: float) -> float:
            return math.log(max(self.delta(eps, delta), 1e-300)) - log_delta

        if gap(self.epsilon0 * (1 - 2.0**-GRID_BITS)) > 0:
            return None
        root = optimize.brentq(gap, 0.0, self.epsilon0, xtol=1e-300, rtol=2.0**-(GRID_BITS + 2), maxiter=200)
        step = 2.0 ** (math.floor(math.log2(root)) - GRID_BITS) if root > 0 else 2.0**-1074
        point = math.ceil(root / step) * step
        for _ in range(64):   # the first is verified unless δ(ε) wiggles within rounding
            if point >= self.epsilon0:
                break
            if self.delta(point, delta) <= delta:
                return point
            point += step
        return None


def _check(n: int, epsilon0: float, delta: float) -> None:
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be a positive integer (reports in one shuffled batch), not {n!r}")
    if not (math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"epsilon0 must be finite and > 0, not {epsilon0!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), not {delta!r}")


def clone_delta(epsilon: float, n: int, epsilon0: float, k: int | None = None,
                target_delta: float = DEFAULT_DELTA) -> float:
    """An upper bound on δ(ε) for n shuffled ε₀-LDP reports: FMT 2021's numerical reduction, or
    with ``k`` the k-RR clones (``target_delta`` only sets how far the clone-count sum reaches:
    its dropped tails weigh at most target_delta·e^−25 each, and are added)."""
    _check(n, epsilon0, target_delta)
    clones = _Clones.fmt21(int(n), epsilon0) if k is None else _Clones.krr(int(n), epsilon0, int(k))
    return clones.delta(epsilon, target_delta)


# --- the three bounds ---------------------------------------------------------------------------------


def fmt21_closed_form(n: int, epsilon0: float, delta: float = DEFAULT_DELTA) -> float | None:
    """FMT 2021 Theorem 3.1 (as the authors' code evaluates it; module docstring), rounded up;
    None outside its range ε₀ < ln(n / (16 ln(4/δ)))."""
    _check(n, epsilon0, delta)
    log4 = math.log(4.0 / delta)
    if n <= 16 * log4 or epsilon0 >= math.log(n / (16 * log4)):
        return None
    e0 = math.exp(epsilon0)
    a = 8.0 * math.sqrt(e0 * log4) / math.sqrt(n)
    b = 8.0 * e0 / n
    eps_c = math.log1p(a + b)
    factor = -math.expm1(-epsilon0) / (1.0 + math.exp(-epsilon0 - eps_c))
    eps = math.log1p(factor * (a + b))
    return _up(eps * (1 + 1e-12)) if eps < epsilon0 else None


@functools.lru_cache(maxsize=4096)
def _numerical(n: int, epsilon0: float, delta: float, k: int | None) -> float | None:
    clones = _Clones.fmt21(n, epsilon0) if k is None else _Clones.krr(n, epsilon0, k)
    eps = clones.epsilon(delta)
    return None if eps is None or eps >= epsilon0 else eps


def fmt21_numerical(n: int, epsilon0: float, delta: float = DEFAULT_DELTA) -> float | None:
    """FMT 2021's numerical bound (Theorem 3.2, Appendix E) computed as an upper bound, or None
    when no ε below ε₀ is certified."""
    _check(n, epsilon0, delta)
    return _numerical(int(n), float(epsilon0), float(delta), None)


def krr_clones(n: int, epsilon0: float, k: int, delta: float = DEFAULT_DELTA) -> float | None:
    """The k-RR clone bound (module docstring) for n shuffled reports of k-ary randomised response
    at ε₀ (binary RR: k = 2), or None when no ε below ε₀ is certified."""
    _check(n, epsilon0, delta)
    if not (isinstance(k, (int, np.integer)) and k >= 2):
        raise ValueError(f"k must be an integer >= 2 (values of the randomised response), not {k!r}")
    return _numerical(int(n), float(epsilon0), float(delta), int(k))


def krr_size(protocol) -> int | None:  # noqa: ANN001 - a device or server half
    """k when one report of ``protocol`` is k-ary randomised response (rr, grr), else None: its
    server half's ``krr_size``, declared once there."""
    return server_half(protocol).krr_size


def central_epsilon(n: int, epsilon0: float, delta: float = DEFAULT_DELTA,
                    k: int | None = None) -> AmplificationBound | None:
    """The smallest certified central ε for n shuffled reports of an ε₀-LDP randomiser, over
    every theorem that applies (FMT 2021 numerical and closed form; with ``k``, the report being
    k-ary randomised response, the k-RR clones too); None when none certifies ε < ε₀."""
    _check(n, epsilon0, delta)
    found = []
    for theorem, eps in ((Theorem.FMT21_NUMERICAL, fmt21_numerical(n, epsilon0, delta)),
                         (Theorem.FMT21_CLOSED, fmt21_closed_form(n, epsilon0, delta)),
                         (Theorem.KRR_CLONES, None if k is None else krr_clones(n, epsilon0, k, delta))):
        if eps is not None:
            found.append((eps, list(Theorem).index(theorem), theorem))
    if not found:
        return None
    eps, _, theorem = min(found)
    return AmplificationBound(eps, delta, theorem, int(n), float(epsilon0))


# --- inverse questions --------------------------------------------------------------------------------


def largest_epsilon0(target_epsilon: float, n: int, delta: float = DEFAULT_DELTA,
                     k: int | None = None, high: float = EPSILON0_MAX,
                     resolution: float = 1e-4) -> AmplificationBound | None:
    """The largest per-report ε₀ (on a grid of ``resolution``, rounded down) whose n shuffled
    reports are certified (target_epsilon, delta)-DP by FMT 2021's numerical bound (or, with
    ``k``, the better of it and the k-RR clones), returned with the central ε at that ε₀; None
    when not even ε₀ = resolution is certified. δ(ε) grows with ε₀ (module docstring), so the
    certified ε₀ form an interval and bisection finds its end."""
    _check(n, high, delta)
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ValueError(f"target_epsilon must be finite and > 0, not {target_epsilon!r}")
    if target_epsilon >= high:
        return central_epsilon(n, high, delta, k) or AmplificationBound(high, 0.0, Theorem.LOCAL, n, high)

    def certified(e0: float) -> bool:
        if e0 <= target_epsilon:
            return True
        reductions = [_Clones.fmt21(n, e0)] + ([] if k is None else [_Clones.krr(n, e0, k)])
        return any(r.delta(target_epsilon, delta) <= delta for r in reductions)

    steps = int(high / resolution)
    lo, hi = 0, steps + 1   # lo certified (ε₀ = 0 trivially), hi not (or beyond the range)
    if certified(steps * resolution):
        lo = steps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if certified(mid * resolution):
            lo = mid
        else:
            hi = mid
    if lo == 0:
        return None
    e0 = lo * resolution
    found = central_epsilon(n, e0, delta, k)
    return found or AmplificationBound(e0, 0.0, Theorem.LOCAL, n, e0)


def smallest_batch_for(target_epsilon: float, epsilon0: float, delta: float = DEFAULT_DELTA,
                       k: int | None = None, high: int = 10**9) -> int | None:
    """The fewest shuffled reports n at which ε₀-LDP reports are certified (target_epsilon,
    delta)-DP (δ(ε) falls as n grows: more clones), or None if not even ``high`` suffice."""
    _check(1, epsilon0, delta)
    if target_epsilon >= epsilon0:
        return 1

    def certified(n: int) -> bool:
        reductions = [_Clones.fmt21(n, epsilon0)] + ([] if k is None else [_Clones.krr(n, epsilon0, k)])
        return any(r.delta(target_epsilon, delta) <= delta for r in reductions)

    if not certified(high):
        return None
    lo, hi = 1, 2
    while not certified(hi):
        lo, hi = hi, min(high, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if certified(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --- the claim policy: what the collector records per window -> what may be claimed ---------------


@dataclasses.dataclass(frozen=True)
class ShuffledWindow:
    """What the collector records, per (metric, window), for the central claim.

    ``smallest_batch``: the fewest envelopes carrying this metric in any shuffled batch the
    window's reports came in, counting only envelopes alike in everything sent in clear (the
    same metrics and fingerprints, the same number of reports of each); None when no report came
    shuffled. ``envelope_epsilon``: the largest local ε one envelope can carry — the sum of the
    per-report ε of the reports it may hold (all metrics in it; at most the device's per-window
    cap); an envelope holding r reports of one metric is one r·ε randomiser.
    ``envelopes_per_device``: the most envelopes carrying the metric one device may send in the
    window (its reports_per_window, or 1 when the SDK puts a window's reports in one envelope).
    ``unshuffled_reports``: reports of the window that did not come through an authenticated
    shuffler. ``smallest_segment``: with public dimensions, the fewest envelopes of one segment
    (combination of dimension values) in a shuffled batch. ``cohorts_permanent``,
    ``smallest_cohort``: whether the cohort number sent in clear is fixed for the device's
    lifetime (RAPPOR, LOLOHA, dBitFlipPM), and the fewest envelopes of one cohort in a shuffled
    batch (``has_cohorts``: the protocol sends a cohort at all). ``epsilon_inf``: set for
    memoised metrics (the local longitudinal bound). ``krr``: k when every envelope is exactly
    one report of k-ary randomised response (rr, grr), enabling the k-RR clones.
    """

    smallest_batch: int | None
    envelope_epsilon: float
    envelopes_per_device: int = 1
    unshuffled_reports: int = 0
    smallest_segment: int | None = None
    has_cohorts: bool = False
    cohorts_permanent: bool = False
    smallest_cohort: int | None = None
    epsilon_inf: float | None = None
    krr: int | None = None

    @property
    def local_epsilon(self) -> float:
        """What a device's reports of the window reveal without the shuffler: k·ε per envelope."""
        return self.envelopes_per_device * self.envelope_epsilon


@dataclasses.dataclass(frozen=True)
class CentralClaim:
    """What may be claimed for one window: the central (ε, δ), or the local ε with the reason.

    ``epsilon``/``delta``: the claim (the local ε with δ = 0 when nothing is amplified);
    ``theorem``: where it comes from; ``n``: the crowd each of a device's envelopes hid in (the
    smallest batch, segment or cohort, divided among its envelopes); ``epsilon0``: the local ε
    of one envelope the theorem was applied to; ``envelopes``: how many were composed;
    ``local_epsilon``: what holds without the shuffler, or if it colludes with the collector;
    ``lifetime_epsilon``: for memoised metrics, the local ε∞ that alone bounds all windows;
    ``reason``: why the claim fell back or what limits it ("" when nothing)."""

    epsilon: float
    delta: float
    theorem: Theorem
    n: int | None
    epsilon0: float
    envelopes: int
    local_epsilon: float
    reason: str = ""
    lifetime_epsilon: float | None = None

    @property
    def amplified(self) -> bool:
        return self.theorem is not Theorem.LOCAL

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["theorem"] = self.theorem.value
        out["amplified"] = self.amplified
        return out


def central_claim(window: ShuffledWindow, delta: float = DEFAULT_DELTA, *,
                  colluding: bool = False) -> CentralClaim:
    """The central (ε, δ) the window's shuffled reports support, by the policy of docs/privacy.md
    ("The central claim of shuffled reports"), or the local ε with the reason:

    - collusion of shuffler and collector, or any report of the window that did not come
      shuffled: the local ε (those devices' reports were never hidden);
    - the crowd is the smallest of: the smallest shuffled batch, the smallest segment (public
      dimensions split it: a report hides only among its segment's), and, where the cohort is
      permanent or shared by several envelopes of one device, the smallest cohort;
    - k envelopes per device: each batch is split (in the analysis) into k parts of ⌊n/k⌋
      reports, each holding one of the device's envelopes; the union of the parts' multisets is
      the batch's, so k-fold composition of the central bound at ⌊n/k⌋ and δ/k holds, whether
      the envelopes share a batch or not (the parts' randomness must be independent, hence the
      cohort rule above). An envelope with r reports is one r·ε randomiser
      (``envelope_epsilon``). The smaller of that and the local k·ε is claimed;
    - memoised metrics: the bound holds for the window alone; the memoised response is the same
      in every window, no published theorem amplifies it across windows, so ``lifetime_epsilon``
      is the local ε∞. Within a window, several envelopes of one device share that response,
      so they cannot be composed as independent parts: only a window's reports in one envelope
      are amplified (its local ε then at most r·ε∞: it post-processes at most r memoised
      responses);
    - too small a crowd: whatever the theorem certifies at that n (possibly nothing)."""
    local = window.local_epsilon
    lifetime = window.epsilon_inf
    memo_note = ("memoised: this window alone; across windows only the local epsilon_inf "
                 f"{lifetime:g} holds (the memoised response repeats)") if lifetime is not None else ""

    def fallback(reason: str, n: int | None = None) -> CentralClaim:
        why = f"{reason}; {memo_note}" if memo_note else reason
        return CentralClaim(local, 0.0, Theorem.LOCAL, n, window.envelope_epsilon,
                            window.envelopes_per_device, local, why, lifetime)

    if colluding:
        return fallback("shuffler and collector collude: only the local epsilon holds")
    if window.unshuffled_reports:
        return fallback(f"{window.unshuffled_reports:,} reports of the window did not come through "
                        "an authenticated shuffler")
    if window.smallest_batch is None or window.smallest_batch < 1:
        return fallback("no shuffled batch recorded for the window")
    k = int(window.envelopes_per_device)
    if k < 1:
        raise ValueError("envelopes_per_device must be >= 1")
    crowd, limits = int(window.smallest_batch), "the smallest shuffled batch"
    if window.smallest_segment is not None and window.smallest_segment < crowd:
        crowd, limits = int(window.smallest_segment), "the smallest segment of a shuffled batch"
    if window.has_cohorts and (window.cohorts_permanent or k > 1):
        if window.smallest_cohort is None:
            return fallback("the cohort sent in clear links the device's reports, and the smallest "
                            "cohort of a batch was not recorded")
        if window.smallest_cohort < crowd:
            crowd, limits = int(window.smallest_cohort), "the smallest cohort of a shuffled batch"
    if lifetime is not None and k > 1:
        return fallback(f"memoised: the device's {k} envelopes in the window share one memoised response, "
                        "so they are not independent parts to compose; send a window's reports in one "
                        "envelope for a claim")
    part = crowd // k
    if part < 1:
        return fallback(f"{limits} ({crowd:,}) holds fewer envelopes than one device may send ({k})", crowd)
    bound = central_epsilon(part, window.envelope_epsilon, delta / k, window.krr)
    if bound is None or k * bound.epsilon >= local:
        return fallback(f"no amplification certified for {part:,} reports at epsilon0 "
                        f"{window.envelope_epsilon:g} ({limits} is too small)", part)
    notes = [f"crowd: {limits} ({crowd:,})"]
    if k > 1:
        notes.append(f"{k} envelopes per device composed ({part:,} reports each, delta/{k})")
    if memo_note:
        notes.append(memo_note)
    return CentralClaim(bound.epsilon if k == 1 else _up(k * bound.epsilon), delta, bound.theorem, part, window.envelope_epsilon,
                        k, local, "; ".join(notes), lifetime)
