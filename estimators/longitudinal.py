"""Simulate devices reporting every day: value changes, memoised first rounds, one sketch per day.

`ldpt simulate --days D --change-rate P` (docs/guide-analysts.md): n devices each report once
per window (a UTC day) for D consecutive days. Day 0's values are drawn as in
``estimators.simulation``; each following day every device's value is, with probability P,
redrawn from the same distribution (it may come out unchanged). Histogram metrics draw
numbers (a numeric distribution) and report their buckets; numeric mean metrics are refused.

Memoised protocols (L-GRR, L-OSUE, LOLOHA) keep one first-round response per (device, memo
key) — the value, or LOLOHA's hashed value under the device's permanent cohort — drawn the
first time the device holds that key and reused afterwards, exactly as the SDK's HMAC-derived
response is (client_sdk.memo); the second round is fresh every day. Everything is vectorised
over devices: the known (device, key) pairs are kept as a sorted array of int64 codes, and
each day's lookups and insertions are one ``searchsorted`` each — no Python loop over devices.
Other protocols randomise each day's value afresh (their reports do not depend on history).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from client_sdk.errors import LdptError
from client_sdk.registry import Kind, MetricSpec
from sketches import server_half
from sketches.base import Payloads, Sketch
from sketches.longitudinal import MemoisedServer
from sketches.metric_arrays import bucket_of, index_of
from sketches.randomness import as_random_source

from .simulation import CHUNK, Population, draw_numeric, draw_population, parse_weights


class LongitudinalError(LdptError):
    """Bad --days / --change-rate arguments."""

    status = 400
    type = "invalid-longitudinal-simulation"


@dataclasses.dataclass
class DayResult:
    """One simulated window: its day offset (0 = first), sketch and the true counts per value."""

    day: int
    sketch: Sketch
    true_counts: np.ndarray


class MemoTable:
    """First-round responses per (device, memo key), as a sorted code array (vectorised)."""

    def __init__(self, proto: MemoisedServer, key_space: int) -> None:
        self.proto = proto
        self.key_space = key_space
        self.codes = np.zeros(0, dtype=np.int64)
        self.responses: np.ndarray | None = None

    def lookup(self, devices: np.ndarray, keys: np.ndarray, source: Any) -> np.ndarray:
        """The memoised responses of (devices, keys), drawing (fresh coins) those not seen yet."""
        codes = devices.astype(np.int64) * self.key_space + keys
        if self.codes.size:
            pos = np.minimum(np.searchsorted(self.codes, codes), self.codes.shape[0] - 1)
            known = self.codes[pos] == codes
        else:
            known = np.zeros(codes.shape[0], dtype=bool)
        new_codes = np.unique(codes[~known])
        if new_codes.size:
            fresh = self.proto.first_round(new_codes % self.key_space, source)
            all_codes = np.concatenate([self.codes, new_codes])
            all_responses = fresh if self.responses is None else np.concatenate([self.responses, fresh])
            order = np.argsort(all_codes, kind="stable")
            self.codes, self.responses = all_codes[order], all_responses[order]
        return self.responses[np.searchsorted(self.codes, codes)]  # type: ignore[index]


def check_arguments(days: int, change_rate: float) -> None:
    if days < 1:
        raise LongitudinalError(f"--days must be at least 1, got {days}")
    if not 0.0 <= change_rate <= 1.0:
        raise LongitudinalError(f"--change-rate must be a probability in [0, 1], got {change_rate}")


def check_metric(spec: MetricSpec) -> None:
    """LongitudinalError unless ``spec`` has a fixed domain of values (or buckets) to simulate."""
    if spec.kind is Kind.STRING:
        raise LongitudinalError("--days simulates fixed-domain metrics (boolean, categorical, histogram); "
                                "string metrics are decoded against candidates per window")
    if spec.kind is Kind.NUMERIC and not spec.is_histogram:
        raise LongitudinalError(f"--days simulates fixed-domain metrics (boolean, categorical, histogram); "
                                f"{spec.name!r} is a numeric mean metric (give it buckets, or simulate "
                                "one window without --days)")


def _initial_values(spec: MetricSpec, clients: int, distribution: str,
                    rng: np.random.Generator) -> tuple[np.ndarray, int, Callable[[int], np.ndarray]]:
    """(day-0 value indices, domain size, a function drawing that many new indices)."""
    if spec.is_histogram:   # bucket indices of numeric draws; a change redraws the number
        def redraw_buckets(n: int) -> np.ndarray:
            return bucket_of(spec, draw_numeric(spec, n, distribution, rng).values)
        return redraw_buckets(clients), len(spec.edge_list) - 1, redraw_buckets
    population: Population = draw_population(spec, clients, distribution, rng)  # type: ignore[assignment]
    d = len(population.values)
    if distribution.startswith("csv:") or distribution.endswith(".csv"):
        weights = population.counts / population.size   # a CSV's weights, as realised on day 0
    else:
        w = parse_weights(distribution, d)
        weights = w / w.sum()
    values = index_of(spec, population.values)
    x = np.repeat(values, population.counts)[rng.permutation(population.size)]
    return x, d, lambda n: values[rng.choice(d, size=n, p=weights)]


def simulate_days(spec: MetricSpec, clients: int, distribution: str, days: int, change_rate: float,
                  rng: np.random.Generator,
                  progress: Callable[[int], None] | None = None) -> Iterator[DayResult]:
    """Yield one DayResult per day (see the module docstring); vectorised over devices.
    Histogram metrics draw numbers (``distribution`` as for numeric metrics) and report buckets."""
    check_arguments(days, change_rate)
    check_metric(spec)
    proto = server_half(spec)
    x, d, redraw = _initial_values(spec, clients, distribution, rng)
    memoised = proto.two_round
    cohorts = rng.integers(0, proto.cohorts, size=clients) if proto.cohorts > 1 else None
    table = None
    if memoised:
        table = MemoTable(proto, proto.memo_key_space)
    devices = np.arange(clients, dtype=np.int64)
    source = as_random_source(rng)   # the protocols' threshold tests on the seeded generator
    for day in range(days):
        if day:
            change = rng.random(clients) < change_rate
            x[change] = redraw(int(change.sum()))
        sketch = proto.new_sketch()
        for start in range(0, clients, CHUNK):
            xs = x[start:start + CHUNK]
            cs = None if cohorts is None else cohorts[start:start + CHUNK]
            if memoised:
                keys = proto.memo_indices(xs, cs)
                first = table.lookup(devices[start:start + CHUNK], keys, source)  # type: ignore[union-attr]
                payloads: Payloads = proto.batch_payloads(proto.second_round(first, source), cs)
            else:
                payloads = proto.encode(xs, source, cs)
            proto.accumulate(sketch, payloads)
            if progress is not None:
                progress(xs.shape[0])
        yield DayResult(day, sketch, np.bincount(x, minlength=d))


@dataclasses.dataclass
class MonteCarlo:
    """R seeded runs of one window through the real estimate path: arrays of shape (R, d)."""

    counts: np.ndarray      # true counts c(v)
    theory: np.ndarray      # protocol.variance(n, c)
    estimate: np.ndarray
    std_err: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray

    @property
    def runs(self) -> int:
        return self.estimate.shape[0]

    @property
    def bias_z(self) -> np.ndarray:
        """|mean ĉ − c| in standard errors of the mean, per value."""
        return np.abs(self.estimate.mean(axis=0) - self.counts) / np.sqrt(self.theory / self.runs)

    @property
    def mse_ratio(self) -> np.ndarray:
        """Mean squared error over the theoretical variance, per value."""
        return ((self.estimate - self.counts) ** 2).mean(axis=0) / self.theory

    @property
    def coverage(self) -> np.ndarray:
        """Fraction of runs whose interval covers c(v), per value."""
        return ((self.ci_low <= self.counts) & (self.counts <= self.ci_high)).mean(axis=0)


def window_monte_carlo(spec: MetricSpec, counts: np.ndarray, runs: int,
                       rng: np.random.Generator) -> MonteCarlo:
    """Encode ``runs`` independent windows of the population ``counts`` (fresh devices) and
    estimate each with ``estimators.frequency.estimate_frame`` (intervals at 95 %)."""
    from .frequency import estimate_frame

    proto = server_half(spec)
    n, d = int(counts.sum()), counts.shape[0]
    x = np.repeat(np.arange(d), counts)
    out = {k: np.empty((runs, d)) for k in ("estimate", "std_err", "ci_low", "ci_high")}
    source = as_random_source(rng)
    for r in range(runs):
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(x, source))
        df = estimate_frame(spec, sketch)
        for k in out:
            out[k][r] = df[k].to_numpy()
    theory = np.asarray(proto.variance(n, counts.astype(np.float64)), dtype=np.float64)
    return MonteCarlo(counts, theory, **out)
