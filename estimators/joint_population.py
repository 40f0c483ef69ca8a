"""Populations of a joint metric for `ldpt simulate`: correlated parts, so benches and docs can
show a real dependence being recovered (docs/guide-analysts.md, "Breakdowns by private attributes").

- ``read_joint_counts``: a CSV of joint counts, one column per part (named as in ``of``) and a
  ``count`` column of relative weights, e.g. ``os,crashed,count`` then ``ios,true,1200``;
  cells the file leaves out have weight 0; errors name the file, the line and the field.
- ``example_weights``: the built-in law when no file is given: the first part Zipf(1.1) over
  its values, and every other part depending on the first: P(part k = j | first = i) ∝
  2^−|j − (i mod kₖ)| (a boolean part is true more often for odd first values).
"""

from __future__ import annotations

import csv

import numpy as np

from client_sdk.registry import MetricSpec

from .simulation import DistributionError, Population

__all__ = ["example_weights", "joint_population", "read_joint_counts"]


def read_joint_counts(path: str, spec: MetricSpec) -> np.ndarray:
    """Weights per cell (row-major over the parts) from a CSV of joint counts."""
    joint = spec.joint
    names = list(joint.names)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except OSError as exc:
        raise DistributionError(f"{path}: cannot read the joint counts ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise DistributionError(f"{path}: the joint counts file is not UTF-8 text") from None
    header = [c.strip() for c in rows[0]] if rows else []
    if sorted(header) != sorted([*names, "count"]):
        raise DistributionError(f"{path}: line 1: the header must name the parts and count, e.g. "
                                f"{','.join([*names, 'count'])} (got {','.join(header) or 'nothing'})")
    pos = {h: i for i, h in enumerate(header)}
    weights = np.zeros(joint.size)
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DistributionError(f"{path}: line {line}: expected {len(header)} fields, got {len(row)}")
        try:
            w = float(row[pos["count"]])
        except ValueError:
            raise DistributionError(f"{path}: line {line}: field 'count' is {row[pos['count']]!r}, "
                                    "not a number") from None
        if not np.isfinite(w) or w < 0:
            raise DistributionError(f"{path}: line {line}: field 'count' must be a finite number >= 0")
        values = [row[pos[n]].strip() for n in names]
        for part, v in zip(joint.parts, values):
            if part.index(v) is None:
                what = "a number nor a bucket label such as " + repr(part.labels[0]) \
                    if part.kind == "numeric" else "one of " + ", ".join(part.labels)
                raise DistributionError(f"{path}: line {line}: field {part.name!r}: {v!r} is not {what}")
        cell = joint.cell(values)
        assert cell is not None  # every part checked above
        weights[cell] += w
    if weights.sum() <= 0:
        raise DistributionError(f"{path}: no positive counts")
    return weights


def example_weights(spec: MetricSpec) -> np.ndarray:
    """The built-in correlated law (module docstring), row-major over the cells."""
    shape = spec.joint.shape
    idx = np.indices(shape)
    first = idx[0]
    w = 1.0 / (first + 1.0) ** 1.1
    for k in range(1, len(shape)):
        w = w * 2.0 ** -np.abs(idx[k] - first % shape[k])
    return w.reshape(-1)


def joint_population(spec: MetricSpec, clients: int, path: str | None,
                     rng: np.random.Generator) -> Population:
    """``clients`` devices drawn (multinomially) from a joint counts file or the built-in law."""
    weights = read_joint_counts(path, spec) if path else example_weights(spec)
    counts = rng.multinomial(clients, weights / weights.sum())
    return Population(list(spec.domain or ()), counts.astype(np.int64))
