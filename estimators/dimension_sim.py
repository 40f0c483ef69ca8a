"""Simulated public dimensions: ``ldpt simulate --dimension os=android:0.6,ios:0.4``.

Each simulated device draws its value of every dimension independently with the given weights
(values outside the registry's closed set are an error, ``other`` and ``unknown`` are allowed);
the population is then split into segments, one per combination, by multinomial thinning of
each true value's count (categorical metrics) or a random assignment of each device (numeric
ones). Every segment is randomised separately with the real protocol code, so the stored total
is exactly the sum of the stored segments, as the collector would keep it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from client_sdk.dimensions import segment_key
from client_sdk.registry import MetricSpec

from .simulation import DistributionError, NumericPopulation, Population


@dataclasses.dataclass(frozen=True)
class DimensionDraw:
    """One ``--dimension NAME=VALUE:WEIGHT,...`` option, parsed."""

    name: str
    values: tuple[str, ...]
    probs: np.ndarray


def parse_dimension_option(text: str, spec: MetricSpec) -> DimensionDraw:
    """``os=android:0.6,ios:0.4`` -> a draw checked against the metric's dimensions."""
    name, sep, rest = text.partition("=")
    dims = {d.name: d for d in spec.dimensions}
    if not sep or name not in dims:
        known = ", ".join(dims) or "none (registry field dimensions = [...])"
        raise DistributionError(f"--dimension {text!r}: use NAME=VALUE:WEIGHT,...; metric "
                                f"{spec.name!r} has dimensions {known}")
    values, weights = [], []
    for part in rest.split(","):
        value, colon, weight = part.partition(":")
        try:
            w = float(weight) if colon else float("nan")
        except ValueError:
            w = float("nan")
        if not w >= 0 or not np.isfinite(w):
            raise DistributionError(f"--dimension {text!r}: {part!r} needs VALUE:WEIGHT with a weight >= 0")
        if value not in dims[name].domain:
            raise DistributionError(f"--dimension {text!r}: {value!r} is not a value of dimension "
                                    f"{name!r} ({', '.join(dims[name].domain)})")
        values.append(value)
        weights.append(w)
    total = sum(weights)
    if total <= 0 or len(set(values)) != len(values):
        raise DistributionError(f"--dimension {text!r}: give distinct values with positive total weight")
    return DimensionDraw(name, tuple(values), np.asarray(weights) / total)


def segment_probabilities(spec: MetricSpec, draws: Sequence[DimensionDraw]) -> dict[str, float]:
    """Segment key -> probability (independent dimensions; an undrawn dimension is ``unknown``)."""
    by_name = {d.name: d for d in draws}
    axes = []
    for dim in spec.dimensions:
        draw = by_name.get(dim.name)
        axes.append([(dim.name, "unknown", 1.0)] if draw is None else
                    [(dim.name, v, float(p)) for v, p in zip(draw.values, draw.probs)])
    out = {}
    for combo in itertools.product(*axes):
        key = segment_key(spec.name, spec.dimensions, {n: v for n, v, _ in combo})
        out[key] = float(np.prod([p for _, _, p in combo]))
    return out


def split_population(population: Population | NumericPopulation, probs: dict[str, float],
                     rng: np.random.Generator) -> dict[str, Population | NumericPopulation]:
    """Each device goes to one segment with the given probabilities."""
    keys = list(probs)
    p = np.asarray([probs[k] for k in keys])
    p = p / p.sum()
    if isinstance(population, NumericPopulation):
        seg = rng.choice(len(keys), size=population.size, p=p)
        return {k: NumericPopulation(population.values[seg == i]) for i, k in enumerate(keys)}
    split = np.stack([rng.multinomial(int(c), p) for c in population.counts]) \
        if len(population.counts) else np.zeros((0, len(keys)), dtype=np.int64)
    return {k: Population(list(population.values), split[:, i].astype(np.int64)) for i, k in enumerate(keys)}


def grr_sketches_exact(proto: object, true_counts: np.ndarray, reps: int,
                       rng: np.random.Generator) -> np.ndarray:
    """``reps`` GRR sketches of one segment drawn from their exact law: the devices holding
    value v report v with probability p and each other value with probability q, so the output
    counts are a sum over v of multinomials (n_v; q, ..., p at v, ..., q). Shape (reps, d).

    What the per-segment statistical test and bench/breakdowns_public.py draw instead of
    randomising each report (the same law, without a loop over devices)."""
    p, q = float(proto.p), float(proto.q)  # type: ignore[attr-defined]
    d = len(true_counts)
    rows = np.full((d, d), q)
    np.fill_diagonal(rows, p)
    out = np.zeros((reps, d), dtype=np.int64)
    for v in range(d):
        if true_counts[v]:
            out += rng.multinomial(int(true_counts[v]), rows[v], size=reps)
    return out


def grr_count_variance(proto: object, true_counts: np.ndarray) -> np.ndarray:
    """Exact variance of GRR's debiased counts ĉ_v = (C_v − n q)/(p − q): C_v adds n_v
    Bernoulli(p) and n − n_v Bernoulli(q) outputs (Wang et al. 2017, "Locally differentially
    private protocols for frequency estimation")."""
    p, q = float(proto.p), float(proto.q)  # type: ignore[attr-defined]
    n = true_counts.sum()
    return (true_counts * p * (1 - p) + (n - true_counts) * q * (1 - q)) / (p - q) ** 2


def rare_combination_share(weights: Sequence[Sequence[float]], devices: int, rng: np.random.Generator,
                           rarer_than: float = 1e-3) -> tuple[float, float]:
    """In a simulated population of ``devices`` whose dimension values are drawn independently
    with ``weights`` (one list per dimension), (the share of devices whose combination of values
    is held by fewer than ``rarer_than`` of the population, the empirical entropy in bits of the
    combination). What docs/privacy.md quotes for a registry's clear dimensions."""
    codes = np.zeros(devices, dtype=np.int64)
    for w in weights:
        p = np.asarray(w, dtype=float)
        codes = codes * len(p) + rng.choice(len(p), size=devices, p=p / p.sum())
    _, inverse, counts = np.unique(codes, return_inverse=True, return_counts=True)
    share = float((counts[inverse] < rarer_than * devices).mean())
    freq = counts / devices
    return share, float(-(freq * np.log2(freq)).sum())
