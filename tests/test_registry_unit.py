"""Registry ``unit`` of numeric metrics (issue 23): a label shown beside estimates in the CLI,
the query API's meta and the dashboard; not part of the fingerprint."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk.errors import RegistryError
from client_sdk.registry import parse_metric

NUMERIC = {"kind": "numeric", "range": [0, 5000], "buckets": [0, 250, 1000, 5000], "protocol": "auto",
           "epsilon": 2.0}


def test_unit_round_trips_and_leaves_the_fingerprint_alone():
    spec = parse_metric("startup_ms", {**NUMERIC, "unit": "ms"})
    assert spec.unit == "ms"
    assert spec.to_toml_table()["unit"] == "ms"
    again = parse_metric("startup_ms", spec.to_toml_table())
    assert dataclasses.asdict(again) == dataclasses.asdict(spec)
    assert spec.fingerprint == parse_metric("startup_ms", NUMERIC).fingerprint
    assert "unit" not in parse_metric("startup_ms", NUMERIC).to_toml_table()


@pytest.mark.parametrize("table, match", [
    ({"kind": "boolean", "protocol": "rr", "epsilon": 1.0, "unit": "ms"}, "only numeric metrics take unit"),
    ({**NUMERIC, "unit": 5}, "short label"),
    ({**NUMERIC, "unit": "m\x1bs"}, "short label"),
    ({**NUMERIC, "unit": "x" * 33}, "short label"),
])
def test_bad_units_are_refused_naming_the_field(table, match):
    with pytest.raises(RegistryError, match=match) as info:
        parse_metric("m", table)
    assert "unit" in str(info.value)


def test_cli_table_and_json_show_the_unit(tmp_path):
    reg = tmp_path / "m.toml"
    reg.write_text('[metrics.startup_ms]\nkind = "numeric"\nrange = [0, 5000]\nunit = "ms"\n'
                   'buckets = [0, 250, 1000, 5000]\nprotocol = "auto"\nepsilon = 2.0\n', encoding="utf-8")
    db = str(tmp_path / "s.sqlite")
    run = CliRunner().invoke
    assert run(main, ["simulate", "--metrics", str(reg), "--metric", "startup_ms", "--clients", "2000",
                      "--distribution", "lognormal:6.5,0.6", "--seed", "1", "--db", db, "--silent"]).exit_code == 0
    table = run(main, ["estimate", "--metrics", str(reg), "--metric", "startup_ms", "--db", db]).output
    assert table.splitlines()[0].endswith("unit ms")
    doc = run(main, ["estimate", "--metrics", str(reg), "--metric", "startup_ms", "--db", db, "--format", "json"])
    assert '"unit": "ms"' in doc.output
