"""Generalised (k-ary) randomised response, a.k.a. Direct Encoding (docs/math.md §3).

Report the true value x with probability p = e^ε/(e^ε+d−1), otherwise a uniformly drawn
*other* value (each with q = (1−p)/(d−1)). p is quantised down to a 2^-32 grid, and the
epsilon we quote, ln(p'/q'), is computed from the realised p'.
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
    threshold_floor,
)
from .base import (
    DirectResponse,
    Payloads,
    Sketch,
    add_cells,
    check_domain_and_epsilon,
    first_bad,
    integers_from_wire,
    require_1d,
)


def keep_threshold(epsilon: float, k: int) -> int:
    """Threshold of P(report the true value) = e^ε/(e^ε+k−1), rounded down (docs/math.md §3).

    Shared with OLH, which runs GRR on its hash range [g].
    """
    e = math.exp(epsilon)
    return threshold_floor(e / (e + k - 1))


class GRROnRange:
    """Realised probabilities of GRR on a range [g] (OLH's hash range, HR's residues, discover's
    buckets), for params classes with ``epsilon`` and ``g``: one place for the threshold rule."""

    epsilon: float
    g: int

    @property
    def keep_threshold(self) -> int:
        return keep_threshold(self.epsilon, self.g)

    @property
    def p(self) -> float:
        """Realised P(report = the true residue / hashed value)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = b) for each other b in [g]."""
        return (1.0 - self.p) / (self.g - 1)


@dataclasses.dataclass(frozen=True)
class GRRParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "GRR")
        # Realised p' > q' = (1−p')/(d−1)  ⇔  T·d > 2^32; otherwise the quantised mechanism
        # has ε' <= 0 (p' < q' leaks |ε'| > the target, p' = q' estimates nothing).
        if self.keep_threshold * self.d <= SCALE:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at d = {self.d}")

    @property
    def keep_threshold(self) -> int:
        return keep_threshold(self.epsilon, self.d)

    @property
    def p(self) -> float:
        """Realised P(report = x)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = v) for each v != x."""
        return (1.0 - self.p) / (self.d - 1)


class GRR(DirectResponse):
    name = "grr"

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n = x.shape[0]
        keep = bernoulli(source, self._threshold, n)
        other = source.below(self.params.d - 1, n)
        other += other >= x  # uniform over the d−1 values != x
        return {"y": np.where(keep, x, other)}

    def encode_one(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> int:
        """GRR for one value in Python integers: keep x if u < T, else a uniform other value."""
        x = self._check_index(index)
        src = source or OS_WORDS
        if src.word() < self._threshold:
            return x
        other = src.below(self.params.d - 1)
        return other + (other >= x)

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


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> GRR:
    """Build from registry fields (GRR takes no extra options)."""
    return GRR(GRRParams(d=domain_size, epsilon=epsilon))
