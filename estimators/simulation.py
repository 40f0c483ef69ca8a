"""Simulate a population: draw true values, randomise them with the real protocol code.

This is how users plan a deployment and how we test: the same ``encode`` and ``accumulate``
the SDK and collector run, driven by a seeded numpy Generator instead of the OS CSPRNG.
Distributions: ``zipf:S``, ``uniform``, ``geometric:P`` over the domain in declared order, or
``csv:PATH`` (a file of value,count whose counts are relative weights; any Unicode strings for
string metrics), and for string metrics ``hosts:S[,D]``: a Zipf(S) law over D (default 10,000)
generated host names of at most 16 UTF-8 bytes (``host_names``). Numeric metrics take
``normal:MEAN,SD``, ``uniform`` (over the range), ``exponential:MEAN``, ``lognormal:MU,SIGMA``
or ``csv:PATH`` (a column ``value``, sampled with replacement); values outside the range are
clipped, as the SDK clips them on the device.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from client_sdk.errors import DomainError, LdptError
from client_sdk.registry import Kind, MetricSpec
from sketches import server_half
from sketches.base import Payloads, Sketch
from sketches.metric_arrays import bucket_of, index_of, normalise

CHUNK = 250_000
#: Size of the synthetic domain ("value-0001", ...) for string metrics without a CSV.
DEFAULT_STRING_VALUES = 100
#: Host names drawn by ``hosts:S`` when D is not given, and their longest UTF-8 length.
DEFAULT_HOSTS = 10_000
HOST_MAX_BYTES = 16
_SYLLABLES = ("an", "bo", "ca", "de", "el", "fi", "go", "ha", "in", "jo", "ka", "li", "mo", "nu",
              "or", "pa", "qu", "ra", "si", "to", "ub", "ve", "wa", "xi", "yo", "ze", "mail", "shop",
              "news", "tv", "bank", "wiki", "cdn", "app", "map", "bü", "çé", "ñu", "日本", "мир")
_TLDS = (".com", ".org", ".net", ".de", ".fr", ".io", ".co", ".jp", ".ru", ".uk")
_PREFIXES = ("", "", "", "www.", "m.", "api.")


def host_names(count: int, seed: int = 20_170_101) -> list[str]:
    """``count`` distinct, realistic host names of at most HOST_MAX_BYTES UTF-8 bytes.

    Syllables (a few non-ASCII), a sub-domain prefix on some and a TLD; drawn from a fixed seed so
    the same names come back every time (the population's law is drawn separately)."""
    rng = np.random.default_rng(seed)
    names: dict[str, None] = {}
    while len(names) < count:
        k = int(rng.integers(1, 5))
        stem = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), k))
        name = _PREFIXES[int(rng.integers(0, len(_PREFIXES)))] + stem + _TLDS[int(rng.integers(0, len(_TLDS)))]
        if len(name.encode("utf-8")) <= HOST_MAX_BYTES:
            names.setdefault(name)
    return list(names)


def parse_hosts(distribution: str) -> tuple[list[str], np.ndarray]:
    """``hosts:S[,D]``: D host names with Zipf(S) weights (rank order = generation order)."""
    _, _, arg = distribution.partition(":")
    parts = arg.split(",") if arg else []
    try:
        s = float(parts[0])
        size = int(parts[1]) if len(parts) > 1 else DEFAULT_HOSTS
        if len(parts) > 2 or not np.isfinite(s) or s < 0 or not 1 <= size <= 1_000_000:
            raise ValueError
    except (ValueError, IndexError):
        raise DistributionError(f"distribution {distribution!r}: use hosts:S or hosts:S,D with S >= 0 "
                                "and 1 <= D <= 1,000,000 (e.g. hosts:1.1)") from None
    return host_names(size), np.arange(1, size + 1, dtype=np.float64) ** -s


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


@dataclasses.dataclass(frozen=True)
class NumericPopulation:
    """True values of a numeric metric, one per client, as drawn (before clipping)."""

    values: np.ndarray  # float64

    @property
    def size(self) -> int:
        return int(self.values.shape[0])


NUMERIC_DISTRIBUTIONS = "normal:MEAN,SD, uniform, exponential:MEAN, lognormal:MU,SIGMA or csv:PATH"


def draw_numeric(spec: MetricSpec, clients: int, distribution: str,
                 rng: np.random.Generator) -> NumericPopulation:
    """Draw ``clients`` values of a numeric metric from one of NUMERIC_DISTRIBUTIONS."""
    name, _, arg = distribution.partition(":")
    if name == "csv" or distribution.endswith(".csv"):
        pool, weights = read_values_csv(arg if name == "csv" else distribution)
        p = None if weights is None else weights / weights.sum()
        return NumericPopulation(rng.choice(pool, size=clients, replace=True, p=p))
    try:
        params = [float(a) for a in arg.split(",")] if arg else []
    except ValueError:
        raise DistributionError(f"distribution {distribution!r}: parameters must be numbers") from None
    if not all(np.isfinite(params)):
        raise DistributionError(f"distribution {distribution!r}: parameters must be finite")
    lo, hi = spec.bounds
    if name == "uniform" and not params:
        return NumericPopulation(rng.uniform(lo, hi, clients))
    if name == "normal" and len(params) == 2 and params[1] >= 0:
        return NumericPopulation(rng.normal(params[0], params[1], clients))
    if name == "exponential" and len(params) == 1 and params[0] > 0:
        return NumericPopulation(rng.exponential(params[0], clients))
    if name == "lognormal" and len(params) == 2 and params[1] >= 0:
        return NumericPopulation(rng.lognormal(params[0], params[1], clients))
    if name in ("uniform", "normal", "exponential", "lognormal"):
        raise DistributionError(f"distribution {distribution!r}: bad parameters; use "
                                f"{NUMERIC_DISTRIBUTIONS} (SD, MEAN of exponential and SIGMA > 0)")
    raise DistributionError(f"unknown distribution {distribution!r} for numeric metric {spec.name!r}; "
                            f"use {NUMERIC_DISTRIBUTIONS}")


def read_values_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``value`` column of a CSV file with a header row (finite numbers, at least one) and,
    if there is a ``count`` column, its relative weights (finite, >= 0, some positive) — the
    value,count layout categorical metrics use; without it every row weighs the same."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or "value" not in [f.strip() for f in reader.fieldnames]:
                raise DistributionError(f"{path}: needs a header row with a column 'value'")
            key = next(f for f in reader.fieldnames if f.strip() == "value")
            count_key = next((f for f in reader.fieldnames if f.strip() == "count"), None)
            values, weights = [], []
            for line, row in enumerate(reader, start=2):
                if None in row:   # DictReader files extra fields under None
                    width = len(reader.fieldnames)
                    raise DistributionError(f"{path}: line {line}: expected {width} field"
                                            f"{'s' if width > 1 else ''} as in the header, got more")
                values.append(_finite_field(path, line, "value", row.get(key)))
                if count_key is not None:
                    weights.append(_finite_field(path, line, "count", row.get(count_key)))
                    if weights[-1] < 0:
                        raise DistributionError(f"{path}: line {line}: field 'count' must be >= 0")
    except OSError as exc:
        raise DistributionError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise DistributionError(f"{path}: not a UTF-8 text file") from None
    if not values:
        raise DistributionError(f"{path}: no values")
    if count_key is not None and sum(weights) <= 0:
        raise DistributionError(f"{path}: no positive counts")
    return np.asarray(values, dtype=np.float64), (np.asarray(weights) if count_key is not None else None)


def _finite_field(path: Path, line: int, field: str, raw: str | None) -> float:
    """One CSV field as a finite float; DistributionError naming the file, line and field."""
    text = (raw or "").strip()
    try:
        x = float(text)
    except ValueError:
        raise DistributionError(f"{path}: line {line}: field {field!r} is {text!r}, not a number") from None
    if not np.isfinite(x):
        raise DistributionError(f"{path}: line {line}: field {field!r} must be finite")
    return x


def numeric_truth(spec: MetricSpec, population: NumericPopulation) -> list[tuple[str, float | int]]:
    """``statistic,value`` rows of the truth an estimate targets: the clipped values' mean, sum
    and n, how many were clipped, and for histograms the bucket counts and quantiles p10..p99
    (counts are ints, so a truth file says ``n,100000``)."""
    lo, hi = spec.bounds
    x = np.clip(population.values, lo, hi)
    rows: list[tuple[str, float | int]] = [
        ("mean", float(x.mean())), ("sum", float(x.sum())), ("n", int(x.size)),
        ("clipped", int(np.count_nonzero(x != population.values)))]
    if spec.is_histogram:
        counts = np.bincount(bucket_of(spec, x), minlength=len(spec.edge_list) - 1)
        rows += [(label, int(c)) for label, c in zip(spec.domain or (), counts)]
        from .numeric import QUANTILES

        ordered = np.sort(x)
        for name, q in QUANTILES:  # the smallest value whose empirical CDF reaches q
            rows.append((name, float(ordered[max(0, int(np.ceil(q * x.size)) - 1)])))
    return rows


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
                    rng: np.random.Generator) -> Population | NumericPopulation:
    """Draw ``clients`` true values for a metric (multinomial over the distribution's weights;
    numeric metrics: independent draws from a numeric distribution)."""
    if clients < 1:
        raise DistributionError("the number of clients must be at least 1")
    if spec.kind is Kind.NUMERIC:
        return draw_numeric(spec, clients, distribution, rng)
    if distribution.startswith("csv:") or distribution.endswith(".csv"):
        path = distribution[4:] if distribution.startswith("csv:") else distribution
        csv_values, weights = read_weights_csv(path)
        if spec.kind is Kind.STRING:
            values = csv_values
        else:
            try:
                spec.indices(csv_values)
            except DomainError as exc:
                raise DistributionError(f"{path}: {exc}") from None
            weight_of = dict(zip(csv_values, weights))
            values = list(spec.domain or ())
            weights = np.asarray([weight_of.get(v, 0.0) for v in values])
    elif distribution.startswith("hosts"):
        if spec.kind is not Kind.STRING:
            raise DistributionError(f"distribution {distribution!r} draws host names: it is for string metrics")
        values, weights = parse_hosts(distribution)
    else:
        values = list(spec.domain) if spec.domain is not None else \
            [f"value-{i:04d}" for i in range(1, DEFAULT_STRING_VALUES + 1)]
        weights = parse_weights(distribution, len(values))
    counts = rng.multinomial(clients, weights / weights.sum())
    return Population(values, counts.astype(np.int64))


def encode_population(spec: MetricSpec, population: Population | NumericPopulation,
                      rng: np.random.Generator) -> Iterator[tuple[int, Payloads]]:
    """Randomise every client's value once with the real protocol code, in chunks.

    Yields (number of reports, payloads). ``simulate_sketch`` accumulates them; `ldpt
    simulate --url` sends them to a collector — the same draws for the same seed.
    """
    proto = server_half(spec)
    if isinstance(population, NumericPopulation):
        for start in range(0, population.size, CHUNK):
            chunk = population.values[start:start + CHUNK]
            if spec.is_mean:
                yield len(chunk), proto.encode_values(normalise(spec, chunk), rng)
            else:
                yield len(chunk), proto.encode(bucket_of(spec, chunk), rng)
        return
    order = rng.permutation(population.size)
    labels = np.repeat(np.arange(len(population.values)), population.counts)[order]
    values_arr = np.asarray(population.values, dtype=object) if spec.kind is Kind.STRING else None
    if values_arr is None:
        index_map = index_of(spec, population.values)
    for start in range(0, population.size, CHUNK):
        chunk = labels[start:start + CHUNK]
        if values_arr is not None:
            payloads = proto.encode(values_arr[chunk], rng)
        else:
            payloads = proto.encode(index_map[chunk], rng)
        yield len(chunk), payloads


def simulate_sketch(spec: MetricSpec, population: Population | NumericPopulation, rng: np.random.Generator,
                    progress: Callable[[int], None] | None = None) -> Sketch:
    """Encode every client's value once with the real protocol code and accumulate a sketch."""
    proto = server_half(spec)
    sketch = proto.new_sketch()
    for n, payloads in encode_population(spec, population, rng):
        proto.accumulate(sketch, payloads)
        if progress is not None:
            progress(n)
    return sketch
