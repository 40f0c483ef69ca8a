"""Format estimate DataFrames as a table, CSV or JSON (columns fixed by estimators.frequency)."""

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


def frame_to_table(df: pd.DataFrame) -> str:
    """Human table with a one-line header describing the estimate."""
    a = df.attrs
    head = []
    if a:
        eps = a.get("epsilon")
        head.append(
            f"metric {a.get('metric')}  protocol {a.get('protocol')}  "
            f"epsilon {eps:.4g}  reports {a.get('n_reports')}  "
            f"confidence {a.get('confidence'):.3g}{' (simultaneous)' if a.get('simultaneous') else ''}"
            + (f"  post-processed: {a['post_processed']}" if a.get("post_processed") else "")
            if eps is not None else f"metric {a.get('metric')}")
    shown = df.copy()
    for col in ("estimate", "raw_estimate", "std_err", "ci_low", "ci_high"):
        if col in shown:
            shown[col] = shown[col].map(lambda v: f"{v:,.1f}")
    if "proportion" in shown:
        shown["proportion"] = shown["proportion"].map(lambda v: f"{v:.4f}")
    if "p_value" in shown:
        shown["p_value"] = shown["p_value"].map(lambda v: f"{v:.2g}")
    body = shown.to_string(index=False)
    return "\n".join(head + [body]) + "\n"


def format_frame(df: pd.DataFrame, fmt: str) -> str:
    return {"table": frame_to_table, "csv": frame_to_csv, "json": frame_to_json}[fmt](df)
