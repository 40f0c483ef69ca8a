"""The server half of the two-round (memoised) protocols (docs/protocols.md, "L-protocols").

``MemoisedServer`` is the mixin of their server halves: the vectorised first and second rounds
(fresh words in simulation, ``sketches.memo.MemoRandom`` for a device's memoised round), the
exact table of the memoised round (``memo_output_probabilities``, the audit of ε∞), the batch
forms of the memo index and of the payloads, and the permanent share of an estimate's variance
(estimators/memo_range.py); and the vectorised helpers of the chains: ``grr_round`` (L-GRR,
LOLOHA) and the exact permanent variance of a pure chain (L-GRR, L-OSUE). The device mixin is
``client_sdk.protocols.longitudinal.MemoisedDevice``.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from client_sdk.protocols.longitudinal import TwoRoundChain

from .randomness import bernoulli


class MemoisedServer(abc.ABC):
    """Mixin of a memoised protocol's server half (with ``sketches.base.ServerHalf``)."""

    #: A report randomises a memoised first-round response, not the value: no k-RR of it (L-GRR).
    krr_size: int | None = None

    @abc.abstractmethod
    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        """The (memoisable) first-round responses of a batch of memo inputs."""

    @abc.abstractmethod
    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        """The fresh second round applied to first-round responses."""

    @abc.abstractmethod
    def memo_output_probabilities(self, index: int) -> np.ndarray:
        """P(first-round response | x = index): what unlimited reports of one value can reveal."""

    def permanent_variance(self, sketch: Any, estimate: Any) -> Any:
        """An upper bound on the part of ``estimate``'s variance (a window's) that comes from the
        devices' permanent state — memoised first rounds, cohorts — and so repeats across windows.
        The rest is fresh second-round noise, independent across windows. Default: λ·variance
        (``second_round_keep``); protocols whose estimator allows it give the exact split."""
        variances = getattr(estimate, "variances", None)
        if variances is None:   # a numeric mean: MeanEstimate.variance
            return self.second_round_keep * estimate.variance
        return self.second_round_keep * np.asarray(variances, dtype=np.float64)

    def memo_indices(self, indices: np.ndarray, cohorts: np.ndarray | None = None) -> np.ndarray:
        """Vectorised ``memo_index`` (simulation): the value, or its hash under the cohort's seed."""
        return indices

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Payloads of second-round outputs (the protocol's wire arrays)."""
        return {"y": second}

    def sdk_cohorts(self, secret: bytes, metric: str) -> np.ndarray | None:
        """The client's cohort as a batch of one (None for protocols without cohorts)."""
        return None

    def memo_lumps(self, sketch: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, ν, μ) of one window under "nobody holds v", per class of reports (rows) and value
        (columns): the integer report counts whose lumps make a range's estimate of a value nobody
        holds skewed (docs/math.md §10a, "The null law of a range"; estimators/memo_range.py).

        The second round keeps its input w.p. λ and otherwise draws uniformly (``second_round_keep``),
        so a report supports v, or lands in v's own cell, in two disjoint ways:

        - a *single*: a uniform draw that happens to hit it, independently per report — about ν such
          reports per window (Poisson), each moving ĉ(v) by a;
        - a *keep* of a memoised response that supports v — an *event*: about μ devices per window
          hold such a response and each keeps it w.p. λ.

        Zeros here, where the protocol has no such lumps (a numeric mean); the count protocols
        override it."""
        size = (1,) + tuple(np.shape(getattr(estimate, "counts", np.zeros(0))))
        return np.zeros(size), np.zeros(size), np.zeros(size)

    def pair_probabilities(self) -> tuple[float, float, float, float] | None:
        """None: the pair law of a joint metric's cells is one fresh report's, and a memoised
        chain's (L-GRR's GRR, L-OSUE's unary bits) is not derived."""
        return None

    def marginal_model(self, cells: int, n: int) -> tuple[float, float, int] | None:
        """None: no exact law of a memoised chain's summed cells."""
        return None

    def draw_support(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """None: a memoised chain's sketch has no exact sampler (its parent's is one round's)."""
        return None


def pure_chain_lumps(params: Any, sketch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``MemoisedServer.memo_lumps`` of a pure chain (L-GRR, L-OSUE): one class of reports over the
    d values; a = 1/(P − Q), ν = n·q₂, μ = n·q₁."""
    n = float(sketch.total_reports)
    q2 = float(params.q2)
    d = int(params.d)
    return (np.full((1, d), 1.0 / (params.p - params.q)), np.full((1, d), n * q2), np.full((1, d), n * params.q1))


def grr_round(x: np.ndarray, k: int, threshold: int, source: Any) -> np.ndarray:
    """GRR on [k] of int64 inputs: keep x w.p. T/2^32, else a uniform one of the other k−1."""
    n = x.shape[0]
    keep = bernoulli(source, threshold, n)
    other = source.below(k - 1, n)
    other += other >= x
    return np.where(keep, x, other)


def pure_chain_permanent_variance(params: TwoRoundChain, n: int, counts: np.ndarray) -> np.ndarray:
    """The permanent part of a pure chain's Var[ĉ(v)] (L-GRR, L-OSUE), exact at c = clip(ĉ, 0, n).

    A report's support bit is S = q₂ + λ·B + e with B the memoised round's support bit
    (P(B = 1) = p₁ if x = v, q₁ otherwise), λ = p₂ − q₂ and e fresh noise of mean 0 given B, so
    Var[ĉ] = (λ²·Var(ΣB) + Σ Var(e))/(P − Q)² and the permanent part is
    λ²·(c·p₁(1−p₁) + (n−c)·q₁(1−q₁))/(P − Q)² (docs/math.md, "Ranges of memoised metrics")."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, n)
    lam = params.p2 - params.q2
    first = c * params.p1 * (1 - params.p1) + (n - c) * params.q1 * (1 - params.q1)
    return lam * lam * first / (params.p - params.q) ** 2


__all__ = ["MemoisedServer", "grr_round", "pure_chain_lumps", "pure_chain_permanent_variance"]
