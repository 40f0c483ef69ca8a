"""Duchi et al.'s one-bit mean mechanism on the server (client_sdk.protocols.duchi derives its
integer thresholds T_j = A + jD out of 2^64): the exact table, the debiased values ±C and the
vectorised encode; validation, sketch, wire and the mean estimator are sketches.numeric's."""

from __future__ import annotations

import functools

import numpy as np

from client_sdk.protocols.duchi import Duchi
from client_sdk.protocols.numeric import SCALE64

from .base import Payloads
from .numeric import NumericServer, words64
from .randomness import RandomLike, as_random_source
from .registry import register


@register(Duchi)
class DuchiServer(NumericServer):
    """Duchi's mechanism on the server: two cells, the reported bit."""

    device: Duchi

    @functools.cached_property
    def _thresholds(self) -> np.ndarray:
        """A + jD for j = 0..K, uint64 (all < 2^64: T_K = 2^64 − A); arrays built on first use."""
        return np.array(self.device.thresholds(), dtype=np.uint64)

    @functools.cached_property
    def _values(self) -> np.ndarray:
        return np.array(self.device.value_list)

    @functools.cached_property
    def _table(self) -> np.ndarray:
        thresholds = self.device.thresholds()
        p1 = np.array([t / SCALE64 for t in thresholds])
        p0 = np.array([(SCALE64 - t) / SCALE64 for t in thresholds])  # exact, not 1 − p1
        return np.stack([p0, p1], axis=1)

    def integer_table(self) -> tuple[np.ndarray, int]:
        """P(1 | j) = (A + jD)/2^64: the sampler's own thresholds (``encode``: u < T_j)."""
        return np.array([[SCALE64 - x, x] for x in self.device.thresholds()], dtype=object), SCALE64

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        u = words64(as_random_source(rng), j.shape[0])
        return {"y": (u < self._thresholds[j]).astype(np.int64)}


__all__ = ["DuchiServer"]
