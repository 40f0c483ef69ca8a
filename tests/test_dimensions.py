"""Public dimensions (issue 22, part 1): registry, SDK wire, collector validation, segments,
suppression and exact totals (client_sdk/dimensions.py, estimators/breakdown.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgpack
import numpy as np
import pytest

from client_sdk.dimensions import DimensionSpec, combination_bits, segment_key, split_segment_key
from client_sdk.errors import RegistryError
from client_sdk.registry import parse_registry
from client_sdk.remote import registry_from_json
from client_sdk.uploader import pack_batch
from collector.ingest import BatchDecoder
from collector.problems import Problem
from collector.segments import SegmentCap
from collector.storage.base import SketchKey, WindowInfo
from sketches import server_half
from sketches.deltas import sum_deltas

from .collector_support import wire_reports

DIMS = """
[dimensions]
min_reports = 1000

[dimensions.os]
values = ["android", "ios"]

[dimensions.app_version]
values = ["3", "4"]
rule = "major"
"""
THEME = """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
"""


def registry(dims: str = DIMS, metric_dims: str | None = '["os"]', extra: str = ""):
    text = dims + THEME + (f"dimensions = {metric_dims}\n" if metric_dims else "") + extra
    return parse_registry(text)


# --- registry ---------------------------------------------------------------------------------
def test_metrics_without_dimensions_keep_their_fingerprint():
    plain = parse_registry(THEME).get("theme").fingerprint
    assert registry(metric_dims=None).get("theme").fingerprint == plain       # a [dimensions] table alone
    assert registry(dims="", metric_dims=None).get("theme").fingerprint == plain


def test_fingerprint_changes_with_the_metric_dimensions():
    fps = {registry(metric_dims=d).get("theme").fingerprint for d in (None, '["os"]', '["os", "app_version"]')}
    assert len(fps) == 3
    wider = DIMS.replace('["android", "ios"]', '["android", "ios", "web"]')
    assert registry(wider).get("theme").fingerprint != registry().get("theme").fingerprint


def test_registry_round_trips_and_publishes_dimensions():
    reg = registry(extra="min_reports = 200\n")
    again = parse_registry(reg.to_toml())
    assert again.get("theme").fingerprint == reg.get("theme").fingerprint
    assert again.segment_min_reports(again.get("theme")) == 200
    remote = registry_from_json(json.loads(json.dumps(reg.to_json())))
    assert remote.get("theme").fingerprint == reg.get("theme").fingerprint
    assert remote.dimension_table.dimensions["os"].values == ("android", "ios")


@pytest.mark.parametrize("dims, metric_dims, field", [
    (DIMS, '["country"]', "dimensions"),                                     # undeclared
    (DIMS, '["os", "os"]', "dimensions"),
    (DIMS + '[dimensions.bad]\nvalues = ["other"]\n', None, "dimensions.bad.values"),   # reserved
    (DIMS + '[dimensions.bad]\nvalues = ["a;b"]\n', None, "dimensions.bad.values"),     # separator
    (DIMS + '[dimensions.bad]\nvalues = ["a"]\nrule = "x"\n', None, "dimensions.bad.rule"),
    (DIMS + '[dimensions.Bad]\nvalues = ["a"]\n', None, "dimensions.Bad"),
    ("[dimensions]\nmin_reports = 0\n", None, "dimensions.min_reports"),
])
def test_registry_errors_name_the_field(dims, metric_dims, field):
    with pytest.raises(RegistryError) as err:
        registry(dims, metric_dims)
    assert err.value.field == field


def test_bucketing_rules():
    version = DimensionSpec("app_version", ("3", "4", "4.1"), "major")
    assert [version.bucket(v) for v in ("3.14.2", "4", "5.0", "", "4.1.0")] == ["3", "4", "other", "other", "4"]
    minor = DimensionSpec("app_version", ("4.1",), "minor")
    assert [minor.bucket(v) for v in ("4.1.7", "4.2.0", "4")] == ["4.1", "other", "other"]
    assert DimensionSpec("os", ("android",)).bucket("Android") == "other"   # exact: case matters


def test_segment_keys_round_trip_and_entropy():
    dims = registry(metric_dims='["os", "app_version"]').get("theme").dimensions
    key = segment_key("theme", dims, {"os": "ios"})
    assert key == "theme@os=ios;app_version=unknown"
    assert split_segment_key(key) == ("theme", {"os": "ios", "app_version": "unknown"})
    assert split_segment_key("theme") == ("theme", None)
    assert combination_bits(dims) == pytest.approx(np.log2(4 * 4))  # 2 values + other + unknown each


# --- SDK --------------------------------------------------------------------------------------
def test_sdk_sends_bucketed_dimensions_per_batch(tmp_path):
    from client_sdk import TelemetryClient
    from client_sdk.testing import MemoryTransport
    from collector.testing import FakeCollector

    reg = registry(metric_dims='["os", "app_version"]', extra="reports_per_window = 2\n")
    fake = FakeCollector(reg)
    client = TelemetryClient(registry=reg, state_dir=tmp_path, transport=MemoryTransport(fake),
                             dimensions={"os": "android", "app_version": "4.2.1", "locale": "fr"})
    client.report("theme", "dark")
    assert client.flush(10)
    client.set_dimensions({"os": "tizen"})
    client.report("theme", "light")
    assert client.flush(10)
    client.close(1)
    docs = fake.batches
    assert [d.get("d") for d in docs] == [{"app_version": "4", "os": "android"}, {"os": "other"}]
    assert fake.sketch("theme").total_reports == 2
    segments = {m for m, _ in fake.sketches if m != "theme"}
    assert segments == {"theme@os=android;app_version=4", "theme@os=other;app_version=unknown"}


def test_pack_batch_without_dimensions_is_the_old_body():
    body = pack_batch([("theme", "f" * 32, 1)], batch_id=b"x" * 16)[1]
    assert set(msgpack.unpackb(body)) == {"v", "batch_id", "reports"}


# --- collector --------------------------------------------------------------------------------
def _body(spec, indices, d=None, seed=0):
    rng = np.random.default_rng(seed)
    doc = {"v": 1, "batch_id": os.urandom(16), "reports": wire_reports(spec, indices, rng)}
    if d is not None:
        doc["d"] = d
    return msgpack.packb(doc)


@pytest.mark.parametrize("d, field", [
    ({"country": "fr"}, "d.country"),          # undeclared dimension
    ({"os": "tizen"}, "d.os"),                 # outside the closed set
    ({"os": "unknown"}, "d.os"),               # reserved for "not sent"
    ({"os": 1}, "d.os"),
    (["os", "ios"], "d"),
])
def test_collector_refuses_bad_dimensions_with_422(d, field):
    reg = registry()
    with pytest.raises(Problem) as err:
        BatchDecoder(reg).decode(_body(reg.get("theme"), [0, 1], d), "2026-12-01")
    assert (err.value.slug, err.value.status, err.value.extra["field"]) == ("invalid-dimension", 422, field)


def test_total_is_exactly_the_sum_of_segments_including_older_sdks():
    reg = registry(metric_dims='["os", "app_version"]')
    spec, decoder = reg.get("theme"), BatchDecoder(reg)
    rng = np.random.default_rng(5)
    dims = [{"os": "android", "app_version": "3"}, {"os": "ios"}, None, {"os": "other", "app_version": "4"},
            {"os": "android", "app_version": "3"}]
    batches = [decoder.decode(_body(spec, rng.integers(0, 3, 40), d, seed=i), "2026-12-01")
               for i, d in enumerate(dims)]
    summed = sum_deltas([b.deltas for b in batches])
    total = summed.pop(SketchKey("theme", spec.fingerprint, "2026-12-01"))
    assert set(k.metric for k in summed) == {
        "theme@os=android;app_version=3", "theme@os=ios;app_version=unknown",
        "theme@os=unknown;app_version=unknown", "theme@os=other;app_version=4"}
    assert total.total_reports == 200
    acc = server_half(spec).new_sketch()
    for sketch in summed.values():
        acc = acc.merge(sketch)
    np.testing.assert_array_equal(acc.counts, total.counts)
    np.testing.assert_array_equal(acc.reports, total.reports)


def test_segment_cap_leaves_out_one_segment_too_many():
    cap = SegmentCap(2)
    cap.load("2026-12-01", [WindowInfo("theme@os=ios", "f", "2026-12-01", 5),
                            WindowInfo("theme", "f", "2026-12-01", 5)])
    key = lambda seg, w="2026-12-01": SketchKey(f"theme@os={seg}", "f", w)  # noqa: E731
    assert cap.check([key("ios"), key("android"), SketchKey("theme", "f", "2026-12-01")]) == []
    assert cap.check([key("android")]) == []         # already counted
    assert cap.check([key("other"), key("ios")]) == [key("other")]   # beyond the cap: left out
    assert cap.check([key("other")]) == [key("other")]               # and stays out
    assert ("theme", "2026-12-01") in cap.full
    assert cap.check([key("other", "2026-12-02")]) == []             # another window counts apart


# --- estimates: suppression everywhere, exact totals -------------------------------------------
REGISTRY_FILE = DIMS + """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
dimensions = ["os", "app_version"]
"""


def _ldpt(*args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
    return subprocess.run([sys.executable, "-c", "from cli.main import main; main()", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dims")
    (tmp / "metrics.toml").write_text(REGISTRY_FILE, encoding="utf-8")
    done = _ldpt("simulate", "--metrics", "metrics.toml", "--metric", "theme", "--clients", "40000",
                 "--seed", "3", "--db", "s.sqlite", "--window", "2026-11-30", "--silent",
                 "--dimension", "os=android:0.6,ios:0.39,other:0.01",
                 "--dimension", "app_version=3:0.5,4:0.5", cwd=tmp)
    assert done.returncode == 0, done.stderr
    return tmp


def test_simulated_total_equals_the_sum_of_segments(store):
    from collector.storage.sqlite import open_store

    spec = parse_registry(REGISTRY_FILE).get("theme")
    db = open_store(str(store / "s.sqlite"), create=False)
    try:
        keys = sorted({w.metric for w in db.windows() if w.metric.startswith("theme@")})
        assert len(keys) == 6
        total = db.load("theme", spec.fingerprint, server_half(spec).new_sketch())
        parts = [db.load(k, spec.fingerprint, server_half(spec).new_sketch()) for k in keys]
    finally:
        db.close()
    assert total.total_reports == 40000
    np.testing.assert_array_equal(sum(p.counts for p in parts), total.counts)


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.e2e
def test_cli_never_shows_a_suppressed_segment(store, fmt):
    # os=other holds ~400 devices (< min_reports = 1000): suppressed in both groupings
    for by in ("os", "os,app_version"):
        done = _ldpt("estimate", "--metrics", "metrics.toml", "--metric", "theme", "--db", "s.sqlite",
                     "--by", by, "--format", fmt, cwd=store)
        assert done.returncode == 0, done.stderr
        assert "other" not in done.stdout and "android" in done.stdout and "ios" in done.stdout
        want = 1 if by == "os" else 2
        assert f"{want} segment{'s' if want > 1 else ''} suppressed" in done.stderr
        if fmt == "json":
            meta = json.loads(done.stdout)["meta"]
            assert meta["suppressed"] == want and meta["segments"] == (2 if by == "os" else 4)


@pytest.mark.e2e
def test_cli_by_refuses_unknown_dimension(store):
    done = _ldpt("estimate", "--metrics", "metrics.toml", "--metric", "theme", "--db", "s.sqlite",
                 "--by", "country", cwd=store)
    assert done.returncode != 0 and "no dimension 'country'" in done.stderr


@pytest.mark.e2e
def test_api_breakdown_ingest_and_suppression(tmp_path):
    """Over HTTP: batches with d are accepted (bad ones 422 with the field), by=os and
    by=os,app_version answer per segment, the small segment is absent from JSON and CSV and
    counted in meta.suppressed, and the segment cap answers 422 beyond its setting."""
    import asyncio

    from aiohttp.test_utils import TestClient

    from client_sdk.registry import load_registry
    from collector.app import create_app
    from collector.config import make_config

    from .collector_support import TOKEN, CollectorTestServer, write_token

    (tmp_path / "metrics.toml").write_text(REGISTRY_FILE, encoding="utf-8")
    reg = load_registry(tmp_path / "metrics.toml")
    spec = reg.get("theme")
    cfg = make_config(tmp_path / "metrics.toml", environ={}, db=tmp_path / "c.sqlite",
                      query_token_file=write_token(tmp_path / "token"), max_segments=3)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    rng = np.random.default_rng(9)

    async def scenario():
        app = create_app(cfg, reg)
        async with TestClient(CollectorTestServer(app, host="127.0.0.1")) as client:
            async def post(d, n):
                body = _body(spec, rng.integers(0, 3, n), d, seed=int(rng.integers(1 << 30)))
                return await client.post("/v1/reports", data=body,
                                         headers={"Content-Type": "application/msgpack"})
            for d, n in (({"os": "android", "app_version": "3"}, 1500), ({"os": "ios", "app_version": "3"}, 1200),
                         ({"os": "ios", "app_version": "3"}, 100), (None, 300)):
                for start in range(0, n, 100):   # the per-batch cap of one metric's reports
                    resp = await post(d, min(100, n - start))
                    assert resp.status == 200, await resp.text()
            bad = await post({"os": "tizen"}, 1)
            assert bad.status == 422 and (await bad.json())["field"] == "d.os"
            full = await post({"os": "other"}, 1)        # a 4th segment: over max_segments = 3
            assert full.status == 200 and (await full.json())["accepted"] == 1   # never refused
            resp = await client.get("/v1/metrics/theme/estimates?by=os", headers=auth)
            doc = await resp.json()
            assert resp.status == 200, doc
            assert {r["os"] for r in doc["estimates"]} == {"android", "ios"}      # unknown: 300 < 1000
            assert doc["meta"]["suppressed"] == 1 and doc["meta"]["n_reports"] == 2800
            assert doc["meta"]["unsegmented"] == 1 and "in no segment" in doc["meta"]["warning"]
            assert {r["n"] for r in doc["estimates"]} == {1500, 1300}
            csv_resp = await client.get("/v1/metrics/theme/estimates?by=os,app_version&format=csv", headers=auth)
            text = await csv_resp.text()
            assert csv_resp.status == 200 and text.startswith("os,app_version,value,")
            assert "unknown" not in text and text.count("\n") == 1 + 2 * 3
            total = await (await client.get("/v1/metrics/theme/estimates", headers=auth)).json()
            assert total["meta"]["n_reports"] == 3101     # the total counts every report
            for by in ("country", "os,os", "a,b,c"):
                resp = await client.get(f"/v1/metrics/theme/estimates?by={by}", headers=auth)
                assert resp.status == 400 and (await resp.json())["field"] == "by"
            svg = await client.get("/ui/charts/theme/breakdown.svg?by=os", headers=auth)
            text = await svg.text()
            assert svg.status == 200 and "android" in text and "unknown" not in text
            assert "(1 suppressed; 1 report in no segment)" in text

    asyncio.run(scenario())
    # ldpt estimate --by on the same store says it too (table on standard output, the note on error)
    done = _ldpt("estimate", "--metrics", "metrics.toml", "--metric", "theme", "--db", "c.sqlite",
                 "--by", "os", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["meta"]["unsegmented"] == 1
    assert "warning: 1 of the metric's 3,101 reports are in no segment" in done.stderr


@pytest.mark.statistical
def test_segment_estimates_reach_their_variance_and_coverage():
    """Per segment, GRR counts estimated through breakdown_frame have the exact variance
    (Wang et al. 2017) and their 95 % intervals cover. R = 1,500 runs from the exact law
    (estimators.dimension_sim): a segment's MSE/theory pooled over its 4 values has a standard
    error of about √(2/(4R)) ≈ 0.018, so [0.9, 1.1] is over 5 of them; a segment's pooled
    coverage has SE √(0.95·0.05/(4R)) ≈ 0.003, so 0.93 is 6 below the nominal 0.95."""
    from estimators.breakdown import breakdown_frame
    from estimators.dimension_sim import grr_count_variance, grr_sketches_exact
    from sketches.base import Sketch

    reg = parse_registry(DIMS.replace('["android", "ios"]', '["android", "ios", "web"]') + THEME.replace(
        '"system"]', '"system", "contrast"]') + 'dimensions = ["os"]\n')
    spec = reg.get("theme")
    proto, reps = server_half(spec), 1500
    truth = {"android": np.array([12_000, 5_000, 2_500, 500]), "ios": np.array([3_000, 3_000, 1_500, 500]),
             "web": np.array([400, 300, 150, 50])}           # web: 900 reports < 1,000, suppressed
    rng = np.random.default_rng(22)
    draws = {s: grr_sketches_exact(proto, c, reps, rng) for s, c in truth.items()}
    shown: dict[str, list[np.ndarray]] = {"android": [], "ios": []}
    for r in range(reps):
        groups = {(s,): Sketch(draws[s][r][None, :].copy(), np.array([int(truth[s].sum())])) for s in truth}
        df = breakdown_frame(spec, groups, ["os"], reg.segment_min_reports(spec))
        assert set(df["os"]) == {"android", "ios"} and df.attrs["suppressed"] == 1
        for s, part in df.groupby("os"):
            shown[s].append(part[["estimate", "ci_low", "ci_high"]].to_numpy())
    for s, runs in shown.items():
        est = np.stack(runs)
        ratio = ((est[:, :, 0] - truth[s]) ** 2).mean(axis=0).sum() / grr_count_variance(proto, truth[s]).sum()
        cover = ((est[:, :, 1] <= truth[s]) & (truth[s] <= est[:, :, 2])).mean()
        assert 0.9 <= ratio <= 1.1, (s, ratio)
        assert cover >= 0.93, (s, cover)


@pytest.mark.e2e
def test_metrics_check_states_the_bits_and_refuses_above_max_bits(tmp_path):
    ok = tmp_path / "ok.toml"
    ok.write_text(REGISTRY_FILE, encoding="utf-8")
    done = _ldpt("metrics", "check", str(ok), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "16 combinations, 4.00 bits (limit 10" in done.stdout   # (2 + 2) x (2 + 2)
    wide = tmp_path / "wide.toml"
    countries = ", ".join(f'"c{i}"' for i in range(70))       # 4 x 4 x 72 = 1,152 > 2^10
    wide.write_text(REGISTRY_FILE + f"\n[dimensions.country]\nvalues = [{countries}]\n", encoding="utf-8")
    done = _ldpt("metrics", "check", str(wide), cwd=tmp_path)
    assert done.returncode != 0 and "10.17 bits, above max_bits = 10" in done.stderr
    wide.write_text(wide.read_text(encoding="utf-8").replace("min_reports = 1000", "min_reports = 1000\nmax_bits = 11"),
                    encoding="utf-8")
    assert _ldpt("metrics", "check", str(wide), cwd=tmp_path).returncode == 0
