"""A metric's total estimate against the sum of its segments' estimates (issue 27 §5).

The total counts every report, so its sketch is the sum of the segments' sketches. For a
protocol whose estimate is linear in the sketch (every pure protocol: the support counts less
n·q*, over p* − q*) the total's estimate is then exactly the sum of the segments'. Multi-cohort
OLH decodes by least squares weighted by each sketch's own cohort counts, which is not linear in
the sketch: the two differ by noise (both unbiased for the same counts), about 0.6 of the total's
SE at most in the reviewer's runs; docs/guide-analysts.md ("Breakdowns") says which holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from estimators.frequency import estimate_frame
from sketches import server_half


def spec_of(protocol: str, d: int, epsilon: float):
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(d)], "protocol": protocol,
             "epsilon": epsilon}
    return parse_registry({"metrics": {"m": table}}).get("m")


def segments(spec, sizes: list[int], rng: np.random.Generator, weights: np.ndarray):
    """One sketch per segment (values drawn from ``weights``) and their merged total."""
    proto = server_half(spec)
    parts = []
    for size in sizes:
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(rng.choice(len(weights), size=size, p=weights), rng))
        parts.append(sketch)
    total = proto.new_sketch()
    for part in parts:
        total = total.merge(part)
    return parts, total


@pytest.mark.parametrize("protocol", ["grr", "oue", "sue", "hr", "ss", "rr"])
def test_a_linear_protocol_total_is_the_sum_of_its_segments(protocol):
    d = 2 if protocol == "rr" else 12
    spec = spec_of(protocol, d, 2.0)
    weights = np.linspace(1, 2, d) / np.linspace(1, 2, d).sum()
    parts, total = segments(spec, [700, 1500, 300], np.random.default_rng(7), weights)
    whole = estimate_frame(spec, total).estimate.to_numpy()
    summed = np.sum([estimate_frame(spec, p).estimate.to_numpy() for p in parts], axis=0)
    assert np.allclose(whole, summed, rtol=1e-9, atol=1e-6)


@pytest.mark.statistical
def test_olh_total_and_the_sum_of_segments_estimate_the_same_counts():
    """Not equal run by run, but both unbiased: the mean difference over 200 runs is within 3 of
    its standard errors of 0, and a run's difference is a fraction of the total's SE."""
    spec = spec_of("olh", 40, 2.0)
    weights = np.arange(40, 0, -1, dtype=np.float64)
    weights /= weights.sum()
    rng = np.random.default_rng(8)
    diffs, ses = [], []
    for _ in range(200):
        parts, total = segments(spec, [600, 1400, 400], rng, weights)
        frame = estimate_frame(spec, total)
        summed = np.sum([estimate_frame(spec, p).estimate.to_numpy() for p in parts], axis=0)
        diffs.append(frame.estimate.to_numpy() - summed)
        ses.append(frame.std_err.to_numpy())
    diffs, ses = np.array(diffs), np.array(ses)
    assert np.abs(diffs).max() > 1e-6                 # not linear: they do differ
    mean, sd = diffs.mean(axis=0), diffs.std(axis=0, ddof=1)
    assert np.all(np.abs(mean) <= 3.5 * sd / math.sqrt(len(diffs))), (mean / (sd / math.sqrt(len(diffs))))
    assert (np.abs(diffs) / ses).max() < 1.0
