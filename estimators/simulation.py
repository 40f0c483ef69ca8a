"""Simulate a population: draw true values, randomise them with the real protocol code.

This is how users plan a deployment and how we test: the same ``encode`` and ``accumulate``
the SDK and collector run, driven by a seeded numpy Generator instead of the OS CSPRNG.
Distributions: ``zipf:S``, ``uniform``, ``geometric:P`` over the domain in declared order, or
``csv:PATH`` (a file of value,count whose counts are relative weights).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from client_sdk.errors import DomainError, LdptError
from client_sdk.protocols.base import Payloads, Sketch
from client_sdk.registry import Kind, MetricSpec

CHUNK = 250_000
#: Size of the synthetic domain ("value-0001", ...) for string metrics without a CSV.
DEFAULT_STRING_VALUES = 100


class DistributionError(LdptError):
    """A --distribution argument or its CSV file is invalid."""

    status = 400
    type = "invalid-distribution"


@dataclasses.dataclass(frozen=True)
class Population:
    """True values (domain order) and how many clients hold each."""

    values: list[str]
    counts: np.ndarray  # int64, same length as values

    @property
    def size(self) -> int:
        return int(self.counts.sum())


def parse_weights(distribution: str, size: int) -> np.ndarray:
    """Relative weights over ``size`` ordered values for zipf:S, uniform, geometric:P."""
    name, _, arg = distribution.partition(":")
    ranks = np.arange(1, size + 1, dtype=np.float64)
    if name == "zipf" and not arg:  # no silent default exponent: it decides the whole population
        raise DistributionError(f"distribution {distribution!r}: zipf needs its exponent, zipf:S "
                                "(e.g. zipf:1.1; S >= 0, larger S is more skewed)")
    try:
        if name == "zipf":
            s = float(arg)
            if not np.isfinite(s) or s < 0:
                raise ValueError
            return ranks ** -s
        if name == "uniform" and not arg:
            return np.ones(size)
        if name == "geometric":
            p = float(arg) if arg else 0.5
            if not 0 < p < 1:
                raise ValueError
            return (1 - p) ** (ranks - 1) * p
    except ValueError:
        raise DistributionError(f"distribution {distribution!r}: bad parameter {arg!r} (zipf:S with "
                                "S >= 0, geometric:P with 0 < P < 1)") from None
    raise DistributionError(f"unknown distribution {distribution!r}; use zipf:S, uniform, "
                            "geometric:P or csv:PATH")


def read_weights_csv(path: str | Path) -> tuple[list[str], np.ndarray]:
    """value,count rows (header optional); counts are non-negative numbers."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise DistributionError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise DistributionError(f"{path}: not a UTF-8 text file") from None
    if rows and [c.strip().lower() for c in rows[0]] == ["value", "count"]:
        rows = rows[1:]
        first_line = 2
    else:
        first_line = 1
    values, weights = [], []
    for offset, row in enumerate(rows):
        line = first_line + offset
        if not row:
            continue
        if len(row) != 2:
            raise DistributionError(f"{path}: line {line}: expected 2 fields value,count, got {len(row)}")
        try:
            w = float(row[1])
        except ValueError:
            raise DistributionError(f"{path}: line {line}: field 'count' is {row[1]!r}, not a number") from None
        if not np.isfinite(w) or w < 0:
            raise DistributionError(f"{path}: line {line}: field 'count' must be a finite number >= 0")
        values.append(row[0])
        weights.append(w)
    if not values or sum(weights) <= 0:
        raise DistributionError(f"{path}: no positive counts")
    return values, np.asarray(weights)


def draw_population(spec: MetricSpec, clients: int, distribution: str,
                    rng: np.random.Generator) -> Population:
    """Draw ``clients`` true values for a metric (multinomial over the distribution's weights)."""
    if clients < 1:
        raise DistributionError("the number of clients must be at least 1")
    if distribution.startswith("csv:") or distribution.endswith(".csv"):
        path = distribution[4:] if distribution.startswith("csv:") else distribution
        csv_values, weights = read_weights_csv(path)
        if spec.kind is Kind.STRING:
            values = csv_values
        else:
            try:
                spec.index_of(csv_values)
            except DomainError as exc:
                raise DistributionError(f"{path}: {exc}") from None
            weight_of = dict(zip(csv_values, weights))
            values = list(spec.domain or ())
            weights = np.asarray([weight_of.get(v, 0.0) for v in values])
    else:
        values = list(spec.domain) if spec.domain is not None else \
            [f"value-{i:04d}" for i in range(1, DEFAULT_STRING_VALUES + 1)]
        weights = parse_weights(distribution, len(values))
    counts = rng.multinomial(clients, weights / weights.sum())
    return Population(values, counts.astype(np.int64))


def encode_population(spec: MetricSpec, population: Population,
                      rng: np.random.Generator) -> Iterator[tuple[int, Payloads]]:
    """Randomise every client's value once with the real protocol code, in chunks.

    Yields (number of reports, payloads). ``simulate_sketch`` accumulates them; `ldpt
    simulate --url` sends them to a collector — the same draws for the same seed.
    """
    proto = spec.protocol_impl
    order = rng.permutation(population.size)
    labels = np.repeat(np.arange(len(population.values)), population.counts)[order]
    values_arr = np.asarray(population.values, dtype=object) if spec.kind is Kind.STRING else None
    if values_arr is None:
        index_map = spec.index_of(population.values)
    for start in range(0, population.size, CHUNK):
        chunk = labels[start:start + CHUNK]
        if values_arr is not None:
            payloads = proto.encode(values_arr[chunk], rng)
        else:
            payloads = proto.encode(index_map[chunk], rng)
        yield len(chunk), payloads


def simulate_sketch(spec: MetricSpec, population: Population, rng: np.random.Generator,
                    progress: Callable[[int], None] | None = None) -> Sketch:
    """Encode every client's value once with the real protocol code and accumulate a sketch."""
    proto = spec.protocol_impl
    sketch = proto.new_sketch()
    for n, payloads in encode_population(spec, population, rng):
        proto.accumulate(sketch, payloads)
        if progress is not None:
            progress(n)
    return sketch
