"""discover's server half (docs/discovery.md): the vectorised mechanism over a batch of strings,
validate, accumulate into (group, seed, bucket) cells, the exact output table and the wire; the
search that estimates it is estimators.discovery. Keys, fingerprints and the one-bucket hash are
the device half's (client_sdk.protocols.discover); ``fingerprints`` and ``bucket`` here are their
vectorised forms, the same integers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.discover import (
    GAMMA,
    MIX1,
    MIX2,
    SALT,
    TAG_KEY,
    Discover,
    fingerprint,
    key_bytes,
    truncate,
)

from .base import (
    CountEstimate,
    Payloads,
    ServerHalf,
    Sketch,
    add_cells,
    first_bad,
    int_rows_from_wire,
    require_1d,
)
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register


def fingerprints(keys: Sequence[bytes]) -> np.ndarray:
    """fp of many keys as a uint64 array."""
    blob = b"".join(hashlib.blake2b(TAG_KEY + k, digest_size=8).digest() for k in keys)
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def bucket(seeds: np.ndarray, fps: np.ndarray, g: int) -> np.ndarray:
    """H_s(k) for broadcast seeds s (int) and fingerprints fp(k) (uint64): int64 in [0, g)."""
    with np.errstate(over="ignore"):
        base = _mix(np.asarray(fps, dtype=np.uint64) ^ np.uint64(SALT))
        s = np.asarray(seeds).astype(np.uint64) + np.uint64(1)
        h = _mix(base + s * np.uint64(GAMMA))
    g64 = np.uint64(g)
    hi, lo = h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)
    return ((hi * g64 + ((lo * g64) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


@register(Discover)
class DiscoverServer(ServerHalf):
    """discover on the server: (groups·seeds) rows of g buckets."""

    device: Discover

    #: Its estimate finds the frequent strings itself (estimators/discovery.py).
    discovers_strings = True

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.g,)

    def output_distribution(self, value: str) -> np.ndarray:
        """P(seed, y | value, group) for every group: shape (groups, seeds·g), rows sum to one.

        Exact enumeration for the audit: the seed is uniform, y is GRR on H_s(key_t(value)).
        """
        par = self.params
        b = truncate(value, par.max_length)
        out = np.empty((par.groups, par.seeds, par.g))
        for t in range(par.groups):
            fp = fingerprint(key_bytes(b, min(t + 1, par.max_length)))
            h = bucket(np.arange(par.seeds), np.uint64(fp), par.g)
            out[t] = self.q
            out[t, np.arange(par.seeds), h] = self.p
        return out.reshape(par.groups, -1) / par.seeds

    def output_probabilities(self, index: int) -> np.ndarray:
        """``output_distribution`` of the string ``str(index)`` (the audit enumerates indices)."""
        return self.output_distribution(str(index))

    def encode(self, values: Sequence[str], rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise a batch of strings; ``cohorts`` are the groups (uniform draws if None)."""
        par = self.params
        vals = self.check_values(values)
        source = as_random_source(rng)
        n = len(vals)
        if cohorts is None:
            groups = source.below(par.groups, n).astype(np.int64)
        else:
            groups = np.broadcast_to(np.asarray(cohorts, dtype=np.int64), (n,)).copy()
            if n and (groups.min() < 0 or groups.max() >= par.groups):
                raise ValueError(f"groups must be integers in [0, {par.groups})")
        # fingerprints per distinct value and level (one BLAKE2b per pair), then per report
        index: dict[str, int] = {}
        inverse = np.fromiter((index.setdefault(v, len(index)) for v in vals), dtype=np.int64, count=n)
        distinct = [truncate(v, par.max_length) for v in index]
        levels = [min(t + 1, par.max_length) for t in range(par.groups)]
        table = fingerprints([key_bytes(b, lev) for b in distinct for lev in levels])
        fps = table.reshape(len(distinct), par.groups)[inverse, groups] if n else np.zeros(0, np.uint64)
        seeds = source.below(par.seeds, n).astype(np.int64)
        h = bucket(seeds, fps, par.g)
        keep = bernoulli(source, self.device.keep_threshold, n)
        other = source.below(par.g - 1, n).astype(np.int64)
        other += other >= h
        return {"group": groups, "seed": seeds, "y": np.where(keep, h, other)}

    # --- collector --------------------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        par = self.params
        n = None
        for field, high in (("group", par.groups), ("seed", par.seeds), ("y", par.g)):
            arr = require_1d(payloads, field, n)
            n = arr.shape[0]
            if arr.ndim != 1 or (n and arr.dtype.kind not in "iu"):
                raise InvalidPayload(f"{field} must be a 1-d array of integers", field=field)
            bad = (arr < 0) | (arr >= high)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"{field} {int(arr[i])} outside [0, {high})", index=i, field=field)

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        par = self.params
        row = np.asarray(payloads["group"], np.int64) * par.seeds + np.asarray(payloads["seed"], np.int64)
        return row * par.g + np.asarray(payloads["y"], np.int64), row

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Discovery needs the server's search (estimators.discovery); cells are not estimates."""
        raise NotImplementedError("discover metrics are estimated by estimators.discovery.discover")

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var[ĉ(v)] of one group's local-hashing estimate with n reports (Wang et al. 2017):
        [n·(1/g)(1−1/g) + c·(p'(1−p') − (1/g)(1−1/g))] / (p' − 1/g)²."""
        g, p = self.params.g, self.p
        c = np.asarray(true_counts, dtype=np.float64)
        base = (1 / g) * (1 - 1 / g)
        return (n * base + c * (p * (1 - p) - base)) / (p - 1 / g) ** 2

    # --- wire -----------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [[int(t), int(s), int(y)] for t, s, y in
                zip(payloads["group"], payloads["seed"], payloads["y"])]

    def from_wire(self, objects: list[Any]) -> Payloads:
        par = self.params
        highs = (par.groups, par.seeds, par.g)
        # Fast path: exact types, one conversion and a vectorised range check; anything wrong is
        # named by the report-by-report pass below.
        out = int_rows_from_wire(objects, 3)
        if out is not None and not ((out < 0) | (out >= np.asarray(highs))).any():
            return {"group": out[:, 0], "seed": out[:, 1], "y": out[:, 2]}
        for i, obj in enumerate(objects):  # msgpack hands over Python objects: types checked one by one
            if not isinstance(obj, (list, tuple)) or len(obj) != 3:
                raise InvalidPayload("expected [group, seed, y]", index=i, field="payload")
            for j, (x, high) in enumerate(zip(obj, highs)):
                if type(x) is not int or not 0 <= x < high:
                    raise InvalidPayload(f"expected an integer in [0, {high}), got {x!r}", index=i,
                                         field=("group", "seed", "y")[j])
        out = np.asarray(objects, dtype=np.int64).reshape(-1, 3)  # one conversion, not one per report
        return {"group": out[:, 0], "seed": out[:, 1], "y": out[:, 2]}

    def support_probabilities(self) -> tuple[float, float] | None:
        """Local hashing's p* = p', q* = 1/g, per group (estimators/poisoning.py)."""
        return float(self.p), 1.0 / self.params.g

    @property
    def held_out_groups(self) -> int:
        """G = L + 1: the population estimate is the held-out group's, scaled by its expected share."""
        return self.params.groups

    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """The group in [0, L + 1): the prefix tree's level the device reports, or the held-out group."""
        return "discover group", int(self.params.groups), True, False

    #: A report's seed is fresh: only its group is a cohort in clear.
    cohort_field = "group"

    @property
    def clear_cohorts(self) -> int:
        """The L + 1 groups."""
        return int(self.params.groups)


__all__ = ["DiscoverServer", "bucket", "fingerprints"]
