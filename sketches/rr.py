"""Binary RR's server half (Warner 1965; docs/math.md §3): the vectorised mechanism, wire
decoding, validate and accumulate (two counters: reports of 0 and of 1); the estimate is the
pure one (sketches.base.PureServer). The device half is client_sdk.protocols.rr."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.rr import RR

from .base import DirectServer, Payloads, Sketch, first_bad, integers_from_wire, require_1d
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register


@register(RR)
class RRServer(DirectServer):
    """Binary randomised response on the server."""

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        keep = bernoulli(as_random_source(rng), self.device.keep_threshold, x.shape[0])
        return {"y": np.where(keep, x, 1 - x)}

    def validate(self, payloads: Payloads) -> None:
        y = require_1d(payloads, "y")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise InvalidPayload("RR report must be the integer 0 or 1", field="y")
        bad = (y != 0) & (y != 1)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} is not 0 or 1", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        y = np.asarray(payloads["y"], dtype=np.int64)
        ones = int(np.count_nonzero(y))
        sketch.counts[0] += (y.shape[0] - ones, ones)
        sketch.reports[0] += y.shape[0]

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.asarray(payloads["y"], dtype=np.int64).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, 2, "y")}


__all__ = ["RRServer"]
