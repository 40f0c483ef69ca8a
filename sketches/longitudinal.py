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


MemoisedServer.register(Memoised)

__all__ = ["MemoisedServer"]
