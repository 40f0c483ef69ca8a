"""The charts rank as the query layer does (collector/estimates.py's ``largest`` and
``top_values``): the dashboard's rows and series (collector/ui_svg.py) and ``--plot``'s PNGs
(cli/plot.py) show the largest estimates, ties in row order, and a series the values of the
largest total over its windows."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from collector import ui_svg

SVG = "{http://www.w3.org/2000/svg}"


def frequency_frame(values: int = 40, seed: int = 3) -> pd.DataFrame:
    """A frequency frame of ``values`` rows with many tied estimates."""
    rng = np.random.default_rng(seed)
    est = rng.integers(0, 12, values).astype(float) * 10
    df = pd.DataFrame({"value": [f"v{i:02d}" for i in range(values)], "estimate": est,
                       "ci_low": est - 5, "ci_high": est + 5, "detected": est > 50})
    df.attrs.update(metric="m", protocol="grr", epsilon=1.0, n_reports=1000, confidence=0.95,
                    kind="categorical")
    return df


def ranked(df: pd.DataFrame, top: int) -> list[str]:
    """The ``top`` values by estimate, largest first, ties in row order (the rule, by hand)."""
    order = sorted(range(len(df)), key=lambda i: (-df["estimate"].iloc[i], i))
    return [df["value"].iloc[i] for i in order[:top]]


def series_frame(seed: int = 5) -> pd.DataFrame:
    """Four windows of twelve values, with totals that tie."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(4):
        for v in range(12):
            est = float(rng.integers(0, 4) * 25)
            rows.append({"window": f"2026-11-0{w + 1}", "value": f"v{v:02d}", "estimate": est,
                         "ci_low": est - 3, "ci_high": est + 3, "n": 1000})
    df = pd.DataFrame(rows)
    df.attrs.update(metric="m", protocol="grr", epsilon=1.0, confidence=0.95, kind="categorical")
    return df


def by_total(df: pd.DataFrame, top: int) -> list[str]:
    """The ``top`` values by total estimate over the windows, ties in order of first appearance."""
    totals: dict[str, float] = {}
    for v, e in zip(df["value"], df["estimate"]):
        totals[v] = totals.get(v, 0.0) + e
    first = list(totals)
    return sorted(first, key=lambda v: (-totals[v], first.index(v)))[:top]


def test_the_dashboard_rows_are_the_largest_estimates():
    df = frequency_frame()
    root = ET.fromstring(ui_svg.estimates_svg(df))
    shown = [c.find(f"{SVG}title").text.split(": ")[0] for c in root.iter(f"{SVG}circle")
             if c.get("class") == "point"]
    assert len(df) > ui_svg.MAX_ROWS
    assert shown == ranked(df, ui_svg.MAX_ROWS)


@pytest.mark.parametrize("top", [1, 3, 5])
def test_the_dashboard_series_draws_the_values_of_the_largest_total(top):
    df = series_frame()
    svg = ui_svg.series_svg(df, top=top)
    drawn = list(dict.fromkeys(m.group(1) for m in re.finditer(r"<title>(v\d\d) 2026-11-01:", svg)))
    assert drawn == by_total(df, top)


def captured_figure(monkeypatch, draw) -> object:  # noqa: ANN001 - matplotlib's Figure
    """The figure ``draw`` would save (cli/plot.py's _save replaced)."""
    pytest.importorskip("matplotlib")
    from cli import plot

    figures = []
    monkeypatch.setattr(plot, "_save", lambda plt, fig, path: figures.append(fig))
    draw(plot)
    assert len(figures) == 1
    return figures[0]


def test_plot_shows_the_largest_estimates_largest_first(monkeypatch):
    df = frequency_frame()
    fig = captured_figure(monkeypatch, lambda plot: plot.plot_estimates(df, "unused.png", top=7))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ranked(df, 7)
    assert "largest 7 of 40 values" in fig.axes[0].get_title()


def test_plot_series_draws_the_values_of_the_largest_total(monkeypatch):
    df = series_frame()
    fig = captured_figure(monkeypatch, lambda plot: plot.plot_series(df, "unused.png", top=4))
    lines = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert lines == by_total(df, 4)
    assert "4 of 12 values by total" in fig.axes[0].get_title()
