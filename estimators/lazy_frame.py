"""A frame of many rows built piece by piece as it is written, never whole.

An estimate of every value of a 10⁶-value metric is a few numeric arrays over d (what the
tests and the multiple-testing control need) and, as a ``pandas.DataFrame``, a million Python
strings and a consolidated copy of every column besides — ~190 MB more of a collector
worker's memory while the answer is written (docs/operations.md, "Queries and ingestion").
A ``LazyFrame`` keeps the arrays and builds the DataFrame of rows ``start .. stop`` when asked
(``piece``); estimators/formats.py writes it piece by piece, the same bytes as the whole frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


class LazyFrame:
    """``len`` rows with ``columns`` and ``attrs`` (as a DataFrame's), made by ``build(start,
    stop)`` — a DataFrame of those rows, its index from 0 — one piece at a time."""

    def __init__(self, length: int, columns: list[str], build: Callable[[int, int], pd.DataFrame],
                 attrs: dict[str, Any] | None = None) -> None:
        self.length, self.columns, self._build = length, list(columns), build
        self.attrs: dict[str, Any] = dict(attrs or {})

    def __len__(self) -> int:
        return self.length

    def piece(self, start: int, stop: int) -> pd.DataFrame:
        """Rows ``start .. stop − 1`` as a DataFrame carrying this frame's ``attrs``."""
        df = self._build(max(0, start), min(stop, self.length))
        df.attrs = dict(self.attrs)
        return df

    def pieces(self, rows_per_piece: int) -> Iterator[pd.DataFrame]:
        """Consecutive pieces of ``rows_per_piece`` rows (one empty piece for an empty frame)."""
        for start in range(0, max(self.length, 1), rows_per_piece):
            yield self.piece(start, start + rows_per_piece)

    def to_frame(self) -> pd.DataFrame:
        """Every row at once (what the lazy form avoids; for callers that need a DataFrame)."""
        return self.piece(0, self.length)


def pieces_of(df: pd.DataFrame | LazyFrame, rows_per_piece: int) -> Iterator[pd.DataFrame]:
    """Consecutive row pieces of a DataFrame or a LazyFrame, each with the frame's ``attrs``."""
    if isinstance(df, LazyFrame):
        yield from df.pieces(rows_per_piece)
        return
    for start in range(0, max(len(df), 1), rows_per_piece):
        part = df.iloc[start:start + rows_per_piece]
        part.attrs = df.attrs
        yield part
