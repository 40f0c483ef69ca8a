"""How many forged reports move an estimate by one percentage point, per protocol.

A forged report is any payload an honest client *could* have sent (the collector's
``validate`` refuses the rest), so the attacker picks the output that helps most. For the
pure frequency protocols (Wang et al. 2017's framework) the count estimate of value v is

    ĉ_v = (S_v − N q*) / (p* − q*),       S_v = reports supporting v,  N = all reports,

which is linear in the reports: one forged report supporting v adds exactly

    g = (1 − q*) / (p* − q*)                                               (gain, in reports)

to ĉ_v, whatever the honest data. With n honest reports of which a share f truly hold v,
m forged ones move the estimated share from f to (n f + m g) / (n + m), i.e. by
Δ = m (g − f) / (n + m). The attacker's best case is f = 0, so one point (Δ = 0.01) costs

    m = 0.01 n / (g − 0.01)  forged reports,  about 0.01 n / g.

This is the manipulation bound of Cheu, Smith and Ullman (2021) and Cao, Jia and Gong (2021):
the smaller ε, the larger g, the cheaper the attack. Downwards, a forged report that supports
nothing of v (it supports other values, or for unary encodings none) leaves S_v alone and
grows N, so it *lowers* ĉ_v by exactly

    δ = q* / (p* − q*)                                                     (deflation, in reports)

(``deflation``; δ < g always, since 1 − q* > q* for every protocol here). For unary encodings (OUE/SUE) one
all-ones payload supports *every* value at once (``values_per_report`` = d); RAPPOR's figure
is per Bloom bit (a forged report may set all k bits). LOLOHA is local hashing with its two
rounds' composed p'. dBitFlipPM's estimate divides by the n·d/k reports that see a bucket,
so its gain is k/d times the per-bit one, on each of the d buckets of a window. Discover's
gain is local hashing's on one group; estimators/discovery.py caps every estimate by its
prefixes' estimates on all the groups, so wherever a forger puts its reports the population
estimate moves up by about g per report (plus at most the cap's margin, CAP_Z standard errors;
docs/security.md). Down, a report that claims the held-out group and supports none of v's
cells lowers its held-out count by local hashing's δ, and the population estimate is the
held-out one scaled by the group's expected share, G = L + 1 groups: G·δ per report through
v's own cells (0.63 at ε 4, L 16, against g = 2.04; ``deflation``). The joint estimate adds
cross terms (nuisance keys sharing v's cells), which depend on the data: estimators.discovery
computes the exact worst case of each frame (``attrs["forged_report_max_down"]``). The estimate
used to be scaled by the observed share, which forged reports set: −c/n_h per report for a
string of count c, whatever the content. For the numeric mean mechanisms the
gain is the largest debiased output v(y) minus the far end of the range (−1 on the
normalised scale), and one point is 1% of the value range (0.02 on [−1, 1]).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sketches.base import ServerHalf

#: One percentage point of a share, or 1% of a numeric metric's range.
POINT = 0.01


@dataclasses.dataclass(frozen=True)
class PoisoningBound:
    """What one forged report can do to one protocol's estimates."""

    protocol: str
    epsilon: float
    gain: float               # g: shift of a count (or of n × the mean, in range units) per report
    values_per_report: int    # values one forged report moves at once
    per_point_share: float    # forged reports per honest report to move an estimate by 1 point
    deflation: float = 0.0    # δ: the most one forged report lowers a count (n × the mean), any placement

    def forged_for_one_point(self, n: int) -> int:
        """Forged reports needed among n honest ones to move one estimate by one point."""
        return math.ceil(self.per_point_share * n)


def support_probabilities(proto: ServerHalf) -> tuple[float, float] | None:
    """(p*, q*) of a frequency protocol, or None for protocols without them: the server half's
    ``support_probabilities`` (PureServer's p and q; local hashing's p' and 1/g, LOLOHA's p' its
    two rounds' composed keep probability, discover's per group; RAPPOR's per Bloom bit, its
    q* and p* read the other way round)."""
    return proto.support_probabilities()


def values_supported(proto: ServerHalf) -> int:
    """Values one forged report supports at once (each by the full gain), the server half's
    ``values_supported``: all d for an all-ones unary report, the s chosen ones for subset
    selection, the values whose Hadamard row agrees with the output for HR (K/2, at most d), a
    dBitFlipPM window's sampled buckets; one for RR, GRR and OLH (an OLH report also supports the
    other values hashed to its cell, a 1/g share of the domain)."""
    return proto.values_supported()


def poisoning_bound(proto: ServerHalf) -> PoisoningBound:
    """The per-report gain and deflation, and the forged share that moves an estimate by one point."""
    pq = support_probabilities(proto)
    shift = proto.forged_gain()   # dBitFlipPM: k/d times the per-bit figures (module docstring)
    if shift is not None:
        (gain, deflation), values, point = shift, values_supported(proto), POINT
    elif pq is not None:
        p_star, q_star = pq
        gain = (1.0 - q_star) / (p_star - q_star)
        deflation = q_star / (p_star - q_star)
        deflation *= proto.held_out_groups  # discover: all in the held-out group, scaled by its expected share
        values = values_supported(proto)
        point = POINT
    elif hasattr(proto, "debiased_values"):  # numeric mean on [−1, 1]
        v = np.asarray(proto.debiased_values(), dtype=np.float64)
        gain = float(max(v.max() + 1.0, 1.0 - v.min()))  # push from the far end of the range
        deflation = float(1.0 - v.min())                  # down from the top end
        values = 1
        point = POINT * 2.0  # 1% of a range of width 2
    else:
        raise ValueError(f"no poisoning bound for protocol {proto.name!r}")
    return PoisoningBound(proto.name, float(proto.epsilon), gain, values,
                          point / (gain - point), float(deflation))
