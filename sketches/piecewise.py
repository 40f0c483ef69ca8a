"""The discrete Piecewise Mechanism on the server (client_sdk.protocols.piecewise derives the
window w and the integer weights A, B out of T = wA + KB): the exact table, the debiased values
β(c − c₀) and the vectorised encode by rejection on 32-bit words; validation, sketch, wire and the
mean estimator are sketches.numeric's."""

from __future__ import annotations

import functools

import numpy as np

from client_sdk.protocols.piecewise import Piecewise
from client_sdk.randomness import SCALE

from .base import Payloads
from .numeric import NumericServer
from .randomness import RandomLike, as_random_source
from .registry import register


@register(Piecewise)
class PiecewiseServer(NumericServer):
    """Piecewise on the server: K + w cells."""

    device: Piecewise

    def __init__(self, device: Piecewise) -> None:
        super().__init__(device)
        self._k, self._w = device.grid, device.window
        self._a, self._b = device.weights
        self._total = device.total
        self._accept = (SCALE // self._total) * self._total   # accept u < this

    @functools.cached_property
    def _values(self) -> np.ndarray:
        beta, c0 = self.device.beta_c0
        return beta * (np.arange(self._k + self._w, dtype=np.float64) - c0)

    @functools.cached_property
    def _table(self) -> np.ndarray:
        j = np.arange(self._k + 1)[:, None]
        c = np.arange(self._k + self._w)[None, :]
        inside = (c >= j) & (c < j + self._w)
        return np.where(inside, self._a, self._b) / self._total

    def integer_table(self) -> tuple[np.ndarray, int]:
        """a inside the window, b elsewhere, out of T = w·a + K·b: ``cells_from_uniform``'s law."""
        j = np.arange(self._k + 1)[:, None]
        c = np.arange(self._k + self._w)[None, :]
        inside = (c >= j) & (c < j + self._w)
        return np.where(inside, self._a, self._b).astype(object), self._total

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def cells_from_uniform(self, j: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Cell for input j given r uniform on [0, T): the first wA values index the window."""
        inside = r < self._w * self._a
        win = j + r // self._a
        rest = np.maximum(r - self._w * self._a, 0) // self._b
        return np.where(inside, win, rest + (rest >= j) * self._w)

    def uniform_below_total(self, source, count: int) -> np.ndarray:
        """``count`` integers uniform on [0, T) from 32-bit words (rejection, no modulo bias)."""
        u = source.words(count).astype(np.int64)
        bad = np.flatnonzero(u >= self._accept)
        while bad.size:  # each word is rejected with probability < (2^32 mod T)/2^32
            u[bad] = source.words(bad.size).astype(np.int64)
            bad = bad[u[bad] >= self._accept]
        return u % self._total

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        r = self.uniform_below_total(as_random_source(rng), j.shape[0])
        return {"y": self.cells_from_uniform(j, r)}


__all__ = ["PiecewiseServer"]
