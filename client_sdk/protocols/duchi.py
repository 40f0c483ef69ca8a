"""Duchi et al.'s one-bit mean mechanism (Duchi, Jordan, Wainwright 2013), discretised.

For t in [−1, 1] report one bit, 1 with probability P(t) = ½ + t(e^ε − 1)/(2(e^ε + 1)); the
server's unbiased value of a bit is ±C with C = (e^ε + 1)/(e^ε − 1), so Var = C² − t².
Ding, Kulkarni, Yekhanin (2017)'s 1BitMean, deployed in Windows telemetry, is the same
mechanism on [0, m] (``bitmean`` below: the same code under the name users know it by).

Exactness: on the input grid t_j = −1 + 2j/K the threshold is T_j = A + j·D (integers, out of
2^32), affine in j so that the debiased value stays exactly unbiased, and symmetric
(T_0 + T_K = 2^32). A is the smallest integer with (2^32 − A)/A <= e^ε, D the largest that
fits, and the quoted epsilon is ln((2^32 − A)/A) of those realised integers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..randomness import SCALE, RandomLike, as_random_source, secure_word
from .base import Payloads
from .numeric import NumericProtocol, check_grid_and_epsilon

DEFAULT_GRID = 256


@dataclasses.dataclass(frozen=True)
class DuchiParams:
    epsilon: float            # target per-report budget
    grid: int = DEFAULT_GRID  # K: input grid steps over [−1, 1]

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "duchi")
        if self.step < 1:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"with {self.grid} grid steps")

    @property
    def low_threshold(self) -> int:
        """A = T_0: P(1 | t = −1) = A/2^32 >= 1/(e^ε + 1) (ceil keeps the ratio <= e^ε)."""
        return (SCALE - self.grid * self.step) // 2  # exact: K is even

    @property
    def step(self) -> int:
        """D: the threshold grows by D per grid step; K·D <= 2^32 − 2·A_min."""
        a_min = math.ceil(SCALE / (math.exp(self.epsilon) + 1.0))
        return (SCALE - 2 * a_min) // self.grid


class Duchi(NumericProtocol):
    name = "duchi"

    def __init__(self, params: DuchiParams) -> None:
        super().__init__(params)
        self._a = params.low_threshold
        self._d = params.step
        self._thresholds = self._a + self._d * np.arange(params.grid + 1, dtype=np.int64)
        # v(y) solves E[v | j] = t_j: P_j = (A + jD)/2^32 and t_j = −1 + 2j/K.
        scale = 2.0 * SCALE / (self._d * params.grid)
        self._values = np.array([(0.0 - self._a / SCALE) * scale - 1.0,
                                 (1.0 - self._a / SCALE) * scale - 1.0])
        p1 = self._thresholds / SCALE
        self._table = np.stack([1.0 - p1, p1], axis=1)

    @property
    def grid(self) -> int:
        return self.params.grid

    @property
    def cells(self) -> int:
        return 2

    @property
    def epsilon(self) -> float:
        return math.log((SCALE - self._a) / self._a)

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        words = as_random_source(rng).words(j.shape[0]).astype(np.int64)
        return {"y": (words < self._thresholds[j]).astype(np.int64)}

    def encode_one(self, index: int, cohort: int | None = None) -> int:
        j = self._check_index(index)
        return int(secure_word() < self._a + self._d * j)


class BitMean(Duchi):
    """Ding et al. (2017)'s 1BitMean: Duchi's mechanism under the name Windows telemetry uses."""

    name = "bitmean"


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def params_from_options(epsilon: float, options: dict[str, Any]) -> DuchiParams:
    return DuchiParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID))


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Duchi:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Duchi(params_from_options(epsilon, options))
