"""A small column table: a frame's columns as numpy arrays, a DataFrame only when asked.

A fresh ``ldpt estimate`` of a 10⁶-value metric prints a page of a few rows; importing pandas to
hold them costs ~0.4 s of CPU, several times the decoding's own floor (issue 32). ``Columns``
holds what ``estimators.frequency`` computes — ``value`` (a list), the numeric columns (numpy
arrays) — with a DataFrame's ``attrs``, and builds the very DataFrame the frequency path builds
(``to_frame``) for any caller that needs one (CSV and JSON writers, the query API, plots).
cli/output.py formats its table from the columns, the same bytes as from the DataFrame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: The smallest p-value a table prints as a number; below it (a tail the float underflowed, the
#: exports' 0.0) it says "<1e-300".
P_FLOOR = 1e-300


def count_text(v: float) -> str:
    """A count as a table shows it: ``12,345.6``; empty for NaN."""
    return "" if v != v else f"{v:,.1f}"


def same_count_texts(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``count_text`` shows a[i] and b[i] alike for every i — without formatting the pairs
    whose values are clearly inside one step of its rounding to 0.1 (10·v + ½ at least
    1e-9·(1 + |10·v|) from an integer, far beyond its float error: then the bucket decides) with
    the same sign; the rest (NaN, inf, near a rounding boundary, signs that differ) are formatted."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        xa, xb = a * 10.0 + 0.5, b * 10.0 + 0.5
        fa, fb = np.floor(xa), np.floor(xb)
        clear = ((xa - fa > 1e-9 * (1.0 + np.abs(xa))) & (fa + 1.0 - xa > 1e-9 * (1.0 + np.abs(xa)))
                 & (xb - fb > 1e-9 * (1.0 + np.abs(xb))) & (fb + 1.0 - xb > 1e-9 * (1.0 + np.abs(xb)))
                 & (np.signbit(a) == np.signbit(b)))
    if not np.array_equal(fa[clear], fb[clear]):
        return False
    rest = np.flatnonzero(~clear)
    return all(count_text(x) == count_text(y) for x, y in zip(a[rest].tolist(), b[rest].tolist()))


def p_text(v: float) -> str:
    """A p-value as a table shows it (2 significant digits, scientific): ``4.8e-02``, ``<1e-300``
    for one too small for a float (never "0": no p-value is 0); empty for NaN."""
    if v != v:
        return ""
    return f"<{P_FLOOR:.0e}" if v < P_FLOOR else f"{v:.1e}"


class Columns:
    """Named columns of equal length, in order, with ``attrs`` (as a DataFrame's)."""

    def __init__(self, data: dict[str, Any], attrs: dict[str, Any] | None = None) -> None:
        self.data = dict(data)
        lengths = {len(v) for v in self.data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self.length = lengths.pop() if lengths else 0
        self.attrs: dict[str, Any] = dict(attrs or {})

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self.data)

    def __len__(self) -> int:
        return self.length

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def take(self, rows: np.ndarray) -> Columns:
        """The rows at the indices ``rows``, in that order (``attrs`` kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        picked = {k: (np.asarray(v)[rows] if isinstance(v, np.ndarray) else [v[i] for i in rows.tolist()])
                  for k, v in self.data.items()}
        return Columns(picked, self.attrs)

    def sorted_descending(self, name: str) -> Columns:
        """Rows by column ``name``, largest first, ties in their order, NaN last: what
        ``DataFrame.sort_values(name, ascending=False, kind="stable")`` orders."""
        key = np.asarray(self.data[name], dtype=np.float64)
        nan = np.isnan(key)
        kept = np.flatnonzero(~nan)
        order = kept[np.argsort(-key[kept], kind="stable")]
        return self.take(np.concatenate([order, np.flatnonzero(nan)]))

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame of these columns (``attrs`` copied): what the frequency path builds."""
        import pandas as pd

        df = pd.DataFrame(self.data)
        df.attrs = dict(self.attrs)
        return df
