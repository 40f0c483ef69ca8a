"""A frequency estimate as Columns (numpy, no pandas) prints what the DataFrame path prints.

`ldpt estimate` builds its frequency estimates as ``estimators.columns.Columns`` and writes the
table from the arrays (cli/output.py ``columns_to_table``), CSV and JSON through ``to_frame``
(issue 32). The bytes must be the DataFrame path's: checked here for every metric of the
conformance registry and of the docs/examples registries (every protocol), with pages, --top,
simultaneous intervals and every format, and on hand-made columns that stress the layout
(labels of every width, control characters, NaN, negative estimates).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cli.output import columns_to_table, format_frame, frame_to_table
from client_sdk.registry import Kind
from collector.estimates import largest
from conformance import golden
from estimators.columns import Columns, count_text, same_count_texts
from estimators.frequency import estimate_frame
from estimators.simulation import draw_population, encode_population
from sketches import server_half


def _metrics() -> list:
    out = []
    for name, registry in golden.registries().items():
        for spec in registry:
            if spec.kind is Kind.JOINT or spec.protocol in ("discover", "rappor"):
                continue   # their frames are DataFrames either way (no Columns path)
            out.append(pytest.param(spec, id=f"{name.rsplit('/', 1)[-1]}:{spec.name}"))
    return out


def _sketch(spec, clients: int, seed: int):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(seed)
    law = "uniform" if spec.kind is Kind.NUMERIC else "zipf:1.1"
    population = draw_population(spec, clients, law, rng)
    proto = server_half(spec)
    sketch = proto.new_sketch()
    for _, payloads in encode_population(spec, population, rng):
        proto.accumulate(sketch, payloads)
    return sketch


@pytest.mark.parametrize("spec", _metrics())
def test_columns_print_the_dataframe_bytes_for_every_protocol(spec) -> None:  # noqa: ANN001
    sketch = _sketch(spec, 1500, 32)
    d = spec.domain_size or 0
    for options in ({}, {"rows_wanted": (0, 5)}, {"rows_wanted": (0, max(1, d + 3))},
                    {"simultaneous": True, "confidence": 0.9}):
        frame = estimate_frame(spec, sketch, **options)
        cols = estimate_frame(spec, sketch, columns=True, **options)
        if not isinstance(cols, Columns):   # means and histograms stay DataFrames
            assert isinstance(cols, pd.DataFrame)
            continue
        pd.testing.assert_frame_equal(cols.to_frame(), frame)
        assert cols.to_frame().attrs == frame.attrs
        table = estimate_frame(spec, sketch, columns=True, digits="table", **options)
        for top in (None, 3):
            a = frame if top is None else largest(frame, top)
            b = cols if top is None else largest(cols, top)
            for fmt in ("table", "csv", "json"):
                assert format_frame(b, fmt) == format_frame(a, fmt), (spec.name, options, top, fmt)
            shown = table if top is None else largest(table, top)
            assert format_frame(shown, "table") == format_frame(a, "table"), (spec.name, options, top)


@pytest.mark.parametrize("error", ["tail", "z", "normal"])
def test_table_digits_fall_back_to_scipy_where_the_bounds_leave_a_cell_open(error: str, monkeypatch) -> None:
    """With error bounds too wide to decide anything, every cell (and every detection) comes
    from the exact path, so the table is still the DataFrame's."""
    from estimators import tails

    monkeypatch.setattr(tails, {"tail": "TAIL_REL_ERROR", "z": "Z_REL_ERROR", "normal": "NORMAL_REL_ERROR"}[error],
                        0.5)
    protocol = "olh" if error == "normal" else "hr"   # olh with cohorts: the normal test
    spec = next(p.values[0] for p in _metrics() if p.values[0].protocol == protocol
                and server_half(p.values[0]).params.m > (1 if protocol == "olh" else 0))
    sketch = _sketch(spec, 3000, 7)
    frame = estimate_frame(spec, sketch, rows_wanted=(0, 10))
    table = estimate_frame(spec, sketch, rows_wanted=(0, 10), columns=True, digits="table")
    assert format_frame(table, "table") == format_frame(frame, "table")
    if error != "z":   # the exact p-values were used for every row shown
        np.testing.assert_array_equal(table["p_value"], frame["p_value"].to_numpy())


def _random_columns(rng: np.random.Generator, n: int, labels: bool) -> Columns:
    alphabet = ["a", "Zz", "é", "中文", "\x1b[2J", "tab\there", "=cmd", " lead", "x" * 60, "", "0"]
    values = [str(rng.choice(alphabet)) + str(i) for i in range(n)] if labels else list(range(n))
    est = rng.normal(0, 10 ** rng.uniform(0, 7), n)
    est[rng.random(n) < 0.1] = np.nan
    half = np.abs(rng.normal(0, 500, n))
    p = 10.0 ** -rng.uniform(0, 320, n)
    p[rng.random(n) < 0.05] = np.nan
    return Columns({"value": values, "estimate": est, "proportion": est / 1e6, "std_err": half,
                    "ci_low": np.maximum(est - half, 0), "ci_high": est + half, "p_value": p,
                    "detected": rng.random(n) < 0.3},
                   {"metric": "m", "protocol": "hr", "epsilon": 2.0, "n_reports": 10 ** 6, "confidence": 0.95,
                    "simultaneous": bool(rng.random() < 0.5), "window_range": {"first": "2026-01-01",
                                                                               "last": "2026-01-02", "windows": 2}})


@pytest.mark.parametrize("seed", range(12))
def test_columns_table_layout_is_pandas_to_string(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for labels in (True, False):
        for n in (1, 2, 7, 40):
            cols = _random_columns(rng, n, labels)
            assert columns_to_table(cols) == frame_to_table(cols.to_frame())
            ranked = largest(cols, n)
            assert columns_to_table(ranked) == frame_to_table(largest(cols.to_frame(), n))


def test_columns_sort_like_pandas_with_ties_and_nan() -> None:
    est = np.array([3.0, np.nan, 5.0, 3.0, -0.0, 0.0, np.nan, 5.0])
    cols = Columns({"value": list("abcdefgh"), "estimate": est})
    expected = cols.to_frame().sort_values("estimate", ascending=False, kind="stable")
    assert cols.sorted_descending("estimate")["value"] == list(expected["value"])


def test_columns_refuse_ragged_data() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        Columns({"value": [1, 2], "estimate": np.zeros(3)})


def test_same_count_texts_is_formatting_each_pair() -> None:
    """``same_count_texts`` decides clear pairs from their rounding bucket: the same answer as
    formatting every pair, at and beside the 0.05 boundaries, near zero of either sign, for
    huge values, NaN and inf, with the tiny perturbations the table's bounds differ by."""
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, 0.04, -0.04, 0.05, -0.05, np.nan, np.inf, -np.inf, 1e300, 12_345.65])
    for trial in range(3000):
        size = int(rng.integers(1, 30))
        a = [rng.standard_normal(size) * 10 ** rng.uniform(-3, 9),
             (rng.integers(-10 ** 7, 10 ** 7, size) + 0.5) / 10,          # on the boundaries x.x5
             rng.integers(-5, 5, size) * 0.05,
             rng.choice(specials, size),
             rng.integers(-10 ** 12, 10 ** 12, size) * 0.1 + 0.05][trial % 5]
        if trial % 3:
            b = a * (1 + 10.0 ** rng.uniform(-17, -6, size) * rng.choice([-1, 1], size))
        else:
            b = np.nextafter(a, rng.choice([-np.inf, np.inf], size))
        want = [count_text(x) for x in a.tolist()] == [count_text(y) for y in b.tolist()]
        assert same_count_texts(a, b) == want, (a.tolist(), b.tolist())
        assert same_count_texts(a, a)
