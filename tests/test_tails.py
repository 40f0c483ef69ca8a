"""The scipy-free z and binomial tails (estimators/tails.py) are within their stated error
bounds of scipy's on a grid that reaches the tails, and a fresh `ldpt estimate` table of a pure
protocol imports neither scipy nor pandas (issue 32)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import special

from estimators.intervals import binom_sf
from estimators.tails import (
    NORMAL_ABS_ERROR,
    NORMAL_REL_ERROR,
    TAIL_ABS_ERROR,
    Z_REL_ERROR,
    _bd0,
    _stirlerr,
    binomial_upper_tails,
    normal_upper_quantile,
    normal_upper_tails,
)


def test_normal_quantile_is_within_its_bound_of_ndtri() -> None:
    worst = 0.0
    for confidence in [*np.linspace(0.5, 0.9999, 120).tolist(), 0.8, 0.9, 0.95, 0.99, 0.999]:
        for family in (1, 2, 7, 100, 12_345, 10 ** 6, 10 ** 8):
            a = (1.0 - confidence) / family / 2
            z = float(-special.ndtri(a))
            worst = max(worst, abs(normal_upper_quantile(a) - z) / z)
    assert worst <= Z_REL_ERROR / 10   # the bound has a tenfold margin over the grid's worst


def test_normal_tails_are_within_their_bound_of_ndtr() -> None:
    z = np.r_[np.linspace(-40, 40, 20001), -0.70710678, 0.70710678, 0.0, np.inf, -np.inf, np.nan]
    p, ref = normal_upper_tails(z), special.ndtr(-z)
    np.testing.assert_array_equal(np.isnan(p), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.all(np.abs(p - ref)[ok] <= NORMAL_REL_ERROR / 100 * ref[ok] + NORMAL_ABS_ERROR)


@pytest.mark.parametrize("n", [1, 2, 5, 17, 100, 1_500, 12_345, 10 ** 5, 10 ** 6, 3 * 10 ** 6])
def test_binomial_tails_are_within_their_bound_of_scipy(n: int) -> None:
    for q in (1e-6, 1e-3, 0.01, 0.0909, 0.3, 0.5, 0.9, 0.999):
        mean, sd = n * q, (n * q * (1 - q)) ** 0.5
        s = np.unique(np.r_[np.arange(-2, min(n, 60) + 2), np.rint(mean + sd * np.linspace(-45, 45, 1500)),
                            n - 1, n, n + 1, n + 5]).astype(np.int64)
        p, rel = binomial_upper_tails(s, n, q)
        ref = binom_sf(s - 1, n, q)
        # where a table could print the value (from 1e-300 on) the relative bound holds, with a
        # hundredfold margin over what is measured (scipy's own error); below, both print "<1e-300"
        shown = ref >= 1e-306
        assert np.all(np.abs(p - ref)[shown] <= rel / 100 * ref[shown] + TAIL_ABS_ERROR), (n, q)
        assert np.all(p[~shown] < 1e-300), (n, q)


@pytest.mark.parametrize(("n", "q"), [(3 * 10 ** 6, 1e-6), (2_000, 0.3), (10 ** 5, 0.0909)])
def test_binomial_tails_against_exact_decimal_sums(n: int, q: float) -> None:
    """The tails themselves are within 1e-13 of 50-digit arithmetic (scipy's error is larger)."""
    from decimal import Decimal, getcontext

    getcontext().prec = 50
    qd = Decimal(q)   # the float's exact value
    start = max(0, int(n * q - 6 * (n * q * (1 - q)) ** 0.5))
    pmf, below = Decimal(0), Decimal(0)
    for k in range(0, start + 40):   # P(X = k) by the recursion from P(X = 0), P(X < k) summed
        pmf = (1 - qd) ** n if k == 0 else pmf * (n - k + 1) / k * qd / (1 - qd)
        if k >= start:
            p = binomial_upper_tails(np.array([k]), n, q)[0][0]
            exact = 1 - below
            assert abs(Decimal(float(p)) - exact) <= Decimal("1e-13") * exact, (k, float(exact))
        below += pmf


def test_binomial_tails_refuse_what_they_cannot_bound() -> None:
    assert binomial_upper_tails(np.arange(3), 10, 0.0) is None
    assert binomial_upper_tails(np.arange(3), 10, 1.0) is None
    assert binomial_upper_tails(np.arange(3), 10 ** 14, 0.5) is None   # a band of millions of terms


def test_loader_terms_against_scipy() -> None:
    k = np.arange(1, 3000, dtype=np.float64)
    exact = special.gammaln(k + 1) - (k + 0.5) * np.log(k) + k - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(_stirlerr(k)[:200], exact[:200], rtol=1e-9)   # lgamma cancels beyond
    x = np.linspace(0, 5000, 1001)
    direct = np.where(x > 0, special.xlogy(x, x / 2500.0), 0.0) + 2500.0 - x
    np.testing.assert_allclose(_bd0(x, 2500.0), direct, rtol=1e-9, atol=1e-9)


@pytest.mark.e2e   # a subprocess and a simulated store: ~8 s under load
def test_a_fresh_table_of_a_pure_protocol_imports_neither_scipy_nor_pandas(tmp_path) -> None:
    reg, db = tmp_path / "metrics.toml", tmp_path / "store.sqlite"
    reg.write_text('[metrics.big]\nkind = "categorical"\ncategories = { ids = 20000 }\nprotocol = "hr"\n'
                   'epsilon = 2.0\n', encoding="utf-8")
    from click.testing import CliRunner

    from cli.main import main

    done = CliRunner().invoke(main, ["simulate", "--metrics", str(reg), "--metric", "big", "--clients", "20000",
                                     "--db", str(db), "--silent", "--seed", "3"])
    assert done.exit_code == 0, done.output
    code = ("import sys, json; from click.testing import CliRunner; from cli.main import main; "
            f"r = CliRunner().invoke(main, ['estimate', '--metrics', {str(reg)!r}, '--metric', 'big', '--db', "
            f"{str(db)!r}, '--silent', '--top', '5']); "
            "print(json.dumps([r.exit_code, r.output, sorted({m.split('.')[0] for m in sys.modules})]))")
    exit_code, output, modules = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                           text=True, check=True).stdout)
    assert exit_code == 0, output
    assert "scipy" not in modules and "pandas" not in modules
    csv = CliRunner().invoke(main, ["estimate", "--metrics", str(reg), "--metric", "big", "--db", str(db),
                                    "--silent", "--top", "5", "--format", "csv"])
    assert csv.exit_code == 0 and len(csv.output.splitlines()) == 6
