"""The server half of the two-round (memoised) protocols (docs/protocols.md, "L-protocols").

``MemoisedServer`` is the mixin of their server halves: the vectorised first and second rounds
(fresh words in simulation, ``client_sdk.memo.MemoRandom`` for a device's memoised round), the
exact table of the memoised round (``memo_output_probabilities``, the audit of ε∞), the batch
forms of the memo index and of the payloads, and the permanent share of an estimate's variance
(estimators/memo_range.py). The device mixin is ``client_sdk.protocols.longitudinal.MemoisedDevice``.

A two-round protocol not yet split is one ``client_sdk.protocols.longitudinal.Memoised`` object
holding both halves; it is registered as a virtual subclass, so ``isinstance(half,
MemoisedServer)`` holds for every memoised protocol, and the defaults below are its definitions
until the last of them moves here.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from client_sdk.protocols.longitudinal import Memoised


class MemoisedServer(abc.ABC):
    """Mixin of a memoised protocol's server half (with ``sketches.base.ServerHalf``)."""

    @abc.abstractmethod
    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        """The (memoisable) first-round responses of a batch of memo inputs."""

    @abc.abstractmethod
    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        """The fresh second round applied to first-round responses."""

    @abc.abstractmethod
    def memo_output_probabilities(self, index: int) -> np.ndarray:
        """P(first-round response | x = index): what unlimited reports of one value can reveal."""

    permanent_variance = Memoised.permanent_variance
    memo_indices = Memoised.memo_indices
    batch_payloads = Memoised.batch_payloads
    sdk_cohorts = Memoised.sdk_cohorts

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


MemoisedServer.register(Memoised)


def pure_chain_lumps(params: Any, sketch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``MemoisedServer.memo_lumps`` of a pure chain (L-GRR, L-OSUE): one class of reports over the
    d values; a = 1/(P − Q), ν = n·q₂, μ = n·q₁."""
    n = float(sketch.total_reports)
    q2 = float(params.q2)
    d = int(params.d)
    return (np.full((1, d), 1.0 / (params.p - params.q)), np.full((1, d), n * q2), np.full((1, d), n * params.q1))

__all__ = ["MemoisedServer", "pure_chain_lumps"]
