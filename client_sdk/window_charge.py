"""What r reports of a memoised metric in one window reveal, and what the ledger charges for them.

r reports of one value in a window share its memoised response b and differ only by the fresh
second round: P(y₁…y_r | x) = Σ_b P(b | x)·Π_i P(y_i | b). They are not independent given x, so
sequential composition (r·ε₁) is not a bound: with L-GRR at d = 64, ε₁ = 0.01, ε∞ = 0.5, ten
reports that all name the same value reveal ε = 0.478, not 0.1 (docs/privacy.md, "Memoisation").
Two bounds hold for r reports of one memo key: ε∞ (every report is a randomised function of b
whose law given x is ε∞-LDP: post-processing, Dwork and Roth 2014, Prop. 2.1), and the exact
worst-case log-likelihood ratio L_r of the r-report law, computed here on a sufficient statistic:

- L-GRR, LOLOHA (GRR over [d], or over the g hashed cells): the counts of each reported value.
  With ρ = p₂/q₂ and counts a, b of x and x′, P(· | x) ∝ q₁·S + (p₁ − q₁)·ρ^a with
  S = Σ_u ρ^{k_u}, decreasing in S, so the rest of the reports is spread evenly over the other
  values (S is convex in the counts) and L_r is a maximum over (a, b): O(r²).
- L-OSUE, dBitFlipPM: the bits are independent given the value and a change of value moves two
  of them (one of dBitFlipPM's if its window holds only one of the values): per bit the count k
  of ones in r reports, with log-ratio f(k) = log[(p₁A_k + (1 − p₁)B_k)/(q₁A_k + (1 − q₁)B_k)],
  A_k = p₂^k(1 − p₂)^{r−k}, B_k = q₂^k(1 − q₂)^{r−k}; L_r = max f − min f (two bits).

Reports of different memo keys draw independent memos and compose (Dwork and Roth 2014,
Thm. 3.16), so the window's ε of r reports is W(r) = max over splits r = r₁ + r₂ + … of Σ L_{r_j}
(a small dynamic programme), never less than r·ε₁ (all in different keys) nor than L_r. Where the
memoised round is symmetric (dBitFlipPM; RAPPOR's PRR; memobitmean's 1BitMean bit) the per-bit
f is odd and concave in the log-odds of the count, so L_r ≤ r·ε₁ and W(r) = r·ε₁: the ledger's
per-report ε₁ is exact. L-OSUE's memoised round is OUE's (asymmetric), and W(r) = r·ε₁ holds
there too: with p₁ = ½ exactly, q₂ = 1 − p₂ exactly (both on the 2^-32 grid), s = ln(p₂/q₂) and
E = ln((1 − q₁)/q₁) > 0, a bit's log-ratio at u = s(2k − r) is f(u) = ln((eᵘ + 1)/2) −
ln(q₁eᵘ + 1 − q₁), increasing, so L_r = F(rs) with F(u) = f(u) − f(−u) = u − ℓ(u − E) + ℓ(−u − E),
ℓ the softplus; F″(u) = σ′(u + E) − σ′(u − E) ≤ 0 for u ≥ 0 (σ′ is even and falls with |x|), so F
is concave with F(0) = 0 and L_r = F(rs) ≤ r·F(s) = r·L_1 ≤ r·ε₁ (docs/privacy.md). L-GRR's and
LOLOHA's memos are GRR's: there r·ε₁ can be exceeded, and the ledger charges
``cumulative_charges``'s figures.

The SDK's ledger needs the figure for every r up to ``reports_per_window``: this module computes
it exactly for r ≤ ``EXACT_REPORTS`` (pure Python, no numpy: it runs on the device and in the
registry's encoder block, which SDKs in other languages charge from), and beyond it the bound
W(r) ≤ r·s with s = max_j L_j/j ≤ max(max_{j ≤ J} L_j/j, ε∞/(J + 1)) (each key's L_j ≤ ε∞).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

__all__ = ["EXACT_REPORTS", "WindowCharges", "cumulative_charges", "joint_epsilon", "next_charge",
           "window_epsilon"]

#: Reports per window up to which the charge is the exact W(r); beyond, the linear bound r·s.
EXACT_REPORTS = 64
#: Relative margin under which W(r) counts as r·ε₁ (float noise of the exact figure).
_SAME = 1e-9


def _logaddexp(x: float, y: float) -> float:
    top = max(x, y)
    if top == -math.inf:
        return top
    return top + math.log1p(math.exp(-abs(x - y)))


def _grr_joint(k: int, p1: float, q1: float, p2: float, q2: float, r: int) -> float:
    """L_r of a GRR memo over [k] then a GRR second round (counts a, b of the two values)."""
    log_rho = math.log(p2 / q2)
    # every power relative to the largest one present, ρ^{e − top} ≤ 1 (no overflow at large ε)
    down = [math.exp(-i * log_rho) for i in range(r + 2)]
    lift = p1 / q1 - 1.0
    best = 1.0
    for a in range(r + 1):
        for b in range(r + 1 - a):
            m = r - a - b
            if k == 2 and m:
                continue
            base, extra = divmod(m, k - 2) if k > 2 else (0, 0)
            top = max(a, b, base + 1 if extra else base)
            s = down[top - a] + down[top - b]
            if k > 2:
                s += (k - 2 - extra) * down[top - base] + (extra * down[top - base - 1] if extra else 0.0)
            ratio = (s + lift * down[top - a]) / (s + lift * down[top - b])
            best = max(best, ratio)
    return math.log(best)


def _bit_joint(p1: float, q1: float, p2: float, q2: float, r: int, bits: int) -> float:
    """L_r of independent memo bits (one or two moved by a change of value) and fresh flips."""
    lp1, lnp1, lq1, lnq1 = math.log(p1), math.log1p(-p1), math.log(q1), math.log1p(-q1)
    f = []
    for k in range(r + 1):
        log_a = k * math.log(p2) + (r - k) * math.log1p(-p2)
        log_b = k * math.log(q2) + (r - k) * math.log1p(-q2)
        f.append(_logaddexp(lp1 + log_a, lnp1 + log_b) - _logaddexp(lq1 + log_a, lnq1 + log_b))
    return max(f) - min(f) if bits == 2 else max(max(f), -min(f))


def _law(protocol: Any) -> tuple[Any, ...]:
    """(kind, k or bits, p1, q1, p2, q2): what the r-report law of one memo key depends on, the
    memoised device half's ``window_law()`` (L-GRR, LOLOHA: a GRR memo; L-OSUE, dBitFlipPM: bits)."""
    window_law = getattr(protocol, "window_law", None)
    law = window_law() if window_law is not None else None
    if law is None:
        raise ValueError(f"no exact window law for protocol {protocol.name!r}")
    return law


def _joint(law: tuple[Any, ...], eps_inf: float, r: int) -> float:
    kind, k, p1, q1, p2, q2 = law
    value = _grr_joint(k, p1, q1, p2, q2, r) if kind == "cat" else _bit_joint(p1, q1, p2, q2, r, k)
    return min(value, eps_inf)


def joint_epsilon(protocol: Any, r: int) -> float:
    """L_r: the exact ε of r reports of one value (one memo key) in a window, at most ε∞."""
    law = _law(protocol)
    return _joint(law, float(protocol.epsilon_longitudinal), r) if r > 0 else 0.0


def _best_splits(joint: list[float]) -> list[float]:
    """W(0..J) from L_1..L_J (``joint[0]`` = 0): the largest Σ L_{r_j} over splits of r."""
    best = [0.0] * len(joint)
    for total in range(1, len(joint)):
        best[total] = max(joint[j] + best[total - j] for j in range(1, total + 1))
    return best


def window_epsilon(protocol: Any, r: int) -> float:
    """W(r): the ε of r reports in one window whatever their values (memo keys), exactly."""
    return _best_splits([0.0] + [joint_epsilon(protocol, j) for j in range(1, r + 1)])[r]


class WindowCharges(NamedTuple):
    """What the ledger charges in one window: the cumulative charge C(k) of k reports is
    ``cumulative[k − 1]`` for k ≤ len(cumulative), else k·``slope``; C(k) ≥ W(k) for every k."""

    cumulative: tuple[float, ...]
    slope: float

    def total(self, k: int) -> float:
        """C(k), the charge of k reports in one window (C(0) = 0)."""
        if k <= 0:
            return 0.0
        return self.cumulative[k - 1] if k <= len(self.cumulative) else k * self.slope

    def to_json(self) -> dict[str, Any]:
        return {"cumulative": list(self.cumulative), "slope": self.slope}

    @classmethod
    def from_json(cls, value: Any, epsilon: float, reports_per_window: int) -> WindowCharges:
        """The charges an encoder block publishes (``to_json``'s form), checked before a ledger
        charges from them; ValueError saying what is wrong. Every figure a finite number (a NaN
        passes every budget check: docs/conformance.md, "The encoder block"), J = min(r, EXACT_REPORTS)
        of them, and none below what r reports of ε₁ each cost (W(k) >= k·ε₁, module docstring)."""
        if not isinstance(value, dict) or set(value) != {"cumulative", "slope"}:
            raise ValueError("window_charges must be an object {\"cumulative\": [...], \"slope\": s}")
        cumulative, slope = value["cumulative"], value["slope"]
        figures = [*cumulative, slope] if isinstance(cumulative, list) else None
        if figures is None or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and math.isfinite(x) for x in figures):
            raise ValueError("window_charges' cumulative and slope must be finite numbers")
        top = min(reports_per_window, EXACT_REPORTS)
        if len(cumulative) != top:
            raise ValueError(f"window_charges must list C(1)..C({top}) for {reports_per_window} reports per "
                             f"window, not {len(cumulative)} figures")
        floor = epsilon * (1 - _SAME)
        if slope < floor or any(c < k * floor for k, c in enumerate(cumulative, start=1)):
            raise ValueError(f"window_charges below k × ε₁ = k × {epsilon!r}: k reports would be charged less "
                             "than their ε₁ each")
        return cls(tuple(float(c) for c in cumulative), float(slope))


@functools.lru_cache(maxsize=64)
def _charges(law: tuple[Any, ...], eps1: float, eps_inf: float, reports: int) -> WindowCharges | None:
    top = min(reports, EXACT_REPORTS)
    joint = [0.0] + [_joint(law, eps_inf, j) for j in range(1, top + 1)]
    best = _best_splits(joint)
    cumulative = tuple(max(k * eps1, best[k]) for k in range(1, top + 1))
    slope = max(eps1, max(joint[j] / j for j in range(1, top + 1)), eps_inf / (top + 1))
    exceeds = any(c > k * eps1 * (1 + _SAME) for k, c in enumerate(cumulative, start=1))
    if not exceeds and (reports <= top or slope <= eps1 * (1 + _SAME)):
        return None
    return WindowCharges(cumulative, slope)


def cumulative_charges(protocol: Any, reports_per_window: int) -> WindowCharges | None:
    """The window charges of a metric whose r reports can reveal more than r·ε₁, else None
    (the ledger charges ε₁ per report: not memoised, one report per window, or a symmetric memo)."""
    if reports_per_window < 2 or getattr(protocol, "epsilon_longitudinal", None) is None \
            or not getattr(protocol, "window_charged", False):   # a GRR memo (L-GRR, LOLOHA) only
        return None
    return _charges(_law(protocol), float(protocol.epsilon), float(protocol.epsilon_longitudinal),
                    int(reports_per_window))


def next_charge(charges: WindowCharges | None, epsilon: float, reports: int, spent: float) -> float:
    """The window epsilon the next report adds: ε₁ without ``charges``; else
    max(C(n + 1) − C(n), C(n + 1) − spent) for n reports already spending ``spent`` in the window,
    so the window's spend is never below C(n + 1) (a re-dated window sums two days' spends), and a
    window that started under other parameters still pays C(n + 1) − C(n) (W is superadditive)."""
    if charges is None:
        return epsilon
    after = charges.total(reports + 1)
    return max(after - charges.total(reports), after - spent)
