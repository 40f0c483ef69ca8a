"""Format estimate DataFrames as a table, CSV or JSON (columns fixed by estimators.frequency)."""

from __future__ import annotations

import pandas as pd

from estimators.formats import frame_to_csv, frame_to_json

__all__ = ["format_frame", "frame_to_csv", "frame_to_json", "frame_to_table"]


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
