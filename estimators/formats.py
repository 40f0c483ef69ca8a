"""Serialise estimate DataFrames as JSON or CSV: one shape for the CLI and the collector API."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
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


def frame_to_json(df: pd.DataFrame) -> str:
    """{"meta": attrs, "estimates": [rows]} — the JSON shape of CLI and collector alike."""
    rows = [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict(orient="records")]
    return json.dumps({"meta": _jsonable(dict(df.attrs)), "estimates": rows}, indent=2) + "\n"


def frame_to_csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False, float_format="%.6g")
