"""Binary randomised response, Warner 1965 (docs/math.md §3), for boolean metrics.

The domain is {0 = false, 1 = true}. Report the true bit with probability
p = e^ε/(1+e^ε), otherwise its negation. p is quantised down to the 2^-32 grid (by rounding
the flip probability 1−p = 1/(1+e^ε) *up*, which stays exact even when e^ε is huge), and the
epsilon we quote, ln(p'/(1−p')), is computed from the realised p'.

Pure protocol with S(y) = {y}: p* = p', q* = 1−p'. The estimator ĉ(v) = (C(v) − n q*)/(p*−q*)
is Warner's π̂ scaled to counts. Wire payload: the int 0 or 1 (a msgpack bool is rejected).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lazy import np
from ..errors import InvalidPayload
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    bernoulli,
    realised,
    threshold_ceil,
)
from .base import (
    DirectResponse,
    Payloads,
    Sketch,
    check_domain_and_epsilon,
    first_bad,
    integers_from_wire,
    require_1d,
)


@dataclasses.dataclass(frozen=True)
class RRParams:
    d: int           # domain size; must be 2 (index 0 = false, 1 = true)
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        if self.d != 2:
            raise ValueError(f"binary RR needs a boolean domain (2 values), got {self.d}; use grr")
        check_domain_and_epsilon(self.d, self.epsilon, "binary RR")
        if self.keep_threshold <= SCALE // 2:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def keep_threshold(self) -> int:
        """T with T/2^32 <= p = e^ε/(1+e^ε): the flip probability 1/(1+e^ε) rounded up."""
        return SCALE - threshold_ceil(1.0 / (1.0 + math.exp(self.epsilon)))

    @property
    def p(self) -> float:
        """Realised P(report = true bit)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = flipped bit) = 1 − p (exact: both are multiples of 2^-32)."""
        return realised(SCALE - self.keep_threshold)


class RR(DirectResponse):
    name = "rr"

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        keep = bernoulli(as_random_source(rng), self._threshold, x.shape[0])
        return {"y": np.where(keep, x, 1 - x)}

    def encode_one(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> int:
        """Binary RR for one value in Python integers: truthful iff u < T."""
        x = self._check_index(index)
        return x if (source or OS_WORDS).word() < self._threshold else 1 - x

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


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> RR:
    """Build from registry fields (RR takes no extra options; the domain must be boolean)."""
    return RR(RRParams(d=domain_size, epsilon=epsilon))
