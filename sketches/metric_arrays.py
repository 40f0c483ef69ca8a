"""A metric's values as arrays: the vectorised arithmetic on a ``MetricSpec`` that simulation,
the collector's tools and the estimators run over many values at once.

The spec (client_sdk.registry) keeps the plain-Python facts a device needs — ``bounds``,
``edge_list``, ``domain_index`` and ``indices`` — and these functions are the same numbers as
float64 and int64 arrays, so the SDK distribution never needs numpy (docs/design.md, "The
device path runs without numpy"). For a numeric metric over [lo, hi] the normalised value is
t = 2(x − lo)/(hi − lo) − 1 in [−1, 1], the scale the mean mechanisms work on
(docs/protocols-numeric.md); a histogram metric's buckets are [e_i, e_{i+1}), the last one
closed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from client_sdk.registry import MetricSpec


def edge_array(spec: MetricSpec) -> np.ndarray:
    """Bucket edges e_0 = lo < e_1 < ... < e_B = hi of a histogram metric (float64): ``edge_list``
    as an array (TypeError for other metrics, as ``edge_list`` raises)."""
    return np.asarray(spec.edge_list, dtype=np.float64)


def normalise(spec: MetricSpec, x: np.ndarray | float) -> np.ndarray | float:
    """t = 2(x − lo)/(hi − lo) − 1, clipped to [−1, 1] (values outside the range are clipped)."""
    lo, hi = spec.bounds
    return np.clip(2.0 * (np.asarray(x, dtype=np.float64) - lo) / (hi - lo) - 1.0, -1.0, 1.0)


def denormalise(spec: MetricSpec, t: np.ndarray | float) -> np.ndarray | float:
    """x = lo + (t + 1)(hi − lo)/2: a normalised value back in the metric's units."""
    lo, hi = spec.bounds
    return lo + (np.asarray(t, dtype=np.float64) + 1.0) * (hi - lo) / 2.0


def bucket_of(spec: MetricSpec, x: Any) -> np.ndarray:
    """Bucket index of each value (clipped to the range): [e_i, e_{i+1}), the last one closed (int64)."""
    e = edge_array(spec)
    idx = np.searchsorted(e, np.asarray(x, dtype=np.float64), side="right") - 1
    return np.clip(idx, 0, len(e) - 2).astype(np.int64)


def index_of(spec: MetricSpec, values: Iterable[Any]) -> np.ndarray:
    """True values as 0-based domain indices (int64); DomainError naming the metric otherwise
    (the spec's ``indices``, as an array)."""
    return np.asarray(spec.indices(values), dtype=np.int64)


__all__ = ["bucket_of", "denormalise", "edge_array", "index_of", "normalise"]
