"""Serialise estimate DataFrames as JSON or CSV: one shape for the CLI and the collector API."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii as _encode_string
from typing import TYPE_CHECKING, Any

import numpy as np

from .lazy_frame import LazyFrame, pieces_of

if TYPE_CHECKING:  # pandas loads when a frame is written, not for printable() and the escapes
    import pandas as pd


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


#: What each output column measures (docs/guide-analysts.md, "Output columns"); JSON output
#: carries the entries of its columns as ``meta.columns`` so a reader never guesses the scale.
COLUMN_SCALES = {
    "window": "window label (UTC day YYYY-MM-DD or hour YYYY-MM-DDTHH)",
    "value": "value of the metric's domain (or bucket label)",
    "key": "a discovered string's bytes, unambiguous: printable ASCII, \\\\, \\xNN; a trailing \\… if cut at max_length",
    "statistic": "row kind of a numeric metric (count = a bucket, or mean, sum, n, p10 ... p99)",
    "estimate": "count (reports holding the value), or the statistic in the metric's units",
    "raw_estimate": "count, unbiased, before post-processing",
    "proportion": "proportion of the reports (estimate / n), in [0, 1] up to noise",
    "std_err": "standard error of estimate (same scale as estimate)",
    "ci_low": "lower confidence bound of estimate (same scale)",
    "ci_high": "upper confidence bound of estimate (same scale)",
    "p_value": "one-sided p-value of 'count = 0'",
    "detected": "count > 0 under the multiple-testing control (fwer = Holm, fdr = Benjamini-Hochberg); "
                "null where no count test was run",
    "ci_unbounded": "true when the (Fieller) confidence set is unbounded: ci_low..ci_high is then the whole "
                    "admissible range and says nothing; null on rows that are not ratios",
    "truth": "count in the true population (--truth), same scale as estimate",
    "n": "reports in the window",
    "estimate_a": "proportion (or mean) in A",
    "estimate_b": "proportion (or mean) in B",
    "difference": "estimate_b - estimate_a (proportion, or the metric's units for a mean)",
    "changed": "difference != 0 under the multiple-testing control (fwer = Holm, fdr = Benjamini-Hochberg)",
}


def frame_to_json(df: pd.DataFrame | LazyFrame) -> str:
    """{"meta": attrs, "estimates": [rows]} — the JSON shape of CLI and collector alike.

    Floats are written with Python's shortest round-tripping repr (``json`` does), so a
    reader gets back exactly the float computed; ``meta.columns`` names each column's scale.
    """
    return "".join(iter_json(df))   # json.dumps(doc, indent=2) + "\n", written faster (iter_json)


#: First characters that make a spreadsheet (Excel, LibreOffice, Google Sheets) read a cell as a
#: formula, or that some of them strip before doing so (OWASP, "CSV Injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A string cell a spreadsheet would run as a formula, with a ``'`` before it (displayed as
    text, the apostrophe hidden); anything else unchanged. Reported strings are chosen by whoever
    sends reports, so an export must not carry ``=cmd|' /C calc'!A0`` into a spreadsheet live."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


#: C0 controls, DEL and C1 controls -> their ``\\xNN`` escape. ESC (0x1b), BEL (0x07) and CSI
#: (0x9b) drive a terminal (retitle it, clear it, move the cursor) when a CSV is printed.
CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def escape_controls(value: Any) -> Any:
    """A string cell with its C0/C1 control characters (and DEL) written as ``\\xNN``; anything
    else unchanged. Reported strings are chosen by whoever sends reports: ``cat out.csv`` must
    not let ``\\x1b]0;pwned\\x07`` retitle the analyst's terminal."""
    if isinstance(value, str):
        return value.translate(CONTROL_ESCAPES)
    return value


def _series_detected(df: pd.DataFrame) -> pd.DataFrame:
    """A series' empty windows (n = 0) have no ``detected``: written as an empty field / null."""
    if "n" not in df or "detected" not in df or not (df["n"] == 0).any():
        return df
    out = df.copy()
    out["detected"] = out["detected"].astype(object).where(out["n"] != 0, None)
    return out


def frame_to_csv(df: pd.DataFrame | LazyFrame, raw: bool = False) -> str:
    """CSV whose floats round-trip exactly: each is written as the shortest decimal that parses
    back to the same float64 (Python's ``repr``; pandas' default), never rounded for display.
    NaN (a window without reports, an untestable value) is an empty field, and so is
    ``detected`` of a series' empty window. Unless ``raw``, string cells have their control
    characters escaped (``escape_controls``: a terminal that prints the file is not driven by
    them) and then, if a spreadsheet would run them as a formula, a leading ``'``
    (``spreadsheet_safe``) (docs/guide-analysts.md, "Exports"). A ``LazyFrame`` is written
    piece by piece (``iter_csv``)."""
    if isinstance(df, LazyFrame):
        return "".join(iter_csv(df, raw))
    import pandas as pd

    out = _series_detected(df)
    if not raw:
        text = [c for c in out.columns if out[c].dtype == object or pd.api.types.is_string_dtype(out[c])]
        if text:
            out = out.copy() if out is df else out
            for c in text:
                out[c] = out[c].map(lambda v: spreadsheet_safe(escape_controls(v)))
    return out.to_csv(index=False, lineterminator="\n")


def printable(text: str) -> str:
    """``text`` with every character that is not printable (control characters such as ESC,
    which would drive a terminal, format and separator characters) written as a Python escape
    (``\\x1b``, ``\\u200b``): safe to print on a terminal or to put into XML."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


# --- streamed output (the collector's query API) -------------------------------------------------
#: Rows per piece of a streamed answer: a piece is formatted off the event loop in a few ms.
STREAM_ROWS = 2_000


def _scalar_json(value: Any) -> str | None:
    """``json.dumps(_jsonable(value))`` for the scalars a frame holds, None for anything else."""
    if isinstance(value, np.generic):
        value = value.item()
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return None


def _column_texts(column: pd.Series) -> list[str] | None:
    """Every cell of a column as JSON text, or None when a cell is not a plain scalar: float,
    int and bool columns by type (a float's ``repr``, "null" where it is not finite), others
    cell by cell."""
    kind = column.dtype.kind
    if kind == "f":
        arr = column.to_numpy(dtype=np.float64)
        out = list(map(float.__repr__, arr.tolist()))
        bad = np.flatnonzero(~np.isfinite(arr))
        for i in bad.tolist():
            out[i] = "null"
        return out
    if kind in "iu":
        return list(map(int.__repr__, column.tolist()))
    if kind == "b":
        return ["true" if v else "false" for v in column.tolist()]
    texts = [_scalar_json(v) for v in column.tolist()]
    return None if None in texts else texts   # type: ignore[return-value]


def iter_json(df: pd.DataFrame | LazyFrame, rows_per_piece: int = STREAM_ROWS) -> Iterator[str]:
    """``frame_to_json(df)`` in pieces of ``rows_per_piece`` rows, the same text once joined.

    Each row is written from per-column texts (``repr`` of each float, the C string encoder)
    rather than by ``json.dumps(indent=2)``'s pure-Python encoder, ~5x faster; a frame with a
    cell that is not a plain scalar falls back to that encoder, piece by piece. A
    ``LazyFrame`` is built piece by piece as it is written (estimators/lazy_frame.py)."""
    meta = dict(df.attrs, columns={c: COLUMN_SCALES[c] for c in df.columns if c in COLUMN_SCALES})
    head = json.dumps({"meta": _jsonable(meta), "estimates": []}, indent=2)
    if len(df) == 0:
        yield head + "\n"
        return
    yield head[:-len("[]\n}")] + "["
    keys = [_encode_string(str(c)) for c in df.columns]
    template = "\n    {\n" + ",\n".join(f"      {k}: %s" for k in keys) + "\n    }"
    columns = list(df.columns)
    for start, part in zip(range(0, len(df), rows_per_piece), pieces_of(df, rows_per_piece)):
        part = _series_detected(part)
        texts = [_column_texts(part[c]) for c in columns]
        if all(t is not None for t in texts):
            rows = [template % cells for cells in zip(*texts)]
        else:   # nested values: the encoder's own layout, indented as inside the document
            records = [{k: _jsonable(v) for k, v in row.items()} for row in part.to_dict(orient="records")]
            rows = ["\n    " + json.dumps(r, indent=2).replace("\n", "\n    ") for r in records]
        yield ("," if start else "") + ",".join(rows)
    yield "\n  ]\n}\n"


def iter_csv(df: pd.DataFrame | LazyFrame, raw: bool = False, rows_per_piece: int = STREAM_ROWS) -> Iterator[str]:
    """``frame_to_csv(df, raw)`` in pieces of ``rows_per_piece`` rows, the same text once joined."""
    for start, part in enumerate(pieces_of(df, rows_per_piece)):
        text = frame_to_csv(part, raw)
        yield text if start == 0 else text.split("\n", 1)[1]
