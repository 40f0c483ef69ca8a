"""`--plot`: estimates with their intervals (and the truth when known) as a PNG."""

from __future__ import annotations

import click
import numpy as np
import pandas as pd

from collector.estimates import largest, top_values
from estimators.formats import printable

#: What `--plot` says when matplotlib (the `plot` extra) is missing.
INSTALL_HINT = "plotting needs matplotlib: pip install 'ldp-telemetry[plot]'"


def require_matplotlib() -> None:
    """Fail at once, before any estimate is computed, when the `plot` extra is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(INSTALL_HINT) from None


def _pyplot():  # noqa: ANN202 - matplotlib is an optional extra
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException(INSTALL_HINT) from None
    # Labels are the metric's values (discovered strings among them): text, never mathtext, so a
    # value such as "$\\undefined$" is drawn as written instead of failing the plot.
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    return plt


def plot_estimates(df: pd.DataFrame, path: str, *, top: int = 50, log_scale: bool = False) -> None:
    """The ``top`` largest estimates, largest first, with intervals; detected values filled,
    the others hollow; the ``truth`` column (``--truth``) as crosses. Histograms keep bucket order."""
    plt = _pyplot()
    kind = df.attrs.get("kind")
    if kind == "numeric-mean":
        _plot_mean(plt, df, path)
        return
    if kind == "joint":
        _plot_joint(plt, df, path)
        return
    if kind == "numeric-histogram":  # the bucket rows, in bucket order; mean and quantiles are in the table
        shown = df[df["statistic"] == "count"]
    else:
        shown = largest(df, top)
    x = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(min(20, max(6, 0.35 * len(shown) + 2)), 4.5))
    err = np.vstack([shown["estimate"] - shown["ci_low"], shown["ci_high"] - shown["estimate"]])
    err = np.clip(err.astype(float), 0, None)
    if kind == "numeric-histogram":
        ax.bar(x, shown["estimate"], yerr=err, capsize=3, alpha=0.6, label="estimate ± CI")
    else:
        detected = shown["detected"].to_numpy(bool) if "detected" in shown else np.zeros(len(shown), bool)
        ax.errorbar(x, shown["estimate"], yerr=err, fmt="none", ecolor="tab:blue", capsize=3,
                    label="confidence interval")
        ax.scatter(x[detected], shown["estimate"][detected], color="tab:blue", zorder=3,
                   label="estimate (detected)")
        ax.scatter(x[~detected], shown["estimate"][~detected], facecolors="white",
                   edgecolors="tab:blue", zorder=3, label="estimate (not detected)")
    if "truth" in shown:
        ax.scatter(x, shown["truth"].to_numpy(float), marker="x", color="black", zorder=4, label="truth")
    step = max(1, -(-len(shown) // 50))   # a histogram is drawn whole, with at most ~50 tick labels
    ax.set_xticks(x[::step], [printable(str(v)) for v in shown["value"]][::step], rotation=60, ha="right",
                  fontsize=8)
    a = df.attrs
    more = "" if kind == "numeric-histogram" or len(df) <= len(shown) else \
        f" — largest {len(shown)} of {len(df)} values"
    ax.set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g}, "
                 f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% intervals{more}",
                 fontsize=9)
    ax.set_xlabel("bucket" if kind == "numeric-histogram" else "value (largest estimate first)")
    _count_axis(ax, log_scale)
    ax.legend(fontsize=8)
    _save(plt, fig, path)


def _count_axis(ax, log_scale: bool) -> None:  # noqa: ANN001
    ax.set_ylabel("estimated count (reports)" + (", log scale" if log_scale else ""))
    if log_scale:  # estimates may be ≤ 0 (unbiased noise): the log axis shows the positive part
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=0)
    else:
        ax.axhline(0, color="grey", lw=0.5)


def plot_series(df: pd.DataFrame, path: str, top: int, log_scale: bool = False) -> None:
    """A series (``--by window``): one line per value of the ``top`` values by total, its
    interval band, and the window's n as grey bars on a secondary axis. A mean metric draws
    its mean. Windows without reports break the lines (no estimate is invented)."""
    plt = _pyplot()
    mean = df.attrs.get("kind") == "numeric-mean"
    if mean:
        rows = df[df["statistic"] == "mean"].assign(value="mean")
    elif df.attrs.get("kind") == "numeric-histogram":
        rows = df[df["statistic"] == "count"]
    else:
        rows = df
    values = top_values(rows, top)
    windows = list(dict.fromkeys(df["window"]))
    x = np.arange(len(windows))
    fig, ax = plt.subplots(figsize=(max(7, 0.3 * len(windows) + 3), 4.8))
    per_window = df.drop_duplicates("window").set_index("window")["n"].reindex(windows)
    ax2 = ax.twinx()
    ax2.bar(x, per_window.to_numpy(float), color="lightgrey", alpha=0.5, width=0.8, label="n (reports)")
    ax2.set_ylabel("reports in the window (n)")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    for value in values:
        r = rows[rows["value"] == value].set_index("window").reindex(windows)
        line, = ax.plot(x, r["estimate"].to_numpy(float), marker="o", ms=3, label=printable(str(value)))
        low, high = r["ci_low"].to_numpy(float), r["ci_high"].to_numpy(float)
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)
        ax.vlines(x, low, high, color=line.get_color(), alpha=0.5, lw=1)  # a lone window's interval too
    step = max(1, len(windows) // 15)
    ax.set_xticks(x[::step], windows[::step], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("window")
    if mean:
        lo, hi = df.attrs.get("range", [np.nan, np.nan])
        ax.set_ylabel(f"mean (range [{lo:g}, {hi:g}])")
    else:
        _count_axis(ax, log_scale)
    a = df.attrs
    every = rows["value"].nunique()
    what = "" if mean or every <= len(values) else f" — {len(values)} of {every} values by total"
    ax.set_title(f"{a.get('metric')} by window — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g}, "
                 f"{100 * a.get('confidence', 0.95):.0f}% bands{what}", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(handles + h2, labels + l2, fontsize=8, loc="upper left", bbox_to_anchor=(1.2, 1))
    _save(plt, fig, path)


def _save(plt, fig, path: str) -> None:  # noqa: ANN001 - matplotlib is an optional extra
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")  # keeps a legend placed outside the axes
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write the plot ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


def _plot_mean(plt, df: pd.DataFrame, path: str) -> None:  # noqa: ANN001
    """A mean metric: the estimate with its interval, and the true mean when known."""
    row = df[df["statistic"] == "mean"].iloc[0]
    fig, ax = plt.subplots(figsize=(5, 4))
    err = [[max(0.0, row["estimate"] - row["ci_low"])], [max(0.0, row["ci_high"] - row["estimate"])]]
    ax.errorbar([0], [row["estimate"]], yerr=err, fmt="o", capsize=6, label="estimate ± CI")
    if "truth" in df and np.isfinite(row["truth"]):
        ax.scatter([0], [row["truth"]], marker="x", color="black", s=60, zorder=3, label="truth")
    a = df.attrs
    lo, hi = a.get("range", [np.nan, np.nan])
    ax.set_xticks([0], [f"mean of {a.get('metric')}"])
    ax.set_xlim(-1, 1)
    ax.set_ylabel(f"value (range [{lo:g}, {hi:g}])")
    ax.set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g},\n"
                 f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% interval", fontsize=10)
    ax.legend()
    _save(plt, fig, path)


def _plot_joint(plt, df: pd.DataFrame, path: str) -> None:  # noqa: ANN001
    """A joint metric's breakdown, one panel per scale (they cannot share an axis): the cells'
    and the marginals' counts, each conditional share P(T | G) on [0, 1], each mean per category
    in its part's unit, and the independence tests' χ² beside their 5 % critical values."""
    from scipy import stats

    a = df.attrs
    groups = list(dict.fromkeys(df["statistic"]))
    panels: list[tuple[str, pd.DataFrame]] = [("count", df[df["statistic"] == "count"])]
    marginals = df[df["statistic"].str.startswith("count ")]
    if len(marginals):
        panels.append(("marginals", marginals))
    panels += [(g, df[df["statistic"] == g]) for g in groups if g.startswith(("P(", "mean "))]
    tests = df[df["statistic"].str.startswith("independence")]
    rows = len(panels) + (1 if len(tests) else 0)
    widest = max(len(p) for _, p in panels)
    fig, axes = plt.subplots(rows, 1, figsize=(min(20, max(7, 0.35 * widest + 3)), 3.2 * rows), squeeze=False)
    units = {p.get("name"): p.get("unit") for p in a.get("joint_parts") or []}
    for ax, (name, rows_df) in zip(axes[:, 0], panels):
        x = np.arange(len(rows_df))
        est = rows_df["estimate"].to_numpy(float)
        err = np.clip(np.vstack([est - rows_df["ci_low"].to_numpy(float), rows_df["ci_high"].to_numpy(float) - est]), 0, None)
        ax.errorbar(x, est, yerr=np.nan_to_num(err), fmt="o", capsize=3, color="tab:blue", label="estimate ± CI")
        if "truth" in rows_df:
            ax.scatter(x, rows_df["truth"].to_numpy(float), marker="x", color="black", zorder=4, label="truth")
        if name == "marginals":
            labels = [f"{st[6:]}={v}" for st, v in zip(rows_df["statistic"], rows_df["value"])]
        elif name.startswith("P("):
            labels = [" · ".join(reversed(str(v).split(" | "))) for v in rows_df["value"]]
        else:
            labels = [str(v) for v in rows_df["value"]]
        ax.set_xticks(x, [printable(label) for label in labels], rotation=45, ha="right", fontsize=8)
        if name in ("count", "marginals"):
            ax.set_title("cells" if name == "count" else "marginals (each part's values summed over the others)",
                         fontsize=9)
            ax.set_ylabel("count (reports)")
            ax.axhline(0, color="grey", lw=0.5)
        elif name.startswith("P("):
            ax.set_title(f"{name}: share within each value of the condition (Fieller intervals)", fontsize=9)
            ax.set_ylabel("share")
            ax.set_ylim(-0.02, 1.02)
        else:
            part = name[5:].split(" | ", 1)[0]
            unit = units.get(part)
            ax.set_title(f"{name} (bucket midpoints)", fontsize=9)
            ax.set_ylabel(f"mean {part}" + (f" ({unit})" if unit else ""))
        ax.legend(fontsize=7)
    if len(tests):
        ax = axes[-1, 0]
        x = np.arange(len(tests))
        dof = [int(v.split("df ")[1].rstrip(")")) if "df " in str(v) else 1 for v in tests["value"]]
        chi2 = tests["estimate"].to_numpy(float)
        critical = np.array([stats.chi2.ppf(0.95, k) for k in dof])
        ax.bar(x, chi2, width=0.4, color="tab:blue", alpha=0.6, label="Wald χ²")
        ax.scatter(x, critical, marker="_", s=900, linewidths=2, color="tab:red",
                   label="5 % critical value: below it, independence is not rejected")
        ax.set_xlim(-0.8, len(tests) - 0.2)
        if np.nanmax(chi2, initial=0) > 30 * critical.max():  # both visible on one axis
            from matplotlib.ticker import FuncFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.set_xticks(x, [f"{st[13:]} ({v}), p = {p:.1e}" for st, v, p in
                          zip(tests["statistic"], tests["value"], tests["p_value"])], fontsize=8)
        ax.set_title("independence tests", fontsize=9)
        ax.set_ylabel("χ²")
        ax.legend(fontsize=7, loc="upper left")
    axes[0, 0].set_title(f"{a.get('metric')} — {a.get('protocol')}, ε={a.get('epsilon', float('nan')):.3g}, "
                         f"n={a.get('n_reports')}, {100 * a.get('confidence', 0.95):.0f}% intervals — cells",
                         fontsize=9)
    _save(plt, fig, path)
