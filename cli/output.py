"""Format estimate DataFrames as a table, CSV or JSON (columns fixed by estimators.frequency).

A frequency estimate may come as ``estimators.columns.Columns`` (numpy arrays, no pandas: a
fresh `ldpt estimate` of a large domain, issue 32): its table is written from the columns by
``columns_to_table``, the bytes ``frame_to_table`` writes from the DataFrame (pandas'
``to_string`` layout: tests/test_columns_output.py); CSV and JSON go through the DataFrame.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from estimators.columns import Columns, count_text, p_text
from estimators.formats import frame_to_csv, frame_to_json, printable

if TYPE_CHECKING:  # pandas loads for DataFrames only (a Columns table needs none)
    import pandas as pd

__all__ = ["compare_to_table", "format_compare", "format_frame", "format_number", "format_p", "frame_to_csv",
           "frame_to_json", "frame_to_table"]


def _isna(v: object) -> bool:
    """``pandas.isna`` of one cell, without importing pandas for floats and None."""
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return bool(np.isnan(v))
    if isinstance(v, (int, str, bool, np.integer, np.bool_)):
        return False
    pd = sys.modules.get("pandas")
    return bool(pd.isna(v)) if pd is not None else False


def format_p(v: object) -> str:
    """A p-value, every one in the same notation (2 significant digits, scientific): ``4.8e-02``,
    ``2.6e-16``, ``<1e-300`` for one too small for a float (never "0": no p-value is 0)."""
    return "" if _isna(v) else p_text(float(v))  # type: ignore[arg-type]


def frame_to_table(df: pd.DataFrame) -> str:
    """Human table with a one-line header describing the estimate."""
    import pandas as pd

    a = df.attrs
    head = _header(a)
    shown = _terminal_safe(df)
    if str(a.get("kind", "")).startswith("numeric"):
        return "\n".join(head + [_numeric_table(shown)]) + "\n"
    if a.get("kind") == "joint":
        return "\n".join(head + [_joint_table(shown)]) + "\n"
    notes = _negative_note(df)
    for col in ("estimate", "raw_estimate", "std_err", "ci_low", "ci_high"):
        if col in shown:
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:,.1f}")
    if "truth" in shown:  # true counts are whole numbers
        shown["truth"] = shown["truth"].map(lambda v: "" if pd.isna(v) else f"{v:,.0f}" if float(v).is_integer()
                                            else f"{v:,.1f}")
    if "proportion" in shown:
        shown["proportion"] = shown["proportion"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    if "p_value" in shown:
        shown["p_value"] = shown["p_value"].map(format_p)
    if "n" in shown:  # a series: a window without reports shows no "detected"
        shown["detected"] = [("" if n == 0 else str(d)) for d, n in zip(shown["detected"], shown["n"])]
        shown["n"] = shown["n"].map(_count)
    body = shown.to_string(index=False)
    return "\n".join(head + [body] + notes) + "\n"


#: The columns ``columns_to_table`` writes, and how each cell is shown (as ``frame_to_table``).
_CELL_TEXT = {"estimate": count_text, "std_err": count_text, "ci_low": count_text, "ci_high": count_text,
              "proportion": lambda v: "" if v != v else f"{v:.4f}"}


def columns_to_table(cols: Columns) -> str:
    """``frame_to_table(cols.to_frame())`` written from the columns, without pandas: the same
    bytes for a frequency estimate's columns (value, estimate, proportion, std_err, ci_low,
    ci_high, p_value, detected); anything else (other columns, an empty frame, a value
    column mixing types) goes through the DataFrame."""
    values = cols["value"] if "value" in cols else None
    ints = values is not None and all(type(v) is int for v in values)
    strs = values is not None and all(type(v) is str for v in values)
    if cols.columns != _FREQUENCY_COLUMNS or not len(cols) or not (ints or strs) \
            or str(cols.attrs.get("kind", "")) in ("joint",) or str(cols.attrs.get("kind", "")).startswith("numeric"):
        return frame_to_table(cols.to_frame())
    table: list[tuple[str, list[str], bool]] = []   # (header, cells, numeric dtype: pandas pads it)
    if ints:
        table.append(("value", [f"{v: d}" for v in values], True))
    else:
        table.append(("value", [printable(v) for v in values], False))
    for name in _FREQUENCY_COLUMNS[1:-2]:
        show = _CELL_TEXT[name]
        table.append((name, list(map(show, np.asarray(cols[name], dtype=np.float64).tolist())), False))
    table.append(("p_value", list(map(p_text, np.asarray(cols["p_value"], dtype=np.float64).tolist())), False))
    detected = cols["detected"]
    table.append(("detected", [str(bool(v)) for v in np.asarray(detected).tolist()],
                  np.asarray(detected).dtype.kind in "biuf"))
    body = _to_string(table)
    return "\n".join(_header(cols.attrs) + [body] + _negative_note(cols)) + "\n"


_FREQUENCY_COLUMNS = ["value", "estimate", "proportion", "std_err", "ci_low", "ci_high", "p_value", "detected"]


def _to_string(table: list[tuple[str, list[str], bool]]) -> str:
    """``DataFrame.to_string(index=False)`` of columns already formatted as text: each column
    right-justified to its widest cell or header (a numeric column's header gets a leading
    space, as pandas writes it), columns joined by one space."""
    out = []
    for header, cells, numeric in table:
        head = " " + header if numeric else header
        width = max(len(head), *(len(c) for c in cells))
        out.append([head.rjust(width)] + [c.rjust(width) for c in cells])
    return "\n".join(" ".join(row) for row in zip(*out))


def _header(a: dict[str, Any]) -> list[str]:
    """The one-line header describing the estimate (none without attrs)."""
    head = []
    if a:
        eps = a.get("epsilon")
        head.append(
            f"metric {a.get('metric')}  protocol {a.get('protocol')}  "
            f"epsilon {eps:.4g}  reports {_count(a.get('n_reports'))}  "
            f"confidence {a.get('confidence'):.3g}{' (simultaneous)' if a.get('simultaneous') else ''}"
            + (f"  post-processed: {a['post_processed']}" if a.get("post_processed") else "")
            + _window_note(a)
            + (f"  unit {a['unit']}" if a.get("unit") else "")
            if eps is not None else f"metric {a.get('metric')}")
        if a.get("privacy") and head:
            from collector.claims import privacy_note

            head[0] += privacy_note(a["privacy"])
    return head


def _window_note(attrs: dict) -> str:
    """``  window D`` or ``  windows D1..D2 (N, summed)``: what one estimate counts."""
    span = attrs.get("window_range")
    if not isinstance(span, dict) or attrs.get("by") == "window":
        return ""
    if span.get("windows") == 1:
        return f"  window {span.get('first')}"
    return f"  windows {span.get('first')}..{span.get('last')} ({_count(span.get('windows'))}, summed)"


def _joint_table(shown: pd.DataFrame) -> str:
    """Rows of a joint metric's breakdown: counts to 0.1, shares to 4 decimals, means as numbers."""
    import pandas as pd

    def fmt(stat: str, v: object) -> str:
        if v is None or pd.isna(v):  # type: ignore[arg-type]
            return ""
        x = float(v)  # type: ignore[arg-type]
        return f"{x:.4f}" if stat.startswith("P(") else \
            format_number(x) if stat.startswith(("mean ", "independence")) else f"{x:,.1f}"
    for col in ("estimate", "std_err", "ci_low", "ci_high", "truth"):
        if col in shown:
            shown[col] = [fmt(st, v) for st, v in zip(shown["statistic"], shown[col])]
    shown["p_value"] = shown["p_value"].map(format_p)
    if "detected" in shown:  # no test on a row: an empty cell, not False
        shown["detected"] = shown["detected"].map(lambda v: "" if v is None or pd.isna(v) else str(bool(v)))
    if "ci_unbounded" in shown:   # a Fieller set that is unbounded: the interval says nothing
        unbounded = shown.pop("ci_unbounded").map(lambda v: v is True or v is np.True_)
        shown.loc[unbounded.to_numpy(bool), ["ci_low", "ci_high"]] = "unbounded"
    return shown.to_string(index=False)


def _count(n: object) -> str:
    """A report count with thousands separators (as tables, the dashboard and the docs write it)."""
    try:
        return f"{int(n):,}"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(n)


def _terminal_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells print as text: control characters (a discovered string may hold
    ESC sequences that retitle or redraw the terminal) are shown as escapes (``\\x1b``)."""
    import pandas as pd

    shown = df.copy()
    for col in shown.columns:
        if shown[col].dtype == object or pd.api.types.is_string_dtype(shown[col]):
            shown[col] = shown[col].map(lambda v: printable(v) if isinstance(v, str) else v)
    return shown


def _negative_note(df: pd.DataFrame | Columns) -> list[str]:
    """A line saying why some estimates are below zero (and below their interval), when they are."""
    if "estimate" not in df:
        return []
    est = np.asarray(df["estimate"], dtype=float)
    negative = int(np.count_nonzero(est < 0))
    if not negative:
        return []
    clipped = "ci_low" in df and bool(np.any(est < np.asarray(df["ci_low"], dtype=float)))
    return [f"note: {negative:,} estimate{'s are' if negative > 1 else ' is'} below 0: an unbiased "
            "estimate of a count near 0 falls on either side of it by noise"
            + ("; intervals are clipped at 0, since a count never is negative" if clipped else "")]


def format_number(v: object) -> str:
    """Values in a metric's own units (means, quantiles, sums, a χ² statistic), one style for a
    whole column: fixed-point, thousands separated, 4 significant digits (``458.7``, ``1,088``,
    ``123,457``, ``0.001235``); scientific only from 10^15, so a huge range prints "5.125e+99",
    not a hundred digits. The dashboard's ``fmt.num`` writes the same strings."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    x = float(v)  # type: ignore[arg-type]
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 1e15:
        return f"{x:.4g}"
    return f"{x:,.{min(12, max(0, 3 - math.floor(math.log10(abs(x)))))}f}"


def _numeric_table(shown: pd.DataFrame) -> str:
    """Rows of a numeric metric's frame (mean/sum/n, or buckets then mean and quantiles)."""
    import pandas as pd

    for col in ("estimate", "raw_estimate", "std_err", "ci_low", "ci_high", "truth"):
        if col in shown:
            shown[col] = shown[col].map(format_number)
    if "proportion" in shown:
        shown["proportion"] = shown["proportion"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    if "p_value" in shown:
        shown["p_value"] = shown["p_value"].map(format_p)
    if "detected" in shown:
        shown["detected"] = shown["detected"].map(lambda v: "" if v is None or pd.isna(v) else str(bool(v)))
    return shown.to_string(index=False)


def compare_to_table(df: pd.DataFrame) -> str:
    """`ldpt compare` as a table: a header naming A, B and the control, changed values marked."""
    a = df.attrs
    pct = a.get("scale") == "proportion"
    head = (f"metric {a.get('metric')}  A {a.get('a')} (n {_count(a.get('n_a'))})  "
            f"B {a.get('b')} (n {_count(a.get('n_b'))})  "
            f"{'proportions' if pct else 'means' + (' (' + a['unit'] + ')' if a.get('unit') else '')}  changed: {a.get('control')} at alpha {a.get('alpha'):.3g}  "
            f"{100 * a.get('confidence', 0.95):.3g}% intervals{' (simultaneous)' if a.get('simultaneous') else ''}")
    shown = _terminal_safe(df)
    number = (lambda v: f"{v:.5f}") if pct else format_number
    for col in ("estimate_a", "estimate_b", "difference", "std_err", "ci_low", "ci_high"):
        shown[col] = shown[col].map(number)
    shown["p_value"] = shown["p_value"].map(format_p)
    shown["changed"] = shown["changed"].map(lambda v: "CHANGED" if v else "")
    flagged = int(df["changed"].sum())
    tail = f"{flagged} of {len(df)} changed" if flagged else f"no change detected among {len(df)}"
    return "\n".join([head, shown.to_string(index=False), tail]) + "\n"


def format_compare(df: pd.DataFrame, fmt: str, raw_csv: bool = False) -> str:
    """`ldpt compare`'s frame as a table, CSV or JSON."""
    if fmt == "csv":
        return frame_to_csv(df, raw=raw_csv)
    return {"table": compare_to_table, "json": frame_to_json}[fmt](df)


def format_frame(df: pd.DataFrame | Columns, fmt: str, raw_csv: bool = False) -> str:
    """``df`` as a terminal table, CSV (spreadsheet-safe unless ``raw_csv``) or JSON."""
    if isinstance(df, Columns):
        if fmt == "table":
            return columns_to_table(df)
        df = df.to_frame()
    if fmt == "csv":
        return frame_to_csv(df, raw=raw_csv)
    return {"table": frame_to_table, "json": frame_to_json}[fmt](df)
