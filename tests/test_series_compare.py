"""Series (`--by window`), `ldpt compare`, exact CSV, and the query API's series/compare.

Statistical checks use fixed seeds and tolerances from the sampling error: the family-wise
false-flag rate of `compare` within 3 binomial SEs of ≤ 5%, its power at a 3-SE shift,
the difference unbiased within 4 SEs and its standard error calibrated (variance ratio within
1 ± 3·sqrt(2/(R−1))).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner
from scipy import stats

from cli.main import main
from client_sdk.errors import EstimationError
from client_sdk.registry import load_registry
from collector.app import create_app
from collector.config import make_config
from collector.storage.base import SketchKey
from collector.storage.sqlite import SQLiteStore
from estimators.compare import compare_frame, required_shift
from estimators.formats import frame_to_csv, frame_to_json
from estimators.frequency import estimate_frame
from estimators.series import MAX_WINDOWS, series_frame, window_grid, windows_in_range
from estimators.simulation import Population, simulate_sketch
from sketches import server_half

TOKEN = "series-token-0123456789abcdef"
REGISTRY = """
[metrics.page]
kind = "categorical"
protocol = "grr"
epsilon = 2.0
categories = [{cats}]

[metrics.minutes]
kind = "numeric"
range = [0, 120]
protocol = "auto"
epsilon = 1.0

[metrics.latency]
kind = "numeric"
range = [0, 1000]
buckets = 5
protocol = "auto"
epsilon = 2.0
""".format(cats=", ".join(f'"p{i:02d}"' for i in range(20)))
DAYS = ["2026-03-01", "2026-03-02", "2026-03-04"]  # 2026-03-03 has no reports


@pytest.fixture(scope="module")
def registry_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("series") / "metrics.toml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def registry(registry_path):
    return load_registry(registry_path)


def zipf(d: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1) ** s
    return w / w.sum()


def sketch_of(spec, weights: np.ndarray, n: int, rng: np.random.Generator):
    counts = rng.multinomial(n, weights)
    return simulate_sketch(spec, Population(list(spec.domain), counts.astype(np.int64)), rng)


def numeric_sketch(spec, mean: float, n: int, rng: np.random.Generator):
    from estimators.simulation import NumericPopulation

    values = np.clip(rng.normal(mean, 15, n), *spec.bounds)
    return simulate_sketch(spec, NumericPopulation(values), rng)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory, registry):
    """A SQLite store with three days of `page` and `minutes` (one day in the range empty)."""
    path = tmp_path_factory.mktemp("store") / "store.sqlite"
    rng = np.random.default_rng(11)
    store = SQLiteStore(path, create=True)
    page, minutes = registry.get("page"), registry.get("minutes")
    for i, day in enumerate(DAYS):
        store.add_sketch(SketchKey("page", page.fingerprint, day), sketch_of(page, zipf(20), 4000 + 500 * i, rng))
        store.add_sketch(SketchKey("minutes", minutes.fingerprint, day), numeric_sketch(minutes, 40 + i, 3000, rng))
    store.close()
    return path


def load_day(path, spec, day):
    store = SQLiteStore(path, create=False)
    try:
        return store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch(), [day])
    finally:
        store.close()


# --- exact CSV -------------------------------------------------------------------------------

def test_csv_floats_round_trip_exactly():
    rng = np.random.default_rng(3)
    awkward = np.concatenate([rng.normal(0, 1e6, 200), rng.random(200) * 1e-9, [1497312.3456789012,
                              0.1, 1 / 3, 2.0 ** -1074, 1.7976931348623157e308, -0.0, 123456789.00000001]])
    df = pd.DataFrame({"value": [f"v{i}" for i in range(len(awkward))], "estimate": awkward,
                       "ci_low": awkward * 0.999})
    text = frame_to_csv(df)
    back = pd.read_csv(io.StringIO(text))
    assert back["estimate"].to_numpy().tobytes() == awkward.tobytes()
    assert back["ci_low"].to_numpy().tobytes() == (awkward * 0.999).tobytes()
    for line, want in zip(text.splitlines()[1:], awkward):  # also with Python's own float()
        assert float(line.split(",")[1]) == want


def test_csv_and_json_of_a_series_round_trip(registry, store_path):
    spec = registry.get("page")
    df = series_frame(spec, [(d, load_day(store_path, spec, d)) for d in DAYS])
    back = pd.read_csv(io.StringIO(frame_to_csv(df)))
    for col in ("estimate", "proportion", "std_err", "ci_low", "ci_high", "p_value"):
        assert np.array_equal(back[col].to_numpy(), df[col].to_numpy(float), equal_nan=True), col
    doc = json.loads(frame_to_json(df))
    assert [r["estimate"] for r in doc["estimates"]] == df["estimate"].tolist()
    assert doc["meta"]["columns"]["estimate"].startswith("count")
    assert doc["meta"]["columns"]["proportion"].startswith("proportion")


# --- series ------------------------------------------------------------------------------------

def test_window_grid_days_hours_and_limits():
    assert window_grid("2026-02-27", "2026-03-01", False) == ["2026-02-27", "2026-02-28", "2026-03-01"]
    hours = window_grid("2026-03-01", "2026-03-02", True)
    assert len(hours) == 48 and hours[0] == "2026-03-01T00" and hours[-1] == "2026-03-02T23"
    assert windows_in_range(["2026-03-01T05", "2026-03-02T01"], None, None) == hours
    with pytest.raises(EstimationError, match="before since"):
        window_grid("2026-03-02", "2026-03-01", False)
    with pytest.raises(EstimationError, match="at most"):
        window_grid("2000-01-01", "2030-01-01", True)
    assert MAX_WINDOWS >= 366 * 24


def test_series_rows_per_window_and_empty_windows(registry, store_path):
    spec = registry.get("page")
    grid = window_grid(DAYS[0], DAYS[-1], False)
    sketches = [(d, load_day(store_path, spec, d)) for d in grid]
    df = series_frame(spec, sketches)
    assert list(df.columns[:2]) == ["window", "value"] and df.columns[-1] == "n"
    assert len(df) == len(grid) * 20
    empty = df[df["window"] == "2026-03-03"]
    assert (empty["n"] == 0).all() and empty["estimate"].isna().all() and not empty["detected"].any()
    for day, sketch in sketches:
        if sketch.total_reports:
            want = estimate_frame(spec, sketch)
            got = df[df["window"] == day].drop(columns=["window", "n"]).reset_index(drop=True)
            pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_exact=True)
            assert (df[df["window"] == day]["n"] == sketch.total_reports).all()
    assert df.attrs["n_reports"] == sum(s.total_reports for _, s in sketches)
    with pytest.raises(EstimationError, match="no reports"):
        series_frame(spec, [("2026-03-03", sketches[2][1])])


# --- compare ---------------------------------------------------------------------------------

def test_compare_columns_and_numeric_means(registry, store_path):
    page, minutes = registry.get("page"), registry.get("minutes")
    df = compare_frame(page, load_day(store_path, page, DAYS[0]), load_day(store_path, page, DAYS[1]),
                       label_a=DAYS[0], label_b=DAYS[1])
    assert list(df["value"]) == list(page.domain) and df.attrs["scale"] == "proportion"
    assert np.allclose(df["difference"], df["estimate_b"] - df["estimate_a"])
    m = compare_frame(minutes, load_day(store_path, minutes, DAYS[0]), load_day(store_path, minutes, DAYS[2]),
                      label_a="a", label_b="b")
    assert list(m["value"]) == ["mean"] and m.attrs["scale"] == "mean"
    latency = registry.get("latency")
    rng = np.random.default_rng(5)
    h = compare_frame(latency, *(numeric_sketch(latency, 300, 2000, rng) for _ in range(2)), label_a="a", label_b="b")
    assert len(h) == 5  # the buckets
    with pytest.raises(EstimationError, match="control"):
        compare_frame(page, load_day(store_path, page, DAYS[0]), load_day(store_path, page, DAYS[1]),
                      label_a="a", label_b="b", control="bonferroni")


def _runs(spec, weights_a, weights_b, n, runs, seed):
    rng = np.random.default_rng(seed)
    return [compare_frame(spec, sketch_of(spec, weights_a, n, rng), sketch_of(spec, weights_b, n, rng),
                          label_a="a", label_b="b") for _ in range(runs)]


@pytest.mark.statistical
def test_compare_family_wise_false_flags_at_most_alpha(registry):
    """Same distribution in A and B (each window's devices a fresh multinomial draw): any value
    flagged in at most 5% of runs (Holm, fwer) within 2.5 MC SEs (2,000 runs: 0.062; it allowed
    0.083 with 400; measured 0.0465 over 4,000); difference unbiased, standard error calibrated."""
    spec, runs = registry.get("page"), 2000
    frames = _runs(spec, zipf(20), zipf(20), 20_000, runs, seed=21)
    rate = np.mean([f["changed"].any() for f in frames])
    assert rate <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / runs), rate
    # unbiased difference and calibrated standard error (per value, pooled over runs)
    diff = np.array([f["difference"].to_numpy() for f in frames])
    se = np.array([f["std_err"].to_numpy() for f in frames])
    assert np.all(np.abs(diff.mean(axis=0)) <= 4 * se.mean(axis=0) / math.sqrt(runs))
    ratio = diff.var(axis=0, ddof=1) / (se ** 2).mean(axis=0)
    tol = 3 * math.sqrt(2 / (runs - 1))
    assert np.all(np.abs(ratio - 1) <= tol), ratio
    # the p-values are uniform under the null: per-value rejections at 5% within 3 SE
    per_value = np.array([f["p_value"].to_numpy() <= 0.05 for f in frames]).mean()
    assert abs(per_value - 0.05) <= 3 * math.sqrt(0.05 * 0.95 / (runs * 20))


def _shifted(weights: np.ndarray, index: int, delta: float) -> np.ndarray:
    out = weights.copy()
    out[index] += delta
    others = np.arange(len(out)) != index
    out[others] -= delta * weights[others] / weights[others].sum()
    return out


def _shift_of(spec, weights: np.ndarray, n: int, index: int, k: float) -> float:
    """The shift δ of value ``index`` that is k standard errors of the difference — randomisation
    plus sampling of the devices in each of two windows of n reports, B's at the shifted weights
    (the SE an analyst reads; it grows with the shifted share, hence the fixed point)."""
    def var(w: np.ndarray) -> float:
        return server_half(spec).variance(n, w * n)[index] / n ** 2 + w[index] * (1 - w[index]) / n

    delta = 0.0
    for _ in range(30):
        delta = k * math.sqrt(var(weights) + var(_shifted(weights, index, delta)))
    return delta


@pytest.mark.statistical
def test_compare_detects_a_three_se_shift(registry):
    """The documented power within 3 MC SEs (2,000 runs: SE ≈ 0.008): a 3-SE shift in one value
    is rejected by its own test in Φ(3 − 1.96) = 85% of runs (measured 0.854 over 4,000), and the
    family-wise flag over 20 values catches a shift of required_shift(20) SEs in 80% (measured
    0.791). The test used to measure the shift in the null's SE and accept 0.80 and 0.73."""
    spec, n, runs, idx = registry.get("page"), 20_000, 2000, 4
    base = zipf(20)
    frames = _runs(spec, base, _shifted(base, idx, _shift_of(spec, base, n, idx, 3.0)), n, runs, seed=22)
    power = np.mean([f["p_value"].iloc[idx] <= 0.05 and f["difference"].iloc[idx] > 0 for f in frames])
    documented = float(stats.norm.cdf(3 - stats.norm.isf(0.025)))
    assert abs(power - documented) <= 3 * math.sqrt(documented * (1 - documented) / runs), power
    shift = required_shift(20)
    frames = _runs(spec, base, _shifted(base, idx, _shift_of(spec, base, n, idx, shift)), n, runs, seed=23)
    flagged = np.mean([bool(f["changed"].iloc[idx]) for f in frames])
    assert abs(flagged - 0.80) <= 3 * math.sqrt(0.8 * 0.2 / runs), (flagged, shift)


# --- CLI and API -------------------------------------------------------------------------------

def ldpt(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_cli_series_table_csv_plot_and_top(registry_path, store_path, tmp_path):
    common = ["--metrics", str(registry_path), "--metric", "page", "--db", str(store_path), "--by", "window",
              "--since", DAYS[0], "--until", DAYS[-1]]
    r = ldpt("estimate", *common, "--format", "csv")
    assert r.exit_code == 0, r.output
    df = pd.read_csv(io.StringIO(r.output))
    assert sorted(set(df["window"])) == window_grid(DAYS[0], DAYS[-1], False)
    assert (df[df["window"] == "2026-03-03"]["n"] == 0).all()
    r = ldpt("estimate", *common, "--top", "3", "--plot", str(tmp_path / "s.png"), "--log-scale")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "s.png").stat().st_size > 10_000
    lines = r.output.splitlines()
    assert len(lines) == 2 + 3 * 4 and all(v in r.output for v in ("p00", "p01", "p02"))
    r = ldpt("estimate", *common, "--window", DAYS[0])
    assert r.exit_code == 2 and "--window" in r.output


def test_cli_plot_shows_the_largest_values_sorted_and_truth_in_the_table(registry_path, store_path, tmp_path):
    truth = tmp_path / "truth.csv"
    truth.write_text("value,count\np00,1000\np01,500\n", encoding="utf-8")
    r = ldpt("estimate", "--metrics", str(registry_path), "--metric", "page", "--db", str(store_path),
             "--window", DAYS[0], "--top", "5", "--truth", str(truth), "--plot", str(tmp_path / "e.png"))
    assert r.exit_code == 0, r.output
    table = [line for line in r.output.splitlines() if not line.startswith("warning:")]
    assert "warning: " in r.output and "the truth counts 1,500 reports" in r.output  # a partial truth
    header = table[1].split()
    assert header[-1] == "truth"
    rows = [line.split() for line in table[2:]]
    assert len(rows) == 5 and rows[0][0] == "p00" and rows[0][-1] == "1,000"
    estimates = [float(row[1].replace(",", "")) for row in rows]
    assert estimates == sorted(estimates, reverse=True)
    assert (tmp_path / "e.png").stat().st_size > 10_000


def test_cli_compare_windows_and_ranges(registry_path, store_path):
    base = ["--metrics", str(registry_path), "--metric", "page", "--db", str(store_path)]
    r = ldpt("compare", *base, "--window", DAYS[0], "--against", DAYS[1])
    assert r.exit_code == 0, r.output
    assert "proportions" in r.output and "changed: fwer" in r.output
    r = ldpt("compare", *base, "--range", f"{DAYS[0]}..{DAYS[1]}", "--against", DAYS[2], "--format", "json")
    doc = json.loads(r.output)
    assert doc["meta"]["a"] == f"{DAYS[0]}..{DAYS[1]}" and doc["meta"]["n_a"] == 4000 + 4500
    r = ldpt("compare", *base, "--window", DAYS[0])
    assert r.exit_code == 2 and "--against" in r.output
    r = ldpt("compare", *base, "--range", "2026-03-05..2026-03-01", "--against", DAYS[0])
    assert r.exit_code == 2 and "FIRST..LAST" in r.output
    r = ldpt("compare", *base, "--window", "2026-03-03", "--against", DAYS[0])
    assert r.exit_code == 1 and "no reports" in r.output


def test_cli_store_flags_override_the_environment_and_the_default_is_serves(registry_path, store_path,
                                                                             tmp_path, monkeypatch):
    """An explicit --db (or --url) wins over LDPT_POSTGRES_DSN, as in `ldpt prune` (the operations
    doc has operators export it for `serve`); two flags are refused naming the flags, not the
    variable; without any, LDPT_POSTGRES_DSN, then LDPT_DB, then ./ldpt.sqlite — serve's store
    (issue 31)."""
    monkeypatch.chdir(tmp_path)
    base = ["--metrics", str(registry_path), "--metric", "page", "--window", DAYS[0]]
    unreachable = {"LDPT_POSTGRES_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    r = ldpt("estimate", *base, "--db", str(store_path), env=unreachable)
    assert r.exit_code == 0 and "reports 4,000" in r.output, r.output
    r = ldpt("compare", "--metrics", str(registry_path), "--metric", "page", "--db", str(store_path),
             "--window", DAYS[0], "--against", DAYS[1], env=unreachable)
    assert r.exit_code == 0 and "changed: fwer" in r.output, r.output
    r = ldpt("estimate", *base, "--db", str(store_path), "--postgres", "postgresql://x@127.0.0.1/y")
    assert r.exit_code == 2 and "not --db and --postgres" in r.output and "LDPT_POSTGRES_DSN is set" not in r.output
    r = ldpt("estimate", *base, env=unreachable)   # no flag: the variable's store is used (and fails)
    assert r.exit_code == 1 and "PostgreSQL" in r.output, r.output
    r = ldpt("estimate", *base)
    assert r.exit_code == 2 and "--db PATH" in r.output and "ldpt.sqlite" in r.output and "does not exist" in r.output
    shutil.copy(store_path, tmp_path / "ldpt.sqlite")
    r = ldpt("estimate", *base)
    assert r.exit_code == 0 and "reports 4,000" in r.stdout and "reading ldpt.sqlite" in r.stderr
    (tmp_path / "ldpt.sqlite").unlink()
    r = ldpt("estimate", *base, env={"LDPT_DB": str(store_path)})
    assert r.exit_code == 0 and f"reading {store_path}" in r.stderr


def test_cli_estimate_says_which_windows_it_sums(registry_path, store_path):
    """Without --window an estimate sums every stored window: the header and JSON meta say
    which (and --help says it is the default)."""
    base = ["--metrics", str(registry_path), "--metric", "page", "--db", str(store_path)]
    r = ldpt("estimate", *base)
    assert r.exit_code == 0 and f"windows {DAYS[0]}..{DAYS[-1]} ({len(DAYS)}, summed)" in r.output.splitlines()[0]
    doc = json.loads(ldpt("estimate", *base, "--format", "json", "--since", DAYS[1]).output)
    assert doc["meta"]["window_range"] == {"first": DAYS[1], "last": DAYS[-1], "windows": len(DAYS) - 1}
    r = ldpt("estimate", *base, "--window", DAYS[0])
    assert f"window {DAYS[0]}" in r.output.splitlines()[0] and "summed" not in r.output.splitlines()[0]
    assert "every stored window" in " ".join(ldpt("estimate", "--help").output.split())


@pytest.mark.postgres
def test_postgres_store_for_analysts(registry_path, registry, store_path):
    dsn = os.environ.get("LDPT_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("LDPT_TEST_POSTGRES_DSN is not set")
    from collector.storage.postgres import PostgresStore

    schema = f"ldpt_series_{os.getpid()}"
    scoped = f"{dsn}{'&' if '?' in dsn else '?'}search_path={schema}"

    async def fill():
        store = await PostgresStore.open(scoped, create=True)
        try:
            for name in ("page", "minutes"):
                spec = registry.get(name)
                for day in DAYS:
                    await store.add_sketch(SketchKey(name, spec.fingerprint, day), load_day(store_path, spec, day))
        finally:
            await store.aclose()
    asyncio.run(fill())
    try:
        args = ["--metrics", str(registry_path), "--metric", "page", "--by", "window", "--format", "csv"]
        from_pg = ldpt("estimate", *args, env={"LDPT_POSTGRES_DSN": scoped})
        from_sqlite = ldpt("estimate", *args, "--db", str(store_path))
        assert from_pg.exit_code == 0, from_pg.output
        assert from_pg.output == from_sqlite.output
        r = ldpt("compare", "--metrics", str(registry_path), "--metric", "minutes", "--window", DAYS[0],
                 "--against", DAYS[2], env={"LDPT_POSTGRES_DSN": scoped})
        assert r.exit_code == 0 and "means" in r.output
    finally:
        import asyncpg

        async def drop():
            conn = await asyncpg.connect(dsn)
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()
        asyncio.run(drop())


def _serve(registry_path, store_path, tmp_path, min_reports: int = 0):
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    token.chmod(0o600)   # the collector refuses a token file others can read
    cfg = make_config(registry_path, environ={}, db=store_path, query_token_file=token, min_reports=min_reports)
    return create_app(cfg, load_registry(registry_path))


def test_api_series_and_compare_give_the_cli_bytes(registry_path, store_path, tmp_path):
    token = tmp_path / "token"
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def scenario():
        app = _serve(registry_path, store_path, tmp_path)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            out = {}
            for fmt in ("csv", "json"):
                resp = await client.get(f"/v1/metrics/page/estimates?by=window&since={DAYS[0]}&until={DAYS[-1]}"
                                        f"&format={fmt}", headers=auth)
                assert resp.status == 200
                out[fmt] = await resp.text()
            resp = await client.get(f"/v1/metrics/minutes/compare?a={DAYS[0]}&b={DAYS[1]}..{DAYS[2]}&format=csv",
                                    headers=auth)
            assert resp.status == 200
            out["compare"] = await resp.text()
            resp = await client.get(f"/v1/metrics/page/compare?a={DAYS[0]}&b={DAYS[1]}")
            assert resp.status == 401
            resp = await client.get(f"/v1/metrics/page/compare?a={DAYS[0]}&b=yesterday", headers=auth)
            assert resp.status == 400 and (await resp.json())["field"] == "b"
            resp = await client.get(f"/v1/metrics/page/compare?a={DAYS[0]}..&b={DAYS[1]}", headers=auth)
            doc = await resp.json()  # the message quotes what was sent, not an empty half
            assert resp.status == 400 and doc["field"] == "a" and f"a='{DAYS[0]}..'" in doc["detail"], doc
            resp = await client.get("/v1/metrics/page/estimates?by=month", headers=auth)
            assert resp.status == 400 and (await resp.json())["field"] == "by"
            resp = await client.get(f"/v1/metrics/page/estimates?by=window&window={DAYS[0]}", headers=auth)
            assert resp.status == 400
            resp = await client.get("/ui/charts/page/series.svg", headers=auth)
            assert resp.status == 200 and (await resp.text()).startswith("<svg")
            resp = await client.get("/ui/charts/page/pie.svg", headers=auth)
            assert resp.status == 404
            resp = await client.get("/ui/api/overview")
            assert resp.status == 401
            resp = await client.get("/ui/")
            assert resp.status == 200 and "script-src 'self'" in resp.headers["Content-Security-Policy"]
            return out
    out = asyncio.run(scenario())
    common = ["--metrics", str(registry_path), "--metric", "page", "--db", str(store_path), "--by", "window",
              "--since", DAYS[0], "--until", DAYS[-1]]
    assert ldpt("estimate", *common, "--format", "csv").output == out["csv"]
    assert ldpt("estimate", *common, "--format", "json").output == out["json"]
    r = ldpt("compare", "--metrics", str(registry_path), "--metric", "minutes", "--db", str(store_path),
             "--window", DAYS[0], "--against-range", f"{DAYS[1]}..{DAYS[2]}", "--format", "csv")
    assert r.output == out["compare"]
    assert token.exists()


#: (API query, the same ldpt estimate flags): every kind of query the one query layer
#: (collector/estimates.py) dispatches, asked both ways.
SAME_QUERIES = [
    ("page", "", []),
    ("page", f"window={DAYS[1]}", ["--window", DAYS[1]]),
    ("page", f"since={DAYS[1]}&until={DAYS[2]}", ["--since", DAYS[1], "--until", DAYS[2]]),
    ("page", "simultaneous=true&consistent=true&confidence=0.9",
     ["--simultaneous", "--consistent", "--confidence", "0.9"]),
    ("minutes", f"until={DAYS[1]}", ["--until", DAYS[1]]),
    ("minutes", f"by=window&since={DAYS[0]}&until={DAYS[2]}", ["--by", "window", "--since", DAYS[0], "--until", DAYS[2]]),
]


def test_every_kind_of_query_gives_the_api_and_the_cli_the_same_bytes(registry_path, store_path, tmp_path):
    """The query API and `ldpt estimate` on the store run one query layer: the same document,
    refusals aside, whatever the query (one window, a range, all windows, options, a numeric
    metric, a series), and `ldpt compare` the same comparison."""
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def scenario():
        async with TestClient(TestServer(_serve(registry_path, store_path, tmp_path), host="127.0.0.1")) as client:
            out = []
            for metric, query, _ in SAME_QUERIES:
                resp = await client.get(f"/v1/metrics/{metric}/estimates?format=json&{query}", headers=auth)
                assert resp.status == 200, (metric, query, await resp.text())
                out.append(await resp.text())
            resp = await client.get(f"/v1/metrics/page/compare?a={DAYS[0]}..{DAYS[1]}&b={DAYS[2]}&format=json"
                                    "&control=fdr&alpha=0.1", headers=auth)
            out.append(await resp.text())
            resp = await client.get(f"/v1/metrics/page/estimates?window={DAYS[2]}T07", headers=auth)
            out.append(await resp.json())
            return out
    *estimates, compared, empty = asyncio.run(scenario())
    for (metric, query, flags), body in zip(SAME_QUERIES, estimates, strict=True):
        r = ldpt("estimate", "--metrics", str(registry_path), "--metric", metric, "--db", str(store_path),
                 "--format", "json", "--silent", *flags)
        assert r.exit_code == 0, r.output
        assert r.output == body, (metric, query)
    r = ldpt("compare", "--metrics", str(registry_path), "--metric", "page", "--db", str(store_path),
             "--range", f"{DAYS[0]}..{DAYS[1]}", "--window", DAYS[2], "--format", "json", "--control", "fdr",
             "--alpha", "0.1")
    assert r.exit_code == 2   # --range and --window name the same side: the CLI says so
    r = ldpt("compare", "--metrics", str(registry_path), "--metric", "page", "--db", str(store_path),
             "--range", f"{DAYS[0]}..{DAYS[1]}", "--against", DAYS[2], "--format", "json", "--control", "fdr",
             "--alpha", "0.1")
    assert r.exit_code == 0 and r.output == compared
    # an empty window: each says so in its own words (a problem document; the store's name)
    assert empty["type"].endswith("/no-data") and empty["metric"] == "page"
    r = CliRunner().invoke(main, ["estimate", "--metrics", str(registry_path), "--metric", "page", "--db",
                                  str(store_path), "--window", f"{DAYS[2]}T07", "--silent"])
    assert r.exit_code == 1 and f"{store_path}: no reports of 'page' in window {DAYS[2]}T07" in r.output


def test_api_series_refuses_a_small_window(registry_path, store_path, tmp_path):
    async def scenario():
        app = _serve(registry_path, store_path, tmp_path, min_reports=4200)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            resp = await client.get("/v1/metrics/page/estimates?by=window",
                                    headers={"Authorization": f"Bearer {TOKEN}"})
            return resp.status, await resp.json()
    status, doc = asyncio.run(scenario())
    assert status == 403 and doc["reports"] == 4000 and "window 2026-03-01" in doc["detail"]


def test_hour_windows_make_an_hourly_series(registry_path, registry, tmp_path):
    spec = registry.get("page")
    db = tmp_path / "hourly.sqlite"
    store = SQLiteStore(db, create=True)
    rng = np.random.default_rng(9)
    for hour in ("2026-03-01T05", "2026-03-01T07"):
        store.add_sketch(SketchKey("page", spec.fingerprint, hour), sketch_of(spec, zipf(20), 2000, rng))
    store.close()
    r = ldpt("estimate", "--metrics", str(registry_path), "--metric", "page", "--db", str(db), "--by", "window",
             "--format", "csv")
    df = pd.read_csv(io.StringIO(r.output))
    assert list(dict.fromkeys(df["window"])) == window_grid("2026-03-01", "2026-03-01", True)
    assert df.groupby("window")["n"].first().to_dict()["2026-03-01T05"] == 2000
    assert (df.groupby("window")["n"].first() > 0).sum() == 2


@pytest.mark.e2e
def test_cli_series_and_compare_over_http(registry_path, store_path, tmp_path):
    """`--url` asks a real `ldpt serve` for the series and the comparison; same output as `--db`."""
    from tests.collector_support import serving

    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (tmp_path / "token").chmod(0o600)
    with serving(["--metrics", str(registry_path), "--db", str(store_path), "--port", "0",
                  "--query-token-file", str(tmp_path / "token")], tmp_path) as server:
        remote = ["--metrics", str(registry_path), "--url", server.url, "--token-file", str(tmp_path / "token")]
        local = ["--metrics", str(registry_path), "--db", str(store_path)]
        for fmt in ("csv", "table"):
            series = ["--metric", "page", "--by", "window", "--since", DAYS[0], "--until", DAYS[-1], "--format", fmt]
            got, want = ldpt("estimate", *remote, *series), ldpt("estimate", *local, *series)
            assert got.exit_code == 0, got.output
            assert got.output == want.output
        cmp = ["--metric", "minutes", "--window", DAYS[0], "--against", DAYS[2]]
        got, want = ldpt("compare", *remote, *cmp), ldpt("compare", *local, *cmp)
        assert got.exit_code == 0, got.output
        assert got.output == want.output


@pytest.mark.parametrize("metric", ["page", "minutes", "latency"])
def test_dashboard_svgs_are_well_formed_and_escape_labels(registry, metric):
    import xml.etree.ElementTree as ET

    from collector.ui_svg import compare_svg, estimates_svg, series_svg

    spec = registry.get(metric)
    rng = np.random.default_rng(4)
    make = (lambda: sketch_of(spec, zipf(20), 3000, rng)) if metric == "page" else \
        (lambda: numeric_sketch(spec, 300 if metric == "latency" else 40, 3000, rng))
    a, b = make(), make()
    empty = server_half(spec).new_sketch()
    series = series_frame(spec, [("2026-03-01", a), ("2026-03-02", empty), ("2026-03-03", b)])
    one = estimate_frame(spec, a)
    if metric == "page":  # markup, and control bytes XML cannot hold (issue 18: a raw ESC broke the SVG)
        one.loc[0, "value"] = series.loc[0, "value"] = "<b>&'\"\x1b]0;x\x07\x00"
    for svg in (estimates_svg(one), series_svg(series), compare_svg(compare_frame(spec, a, b, label_a="x", label_b="y"))):
        root = ET.fromstring(svg)  # well-formed XML: every label escaped
        assert root.tag.endswith("svg") and "<b>" not in svg
        assert root.findall(".//{http://www.w3.org/2000/svg}circle")
        assert "style=" not in svg  # the dashboard's CSP forbids inline styles
        assert 'viewBox="0 0 ' in svg  # the page scales it to its width
    if metric == "page":
        assert "\\x1b]0;x\\x07\\x00" in estimates_svg(one)  # shown, escaped


def test_dashboard_charts_say_what_they_draw(registry):
    """Legends for detected/changed, compare titled A then B as the selectors read, densities
    for unequal buckets, a histogram's series of p50 and p90, a chosen series' values (issue 23)."""
    from collector.ui_svg import bucket_widths, compare_svg, estimates_svg, series_svg, unequal

    rng = np.random.default_rng(5)
    page = registry.get("page")
    a, b = sketch_of(page, zipf(20), 3000, rng), sketch_of(page, zipf(20), 3000, rng)
    svg = estimates_svg(estimate_frame(page, a))
    assert "detected (count &gt; 0)" in svg and "not detected" in svg
    svg = compare_svg(compare_frame(page, a, b, label_a="2026-03-01", label_b="2026-03-02"))
    assert "from A 2026-03-01 to B 2026-03-02" in svg and "no change detected" in svg
    series = series_frame(page, [("2026-03-01", a), ("2026-03-02", b)])
    svg = series_svg(series, values=["p07", "p11", "nope"])
    assert ">p07</text>" in svg and ">p11</text>" in svg and ">p00</text>" not in svg
    assert ">p00</text>" in series_svg(series)  # default: the largest
    latency = registry.get("latency")
    h = [numeric_sketch(latency, 300, 3000, rng) for _ in range(2)]
    hist_series = series_frame(latency, [("2026-03-01", h[0]), ("2026-03-02", h[1])])
    hist_series.attrs["unit"] = "ms"
    svg = series_svg(hist_series)
    assert ">p50</text>" in svg and ">p90</text>" in svg and "quantile (ms)" in svg and "[0, 200)" not in svg
    assert not unequal(bucket_widths(["[0, 200)", "[200, 400)", "[400, 1000]"][:2]))
    assert unequal(bucket_widths(["[0, 250)", "[250, 500)", "[500, 1000]"]))
    one = estimate_frame(latency, h[0])
    assert "density" not in estimates_svg(one)  # 5 equal buckets: shares
    uneven = one.copy()
    labels = ["[0, 100)", "[100, 200)", "[200, 400)", "[400, 700)", "[700, 1000]"]
    uneven.loc[uneven["statistic"] == "count", "value"] = labels
    uneven.attrs = dict(one.attrs, unit="ms")
    assert "density: proportion of reports per ms" in estimates_svg(uneven)



def test_dashboard_charts_draw_a_narrow_layout_for_a_phone(registry):
    """width=... (the page's): drawn that wide, text at its size, legend under the series."""
    import xml.etree.ElementTree as ET

    from collector.ui_svg import MIN_WIDTH, compare_svg, estimates_svg, series_svg

    rng = np.random.default_rng(6)
    page = registry.get("page")
    a, b = sketch_of(page, zipf(20), 3000, rng), sketch_of(page, zipf(20), 3000, rng)
    series = series_frame(page, [("2026-03-01", a), ("2026-03-02", b)])
    for svg in (estimates_svg(estimate_frame(page, a), width=360), series_svg(series, width=360),
                compare_svg(compare_frame(page, a, b, label_a="x", label_b="y"), width=360)):
        root = ET.fromstring(svg)
        assert root.get("width") == "360" and root.get("viewBox").startswith("0 0 360 ")
        xs = [float(t.get("x")) for t in root.iter("{http://www.w3.org/2000/svg}text") if t.get("x")]
        assert min(xs) >= 0 and max(xs) <= 360
    assert float(ET.fromstring(series_svg(series, width=360)).get("height")) > 380  # legend below
    assert ET.fromstring(series_svg(series, width=10)).get("width") == str(MIN_WIDTH)
    assert ET.fromstring(series_svg(series, width=5000)).get("width") == "900"  # never wider than drawn


def test_cli_url_never_forwards_the_token_through_a_redirect(registry_path, tmp_path):
    """urllib re-sends every header, Authorization too, to wherever a 3xx points (another host,
    plain http). `ldpt estimate|compare --url` stop at a redirect and say where it pointed."""
    import http.server
    import threading

    seen: list[str | None] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    elsewhere = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}"

    class Redirector(Elsewhere):
        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.end_headers()

    redirector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    servers = [elsewhere, redirector]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    url = f"http://127.0.0.1:{redirector.server_address[1]}"
    try:
        r1 = ldpt("estimate", "--metrics", str(registry_path), "--metric", "page", "--url", url,
                  "--token-file", str(token))
        r2 = ldpt("compare", "--metrics", str(registry_path), "--metric", "page", "--url", url,
                  "--token-file", str(token), "--window", DAYS[0], "--against", DAYS[1])
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert seen == []  # the token never left for the other address
    for r in (r1, r2):
        assert r.exit_code != 0 and "redirect" in r.output and target in r.output, r.output
