"""Population drawing for `ldpt simulate`: distributions, CSV weights, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from estimators.simulation import DistributionError, draw_population, parse_weights, simulate_sketch

SPEC = parse_registry('[metrics.m]\nkind = "categorical"\ncategories = ["a", "b", "c", "d", "e"]\n'
                      'protocol = "grr"\nepsilon = 1.0\n').get("m")


@pytest.mark.parametrize("dist, expected", [
    ("zipf:1", [1, 1 / 2, 1 / 3]),
    ("uniform", [1, 1, 1]),
    ("geometric:0.5", [0.5, 0.25, 0.125]),
])
def test_weights(dist, expected):
    assert np.allclose(parse_weights(dist, 3), expected)


@pytest.mark.parametrize("dist", ["zipf:x", "geometric:1.5", "uniform:3", "pareto:1", "zipf:-1", "zipf"])
def test_bad_distributions(dist):
    with pytest.raises(DistributionError):
        parse_weights(dist, 3)


def test_population_is_a_multinomial_draw_of_the_right_size():
    pop = draw_population(SPEC, 10_000, "zipf:1.1", np.random.default_rng(0))
    assert pop.values == list("abcde") and pop.size == 10_000
    assert pop.counts[0] > pop.counts[-1]


def test_csv_weights(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("value,count\nc,3\na,1\n")
    pop = draw_population(SPEC, 4000, f"csv:{path}", np.random.default_rng(0))
    assert pop.counts[1] == pop.counts[3] == pop.counts[4] == 0
    assert abs(pop.counts[2] / 4000 - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 4000)  # 4 binomial SEs


@pytest.mark.parametrize("content, message", [
    ("value,count\na,x\n", "line 2: field 'count'"),
    ("a,1,2\n", "line 1: expected 2 fields"),
    ("value,count\na,-1\n", "line 2: field 'count' must be"),
    ("value,count\nzzz,1\n", "'zzz'"),
    ("", "no positive counts"),
])
def test_csv_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "w.csv"
    path.write_text(content)
    with pytest.raises(DistributionError) as info:
        draw_population(SPEC, 10, f"csv:{path}", np.random.default_rng(0))
    assert str(path) in str(info.value) and message in str(info.value)


def test_simulated_sketch_counts_every_client():
    rng = np.random.default_rng(5)
    pop = draw_population(SPEC, 12_345, "uniform", rng)
    sketch = simulate_sketch(SPEC, pop, rng)
    assert sketch.total_reports == 12_345 and sketch.counts.sum() == 12_345


@pytest.mark.statistical
def test_million_value_domain_estimates(tmp_path):
    from estimators.frequency import estimate_frame

    cats = ", ".join(f'"v{i}"' for i in range(1_000_000))
    spec = parse_registry(f'[metrics.big]\nkind = "categorical"\nprotocol = "hr"\nepsilon = 2.0\n'
                          f'categories = [{cats}]\n').get("big")
    rng = np.random.default_rng(1)
    pop = draw_population(spec, 50_000, "zipf:1.2", rng)
    df = estimate_frame(spec, simulate_sketch(spec, pop, rng))
    assert len(df) == 1_000_000 and df.attrs["n_reports"] == 50_000
    assert df["estimate"].iloc[0] == pytest.approx(pop.counts[0], abs=5 * df["std_err"].iloc[0])
