"""Hadamard response's server half (docs/protocols.md, "Hadamard response"): the vectorised
mechanism, wire decoding, validate, accumulate, the exact output table and the estimator, whose
support counts S(x) = Σ_a h[a, ⟨a,x⟩] come from one DFT over Z_g^t (the device half's module
docstring, client_sdk.protocols.hr, derives it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.hr import HR

from .base import (
    CountEstimate,
    Payloads,
    PureServer,
    Sketch,
    add_cells,
    first_bad,
    integers_from_wire,
    pure_estimate,
    pure_variance,
    require_1d,
)
from .projective import direction_codes, inner, line_sums
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register

#: When p*+q* > 1 (g = 2), Var[ĉ] = n q*(1−q*)/(p*−q*)² − c·(p*+q*−1)/(p*−q*) *decreases* in c,
#: so the usual plug-in at ĉ narrows the interval exactly when ĉ overshoots. The plug-in is then
#: taken at ĉ − 3·sd₀ (sd₀ = √Var at c=0), clipped to [0, n] (it restored 95 % Bonferroni coverage
#: for basic HR at d=64, ε=2, n=2000); for g > 2 the usual plug-in is conservative already.
VARIANCE_SHIFT_SD = 3.0

@register(HR)
class HRServer(PureServer):
    """Hadamard response on the server: K = m·g counters, one per (direction, residue)."""

    device: HR

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.device.k,)

    def design_note(self, n: int | None = None) -> str:
        """The field F_g^t whose points are the outputs, and how many there are."""
        return f"F_{self.params.g}^{self.params.t}, {self.params.k:,} outputs"

    def output_probabilities(self, index: int) -> np.ndarray:
        """Q(y | x) over y = s·g + b: p'/m where b = ⟨a_s, x⟩, q'/m elsewhere."""
        dev = self.device
        s = np.arange(dev.m, dtype=np.int64)
        h = inner(direction_codes(s, dev.g, dev.t), np.int64(index), dev.g, dev.t)
        probs = np.full((dev.m, dev.g), dev.q_prime / dev.m)
        probs[s, h] = self.params.p / dev.m
        return probs.ravel()

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        dev = self.device
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, g = x.shape[0], dev.g
        s = source.below(dev.m, n)                                  # direction, fresh per report
        h = inner(direction_codes(s, g, dev.t), x, g, dev.t)        # ⟨a, x⟩: true residue
        keep = bernoulli(source, dev.keep_threshold, n)
        other = source.below(g - 1, n)
        other += other >= h                                         # uniform over residues != h
        return {"y": s * g + np.where(keep, h, other)}

    def validate(self, payloads: Payloads) -> None:
        k = self.device.k
        y = require_1d(payloads, "y")
        if y.ndim != 1 or (y.size and y.dtype.kind not in "iu"):
            raise InvalidPayload("HR report must be an integer", field="y")
        bad = (y < 0) | (y >= k)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {k})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(payloads["y"], dtype=np.int64)
        return y, np.zeros(y.shape[0], dtype=np.int64)

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """S(x) = Σ_a h[a, ⟨a,x⟩] for every x by one DFT over Z_g^t."""
        dev = self.device
        counts = sketch.counts
        h = (counts[0] if counts.shape[0] == 1 else counts.sum(axis=0)).reshape(dev.m, dev.g)
        support = line_sums(h, dev.g, dev.t, self.params.d)
        return np.rint(support, out=support)

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Pure estimator; when p*+q* > 1 the variance is plugged in at ĉ − 3·sd₀."""
        n = sketch.total_reports
        support = self.support_counts(sketch)
        counts, variances = pure_estimate(support, n, self.p, self.q)
        if self.p + self.q > 1:
            sd0 = math.sqrt(float(pure_variance(n, 0.0, self.p, self.q)))
            variances = pure_variance(n, np.clip(counts - VARIANCE_SHIFT_SD * sd0, 0, n), self.p, self.q)
        # the support counts go along: the exact small-count law needs them (one DFT, not two)
        return CountEstimate(counts, variances, n, {"hash_range": self.device.g, "dimension": self.device.t,
                                                    "support": support})

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.asarray(payloads["y"], dtype=np.int64).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.device.k, "y")}

    def values_supported(self) -> int:
        """The values whose Hadamard row agrees with the output: K/2, at most d."""
        return min(int(self.domain_size), int(self.params.k) // 2)


__all__ = ["VARIANCE_SHIFT_SD", "HRServer"]
