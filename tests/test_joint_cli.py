"""Joint metrics end to end: `ldpt simulate --joint-counts` into a store and into a real
collector (`ldpt serve`), SDK clients reporting tuples over HTTP, `ldpt estimate` (local and
through the query API) with the truth beside it, and `ldpt plan`'s joint-versus-separate table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main

from .sdk_support import Collector

ROOT = Path(__file__).resolve().parent.parent

REGISTRY = """
[metrics.crash_by_os]
kind = "joint"
epsilon = 2.0
reports_per_window = 100
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows", "macos"] },
  { name = "crashed", kind = "boolean" },
]

[metrics.startup_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios"] },
  { name = "startup_ms", kind = "numeric", range = [0, 4000], buckets = [0, 500, 1000, 4000], unit = "ms" },
]
"""

COUNTS = """os,crashed,count
android,false,36000
android,true,4000
ios,false,27000
ios,true,3000
windows,false,16000
windows,true,4000
macos,false,9500
macos,true,500
"""


def _files(tmp_path):
    reg = tmp_path / "joint.toml"
    reg.write_text(REGISTRY, encoding="utf-8")
    counts = tmp_path / "counts.csv"
    counts.write_text(COUNTS, encoding="utf-8")
    return reg, counts


def _rows(output: str) -> dict[tuple[str, str], dict]:
    return {(r["statistic"], r["value"]): r for r in json.loads(output)["estimates"]}


def test_simulate_joint_counts_then_estimate_recovers_the_breakdown(tmp_path):
    reg, counts = _files(tmp_path)
    db, truth = tmp_path / "s.db", tmp_path / "truth.csv"
    runner = CliRunner()
    sim = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "crash_by_os", "--clients",
                               "200000", "--joint-counts", str(counts), "--seed", "3", "--db", str(db),
                               "--truth", str(truth), "--silent"])
    assert sim.exit_code == 0, sim.output
    assert truth.read_text().splitlines()[0] == "value,count"
    out = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "crash_by_os", "--db", str(db),
                               "--truth", str(truth), "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = _rows(out.output)
    share = rows[("P(crashed | os)", "true | windows")]
    assert share["ci_low"] <= share["truth"] <= share["ci_high"]      # 0.2: 5 std errs from the others
    assert abs(share["truth"] - 0.2) < 0.01
    assert rows[("independence os, crashed", "chi2 (df 3)")]["p_value"] < 1e-6
    # every row has a truth, and the estimates sit within 4.5 std errs of it (seeded run)
    for (stat, _), r in rows.items():
        if not stat.startswith("independence"):
            assert abs(r["estimate"] - r["truth"]) <= 4.5 * r["std_err"] + 1e-9, r
    table = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "crash_by_os", "--db", str(db)])
    assert table.exit_code == 0 and "P(crashed | os)" in table.output and "chi2 (df 3)" in table.output
    refused = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "crash_by_os", "--db", str(db),
                                   "--consistent"])
    assert refused.exit_code == 2 and "joint metric" in refused.output


def test_simulate_joint_errors_name_the_file_line_and_field(tmp_path):
    reg, counts = _files(tmp_path)
    runner = CliRunner()
    bad = tmp_path / "bad.csv"
    bad.write_text("os,crashed,count\nandroid,maybe,3\n", encoding="utf-8")
    out = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "crash_by_os", "--clients", "10",
                               "--joint-counts", str(bad), "--db", str(tmp_path / "x.db"), "--silent"])
    assert out.exit_code != 0 and "bad.csv: line 2: field 'crashed'" in out.output
    bad.write_text("os,count\nandroid,3\n", encoding="utf-8")
    out = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "crash_by_os", "--clients", "10",
                               "--joint-counts", str(bad), "--db", str(tmp_path / "x.db"), "--silent"])
    assert out.exit_code != 0 and "line 1" in out.output and "os,crashed,count" in out.output


def test_default_population_is_correlated_and_means_per_category_are_estimated(tmp_path):
    reg, _ = _files(tmp_path)
    db, truth = tmp_path / "m.db", tmp_path / "t.csv"
    runner = CliRunner()
    sim = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "startup_by_os", "--clients",
                               "100000", "--seed", "1", "--db", str(db), "--truth", str(truth), "--silent"])
    assert sim.exit_code == 0, sim.output
    out = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "startup_by_os", "--db", str(db),
                               "--truth", str(truth), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["meta"]["mean_bias_bound"] == {"startup_ms": 1500.0}
    rows = _rows(out.output)
    for os_ in ("android", "ios"):
        r = rows[("mean startup_ms | os", os_)]
        assert r["ci_low"] <= r["truth"] <= r["ci_high"]
    # the built-in law makes the parts dependent: the means per os differ
    assert abs(rows[("mean startup_ms | os", "android")]["truth"] - rows[("mean startup_ms | os", "ios")]["truth"]) > 100


@pytest.mark.e2e
def test_sdk_and_simulate_through_a_real_collector_then_estimate(tmp_path):
    from client_sdk import TelemetryClient

    reg, counts = _files(tmp_path)
    token = tmp_path / "token"
    token.write_text("joint-query-token-0123456789\n")
    token.chmod(0o600)
    col = Collector(reg, tmp_path / "store.sqlite", 0, tmp_path / "collector.log",
                    ("--query-token-file", str(token))).start()
    runner = CliRunner()
    try:
        client = TelemetryClient(col.url, state_dir=tmp_path / "c")
        assert client.wait_for_registry(10.0)
        assert all(client.report("crash_by_os", v) for v in [("ios", True), {"os": "macos", "crashed": False}])
        assert client.flush(10.0)
        client.close(1.0)
        sim = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "crash_by_os", "--clients",
                                   "20000", "--joint-counts", str(counts), "--seed", "2", "--url", col.url,
                                   "--silent"])
        assert sim.exit_code == 0, sim.output
        remote = runner.invoke(main, ["estimate", "--url", col.url, "--token-file", str(token), "--metric",
                                      "crash_by_os", "--format", "json"])
        assert remote.exit_code == 0, remote.output
    finally:
        col.stop()
    local = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "crash_by_os", "--db",
                                 str(col.db), "--format", "json"])
    assert local.exit_code == 0, local.output
    for output in (remote.output, local.output):
        doc = json.loads(output)
        assert doc["meta"]["n_reports"] == 20002 and doc["meta"]["kind"] == "joint"
        rows = _rows(output)
        marg = rows[("count os", "android")]
        assert abs(marg["estimate"] - 20000 * 0.4) <= 4.5 * marg["std_err"] + 4.5 * np.sqrt(20000 * 0.24)


def test_plan_shows_what_a_joint_costs_against_separate_metrics(tmp_path):
    reg, _ = _files(tmp_path)
    out = CliRunner().invoke(main, ["plan", "--metrics", str(reg), "--metric", "crash_by_os", "--clients",
                                    "1000000", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"] if out.output.lstrip().startswith("{") else json.loads(out.output)
    assert {r["part"] for r in rows} == {"os", "crashed"}
    for r in rows:
        assert r["variance ratio"] >= 1.0       # a marginal from the joint never beats its own metric


def test_query_api_and_dashboard_serve_the_breakdown(tmp_path):
    import asyncio

    from cli.output import frame_to_json
    from client_sdk.registry import load_registry
    from collector.app import STATE
    from estimators.joint import joint_frame
    from estimators.series import window_span

    from .collector_support import expected_sketch, make_body, wire_reports, write_token
    from .test_collector_app import AUTH, assert_problem, post, running

    registry_path, _ = _files(tmp_path)
    registry = load_registry(registry_path)
    spec = registry.get("crash_by_os")
    rng = np.random.default_rng(11)
    bodies = [make_body(wire_reports(spec, rng.integers(0, 8, 200), rng)) for _ in range(3)]
    setup = (registry_path, registry, write_token(tmp_path / "token"), tmp_path / "c.sqlite")
    path = "/v1/metrics/crash_by_os/estimates"

    async def get(client, url):
        resp = await client.get(url, headers=AUTH)
        return resp.status, resp.headers, await resp.read()

    async def scenario():
        async with running(setup, min_reports=10) as (client, _):
            for body in bodies:
                assert (await post(client, body))[0] == 200
            status, _, data = await get(client, path)
            assert status == 200
            day = (await client.app[STATE].store.awindows("crash_by_os"))[0].window
            want = window_span(joint_frame(spec, expected_sketch(spec, bodies)), [day])  # the window summed
            assert data.decode() == frame_to_json(want)
            doc = assert_problem(*await get(client, path + "?consistent=true"), 400, "invalid-query")
            assert doc["field"] == "consistent"
            status, headers, svg = await get(client, "/ui/charts/crash_by_os/estimates.svg")
            assert status == 200 and b"ios|true" in svg
    asyncio.run(scenario())


def test_plot_of_a_joint_metric_gives_each_scale_its_own_panel(tmp_path, monkeypatch):
    """--plot of a joint metric: counts (cells, marginals), each P(T | G) on [0, 1], the means in
    their unit and the χ² statistic each on their own axes — once all on one count axis (issue 31)."""
    import cli.plot as plot

    pytest.importorskip("matplotlib")
    reg = ROOT / "docs" / "examples" / "joint.toml"
    db, truth = tmp_path / "j.sqlite", tmp_path / "truth.csv"
    runner = CliRunner()
    out = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", "startup_by_os", "--clients",
                               "20000", "--seed", "4", "--db", str(db), "--truth", str(truth), "--silent"])
    assert out.exit_code == 0, out.output
    figures = []
    real_save = plot._save
    monkeypatch.setattr(plot, "_save", lambda plt, fig, path: (figures.append(fig), real_save(plt, fig, path)))
    out = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", "startup_by_os", "--db", str(db),
                               "--truth", str(truth), "--plot", str(tmp_path / "j.png")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "j.png").stat().st_size > 10_000
    (fig,) = figures
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["count (reports)", "count (reports)", "share", "share", "mean startup_ms (ms)", "χ²"]
    for ax in fig.axes:
        if ax.get_ylabel() == "share":
            low, high = ax.get_ylim()
            assert -0.05 <= low and high <= 1.05
    titles = [ax.get_title() for ax in fig.axes]
    assert any("P(startup_ms | os)" in t for t in titles) and any("P(os | startup_ms)" in t for t in titles)
