"""Server-side SVG charts of the dashboard (collector/ui.py): no JavaScript charting library.

Five charts, each drawn from the same DataFrame the query API serialises, so a chart never
shows a number the API would not give:

- ``estimates_svg``: one window's values, largest first, as a point and its interval bar on
  the proportion scale (detected values filled, others hollow);
- ``series_svg``: the proportion of the top values per window with interval bands, and the
  window's n as grey bars in a strip under the plot (empty windows break the lines);
- ``breakdown_svg``: per segment of a public dimension, each value's proportion (or the
  mean) with its interval, one colour per segment; suppressed segments are only counted;
- ``compare_svg``: per value the change of proportion B − A with its interval around zero,
  changed values in red;
- ``joint_svg``: one statistic of a joint metric (a marginal, the shares P(T | G), the means
  per category) with its intervals.

Only presentation attributes are used (no ``style``), so the dashboard's Content-Security-Policy
can forbid inline styles; every label is XML-escaped, and characters XML cannot hold (control
bytes of a reported string) are written as visible escapes, so a chart is always well-formed.
Charts carry a ``viewBox``: the page scales them to its width. The page also asks for its own
width (``width``, from ``MIN_WIDTH``): a narrow chart keeps the text at its size, with shorter
labels and the series' legend under the plot, instead of shrinking everything on a phone.
"""

from __future__ import annotations

import math
import re
from xml.sax.saxutils import escape as _xml_escape
from xml.sax.saxutils import quoteattr as _xml_quoteattr

import numpy as np
import pandas as pd

from estimators.formats import printable

from .estimates import largest, top_values

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
#: Rows of a bar chart (the table under it lists them all).
MAX_ROWS = 25
#: Narrowest chart drawn (a phone's 390 px less the page's margins); below NARROW the layout
#: changes (short labels, legend below the plot).
MIN_WIDTH, NARROW = 300, 600
#: Natural widths: the desktop layout, never drawn wider.
ROWS_WIDTH, SERIES_WIDTH = 760, 900


def chart_width(requested: int | None, natural: int) -> int:
    """The width to draw: the page's, within [MIN_WIDTH, natural]."""
    return natural if requested is None else max(MIN_WIDTH, min(natural, int(requested)))

__all__ = ["breakdown_svg", "compare_svg", "estimates_svg", "joint_statistics", "joint_svg", "series_svg"]


def escape(text: str) -> str:
    """Text for an SVG element: non-printable characters as escapes, then XML-escaped."""
    return _xml_escape(printable(str(text)))


def quoteattr(text: str) -> str:
    return _xml_quoteattr(printable(str(text)))


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return ""
    if v == 0:
        return "0"
    a = abs(v)
    return f"{v:.0f}" if a >= 1000 else f"{v:.3g}" if a >= 0.001 else f"{v:.1e}"


def _tick_labels(ticks: list[float]) -> list[str]:
    """Labels of an axis's ticks in one notation: fixed-point with the decimals the step needs
    (thousands separated), or, when that would take more than 4 decimals, every label in
    scientific notation with the same number of digits; 0 is always "0"."""
    if len(ticks) < 2:
        return [_fmt(t) for t in ticks]
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:]) if b != a) if len(set(ticks)) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if round(step * 10 ** decimals, 6) % 1:  # a step of 2.5 x 10^k needs one digit more
        decimals += 1
    biggest = max(abs(t) for t in ticks)
    if decimals <= 4 and biggest < 1e15:
        return ["0" if t == 0 else f"{t:,.{decimals}f}" for t in ticks]
    digits = max(1, min(3, math.floor(math.log10(biggest)) - math.floor(math.log10(step)) + 1)) if biggest else 1
    return ["0" if t == 0 else f"{t:.{digits - 1}e}" for t in ticks]


def _label_px(text: str) -> float:
    """About how wide ``text`` is at the charts' 11 px font."""
    return 6.3 * len(text)


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int(math.ceil((hi - start) / step)) + 1)]


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label={quoteattr(title)} {FONT}>'
            f'<title>{escape(title)}</title><rect width="{width}" height="{height}" fill="#ffffff"/>'
            + "".join(body) + "</svg>")


def _interval_rows(labels: list[str], mid: np.ndarray, low: np.ndarray, high: np.ndarray,
                   filled: np.ndarray, axis_title: str, title: str, colour_on: str,
                   colour_off: str, zero_line: bool, legend: tuple[str, str] | None = None,
                   width: int = ROWS_WIDTH, colours: list[str] | None = None) -> str:
    """Horizontal rows: label, interval bar and point, on a shared x axis; ``legend`` names
    what a filled and a hollow point mean; ``colours``: one per row instead of on/off."""
    n = len(labels)
    narrow = width < NARROW
    # a long title on a narrow chart: two lines, split after "metric:" (bold 13 px ≈ 7.5 px a letter)
    lines = title.split(": ", 1) if narrow and len(title) * 7.5 > width - 16 and ": " in title else [title]
    if len(lines) == 2:
        lines[0] += ":"
    drop = 16 * (len(lines) - 1)
    # the labels' column: as wide as the longest label, within a share of the chart
    longest = max((_label_px(printable(str(x))) for x in labels), default=0.0)
    left = int(min(max(longest + 14, 70 if narrow else 120), 0.45 * width if narrow else 260))
    right, top, row = (16 if narrow else 30), (58 if legend else 40) + drop, 22
    axis_lines = _wrap(axis_title, width - 16)
    height = top + row * max(n, 1) + 50 + 14 * (len(axis_lines) - 1)
    keep = max(6, int((left - 14) / 6.3))
    finite = np.concatenate([v[np.isfinite(v)] for v in (mid, low, high)] + [np.zeros(1)])
    plot_w = width - left - right
    ticks = _ticks(float(finite.min()), float(finite.max()), 3 if narrow else 5)
    lo, hi = ticks[0], ticks[-1]
    tick_text = _tick_labels(ticks)
    # every label fits between its neighbours (a narrow chart of long labels keeps every other one)
    gap = plot_w / max(len(ticks) - 1, 1)
    label_every = next(k for k in range(1, len(ticks) + 1)
                       if k * gap >= max(_label_px(t) for t in tick_text) + 10 or k == len(ticks))

    def xpos(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    first = 8 if narrow else left   # where the title and the legend start
    body = [f'<text x="{first}" y="{20 + 16 * i}" font-size="13" font-weight="bold">{escape(line)}</text>'
            for i, line in enumerate(lines)]
    if legend:
        gap, ly = (150 if narrow else 220), 36 + drop
        body.append(f'<g class="legend"><circle cx="{first + 6}" cy="{ly}" r="4.5" fill="{colour_on}" '
                    f'stroke="{colour_on}" stroke-width="1.5"/><text x="{first + 16}" y="{ly + 4}">{escape(legend[0])}</text>'
                    f'<circle cx="{first + gap + 6}" cy="{ly}" r="4.5" fill="#ffffff" stroke="{colour_off}" '
                    f'stroke-width="1.5"/><text x="{first + gap + 16}" y="{ly + 4}">{escape(legend[1])}</text></g>')
    for i, (t, text) in enumerate(zip(ticks, tick_text)):
        x = xpos(t)
        body.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{top + row * n}" stroke="#e5e5e5"/>')
        if i % label_every == 0:  # centred on its tick, or flush with the frame at the edges
            half = _label_px(text) / 2
            anchor, tx = ("end", width - 3.0) if x + half > width - 3 else ("start", 3.0) if x - half < 3 \
                else ("middle", x)
            body.append(f'<text class="tick" x="{tx:.1f}" y="{top + row * n + 16}" text-anchor="{anchor}" '
                        f'fill="#444">{escape(text)}</text>')
    if zero_line:
        body.append(f'<line x1="{xpos(0):.1f}" y1="{top - 6}" x2="{xpos(0):.1f}" y2="{top + row * n}" '
                    'stroke="#555" stroke-width="1.2"/>')
    for i, label in enumerate(labels):
        y = top + row * i + row / 2
        colour = colours[i] if colours is not None else colour_on if filled[i] else colour_off
        short = label if len(label) <= keep else label[:keep - 1] + "…"
        body.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(short)}</text>')
        if math.isfinite(low[i]) and math.isfinite(high[i]):
            body.append(f'<line x1="{xpos(low[i]):.1f}" y1="{y:.1f}" x2="{xpos(high[i]):.1f}" y2="{y:.1f}" '
                        f'stroke="{colour}" stroke-width="3" stroke-linecap="round" opacity="0.55"/>')
        if math.isfinite(mid[i]):
            fill = colour if filled[i] else "#ffffff"
            body.append(f'<circle class="point" cx="{xpos(mid[i]):.1f}" cy="{y:.1f}" r="4.5" fill="{fill}" '
                        f'stroke="{colour}" stroke-width="1.5"><title>{escape(label)}: {escape(_fmt(mid[i]))} '
                        f'[{escape(_fmt(low[i]))}, {escape(_fmt(high[i]))}]</title></circle>')
    for k, line in enumerate(axis_lines):
        body.append(f'<text x="{(width / 2 if narrow else left + plot_w / 2):.1f}" '
                    f'y="{height - 8 - 14 * (len(axis_lines) - 1 - k)}" text-anchor="middle" fill="#222">'
                    f'{escape(line)}</text>')
    return _svg(width, height, body, title)


def _wrap(text: str, room: float) -> list[str]:
    """``text`` in lines of at most ``room`` pixels (at the 11 px font), split at spaces."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and _label_px(lines[-1] + " " + word) <= room:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [text]


def bucket_widths(labels: list[str]) -> np.ndarray | None:
    """Widths of histogram buckets from their labels "[lo, hi)" (None if a label is not one)."""
    widths = []
    for label in labels:
        m = re.fullmatch(r"\[([^,]+), ([^\])]+)[)\]]", label)
        if m is None:
            return None
        try:
            widths.append(float(m.group(2)) - float(m.group(1)))
        except ValueError:
            return None
    return np.asarray(widths)


def unequal(widths: np.ndarray | None) -> bool:
    """Whether histogram buckets differ in width (then shares mislead about the shape)."""
    return widths is not None and len(widths) > 1 and bool(np.ptp(widths) > 1e-9 * np.max(np.abs(widths)))


def estimates_svg(df: pd.DataFrame, width: int | None = None) -> str:
    """One estimate frame (frequency, histogram or mean) as interval rows, largest first.

    A histogram keeps bucket order; with buckets of unequal width it draws densities (share of
    reports per unit of the metric), since shares would make a wide bucket look like a peak."""
    a = df.attrs
    kind = a.get("kind")
    unit = a.get("unit") or ""
    width = chart_width(width, ROWS_WIDTH)
    conf = f"{100 * a.get('confidence', 0.95):.3g}% intervals"
    if kind == "numeric-mean":
        r = df[df["statistic"] == "mean"]
        lo, hi = a.get("range", [0, 1])
        return _interval_rows(["mean"], r["estimate"].to_numpy(float), r["ci_low"].to_numpy(float),
                              r["ci_high"].to_numpy(float), np.ones(1, bool),
                              f"mean{' (' + unit + ')' if unit else ''}, range [{_fmt(lo)}, {_fmt(hi)}]",
                              f"{a.get('metric')}: mean, {conf}", PALETTE[0], PALETTE[0], zero_line=False,
                              width=width)
    rows = df[df["statistic"] == "count"] if kind in ("numeric-histogram", "joint") else df
    cells = len(rows)
    # a frequency metric's largest rows; a joint metric's cells in order, or its largest when many
    ranked = kind != "numeric-histogram" and (kind != "joint" or cells > MAX_ROWS)
    rows = largest(rows, MAX_ROWS) if ranked else rows.head(MAX_ROWS)
    n = float(a.get("n_reports") or 1)
    labels = [str(v) for v in rows["value"]]
    scale = np.full(len(rows), n)
    axis = "proportion of reports (estimate / n)"
    note = ""
    if kind == "numeric-histogram":
        widths = bucket_widths(labels)
        if unequal(widths):
            scale = n * widths
            axis = f"density: proportion of reports per {unit or 'unit'} (buckets of unequal width)"
            note = ", densities"
    more = f" (largest {len(rows)} of {cells})" if kind != "numeric-histogram" and cells > len(rows) else ""
    return _interval_rows(labels, rows["estimate"].to_numpy(float) / scale,
                          rows["ci_low"].to_numpy(float) / scale, rows["ci_high"].to_numpy(float) / scale,
                          _flags(rows["detected"]), axis,
                          f"{a.get('metric')}: n = {int(n):,}, {conf}{note}{more}", PALETTE[0], "#9fb7cf",
                          zero_line=True, legend=("detected (count > 0)", "not detected"), width=width)


def _flags(column: pd.Series) -> np.ndarray:
    """A ``detected``/``changed`` column as booleans: a missing flag (no test run) is not set."""
    return np.array([bool(v) if v is not None and v == v else False for v in column], dtype=bool)


def joint_statistics(df: pd.DataFrame) -> list[str]:
    """The statistics of a joint frame a chart can draw: marginals, shares and means (cells are
    the estimates chart; an independence test is one number, in the page's table)."""
    return [s for s in dict.fromkeys(df["statistic"])
            if s.startswith(("count ", "P(", "mean "))]


def joint_svg(df: pd.DataFrame, statistic: str, width: int | None = None) -> str:
    """One statistic of a joint metric's breakdown (estimators/joint.py) as interval rows:

    - ``count PART``: each value's marginal, as a proportion of the reports;
    - ``P(T | G)``: the share of each value of T within each value of G (Fieller intervals on
      [0, 1]), rows of one G in one colour, labelled ``G · T``;
    - ``mean NUM | G``: NUM's mean in each value of G, in NUM's unit.
    """
    a = df.attrs
    rows = df[df["statistic"] == statistic]
    width = chart_width(width, ROWS_WIDTH)
    conf = f"{100 * a.get('confidence', 0.95):.3g}% intervals"
    mid, low, high = (rows[c].to_numpy(float) for c in ("estimate", "ci_low", "ci_high"))
    values = [str(v) for v in rows["value"]]
    colours = None
    if statistic.startswith("count "):
        n = float(a.get("n_reports") or 1)
        mid, low, high = mid / n, low / n, high / n
        labels, axis = values, f"proportion of reports holding each {statistic[6:]}"
        title = f"{a.get('metric')}: {statistic[6:]} (marginal), {conf}"
    elif statistic.startswith("P("):
        pairs = [v.split(" | ", 1) if " | " in v else [v, ""] for v in values]
        labels = [f"{g} · {t}" for t, g in pairs]
        given = list(dict.fromkeys(g for _, g in pairs))
        colours = [PALETTE[given.index(g) % len(PALETTE)] for _, g in pairs]
        axis = f"share {statistic}"
        title = f"{a.get('metric')}: {statistic}, {conf} (Fieller)"
    else:
        part = statistic[5:].split(" | ", 1)[0]
        unit = next((p.get("unit") for p in a.get("joint_parts") or [] if p.get("name") == part), None)
        labels = values
        axis = f"mean {part}" + (f" ({unit})" if unit else "") + " (bucket midpoints)"
        title = f"{a.get('metric')}: {statistic}, {conf} (Fieller)"
    return _interval_rows(labels, mid, low, high, np.ones(len(labels), dtype=bool), axis, title,
                          PALETTE[0], PALETTE[0], zero_line=False, width=width, colours=colours)


def compare_svg(df: pd.DataFrame, width: int | None = None) -> str:
    """A comparison frame: differences B − A with intervals, changed values in red."""
    a = df.attrs
    order = np.argsort(-np.abs(df["difference"].to_numpy(float)), kind="stable")[:MAX_ROWS]
    rows = df.iloc[order]
    scale = "proportion" if a.get("scale") == "proportion" else "mean"
    more = f" (largest {len(rows)} of {len(df)} changes)" if len(df) > len(rows) else ""
    return _interval_rows([str(v) for v in rows["value"]], rows["difference"].to_numpy(float),
                          rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float),
                          _flags(rows["changed"]), f"change of {scale}: B − A",
                          f"{a.get('metric')}: from A {a.get('a')} to B {a.get('b')}{more}", "#d62728", "#7f7f7f",
                          zero_line=True, legend=("changed", "no change detected"),
                          width=chart_width(width, ROWS_WIDTH))


#: Statistics a histogram metric's series draws (its quantiles over time, in the metric's units).
HISTOGRAM_SERIES = ("p50", "p90")


def series_svg(df: pd.DataFrame, top: int = 5, values: list[str] | None = None,
               width: int | None = None) -> str:
    """A series frame: lines with interval bands for the ``top`` values (or the chosen
    ``values``), and the windows' n as bars in a strip of their own under the plot (never over a
    line). A mean metric draws its mean, a histogram metric its
    median and 90th percentile (in its units)."""
    a = df.attrs
    unit = a.get("unit") or ""
    in_units = f" ({unit})" if unit else ""
    if a.get("kind") == "numeric-mean":
        rows, scale, axis = df[df["statistic"] == "mean"].assign(value="mean"), False, "mean" + in_units
        values = None
    elif a.get("kind") == "numeric-histogram":
        rows = df[df["statistic"].isin(HISTOGRAM_SERIES)]
        rows = rows.assign(value=rows["statistic"])
        scale, axis, values = False, "quantile" + in_units, list(HISTOGRAM_SERIES)
    else:
        rows = df[df["statistic"] == "count"] if "statistic" in df else df
        scale, axis = True, "proportion of the window's reports"
    windows = list(dict.fromkeys(df["window"]))
    n_per = df.drop_duplicates("window").set_index("window")["n"].reindex(windows).to_numpy(float)
    if values:
        known = {str(v): v for v in rows["value"].dropna().unique()}
        values = [known[str(v)] for v in values if str(v) in known][:len(PALETTE)]
    if not values:
        values = top_values(rows, top)
    width = chart_width(width, SERIES_WIDTH)
    narrow = width < NARROW
    lines = []
    for value in values:
        r = rows[rows["value"] == value].set_index("window").reindex(windows)
        div = np.where(n_per > 0, n_per, np.nan) if scale else np.ones(len(windows))
        lines.append((str(value), *(r[c].to_numpy(float) / div for c in ("estimate", "ci_low", "ci_high"))))
    allv = np.concatenate([np.concatenate(x[1:]) for x in lines] + [np.zeros(1)])
    ticks = _ticks(float(np.nanmin(allv)), float(np.nanmax(allv)), 4 if narrow else 5)
    tick_text = _tick_labels(ticks)
    # the plot, then under it a strip of the windows' n (its own axis: bars never cover a line)
    left = int(26 + max(max(_label_px(t) for t in tick_text), _label_px("20.0k")) + 6)
    right, top_m = (12 if narrow else 170), 36
    ph, strip_gap, strip_h, dates_h = 210, 12, 40, 70
    strip_top = top_m + ph + strip_gap
    base_h = strip_top + strip_h + dates_h
    legend_rows = (len(values) + 2) // 2 if narrow else 0  # the legend: right of the plot, or under it
    height = base_h + 18 * legend_rows + (10 if narrow else 0)
    pw = width - left - right
    lo, hi = ticks[0], ticks[-1]
    nmax = float(np.nanmax(n_per)) if len(n_per) and np.nanmax(n_per) > 0 else 1.0
    step_x = pw / max(len(windows), 1)

    def xpos(i: int) -> float:
        return left + step_x * (i + 0.5)

    def ypos(v: float) -> float:
        return top_m + ph - (v - lo) / (hi - lo) * ph

    body = [f'<text x="{8 if narrow else left}" y="20" font-size="13" font-weight="bold">'
            f'{escape(str(a.get("metric")))} by window — {100 * a.get("confidence", 0.95):.3g}% bands</text>']
    for t, text in zip(ticks, tick_text):
        y = ypos(t)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ececec"/>'
                    f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{escape(text)}</text>')
    body.append(f'<line x1="{left}" y1="{strip_top + strip_h}" x2="{left + pw}" y2="{strip_top + strip_h}" stroke="#bbb"/>'
                f'<text x="{left - 6}" y="{strip_top + 9}" text-anchor="end" fill="#888">{escape(_compact(nmax))}</text>'
                f'<text x="{left - 6}" y="{strip_top + strip_h}" text-anchor="end" fill="#888">0</text>'
                f'<text x="14" y="{strip_top + strip_h / 2 + 4:.1f}" text-anchor="middle" fill="#666">n</text>')
    for i, n in enumerate(n_per):
        h = (n / nmax) * strip_h if math.isfinite(n) else 0
        body.append(f'<rect class="n-bar" x="{xpos(i) - step_x * 0.4:.1f}" y="{strip_top + strip_h - h:.1f}" '
                    f'width="{step_x * 0.8:.1f}" height="{h:.1f}" fill="#c8c8c8"><title>{escape(windows[i])}: '
                    f'n = {int(n) if math.isfinite(n) else 0:,}</title></rect>')
    # date labels: as many as fit (a rotated label needs about 16 px across)
    every = max(1, math.ceil(len(windows) / max(1, min(12, pw // 16))))
    date_y = strip_top + strip_h + 14
    for i in range(0, len(windows), every):
        body.append(f'<text x="{xpos(i):.1f}" y="{date_y}" text-anchor="end" fill="#444" '
                    f'transform="rotate(-40 {xpos(i):.1f} {date_y})">{escape(windows[i])}</text>')
    for k, (label, est, low, high) in enumerate(lines):
        colour = PALETTE[k % len(PALETTE)]
        for seg in _segments(np.isfinite(est) & np.isfinite(low) & np.isfinite(high)):
            up = " ".join(f"{xpos(i):.1f},{ypos(high[i]):.1f}" for i in seg)
            down = " ".join(f"{xpos(i):.1f},{ypos(low[i]):.1f}" for i in reversed(seg))
            body.append(f'<polygon class="band" points="{up} {down}" fill="{colour}" opacity="0.15"/>')
            pts = " ".join(f"{xpos(i):.1f},{ypos(est[i]):.1f}" for i in seg)
            body.append(f'<polyline class="line" points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for i in seg:
                body.append(f'<circle cx="{xpos(i):.1f}" cy="{ypos(est[i]):.1f}" r="2.5" fill="{colour}">'
                            f'<title>{escape(label)} {escape(windows[i])}: {escape(_fmt(est[i]))}</title></circle>')
        body.append(_legend_item(k, colour, label, narrow, left, pw, top_m, width, base_h))
    body.append(_legend_item(len(lines), "#c8c8c8", "n (reports)", narrow, left, pw, top_m, width, base_h))
    body.append(f'<text x="14" y="{top_m + ph / 2:.1f}" text-anchor="middle" fill="#222" '
                f'transform="rotate(-90 14 {top_m + ph / 2:.1f})">{escape(axis)}</text>')
    return _svg(width, height, body, f"{a.get('metric')} by window")


def _compact(n: float) -> str:
    """A report count in at most 5 characters: 950, 20.0k, 1.2M."""
    if not math.isfinite(n):
        return ""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{suffix}" if n < 100 * div else f"{n / div:.0f}{suffix}"
    return f"{n:.0f}"


def _legend_item(k: int, colour: str, label: str, narrow: bool, left: int, pw: float, top_m: int,
                 width: int, below: float) -> str:
    """Legend entry ``k`` of a series: right of the plot, or (narrow) under it, from y = ``below``,
    in two columns."""
    if narrow:
        x, y = 8 + (k % 2) * (width - 16) / 2, below + 4 + 18 * (k // 2)
        keep = max(8, int((width - 16) / 2 / 7) - 3)
    else:
        x, y = left + pw + 24, top_m + 10 + 18 * k
        keep = max(8, int((width - x - 18 - 6) / 6.3))
    short = label if len(label) <= keep else label[:keep - 1] + "…"
    return (f'<rect x="{x:.1f}" y="{y - 8:.1f}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 18:.1f}" y="{y + 2:.1f}">{escape(short)}</text>')


def _segments(ok: np.ndarray) -> list[list[int]]:
    """Runs of consecutive True indices (a window without reports breaks a line)."""
    out: list[list[int]] = []
    for i, good in enumerate(ok):
        if good and out and out[-1][-1] == i - 1:
            out[-1].append(i)
        elif good:
            out.append([i])
    return out


def breakdown_svg(df: pd.DataFrame, width: int | None = None) -> str:
    """Per segment of a dimension (``by=os``): each value's proportion with its interval
    (frequency and histogram metrics), or the mean with its interval (mean metrics); rows of one
    segment share a colour. Suppressed segments are not in ``df``: the title only counts them."""
    a = df.attrs
    by = list(a.get("by") or [])
    suppressed = int(a.get("suppressed", 0))
    unsegmented = int(a.get("unsegmented", 0) or 0)
    notes = ([f"{suppressed} suppressed"] if suppressed else []) + \
        ([f"{unsegmented:,} report{'' if unsegmented == 1 else 's'} in no segment"] if unsegmented else [])
    title = f"{a.get('metric', '')}: by {', '.join(by)}" + (f" ({'; '.join(notes)})" if notes else "")
    if "statistic" in df.columns and str(a.get("kind", "")) == "numeric-mean":
        rows = df[df["statistic"] == "mean"]
        mid, low, high = (rows[c].to_numpy(float) for c in ("estimate", "ci_low", "ci_high"))
        axis = "mean" + (f" ({a['unit']})" if a.get("unit") else "")
        labels = [" · ".join(str(r[b]) for b in by) for _, r in rows.iterrows()]
    else:
        rows = df[df["statistic"] == "count"] if "statistic" in df.columns else df
        n = rows["n"].to_numpy(float) if "n" in rows.columns else np.full(len(rows), np.nan)
        mid, low, high = (rows[c].to_numpy(float) / n for c in ("estimate", "ci_low", "ci_high"))
        axis = "proportion of the segment's reports"
        labels = [" · ".join(str(r[b]) for b in by) + f" · {r['value']}" for _, r in rows.iterrows()]
    segments = [tuple(str(r[b]) for b in by) for _, r in rows.iterrows()]
    order = list(dict.fromkeys(segments))
    colours = [PALETTE[order.index(s) % len(PALETTE)] for s in segments]
    labels, mid, low, high, colours = labels[:MAX_ROWS * 2], mid[:MAX_ROWS * 2], low[:MAX_ROWS * 2], \
        high[:MAX_ROWS * 2], colours[:MAX_ROWS * 2]
    if not labels:
        w = chart_width(width, ROWS_WIDTH)
        return _svg(w, 60, [f'<text x="8" y="20" font-size="13" font-weight="bold">{escape(title)}</text>',
                            '<text x="8" y="44" fill="#666">every segment is below min_reports: nothing '
                            'is shown</text>'], title)
    return _interval_rows(labels, mid, low, high, np.ones(len(labels), dtype=bool), axis, title,
                          PALETTE[0], PALETTE[0], zero_line=False, width=chart_width(width, ROWS_WIDTH),
                          colours=colours)

