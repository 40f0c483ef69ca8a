"""google/rappor interop: the three CSV formats, `ldpt rappor decode` and `ldpt rappor export`."""

from __future__ import annotations

import json

import click
import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from cli.rappor_cmd import rappor
from client_sdk.protocols.rappor import RapporParams
from client_sdk.registry import parse_registry
from collector.storage.base import SketchKey
from collector.storage.sqlite import open_store
from estimators import rappor_io
from estimators.rappor import CandidateMap, decode, sample_sketch
from sketches import server_half

PARAMS = RapporParams(k=16, h=2, m=8, f=0.5, p=0.25, q=0.75)
VALUES = [f"v{i}" for i in range(12)] + ["with,comma", 'with "quote"', "ünïcode", ""]


def zipf_truth(n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1)
    return w / w.sum()


@pytest.fixture
def google_files(tmp_path):
    cmap = CandidateMap.from_strings(VALUES, PARAMS)
    sketch = sample_sketch(PARAMS, cmap, zipf_truth(len(VALUES)), 300_000, np.random.default_rng(1))
    paths = rappor_io.write_google(tmp_path / "g", PARAMS, sketch, cmap)
    return paths, sketch, cmap


def test_round_trip_compares_every_field(google_files):
    paths, sketch, cmap = google_files
    params, back, read_map = rappor_io.read_google(paths["params"], paths["counts"], paths["map"])
    assert (params.k, params.h, params.m, params.f, params.p, params.q) == \
        (PARAMS.k, PARAMS.h, PARAMS.m, PARAMS.f, PARAMS.p, PARAMS.q)
    np.testing.assert_array_equal(back.counts, sketch.counts)
    np.testing.assert_array_equal(back.reports, sketch.reports)
    assert read_map.values == cmap.values
    assert (read_map.design != cmap.design).nnz == 0
    # a map read from a file (no positions) writes back the same design
    again = paths["map"].parent / "again.csv"
    rappor_io.write_map(again, read_map, params)
    assert (rappor_io.read_map(again, params).design != cmap.design).nnz == 0


def test_file_layout_matches_google(google_files):
    paths, sketch, cmap = google_files
    assert paths["params"].read_text().splitlines() == ["k,h,m,p,q,f", "16,2,8,0.25,0.75,0.5"]
    first = paths["counts"].read_text().splitlines()[0].split(",")
    assert len(first) == 17 and int(first[0]) == sketch.reports[0] and int(first[3]) == sketch.counts[0, 2]
    row = paths["map"].read_text().splitlines()[0].split(",")
    assert row[0] == "v0" and len(row) == 1 + 2 * 8
    expected = [c * 16 + b + 1 for c in range(8) for b in cmap.positions[0, c]]
    assert [int(x) for x in row[1:]] == expected


def test_google_quirks_are_accepted(tmp_path):
    (tmp_path / "params.csv").write_text('"k","h","m","p","q","f"\n16,2,2,0.5,0.75,0\n')
    params = rappor_io.read_params(tmp_path / "params.csv")
    assert params.f == 0 and params.m == 2 and params.epsilon_inf == float("inf")
    # a collision dropped by Google's tools leaves an empty field; a repeated string keeps row 1
    (tmp_path / "map.csv").write_text('"a",1,2,17,18\n"b",3,,19,20\n"a",5,6,21,22\n')
    cmap = rappor_io.read_map(tmp_path / "map.csv", params)
    assert cmap.values == ("a", "b")
    assert cmap.design[:, 0].indices.tolist() == [0, 1, 16, 17]
    assert cmap.design[:, 1].indices.tolist() == [2, 18, 19]
    (tmp_path / "counts.csv").write_text("10," + ",".join(["5"] * 16) + "\n\n12," + ",".join(["6"] * 16) + "\n")
    sk = rappor_io.read_counts(tmp_path / "counts.csv", params)
    assert sk.reports.tolist() == [10, 12] and sk.counts.sum() == 5 * 16 + 6 * 16


BAD_FILES = [
    ("params", "k,h,m,p,q\n16,2,8,0.25,0.75\n", "line 1: header must be k,h,m,p,q,f"),
    ("params", "k,h,m,p,q,f\n16,2,8,0.25,0.75,0.5\n16,2,8,0.25,0.75,0.5\n", "exactly one row"),
    ("params", "k,h,m,p,q,f\n16,two,8,0.25,0.75,0.5\n", "line 2, field 'h': 'two' is not an integer"),
    ("params", "k,h,m,p,q,f\n16,2,8,0.25,0.75\n", "line 2: expected 6 fields"),
    ("params", "k,h,m,p,q,f\n16,2,8,0.8,0.75,0.5\n", "line 2: invalid parameters: need 0 <= p < q"),
    ("params", "k,h,m,p,q,f\n16,2,8,0.25,x,0.5\n", "field 'q': 'x' is not a number"),
    ("params", "", "empty file"),
    ("counts", "10," + ",".join(["5"] * 15) + "\n", "line 1: expected 17 fields"),
    ("counts", "10,5,x" + ",5" * 14 + "\n", "line 1, column 3 (bit 1): 'x' is not an integer"),
    ("counts", "10,5,-1" + ",5" * 14 + "\n", "line 1, column 3 (bit 1): negative count -1"),
    ("counts", "10,5,11" + ",5" * 14 + "\n", "line 1, column 3 (bit 1): count 11 exceeds the cohort's 10 reports"),
    ("counts", "-3" + ",0" * 16 + "\n", "column 1 (reports): negative count -3"),
    ("counts", "10" + ",5" * 16 + "\n", "1 rows, expected m = 8"),
    ("counts", ("10" + ",5" * 16 + "\n") * 9, "line 9: more than m = 8 rows"),
    ("map", "a" + ",1" * 15 + "\n", "line 1: expected 17 fields"),
    ("map", "a,1,2,y" + ",1" * 13 + "\n", "line 1, column 4: 'y' is not an integer position"),
    ("map", "a,1,2,129" + ",1" * 13 + "\n", "line 1, column 4: position 129 is outside [1, m·k = 128]"),
    ("map", "a,1,2,0" + ",1" * 13 + "\n", "column 4: position 0 is outside"),
    ("map", "a" + "," * 16 + "\n", "candidate 'a' has no positions"),
    # integers beyond int64 used to escape as a numpy OverflowError (a traceback)
    ("counts", "1" + "0" * 30 + ",5" * 16 + "\n", "column 1 (reports): '1" + "0" * 30 + "' is out of range"),
    ("map", "a,1,2," + "9" * 30 + ",1" * 13 + "\n", "line 1, column 4: '" + "9" * 30 + "' is not an integer position"),
    ("map", "", "no candidate strings"),
]


@pytest.mark.parametrize("which,text,words", BAD_FILES)
def test_bad_files_are_rejected_precisely(tmp_path, google_files, which, text, words):
    paths, _, _ = google_files
    bad = tmp_path / f"{which}.csv"
    bad.write_text(text, encoding="utf-8")
    args = {k: str(v) for k, v in paths.items()}
    args[which] = str(bad)
    result = CliRunner().invoke(main, ["rappor", "decode", "--params", args["params"], "--counts",
                                       args["counts"], "--map", args["map"]])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.output
    assert str(bad) in lines[0] and words in lines[0], lines[0]


def test_missing_and_unreadable_files(tmp_path, google_files):
    paths, _, _ = google_files
    out = CliRunner().invoke(rappor, ["decode", "--params", str(tmp_path / "nope.csv"), "--counts",
                                      str(paths["counts"]), "--map", str(paths["map"])])
    assert out.exit_code == 1 and "nope.csv: file not found" in out.output
    assert len(out.output.strip().splitlines()) == 1
    out = CliRunner().invoke(rappor, ["decode", "--params", str(tmp_path), "--counts", str(paths["counts"]),
                                      "--map", str(paths["map"])])
    assert out.exit_code == 2 and "is a directory" in out.output and "Traceback" not in out.output
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00k")
    with pytest.raises(rappor_io.RapporFileError, match="not a UTF-8"):
        rappor_io.read_params(tmp_path / "bin.csv")


def test_cli_decode_formats_and_google_columns(tmp_path, google_files):
    paths, sketch, cmap = google_files
    base = ["rappor", "decode", "--params", str(paths["params"]), "--counts", str(paths["counts"]),
            "--map", str(paths["map"])]
    runner = CliRunner()
    table = runner.invoke(main, base)
    assert table.exit_code == 0, table.output
    assert "protocol rappor" in table.output and "candidates detected (fwer 0.05)" in table.output
    as_json = json.loads(runner.invoke(main, [*base, "--format", "json"]).output)
    assert as_json["meta"]["summary"]["reports"] == 300_000 and len(as_json["estimates"]) == len(VALUES)
    out = tmp_path / "result.csv"
    assert runner.invoke(main, [*base, "--format", "csv", "--output", str(out), "--control", "fdr"]).exit_code == 0
    header = out.read_text().splitlines()[0]
    assert header == "value,estimate,proportion,std_err,ci_low,ci_high,p_value,detected,share,share_low," \
                     "share_high,reported"
    assert as_json["meta"]["units"]["estimate"] == "count" and as_json["meta"]["units"]["share"] == "proportion"
    assert as_json["meta"]["metric"] == "unnamed" and "columns in counts of reports: estimate" in table.output
    named = json.loads(runner.invoke(main, [*base, "--metric", "home_page", "--format", "json"]).output)
    assert named["meta"]["metric"] == "home_page"
    assert "metric home_page " in runner.invoke(main, [*base, "--metric", "home_page"]).output
    google = runner.invoke(main, [*base, "--rappor-columns", "--format", "csv"]).output.splitlines()
    assert google[0] == ",".join(rappor_io.RAPPOR_COLUMNS)
    direct = decode(sketch, PARAMS, cmap)
    assert len(google) - 1 == int(direct["detected"].sum()) and google[1].startswith("v0,")
    rows = json.loads(runner.invoke(main, [*base, "--rappor-columns", "--format", "json"]).output)
    assert rows[0]["string"] == "v0" and rows[0]["prop_low_95"] <= rows[0]["proportion"] <= rows[0]["prop_high_95"]


REGISTRY = '[metrics.home]\nkind = "string"\nbloom_bits = 16\nhashes = 2\ncohorts = 8\nprob_f = 0.5\n' \
           'prob_p = 0.25\nprob_q = 0.75\n\n[metrics.theme]\nkind = "categorical"\n' \
           'categories = ["a", "b"]\nepsilon = 1.0\n'


def test_export_then_decode_equals_direct_decode(tmp_path):
    reg_path = tmp_path / "metrics.toml"
    reg_path.write_text(REGISTRY)
    spec = parse_registry(REGISTRY).get("home")
    proto = server_half(spec)
    cmap = CandidateMap.from_strings(VALUES, proto.params)
    sketch = sample_sketch(proto.params, cmap, zipf_truth(len(VALUES)), 200_000, np.random.default_rng(3))
    db = tmp_path / "store.sqlite"
    store = open_store(db, create=True)
    half = sketch.copy()
    half.counts //= 2
    half.reports //= 2
    rest = type(sketch)(sketch.counts - half.counts, sketch.reports - half.reports)
    store.add_sketch(SketchKey("home", spec.fingerprint, "2026-01-01"), half)
    store.add_sketch(SketchKey("home", spec.fingerprint, "2026-01-02"), rest)
    store.close()
    cand = tmp_path / "candidates.txt"
    cand.write_text("\n".join(v for v in VALUES if v) + "\n", encoding="utf-8")
    out_dir = tmp_path / "export"
    runner = CliRunner()
    res = runner.invoke(main, ["rappor", "export", "--metrics", str(reg_path), "--metric", "home", "--db",
                               str(db), "--candidates", str(cand), "--out-dir", str(out_dir)])
    assert res.exit_code == 0, res.output
    assert "200000 reports" in res.output
    res = runner.invoke(main, ["rappor", "decode", "--params", str(out_dir / "params.csv"), "--counts",
                               str(out_dir / "counts.csv"), "--map", str(out_dir / "map.csv"), "--format", "json"])
    assert res.exit_code == 0, res.output
    via_files = json.loads(res.output)["estimates"]
    direct = decode(sketch, proto, [v for v in VALUES if v])
    assert [r["value"] for r in via_files] == list(direct["value"])
    for col in ("estimate", "std_err", "ci_low", "ci_high", "p_value"):
        np.testing.assert_allclose([r[col] for r in via_files], direct[col], rtol=1e-12, atol=1e-300)
    assert [r["detected"] for r in via_files] == list(direct["detected"])
    # one window only
    res = runner.invoke(main, ["rappor", "export", "--metrics", str(reg_path), "--metric", "home", "--db",
                               str(db), "--candidates", str(cand), "--out-dir", str(out_dir), "--window",
                               "2026-01-01"])
    assert res.exit_code == 0 and f"{int(half.reports.sum())} reports" in res.output


@pytest.mark.parametrize("args,words", [
    (["--metric", "theme"], "protocol"),
    (["--metric", "nope"], "unknown metric"),
    (["--metric", "home", "--window", "2026-01-01", "--since", "2026-01-01"], "either --window"),
])
def test_export_errors_are_one_line(tmp_path, args, words):
    reg_path = tmp_path / "metrics.toml"
    reg_path.write_text(REGISTRY)
    db = tmp_path / "store.sqlite"
    open_store(db, create=True).close()
    cand = tmp_path / "c.txt"
    cand.write_text("a\n")
    res = CliRunner().invoke(main, ["rappor", "export", "--metrics", str(reg_path), "--db", str(db),
                                    "--candidates", str(cand), "--out-dir", str(tmp_path / "o"), *args])
    assert res.exit_code != 0 and words in res.output and "Traceback" not in res.output


def test_export_without_data_or_store(tmp_path):
    reg_path = tmp_path / "metrics.toml"
    reg_path.write_text(REGISTRY)
    cand = tmp_path / "c.txt"
    cand.write_text("a\n")
    db = tmp_path / "store.sqlite"
    base = ["rappor", "export", "--metrics", str(reg_path), "--metric", "home", "--candidates", str(cand),
            "--out-dir", str(tmp_path / "o"), "--db", str(db)]
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 1 and "no store" in res.output
    open_store(db, create=True).close()
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 1 and "no data for metric 'home'" in res.output


def test_group_is_registered_and_standalone():
    assert main.get_command(click.Context(main), "rappor") is rappor
    assert set(rappor.commands) == {"decode", "export"}
    res = CliRunner().invoke(rappor, ["--help"])
    assert res.exit_code == 0 and "decode" in res.output and "export" in res.output
