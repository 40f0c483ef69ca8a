"""google/rappor's file formats: decode their data with our decoder, export ours for theirs.

Three CSV files (google/rappor ``analysis/R/read_input.R``, ``bin/sum_bits.py``):

``params.csv``   header ``k,h,m,p,q,f`` (quoted or not), then one row of values.
``counts.csv``   no header; row i is cohort i−1: its number of reports, then the number of
                 reports with bit 0, 1, ..., k−1 set (bit 0 = least significant bit).
``map.csv``      no header; a candidate string, then h·m 1-based positions ``c·k + bit + 1``
                 for cohort c = 0..m−1 and each hash. Google's own tools leave a field empty
                 when two hashes of a cohort collide, so empty fields are allowed. A string
                 listed twice keeps its first row (as google/rappor does).

The map's positions are used as given (decoding never re-hashes). Errors are
``RapporFileError``: one line naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from client_sdk.errors import EstimationError
from client_sdk.protocols.rappor import RapporParams
from sketches.base import Sketch

from .rappor import CandidateMap

PARAMS_HEADER = ["k", "h", "m", "p", "q", "f"]
_EMPTY = -(1 << 62)  # an empty map field (google/rappor drops colliding positions)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
RAPPOR_COLUMNS = ["string", "estimate", "std_error", "proportion", "prop_std_error", "prop_low_95",
                  "prop_high_95"]


class RapporFileError(EstimationError):
    """A google/rappor CSV file is missing or malformed (the message names file, line, field)."""

    type = "invalid-rappor-file"


def _rows(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a CSV file; blank lines skipped."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            try:
                for fields in reader:
                    if fields and any(f.strip() for f in fields):
                        yield reader.line_num, fields
            except csv.Error as exc:
                raise RapporFileError(f"{path}: line {reader.line_num}: not valid CSV ({exc})") from None
    except FileNotFoundError:
        raise RapporFileError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise RapporFileError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError:
        raise RapporFileError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise RapporFileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _int(text: str, where: str) -> int:
    value = text.strip()
    try:
        number = int(value)
    except ValueError:
        try:
            real = float(value)
        except ValueError:
            raise RapporFileError(f"{where}: {text!r} is not an integer") from None
        if not (math.isfinite(real) and real.is_integer()):
            raise RapporFileError(f"{where}: {text!r} is not an integer") from None
        number = int(real)
    if not _INT64_MIN <= number <= _INT64_MAX:  # counts are int64: numpy would raise OverflowError
        raise RapporFileError(f"{where}: {text!r} is out of range")
    return number


# --- params.csv ------------------------------------------------------------------------------------

def read_params(path: str | Path) -> RapporParams:
    """RAPPOR parameters from a google/rappor params.csv."""
    rows = list(_rows(path))
    if not rows:
        raise RapporFileError(f"{path}: empty file; expected a header k,h,m,p,q,f and one row of values")
    line, header = rows[0]
    names = [h.strip() for h in header]
    if names != PARAMS_HEADER:
        raise RapporFileError(f"{path}: line {line}: header must be k,h,m,p,q,f, got {','.join(names)}")
    if len(rows) != 2:
        raise RapporFileError(f"{path}: expected exactly one row of values after the header, got {len(rows) - 1}")
    line, values = rows[1]
    if len(values) != 6:
        raise RapporFileError(f"{path}: line {line}: expected 6 fields k,h,m,p,q,f, got {len(values)}")
    parsed: dict[str, float | int] = {}
    for name, text in zip(PARAMS_HEADER, values):
        where = f"{path}: line {line}, field {name!r}"
        if name in ("k", "h", "m"):
            parsed[name] = _int(text, where)
        else:
            try:
                parsed[name] = float(text.strip())
            except ValueError:
                raise RapporFileError(f"{where}: {text!r} is not a number") from None
    try:
        return RapporParams(k=int(parsed["k"]), h=int(parsed["h"]), m=int(parsed["m"]),
                            f=float(parsed["f"]), p=float(parsed["p"]), q=float(parsed["q"]))
    except ValueError as exc:
        raise RapporFileError(f"{path}: line {line}: invalid parameters: {exc}") from None


def write_params(path: str | Path, params: RapporParams) -> None:
    """params.csv: exact (repr) probabilities, so reading it back rebuilds the same params."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(PARAMS_HEADER)
        writer.writerow([params.k, params.h, params.m, repr(params.p), repr(params.q), repr(params.f)])


# --- counts.csv ------------------------------------------------------------------------------------

def read_counts(path: str | Path, params: RapporParams) -> Sketch:
    """Per-cohort report counts and set-bit counts from a google/rappor counts.csv."""
    m, k = params.m, params.k
    counts = np.zeros((m, k), dtype=np.int64)
    reports = np.zeros(m, dtype=np.int64)
    cohort = 0
    for line, fields in _rows(path):
        if cohort >= m:
            raise RapporFileError(f"{path}: line {line}: more than m = {m} rows (one per cohort)")
        if len(fields) != k + 1:
            raise RapporFileError(f"{path}: line {line}: expected {k + 1} fields (reports, then bits "
                                  f"0..{k - 1}), got {len(fields)}")
        row = [_int(text, f"{path}: line {line}, {_column(i)}") for i, text in enumerate(fields)]
        bad = next((i for i, v in enumerate(row) if v < 0), None)
        if bad is not None:
            raise RapporFileError(f"{path}: line {line}, {_column(bad)}: negative count {row[bad]}")
        over = next((i for i, v in enumerate(row[1:], start=1) if v > row[0]), None)
        if over is not None:
            raise RapporFileError(f"{path}: line {line}, {_column(over)}: count {row[over]} exceeds "
                                  f"the cohort's {row[0]} reports")
        reports[cohort], counts[cohort] = row[0], row[1:]
        cohort += 1
    if cohort != m:
        raise RapporFileError(f"{path}: {cohort} rows, expected m = {m} (one per cohort)")
    return Sketch(counts, reports)


def _column(index: int) -> str:
    return "column 1 (reports)" if index == 0 else f"column {index + 1} (bit {index - 1})"


def write_counts(path: str | Path, sketch: Sketch) -> None:
    """counts.csv: reports then bit counts, one row per cohort."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        for n_reports, row in zip(np.asarray(sketch.reports).tolist(), np.asarray(sketch.counts).tolist()):
            writer.writerow([n_reports, *row])


# --- map.csv ---------------------------------------------------------------------------------------

def read_map(path: str | Path, params: RapporParams) -> CandidateMap:
    """Candidate strings and their Bloom bits, as google/rappor's map.csv gives them."""
    m, k, h = params.m, params.k, params.h
    n_rows = m * k
    values: list[str] = []
    rows: list[np.ndarray] = []
    seen: set[str] = set()
    for line, fields in _rows(path):
        if len(fields) != h * m + 1:
            raise RapporFileError(f"{path}: line {line}: expected {h * m + 1} fields (a string, then "
                                  f"h·m = {h * m} positions), got {len(fields)}")
        string = fields[0]
        try:
            positions = np.array([int(f) if f.strip() else _EMPTY for f in fields[1:]], dtype=np.int64)
        except (ValueError, OverflowError):
            bad = next(i for i, f in enumerate(fields[1:], start=2) if f.strip() and not _is_int_text(f))
            raise RapporFileError(f"{path}: line {line}, column {bad}: {fields[bad - 1]!r} is not an "
                                  f"integer position in [1, m·k = {n_rows}]") from None
        filled = positions != _EMPTY
        given = positions[filled]
        out = (given < 1) | (given > n_rows)
        if out.any():
            col = int(np.flatnonzero(filled)[np.flatnonzero(out)[0]]) + 2
            raise RapporFileError(f"{path}: line {line}, column {col}: position {int(given[out][0])} is "
                                  f"outside [1, m·k = {n_rows}]")
        if given.size == 0:
            raise RapporFileError(f"{path}: line {line}: candidate {string!r} has no positions")
        if string in seen:
            continue  # google/rappor keeps the first row of a repeated string
        seen.add(string)
        values.append(string)
        rows.append(given - 1)
    if not values:
        raise RapporFileError(f"{path}: no candidate strings")
    return CandidateMap.from_rows(values, rows, n_rows)


def _is_int_text(text: str) -> bool:
    """Whether ``text`` is an integer that fits int64."""
    try:
        return _INT64_MIN <= int(text) <= _INT64_MAX
    except ValueError:
        return False


def write_map(path: str | Path, cmap: CandidateMap, params: RapporParams) -> None:
    """map.csv: each candidate's h·m positions, cohort by cohort (duplicates kept, as Google's)."""
    m, k, h = params.m, params.k, params.h
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        if cmap.positions is not None:
            absolute = (np.arange(m)[None, :, None] * k + cmap.positions + 1).reshape(len(cmap), -1)
            for value, row in zip(cmap.values, absolute.tolist()):
                writer.writerow([value, *row])
            return
        design = cmap.design.tocsc()
        for j, value in enumerate(cmap.values):
            given = (design.indices[design.indptr[j]:design.indptr[j + 1]] + 1).tolist()
            writer.writerow([value, *given, *[""] * (h * m - len(given))])


# --- all three ---------------------------------------------------------------------------------------

def read_google(params_path: str | Path, counts_path: str | Path,
                map_path: str | Path) -> tuple[RapporParams, Sketch, CandidateMap]:
    """Params, sketch and candidate map from google/rappor's three files."""
    params = read_params(params_path)
    return params, read_counts(counts_path, params), read_map(map_path, params)


def write_google(out_dir: str | Path, params: RapporParams, sketch: Sketch,
                 cmap: CandidateMap) -> dict[str, Path]:
    """Write params.csv, counts.csv and map.csv into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = {"params": out / "params.csv", "counts": out / "counts.csv", "map": out / "map.csv"}
        write_params(paths["params"], params)
        write_counts(paths["counts"], sketch)
        write_map(paths["map"], cmap, params)
    except OSError as exc:
        raise RapporFileError(f"{out}: cannot write ({exc.strerror or exc})") from None
    return paths


def rappor_columns(df: pd.DataFrame) -> pd.DataFrame:
    """google/rappor's result columns for the detected strings (largest first).

    string, estimate (count), std_error (count), proportion, prop_std_error, prop_low_95,
    prop_high_95 (the interval at the frame's confidence, 95% by default, clipped to [0, 1]).
    """
    n = float(df.attrs.get("n_reports", 1) or 1)
    kept = df[df["detected"]]
    return pd.DataFrame({"string": kept["value"].to_numpy(), "estimate": kept["estimate"].to_numpy(),
                         "std_error": kept["std_err"].to_numpy(), "proportion": kept["proportion"].to_numpy(),
                         "prop_std_error": (kept["std_err"] / n).to_numpy(),
                         "prop_low_95": (kept["ci_low"] / n).to_numpy(),
                         "prop_high_95": (kept["ci_high"] / n).to_numpy()}, columns=RAPPOR_COLUMNS)
