"""Streamed output (estimators/formats.py ``iter_json``/``iter_csv``): the pieces join to
exactly what one document gives — the JSON of ``json.dumps(doc, indent=2)``, the CSV of
``frame_to_csv`` — whatever the cells (escapes, non-finite floats, bools, ints, None, nested
values) and the piece size."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from estimators.formats import (
    COLUMN_SCALES,
    _jsonable,
    _series_detected,
    frame_to_csv,
    frame_to_json,
    iter_csv,
    iter_json,
)


def reference_json(df: pd.DataFrame) -> str:
    """The document as the encoder writes it (what frame_to_json wrote before it streamed)."""
    rows = [{k: _jsonable(v) for k, v in row.items()} for row in _series_detected(df).to_dict(orient="records")]
    meta = dict(df.attrs, columns={c: COLUMN_SCALES[c] for c in df.columns if c in COLUMN_SCALES})
    return json.dumps({"meta": _jsonable(meta), "estimates": rows}, indent=2) + "\n"


def frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "value": [f"v{i}é\"\\\x01\u2028=cmd" if i % 7 == 0 else str(i) for i in range(n)],
        "estimate": rng.standard_normal(n) * 1e6, "proportion": rng.random(n),
        "std_err": np.where(rng.random(n) < 0.05, np.nan, rng.random(n)),
        "ci_low": np.where(rng.random(n) < 0.05, -np.inf, rng.random(n)),
        "ci_high": np.where(rng.random(n) < 0.05, np.inf, rng.random(n) * 1e-300),
        "p_value": rng.random(n) ** 8, "detected": rng.random(n) < 0.5, "n": rng.integers(0, 5, n),
        "f32": rng.random(n).astype(np.float32)})
    df.attrs.update(metric="m", n_reports=5, z=1.96, bias_bounds=[-1.5, 2.0], warning="é\x1b")
    return df


#: (rows per piece, rows): a frame of a few hundred rows already has every kind of cell (escapes
#: every 7th row, ~5 % non-finite floats), so the one-row pieces (a DataFrame slice and write per
#: row: 13 s of the fast subset at 3,001 rows) need no bigger one; the last piece is partial.
@pytest.mark.parametrize(("piece", "rows"), [(1, 201), (7, 1_003), (2_000, 3_001), (100_000, 3_001)])
def test_streamed_pieces_join_to_the_document(piece, rows):
    df = frame(rows, seed=piece)
    assert "".join(iter_json(df, piece)) == reference_json(df) == frame_to_json(df)
    for raw in (False, True):
        assert "".join(iter_csv(df, raw=raw, rows_per_piece=piece)) == frame_to_csv(df, raw=raw)


def test_empty_frames_and_cells_the_fast_path_does_not_know():
    df = frame(50, seed=1)
    empty = df.iloc[:0]
    empty.attrs = df.attrs
    assert "".join(iter_json(empty)) == reference_json(empty)
    assert "".join(iter_csv(empty)) == frame_to_csv(empty)
    odd = df.copy()
    odd["detected"] = odd["detected"].astype(object)
    odd.loc[3, "detected"] = None
    odd["nested"] = [[1, 2.5, None]] * len(odd)
    assert "".join(iter_json(odd, 7)) == reference_json(odd)
    series = df.copy()
    series.loc[:10, "n"] = 0   # a series' empty windows: detected is null
    assert "".join(iter_json(series, 3)) == reference_json(series)
