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
    shown = df.head(50)
    x = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(shown) + 2), 4.5))
    err = np.vstack([shown["estimate"] - shown["ci_low"], shown["ci_high"] - shown["estimate"]])
    err = np.clip(err, 0, None)
    ax.errorbar(x, shown["estimate"], yerr=err, fmt="o", capsize=3, label="estimate ± CI")
    if truth_csv:
        from estimators.simulation import read_weights_csv

        values, counts = read_weights_csv(truth_csv)
        truth = dict(zip(values, counts))
        ax.scatter(x, [truth.get(str(v), 0) for v in shown["value"]], marker="x", color="black",
                   zorder=3, label="truth")
    ax.set_xticks(x, [str(v) for v in shown["value"]], rotation=60, ha="right", fontsize=8)
    a = df.attrs
    ax.set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g}, "
                 f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% intervals")
    ax.set_ylabel("count")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write the plot ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
