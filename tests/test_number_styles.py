"""One number style per column, in the CLI's tables and on the dashboard alike (issue 31).

Counts to 0.1, shares to 4 decimals, values in a metric's units to 4 significant digits, all
fixed-point with thousands separators; p-values in one scientific notation, "<1e-300" for a
tail too small for a float (the exports keep its exact 0.0).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cli.output import format_number, format_p


def test_format_number_is_fixed_point_with_separators():
    assert [format_number(v) for v in (458.73, 1088.2, 1191.45, 12345.6, 0.00012345, -75.7, 0.0)] == \
        ["458.7", "1,088", "1,191", "12,346", "0.0001234", "-75.70", "0"]
    assert format_number(5.1247965e99) == "5.125e+99" and format_number(None) == ""


def test_format_p_has_one_notation_and_never_prints_zero():
    assert [format_p(v) for v in (0.048, 0.95, 1.0, 4.1e-49, 3e-301, 0.0, float("nan"))] == \
        ["4.8e-02", "9.5e-01", "1.0e+00", "4.1e-49", "<1e-300", "<1e-300", ""]


def test_number_styles_match_the_cli():
    """The dashboard's fmt.num and fmt.p (app.js) write what cli.output writes (checked in Node
    when it is installed: the same rule in both languages)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the dashboard's formatters are checked in the browser tests only")
    source = (Path(__file__).parent.parent / "collector" / "static" / "app.js").read_text(encoding="utf-8")
    body = source[source.index("const grouped"):source.index("const plural")]
    values = [0.0, 1e-320, 3e-301, 4.1e-49, 0.048, 0.95, 1.0, 458.73, 1088.2, 999.96, 12345.6, 0.00012345,
              -75.7, 1191.45, 5.1247965e99, -2.5e15, 1e15, 123456.7]
    script = body + f"const xs = {json.dumps(values)}; console.log(JSON.stringify(xs.map(v => [fmt.num(v), fmt.p(v)])));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60, check=True).stdout
    got = json.loads(out)
    assert got == [[format_number(v), format_p(v)] for v in values]


def test_a_joint_table_has_one_style_per_column(tmp_path):
    """`ldpt estimate` of a joint metric: counts with one decimal, shares with four, the means and
    the χ² statistic in 4 significant digits, thousands separated, and no p-value printed as 0."""
    from click.testing import CliRunner

    from cli.main import main

    root = Path(__file__).parent.parent
    reg = root / "docs" / "examples" / "joint.toml"
    runner = CliRunner()
    for metric in ("crash_by_os", "startup_by_os"):
        out = runner.invoke(main, ["simulate", "--metrics", str(reg), "--metric", metric, "--clients", "50000",
                                   "--seed", "2", "--db", str(tmp_path / "j.sqlite"), "--silent"])
        assert out.exit_code == 0, out.output
        out = runner.invoke(main, ["estimate", "--metrics", str(reg), "--metric", metric, "--db",
                                   str(tmp_path / "j.sqlite")])
        assert out.exit_code == 0, out.output
        lines = out.output.splitlines()[2:]
        p_values = [line.split()[-2] if line.split()[-1] in ("True", "False") else line.split()[-1]
                    for line in lines if line.split()[0] == "independence"
                    or (line.split()[0] == "count" and "|" in line.split()[1])]  # the tested rows
        assert p_values and all(p == "<1e-300" or re.fullmatch(r"\d\.\de[+-]\d{2,3}", p) for p in p_values), p_values
        for line in lines:
            if line.split()[0] == "independence":      # χ² like the means: 4 significant digits
                chi2 = line.split(")")[1].split()[0]
                assert chi2 == format_number(float(chi2.replace(",", ""))), line
            if line.lstrip().startswith("mean "):
                tokens = [t for t in line.split() if t not in ("True", "False")]  # detected, if shown
                numbers = tokens[-4:]
                assert all(n == format_number(float(n.replace(",", ""))) for n in numbers), line
