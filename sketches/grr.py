"""GRR's server half (docs/math.md §3): the vectorised mechanism, wire decoding, validate and
accumulate; the estimate is the pure one (sketches.base.PureServer). The device half,
thresholds included, is client_sdk.protocols.grr."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.grr import GRR

from .base import DirectServer, Payloads, Sketch, add_cells, first_bad, integers_from_wire, require_1d
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register


@register(GRR)
class GRRServer(DirectServer):
    """k-ary randomised response on the server: one counter per domain value."""

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n = x.shape[0]
        keep = bernoulli(source, self.device.keep_threshold, n)
        other = source.below(self.params.d - 1, n)
        other += other >= x  # uniform over the d−1 values != x
        return {"y": np.where(keep, x, other)}

    def validate(self, payloads: Payloads) -> None:
        y = require_1d(payloads, "y")
        if y.dtype.kind not in "iu":
            raise InvalidPayload("GRR report must be an integer", field="y")
        bad = (y < 0) | (y >= self.params.d)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {self.params.d})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(payloads["y"], dtype=np.int64)
        return y, np.zeros(y.shape[0], dtype=np.int64)

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [int(v) for v in payloads["y"]]

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.params.d, "y")}

    def pair_probabilities(self) -> tuple[float, float, float, float] | None:
        """r₁ = r₂ = 0: a report supports one value (the multinomial's negative covariance)."""
        return float(self.p), float(self.q), 0.0, 0.0

    def marginal_model(self, cells: int, n: int) -> tuple[float, float, int] | None:
        """One cell a report: the sum is the support of the merged value, (p* + (k−1)q*, k·q*, n)."""
        p, q = float(self.p), float(self.q)
        return p + (cells - 1) * q, cells * q, n

    def draw_support(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """x's c_x reports keep x w.p. p (binomial) and spread the rest uniformly over the d − 1
        other values (multinomial)."""
        c, p = counts, float(self.p)
        d = c.size
        kept = rng.binomial(c, p)
        out = kept.astype(np.int64)
        others = np.full(d - 1, 1.0 / (d - 1))
        for x in np.flatnonzero(c - kept):
            spread = rng.multinomial(int(c[x] - kept[x]), others)
            out[:x] += spread[:x]
            out[x + 1:] += spread[x:]
        return out


__all__ = ["GRRServer"]
