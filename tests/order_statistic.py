"""The order test of the shuffler's tests: does a forwarded batch's order depend on a reference
order (arrival, or the pool's digest order)? A linear permutation statistic with its exact null
variance, so its size is set by a z bound, not by a Monte Carlo draw."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np


def order_dependence_z(batches: Iterable[Sequence[Hashable]], arrival: Mapping[Hashable, float]) -> float:
    """z of H0 "within each forwarded batch, positions are independent of arrival ranks":
    T = Σ over batches of Σ_i c_i r_i, c the centred positions and r the centred arrival ranks
    within the batch, divided by its exact null standard deviation. A uniform permutation of a
    batch of n gives E[c·r] = 0 and Var[c·r] = (Σc²)(Σr²)/(n - 1) (Hoeffding 1951, a linear
    permutation statistic); batches are independent, so the variances add, and T is close to
    normal (Hoeffding's combinatorial central limit theorem)."""
    t = var = 0.0
    for batch in batches:
        n = len(batch)
        if n < 2:
            continue
        ranks = np.array([arrival[e] for e in batch], dtype=float).argsort().argsort() - (n - 1) / 2.0
        positions = np.arange(n) - (n - 1) / 2.0
        t += float(positions @ ranks)
        var += float(positions @ positions) * float(ranks @ ranks) / (n - 1)
    return t / np.sqrt(var)
