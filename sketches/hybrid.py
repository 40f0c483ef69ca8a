"""Wang et al. (2019)'s Hybrid Mechanism on the server (client_sdk.protocols.hybrid: the mixture
threshold H and the two parts): the Piecewise part's table and cells beside Duchi's, each from
that part's own server half (``server_half``), validation of the cells a part that is never used
would own, and the vectorised mixture."""

from __future__ import annotations

import functools

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.hybrid import Hybrid
from client_sdk.randomness import SCALE

from .base import Payloads, first_bad
from .numeric import NumericServer
from .randomness import RandomLike, as_random_source
from .registry import register, server_half


@register(Hybrid)
class HybridServer(NumericServer):
    """Hybrid on the server: Piecewise's K + w cells, then Duchi's two."""

    device: Hybrid

    def __init__(self, device: Hybrid) -> None:
        super().__init__(device)
        pm, duchi = device.parts
        self._pm, self._duchi = server_half(pm), server_half(duchi)
        self._h, self._m = device.threshold, pm.cells

    @functools.cached_property
    def _table(self) -> np.ndarray:
        mix = self._h / SCALE
        return np.concatenate([mix * self._pm.probability_table(),
                               (1 - mix) * self._duchi.probability_table()], axis=1)

    @functools.cached_property
    def _values(self) -> np.ndarray:
        return np.concatenate([self._pm.debiased_values(), self._duchi.debiased_values()])

    def integer_table(self) -> tuple[np.ndarray, int]:
        """h/2^32 · Piecewise (out of T) beside (1 − h/2^32) · Duchi (out of 2^64), one denominator."""
        pm, pm_total = self._pm.integer_table()
        du, du_total = self._duchi.integer_table()
        table = np.concatenate([pm * (self._h * du_total), du * ((SCALE - self._h) * pm_total)], axis=1)
        return table, SCALE * pm_total * du_total

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def validate(self, payloads: Payloads) -> None:
        """Cells in range, and only cells of a part that is ever used (α = 0 or 1 leaves one idle)."""
        super().validate(payloads)
        y = np.asarray(payloads["y"])
        lo = 0 if self._h > 0 else self._m
        hi = self.device.cells if self._h < SCALE else self._m
        bad = (y < lo) | (y >= hi)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} is a cell this hybrid never reports (alpha = {self.device.alpha})",
                                 index=i, field="y")

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        source = as_random_source(rng)
        n = j.shape[0]
        use_pm = source.words(n).astype(np.int64) < self._h
        pm_cells = self._pm.cells_from_uniform(j, self._pm.uniform_below_total(source, n))
        bits = self._duchi.encode(j, source)["y"]
        return {"y": np.where(use_pm, pm_cells, self._m + bits)}


__all__ = ["HybridServer"]
