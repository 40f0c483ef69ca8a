"""Memoised 1BitMean on the server (Ding, Kulkarni, Yekhanin 2017; client_sdk.protocols.memobitmean
derives the round-1 thresholds at ε∞ and the flip threshold γ): both rounds over a batch, the
exact table of one report and of the memoised bit, and the debiased values; validation, sketch,
wire and the mean estimator are sketches.numeric's, the permanent share sketches.longitudinal's."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from client_sdk.protocols.memobitmean import MemoBitMean, MemoBitMeanParams
from client_sdk.protocols.numeric import SCALE64
from client_sdk.randomness import SCALE

from .base import Payloads
from .longitudinal import MemoisedServer
from .numeric import NumericServer, words64
from .randomness import RandomLike, as_random_source
from .registry import register


def one_probabilities(params: MemoBitMeanParams, gamma_threshold: int) -> np.ndarray:
    """P(report = 1 | j) for j = 0..K with flip probability γ = threshold/2^32."""
    g = gamma_threshold / SCALE
    a, d = params.first.low_threshold, params.first.step   # Duchi's thresholds out of 2^64
    p1 = np.array([(a + d * j) / SCALE64 for j in range(params.grid + 1)])
    return g + (1 - 2 * g) * p1


@register(MemoBitMean)
class MemoBitMeanServer(MemoisedServer, NumericServer):
    """Two-round memoised 1BitMean on the server: the numeric contract's two cells."""

    device: MemoBitMean

    @functools.cached_property
    def _t1(self) -> np.ndarray:
        return np.array(self.device.first_thresholds, dtype=np.uint64)

    @functools.cached_property
    def _table(self) -> np.ndarray:
        one = one_probabilities(self.params, self.device.gamma_threshold)
        return np.stack([1.0 - one, one], axis=1)

    @functools.cached_property
    def _values(self) -> np.ndarray:
        one = one_probabilities(self.params, self.device.gamma_threshold)
        slope = (one[-1] - one[0]) / self.params.grid     # P_j = one[0] + slope·j
        spread = (2.0 / self.params.grid) / slope         # v(1) − v(0)
        v0 = -1.0 - spread * one[0]
        return np.array([v0, v0 + spread])

    def probability_table(self) -> np.ndarray:
        return self._table

    def integer_table(self) -> tuple[np.ndarray, int]:
        """The two rounds' exact law out of 2^96 (``MemoBitMeanParams.one_weights``)."""
        total = SCALE * SCALE64
        weights = self.params.one_weights(self.device.gamma_threshold)
        return np.array([[total - w, w] for w in weights], dtype=object), total

    def debiased_values(self) -> np.ndarray:
        return self._values

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        p1 = int(self._t1[index]) / SCALE64
        return np.array([1.0 - p1, p1])

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        words = words64(source, memo_inputs.shape[0])
        return (words < self._t1[memo_inputs]).astype(np.int64)

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        flip = source.words(first.shape[0]).astype(np.int64) < self.device.gamma_threshold
        return first ^ flip.astype(np.int64)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new client reporting once)."""
        source = as_random_source(rng)
        return {"y": self.second_round(self.first_round(self.check_indices(indices), source), source)}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """Grid point x's memoised bit (1 w.p. P1_x), flipped w.p. γ every report."""
        gamma = self.params.gamma_threshold / (1 << 32)
        return "bit", self.memo_output_probabilities(int(x))[1:], 1.0 - gamma, gamma

    def audit_inputs(self, x: Any) -> list[tuple[float, Any]]:
        """The grid points normalised t = ``x`` rounds to, with their probabilities: the device's α
        (``alpha_round``) is a secret uniform 32-bit word, so it rounds up w.p. ⌊frac·2^32⌋/2^32."""
        pos = (min(1.0, max(-1.0, float(x))) + 1.0) * (self.grid / 2)
        low = math.floor(pos)
        up = math.floor((pos - low) * (1 << 32)) / (1 << 32)
        return [(w, min(j, self.grid)) for w, j in ((1.0 - up, low), (up, low + 1)) if w > 0]

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        """The reported bit."""
        return payloads["y"][:, None].astype(np.int64)


__all__ = ["MemoBitMeanServer", "one_probabilities"]
