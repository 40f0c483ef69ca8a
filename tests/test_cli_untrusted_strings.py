"""What analysts open (issue 18, part 6): reported strings are chosen by whoever sends reports,
so CSV exports must not carry live spreadsheet formulas, terminal tables must not carry control
sequences, and plot labels are text, never matplotlib mathtext."""

from __future__ import annotations

import csv
import io

import pandas as pd
import pytest
from click.testing import CliRunner

from cli.main import main
from estimators.formats import escape_controls, frame_to_csv, printable, spreadsheet_safe

FORMULA = "=cmd|' /C calc'!A0"
TITLE = "\x1b]0;pwned\x07evil.example"
MATH = "$\\undefinedmacro$"
STRINGS = [FORMULA, TITLE, MATH, "+1", "-2", "@sum", "\tx", "\rx", "plain.example"]


def ldpt(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("text", [FORMULA, "+1", "-2", "@sum", "\t=1", "\r=1"])
def test_formula_prefixes_are_neutralised(text):
    assert spreadsheet_safe(text) == "'" + text


@pytest.mark.parametrize("value", ["plain", "a=b", "", 3.5, -2.0, None])
def test_other_cells_are_unchanged(value):
    assert spreadsheet_safe(value) == value


def test_csv_numbers_stay_exact_and_raw_keeps_strings():
    df = pd.DataFrame({"value": [FORMULA, "ok"], "estimate": [-120.25, 3.0]})
    safe = list(csv.DictReader(io.StringIO(frame_to_csv(df))))
    assert [r["value"] for r in safe] == ["'" + FORMULA, "ok"]
    assert safe[0]["estimate"] == "-120.25"  # numbers are never prefixed
    raw = list(csv.DictReader(io.StringIO(frame_to_csv(df, raw=True))))
    assert raw[0]["value"] == FORMULA


def test_csv_escapes_c0_and_c1_controls_unless_raw():
    """Issue 26 §5: CSV carried raw ESC and BEL from reported strings; printed in a terminal
    they set its title or cleared it. Every C0/C1 control and DEL is now \\xNN (before the
    formula check, so a tab before = is an escape, not a formula); raw keeps the bytes."""
    clear = "\x1b[2J\x1b[H\x9b31mred\x7f"
    assert escape_controls(TITLE) == "\\x1b]0;pwned\\x07evil.example"
    assert escape_controls(clear) == "\\x1b[2J\\x1b[H\\x9b31mred\\x7f"
    assert escape_controls("café ü 東京 a\u200bb") == "café ü 東京 a\u200bb"   # only controls
    assert escape_controls(3.5) == 3.5
    df = pd.DataFrame({"value": [TITLE, clear, "\t=1", "line\nbreak"], "estimate": [1.0, 2.0, 3.0, 4.0]})
    text = frame_to_csv(df)
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in text.replace("\n", "")), repr(text)
    assert text.count("\n") == 5                               # header + 4 rows: no break inside a value
    values = [r["value"] for r in csv.DictReader(io.StringIO(text))]
    assert values == ["\\x1b]0;pwned\\x07evil.example", "\\x1b[2J\\x1b[H\\x9b31mred\\x7f", "\\x09=1",
                      "line\\x0abreak"]
    raw = [r["value"] for r in csv.DictReader(io.StringIO(frame_to_csv(df, raw=True)))]
    assert raw == [TITLE, clear, "\t=1", "line\nbreak"]


def test_printable_escapes_control_characters_only():
    assert printable(TITLE) == "\\x1b]0;pwned\\x07evil.example"
    assert printable("café ü 東京") == "café ü 東京"
    assert printable("a\u200bb") == "a\\u200bb"


@pytest.fixture
def strings_store(tmp_path):
    """A RAPPOR string metric whose devices reported attacker-chosen strings."""
    reg = tmp_path / "s.toml"
    reg.write_text('[metrics.page]\nkind = "string"\nprotocol = "rappor"\nbloom_bits = 128\nhashes = 2\n'
                   'cohorts = 8\nepsilon = 4.0\n', encoding="utf-8")
    weights = tmp_path / "w.csv"
    with weights.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["value", "count"], *[[s, 1000 + 100 * i] for i, s in enumerate(STRINGS)]])
    cands = tmp_path / "candidates.txt"
    cands.write_text("\n".join(s.strip() for s in STRINGS) + "\n", encoding="utf-8")
    db = tmp_path / "s.sqlite"
    r = ldpt("simulate", "--metrics", str(reg), "--metric", "page", "--clients", "20000",
             "--distribution", f"csv:{weights}", "--seed", "1", "--db", str(db), "--silent")
    assert r.exit_code == 0, r.output
    return ["--metrics", str(reg), "--metric", "page", "--db", str(db), "--candidates", str(cands)]


def test_estimate_csv_is_spreadsheet_safe_unless_raw(strings_store):
    r = ldpt("estimate", *strings_store, "--format", "csv")
    assert r.exit_code == 0, r.output
    values = [row["value"] for row in csv.DictReader(io.StringIO(r.output))]
    assert "'" + FORMULA in values and FORMULA not in values
    assert not any(v.startswith(("=", "+", "-", "@")) for v in values)
    raw = [row["value"] for row in csv.DictReader(io.StringIO(ldpt("estimate", *strings_store, "--format",
                                                                  "csv", "--raw-csv").output))]
    assert FORMULA in raw


def test_estimate_csv_carries_no_control_bytes_unless_raw(strings_store):
    """The issue's case through the CLI: `ldpt estimate --format csv` wrote the ESC and BEL of
    a reported string as they came."""
    r = ldpt("estimate", *strings_store, "--format", "csv")
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "\\x1b]0;pwned\\x07evil.example" in r.output
    raw = ldpt("estimate", *strings_store, "--format", "csv", "--raw-csv").output
    assert TITLE in raw


def test_the_query_api_csv_escapes_unless_raw_csv(strings_store, tmp_path):
    """The API's format=csv: the same escaping, and raw_csv=true for the exact strings."""
    import asyncio

    from client_sdk.registry import load_registry

    from .collector_support import write_token
    from .test_collector_app import running

    registry_path, db = strings_store[1], strings_store[5]
    setup = (registry_path, load_registry(registry_path), write_token(tmp_path / "token"), db)
    query = "&".join(f"candidates={c}" for c in ("evil.example", "plain.example"))
    auth = {"Authorization": "Bearer test-token-0123456789abcdef"}

    async def scenario():
        async with running(setup) as (client, _):
            out = {}
            for extra in ("", "&raw_csv=true"):
                # the string itself, percent-encoded, as one more candidate
                resp = await client.get(f"/v1/metrics/page/estimates?format=csv&{query}{extra}",
                                        params={"candidates": TITLE.strip()}, headers=auth)
                assert resp.status == 200, await resp.text()
                out[extra] = await resp.text()
            return out

    out = asyncio.run(scenario())
    assert "\x1b" not in out[""] and "\x07" not in out[""] and "\\x1b]0;pwned\\x07evil.example" in out[""]
    assert TITLE in out["&raw_csv=true"]


def test_estimate_table_escapes_terminal_control_sequences(strings_store):
    r = ldpt("estimate", *strings_store)
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "\\x1b]0;pwned\\x07evil.example" in r.output


def test_plot_labels_are_text_not_mathtext(strings_store, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    r = ldpt("estimate", *strings_store, "--plot", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000
