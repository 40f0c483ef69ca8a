"""The dashboard's server-side charts without a browser (collector/ui.py, collector/ui_svg.py):
a joint metric's statistics, a RAPPOR metric decoded against posted candidates, and the layout
rules issue 31 asked for (tick labels in one notation that never run together at 390 px, the
windows' n in a strip of its own under the series, no label cut at the frame)."""

from __future__ import annotations

import asyncio
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from client_sdk.registry import load_registry
from collector.storage.base import SketchKey
from collector.storage.sqlite import open_store
from collector.ui_svg import NARROW, estimates_svg, joint_svg, series_svg
from estimators.joint import joint_frame
from estimators.simulation import draw_population, simulate_sketch

from .collector_support import write_token
from .test_collector_app import AUTH, assert_problem, running

REGISTRY = """
[metrics.crash_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows", "macos"] },
  { name = "crashed", kind = "boolean" },
]

[metrics.startup_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios"] },
  { name = "startup_ms", kind = "numeric", range = [0, 5000], buckets = [0, 500, 1000, 5000], unit = "ms" },
]

[metrics.home]
kind = "string"
protocol = "rappor"
bloom_bits = 64
hashes = 2
cohorts = 8
epsilon = 4.0

[metrics.startup]
kind = "numeric"
range = [0, 5000]
unit = "ms"
buckets = [0, 250, 500, 1000, 2000, 5000]
epsilon = 2.0

[metrics.country]
kind = "categorical"
categories = ["AR", "BR", "CA", "DE"]
protocol = "grr"
epsilon = 2.0
"""
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def served(tmp_path):
    """(setup for `running`, registry) with two windows of every metric in a SQLite store."""
    path = tmp_path / "metrics.toml"
    path.write_text(REGISTRY, encoding="utf-8")
    (tmp_path / "hosts.csv").write_text("value,count\na.example,6\nb.example,3\n", encoding="utf-8")
    registry = load_registry(path)
    rng = np.random.default_rng(5)
    store = open_store(tmp_path / "c.sqlite", create=True)
    try:
        for spec in registry:
            dist = f"csv:{tmp_path / 'hosts.csv'}" if spec.name == "home" else \
                "lognormal:6.5,0.6" if spec.name == "startup" else "uniform"
            for window in ("2026-11-01", "2026-11-02"):
                if spec.parts is not None:
                    from estimators.joint_population import joint_population

                    population = joint_population(spec, 20000, None, rng)
                else:
                    population = draw_population(spec, 20000, dist, rng)
                store.add_sketch(SketchKey(spec.name, spec.fingerprint, window), simulate_sketch(spec, population, rng))
    finally:
        store.close()
    return (path, registry, write_token(tmp_path / "token"), tmp_path / "c.sqlite"), registry


def fetch(setup, *requests):
    """Answer each (method, url, json body or None) from a collector on ``setup``."""
    async def scenario():
        out = []
        async with running(setup) as (client, _):
            for method, url, body in requests:
                resp = await client.request(method, url, headers=AUTH, data=None if body is None else json.dumps(body))
                out.append((resp.status, resp.headers, await resp.read()))
        return out
    return asyncio.run(scenario())


def points(svg: bytes | str) -> int:
    return len(re.findall(r'<circle class="point"', svg.decode() if isinstance(svg, bytes) else svg))


def test_a_joint_metrics_statistics_are_charts_of_their_own(served):
    setup, registry = served
    base = "/ui/charts/crash_by_os/estimates.svg?window=2026-11-02&statistic="
    ok = fetch(setup, ("GET", base + "P(crashed | os)", None), ("GET", base + "count os", None),
               ("GET", "/ui/charts/startup_by_os/estimates.svg?window=2026-11-02&statistic=mean startup_ms | os", None),
               ("GET", base + "nope", None), ("GET", "/ui/charts/country/estimates.svg?statistic=count", None),
               ("GET", base + "independence os, crashed", None))
    shares, marginal, means, unknown, not_joint, independence = ok
    assert shares[0] == 200 and points(shares[2]) == 8 and "android · true" in shares[2].decode()
    assert "share P(crashed | os)" in shares[2].decode()
    assert marginal[0] == 200 and points(marginal[2]) == 4
    assert means[0] == 200 and points(means[2]) == 2 and "mean startup_ms (ms)" in means[2].decode()
    doc = assert_problem(*unknown, 422 if unknown[0] == 422 else 400, "invalid-query")
    assert "P(crashed | os)" in doc["detail"] and doc["field"] == "statistic"
    assert assert_problem(*not_joint, not_joint[0], "invalid-query")["field"] == "statistic"
    assert independence[0] == not_joint[0]   # one number: the page's table, not a chart


def test_a_rappor_chart_is_decoded_against_posted_candidates(served):
    setup, _ = served
    url = "/ui/charts/home/estimates.svg?window=2026-11-02"
    drawn, series, without, bad = fetch(setup, ("POST", url, {"candidates": ["a.example", "b.example", "c.example"]}),
                                        ("POST", "/ui/charts/home/series.svg?value=a.example",
                                         {"candidates": ["a.example", "b.example"]}),
                                        ("GET", url, None), ("POST", url, {"candidates": ["a"], "window": "x"}))
    assert drawn[0] == 200 and points(drawn[2]) == 3 and "c.example" in drawn[2].decode()
    assert series[0] == 200 and ">a.example</text>" in series[2].decode()
    assert without[0] >= 400                                   # a RAPPOR decode needs candidates
    assert assert_problem(*bad, bad[0], "invalid-query")["field"] == "candidates"


def text_boxes(svg: str) -> list[tuple[float, float, float, str]]:
    """(left, right, y, text) of every <text>, its width estimated from its font."""
    root = ET.fromstring(svg)
    out = []
    for t in root.iter(f"{SVG}text"):
        if t.get("transform"):  # rotated date and axis labels
            continue
        text = "".join(t.itertext())
        size = float(t.get("font-size") or 11)
        # Chromium measured 5.5-5.7 px a character at 11 px and 7.3 at bold 13 px: a little more here
        w = len(text) * (7.6 * size / 13 if t.get("font-weight") == "bold" else 5.8 * size / 11)
        x = float(t.get("x"))
        anchor = t.get("text-anchor", "start")
        left = x - w / 2 if anchor == "middle" else x - w if anchor == "end" else x
        out.append((left, left + w, float(t.get("y")), text))
    return out


def axis_ticks(svg: str) -> list[tuple[float, float, float, str]]:
    return [b for b in text_boxes(svg) if 'class="tick"' in svg and b[3] in re.findall(r'class="tick"[^>]*>([^<]*)<', svg)]


def one_notation(labels: list[str]) -> bool:
    kinds = {"sci" if "e" in s else "fixed" for s in labels if s != "0"}
    return len(kinds) <= 1


@pytest.mark.parametrize("width", [300, 366, 760])
def test_histogram_ticks_fit_and_share_one_notation(served, width):
    """Densities of unequal buckets (~10^-4 per ms): at phone width the tick labels used to run
    together in two notations (0.001 beside 5.0e-04); now they fit and read alike."""
    setup, registry = served
    (status, _, body), = fetch(setup, ("GET", f"/ui/charts/startup/estimates.svg?window=2026-11-02&width={width}", None))
    svg = body.decode()
    assert status == 200
    ticks = sorted(axis_ticks(svg))
    assert len(ticks) >= 2 and one_notation([t[3] for t in ticks])
    for (_, right, _, _), (left, _, _, _) in zip(ticks, ticks[1:]):
        assert right + 4 <= left, ticks                       # no two labels touch
    for left, right, _, text in text_boxes(svg):
        assert left >= 0 and right <= width + 1, (text, left, right, width)   # nothing cut at the frame


def series_frame_of(n_windows: int = 6, big: float = 2_000_000) -> pd.DataFrame:
    rows = []
    for i in range(n_windows):
        n = big if i % 2 else big / 3
        for v, p in (("a", 0.02), ("b", 0.01)):  # small shares: the lines run along the bottom
            rows.append({"window": f"2026-11-0{i + 1}", "value": v, "estimate": p * n, "ci_low": p * n * 0.9,
                         "ci_high": p * n * 1.1, "n": n})
    df = pd.DataFrame(rows)
    df.attrs.update(metric="m", confidence=0.95, kind="categorical")
    return df


@pytest.mark.parametrize("width", [300, 900])
def test_series_n_bars_are_a_strip_under_the_lines_and_no_label_is_cut(width):
    svg = series_svg(series_frame_of(), width=width)
    root = ET.fromstring(svg)
    line_ys = [float(p.split(",")[1]) for pl in root.iter(f"{SVG}polyline") for p in pl.get("points").split()]
    band_ys = [float(p.split(",")[1]) for pg in root.iter(f"{SVG}polygon") for p in pg.get("points").split()]
    bar_tops = [float(r.get("y")) for r in root.iter(f"{SVG}rect") if r.get("class") == "n-bar"]
    assert len(bar_tops) == 6 and line_ys and band_ys
    assert max(line_ys + band_ys) < min(bar_tops)           # the bars never cover a line or a band
    for left, right, _, text in text_boxes(svg):
        assert left >= 0 and right <= width + 1, (text, left, right)  # "n 2,000,000" was cut at the right
    assert ">2.0M</text>" in svg


def test_interval_rows_ticks_at_narrow_width_do_not_overlap():
    df = joint_frame(load_registry_from(REGISTRY).get("crash_by_os"), _sketch())
    for width in (300, NARROW - 1, 760):
        for svg in (estimates_svg(df, width=width), joint_svg(df, "P(crashed | os)", width=width)):
            ticks = sorted(axis_ticks(svg))
            assert one_notation([t[3] for t in ticks])
            for (_, right, _, _), (left, _, _, _) in zip(ticks, ticks[1:]):
                assert right + 4 <= left


def load_registry_from(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.toml"
        path.write_text(text, encoding="utf-8")
        return load_registry(path)


def _sketch():
    spec = load_registry_from(REGISTRY).get("crash_by_os")
    from estimators.joint_population import joint_population

    rng = np.random.default_rng(3)
    return simulate_sketch(spec, joint_population(spec, 5000, None, rng), rng)
