"""The discrete Laplace mechanism on the server (client_sdk.protocols.laplace calibrates the
integer noise weights out of 2^64 and their inverse-CDF bounds): the exact integer table, its
float form, the clamp's residual bias and mass, and the vectorised inverse CDF on 64-bit words;
validation, sketch, wire and the mean estimator are sketches.numeric's."""

from __future__ import annotations

import functools
import itertools

import numpy as np

from client_sdk.protocols.laplace import Laplace
from client_sdk.protocols.numeric import SCALE64

from .base import Payloads
from .numeric import NumericServer, words64
from .randomness import RandomLike, as_random_source
from .registry import register


@register(Laplace)
class LaplaceServer(NumericServer):
    """Discrete Laplace on the server: K + 2L + 1 cells, c = y + L."""

    device: Laplace

    def __init__(self, device: Laplace) -> None:
        super().__init__(device)
        self._k, self._l = device.grid, device.window
        self._n = self._k + self._l

    @functools.cached_property
    def _bounds_np(self) -> np.ndarray:
        return np.array(self.device.bounds, dtype=np.uint64)

    @functools.cached_property
    def _values(self) -> np.ndarray:
        return np.array(self.device.value_list)

    @functools.cached_property
    def _table(self) -> np.ndarray:
        return self._integer_table().astype(np.float64) / float(SCALE64)

    def _integer_table(self, weights: list[int] | None = None) -> np.ndarray:
        """P(y | j)·2^64 as uint64, shape (K+1, M)."""
        w = self.device.noise_weights if weights is None else weights
        k, window, n = self._k, self._l, self._n
        cells = k + 2 * window + 1
        w_np = np.array(w, dtype=np.uint64)
        j = np.arange(k + 1)[:, None]
        y = np.arange(-window, k + window + 1)[None, :]
        table = w_np[y - j + n]
        prefix = list(itertools.accumulate(w, initial=0))  # prefix[i] = Σ_{z index < i} W
        for row in range(k + 1):
            # clamped ends: z <= −L − j goes to y = −L; z >= K + L − j goes to y = K + L
            table[row, 0] = prefix[n - window - row + 1]
            table[row, cells - 1] = prefix[-1] - prefix[n + k + window - row]
        return table

    def integer_table(self) -> tuple[np.ndarray, int]:
        """The noise weights out of 2^64 that ``encode``'s inverse CDF (the device's bounds) realises."""
        return self._integer_table().astype(object), SCALE64

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def bias(self) -> np.ndarray:
        """E[v(y) | j] − t_j for every grid point, from the realised table (the clamp's residue)."""
        return self.probability_table() @ self._values - self.grid_points()

    def clamped_mass(self) -> float:
        """Largest probability, over inputs, of landing in an end cell."""
        table = self.probability_table()
        return float(max(table[:, 0].max(), table[:, -1].max()))

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        u = words64(as_random_source(rng), j.shape[0])
        noise = np.searchsorted(self._bounds_np, u, side="right").astype(np.int64)
        y = np.clip(j + noise, self._n - self._l, self._n + self._k + self._l)
        return {"y": y - (self._n - self._l)}


__all__ = ["LaplaceServer"]
