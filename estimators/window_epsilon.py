"""The ε of r reports in one window of a memoised metric, exactly (docs/privacy.md, "Memoisation").

r reports of one value in a window share its memoised response b and differ only by the fresh
second round: P(y₁…y_r | x) = Σ_b P(b | x)·Π_i P(y_i | b). They are not independent given x, so
sequential composition (r·ε₁) does not apply, and it is not a bound: with L-GRR at d = 64,
ε₁ = 0.01, ε∞ = 0.5, ten reports that all name the same value reveal ε = 0.478, not 0.1. What
holds is post-processing (every report is a function of b: at most ε∞ of the memo key) and the
exact worst-case log-likelihood ratio of the r-report law, L_r, computed here on a sufficient
statistic:

- L-GRR, LOLOHA (GRR over [d], or over the g hashed cells): the counts of each reported value.
  With ρ = p₂/q₂ and counts a, b of x and x′, P(· | x) ∝ q₁·S + (p₁ − q₁)·ρ^a with
  S = Σ_u ρ^{k_u}, decreasing in S, so the rest of the reports is spread evenly over the other
  values (S is convex in the counts) and L_r is a maximum over (a, b): O(r²).
- L-OSUE, dBitFlipPM: the bits are independent given the value and a change of value moves two
  of them (one of dBitFlipPM's if its window holds only one of the values): per bit the count k
  of ones in r reports, with log-ratio f(k) = log[(p₁A_k + (1 − p₁)B_k)/(q₁A_k + (1 − q₁)B_k)],
  A_k = p₂^k(1 − p₂)^{r−k}, B_k = q₂^k(1 − q₂)^{r−k}; L_r = max f − min f (two bits).

Reports of different memo keys in one window draw independent memos and compose, so the window's
ε of r reports is W(r) = max over splits r = r₁ + r₂ + … of Σ L_{r_j} (a small dynamic
programme), never less than r·ε₁ (all in different keys) nor than L_r. Where the memoised round is
symmetric (dBitFlipPM; RAPPOR's PRR) f is odd and concave for k above r/2, so L_r ≤ r·ε₁ and
W(r) = r·ε₁; L-OSUE's memoised round is OUE's, asymmetric, and L-GRR's and LOLOHA's are GRR's,
where r·ε₁ can be exceeded (``window_epsilon`` says by how much).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["joint_epsilon", "window_epsilon"]


def _grr_chain(k: int, p1: float, q1: float, p2: float, q2: float, r: int) -> float:
    rho = p2 / q2
    best = 0.0
    for a in range(r + 1):
        for b in range(r + 1 - a):
            m = r - a - b
            if k == 2 and m:
                continue
            rest = 0.0
            if k > 2:
                base, extra = divmod(m, k - 2)
                rest = (k - 2 - extra) * rho ** base + extra * rho ** (base + 1)
            s = rho ** a + rho ** b + rest
            best = max(best, math.log((q1 * s + (p1 - q1) * rho ** a) / (q1 * s + (p1 - q1) * rho ** b)))
    return best


def _bit_chain(p1: float, q1: float, p2: float, q2: float, r: int, bits: int) -> float:
    ks = np.arange(r + 1, dtype=np.float64)
    # in logs: the counts' laws given the memo bit (the binomial coefficient cancels)
    log_a = ks * math.log(p2) + (r - ks) * math.log1p(-p2)
    log_b = ks * math.log(q2) + (r - ks) * math.log1p(-q2)
    hold = np.logaddexp(math.log(p1) + log_a, math.log1p(-p1) + log_b)
    other = np.logaddexp(math.log(q1) + log_a, math.log1p(-q1) + log_b)
    f = hold - other
    return float(f.max() - f.min()) if bits == 2 else float(max(f.max(), -f.min()))


def joint_epsilon(protocol, r: int) -> float:
    """L_r: the exact ε of r reports of one value (one memo key) in a window, at most ε∞."""
    if r <= 0:
        return 0.0
    par = protocol.params
    name = protocol.name
    if name == "lgrr":
        value = _grr_chain(int(par.d), par.p1, par.q1, par.p2, par.q2, r)
    elif name == "loloha":
        value = _grr_chain(int(par.g), par.p1, par.q1, par.p2, par.q2, r)
    elif name == "losue":
        value = _bit_chain(par.p1, par.q1, par.p2, par.q2, r, bits=2)
    elif name == "dbitflip":
        value = _bit_chain(par.p1, par.q1, par.p2, par.q2, r, bits=2 if par.sampled > 1 else 1)
    else:
        raise ValueError(f"no exact window law for protocol {name!r}")
    return min(value, float(protocol.epsilon_longitudinal))


def window_epsilon(protocol, r: int) -> float:
    """W(r): the ε of r reports in one window whatever their values (memo keys), exactly."""
    joint = [0.0] + [joint_epsilon(protocol, j) for j in range(1, r + 1)]
    best = [0.0] * (r + 1)
    for total in range(1, r + 1):
        best[total] = max(joint[j] + best[total - j] for j in range(1, total + 1))
    return best[r]
