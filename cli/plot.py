"""`--plot`: estimates with their intervals (and the truth when known) as a PNG."""

from __future__ import annotations

import click
import numpy as np
import pandas as pd


def plot_estimates(df: pd.DataFrame, path: str, truth_csv: str | None = None) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException("plotting needs matplotlib: pip install 'ldp-telemetry[plot]'") from None
    kind = df.attrs.get("kind")
    numeric_truth = read_statistics(truth_csv) if truth_csv and kind else {}
    if kind == "numeric-mean":
        _plot_mean(plt, df, path, numeric_truth)
        return
    if kind == "numeric-histogram":  # the bucket rows; mean and quantiles are in the table
        df = df[df["statistic"] == "count"]
        truth_csv = None
    # a histogram is drawn whole (its range is the point), with at most ~50 tick labels;
    # other metrics show their first 50 rows
    shown = df if kind == "numeric-histogram" else df.head(50)
    x = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(min(20, max(6, 0.35 * len(shown) + 2)), 4.5))
    err = np.vstack([shown["estimate"] - shown["ci_low"], shown["ci_high"] - shown["estimate"]])
    err = np.clip(err, 0, None)
    if kind == "numeric-histogram":
        ax.bar(x, shown["estimate"], yerr=err, capsize=3, alpha=0.6, label="estimate ± CI")
    else:
        ax.errorbar(x, shown["estimate"], yerr=err, fmt="o", capsize=3, label="estimate ± CI")
    if truth_csv:
        from estimators.simulation import read_weights_csv

        values, counts = read_weights_csv(truth_csv)
        truth = dict(zip(values, counts))
        ax.scatter(x, [truth.get(str(v), 0) for v in shown["value"]], marker="x", color="black",
                   zorder=3, label="truth")
    if numeric_truth:
        ax.scatter(x, [numeric_truth.get(str(v), np.nan) for v in shown["value"]], marker="x",
                   color="black", zorder=3, label="truth")
    step = max(1, -(-len(shown) // 50))
    ax.set_xticks(x[::step], [str(v) for v in shown["value"]][::step], rotation=60, ha="right", fontsize=8)
    a = df.attrs
    ax.set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g}, "
                 f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% intervals")
    ax.set_ylabel("count")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend()
    _save(plt, fig, path)


def _save(plt, fig, path: str) -> None:  # noqa: ANN001 - matplotlib is an optional extra
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write the plot ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


def _plot_mean(plt, df: pd.DataFrame, path: str, truth: dict[str, float]) -> None:  # noqa: ANN001
    """A mean metric: the estimate with its interval, and the true mean when known."""
    row = df[df["statistic"] == "mean"].iloc[0]
    fig, ax = plt.subplots(figsize=(5, 4))
    err = [[max(0.0, row["estimate"] - row["ci_low"])], [max(0.0, row["ci_high"] - row["estimate"])]]
    ax.errorbar([0], [row["estimate"]], yerr=err, fmt="o", capsize=6, label="estimate ± CI")
    if "mean" in truth:
        ax.scatter([0], [truth["mean"]], marker="x", color="black", s=60, zorder=3, label="truth")
    a = df.attrs
    lo, hi = a.get("range", [np.nan, np.nan])
    ax.set_xticks([0], [f"mean of {a.get('metric')}"])
    ax.set_xlim(-1, 1)
    ax.set_ylabel(f"value (range [{lo:g}, {hi:g}])")
    ax.set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g},\n"
                 f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% interval", fontsize=10)
    ax.legend()
    _save(plt, fig, path)


def read_statistics(path: str) -> dict[str, float]:
    """A ``statistic,value`` truth file (``ldpt simulate --truth`` of a numeric metric)."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"{path}: cannot read the truth file ({exc})") from None
    if not rows or [c.strip() for c in rows[0]] != ["statistic", "value"]:
        raise click.ClickException(f"{path}: a numeric metric's truth file starts with the header "
                                   "statistic,value (as ldpt simulate --truth writes it)")
    out = {}
    for line, row in enumerate(rows[1:], start=2):
        try:
            out[row[0]] = float(row[1])
        except (IndexError, ValueError):
            raise click.ClickException(f"{path}: line {line}: field 'value' is not a number") from None
    return out
