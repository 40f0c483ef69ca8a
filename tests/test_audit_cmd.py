"""`ldpt audit` and estimators.audit: the attacker that explains what epsilon means.

The reports come from the SDK's encoding path with OS-CSPRNG coins (as on a device), so the
figures are random: every check compares a Clopper–Pearson interval (95 %, or a wider one
where stated) with the bound, which fails a correct implementation far less than once in 10⁴.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk.registry import parse_registry
from estimators.audit import accuracy_interval, auc_from_scores, distinguish, link
from sketches import server_half

REGISTRY = """
[metrics.flag]
kind = "boolean"
protocol = "rr"
epsilon = 1.0

[metrics.lflag]
kind = "boolean"
protocol = "lgrr"
epsilon = 1.0
epsilon_inf = 2.5

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system", "other"]
epsilon = 1.0
epsilon_inf = 3.0

[metrics.bars]
kind = "categorical"
categories = ["b0", "b1", "b2", "b3", "b4", "b5"]
protocol = "losue"
epsilon = 1.0
epsilon_inf = 3.0

[metrics.city]
kind = "categorical"
categories = ["c0", "c1", "c2", "c3", "c4", "c5"]
protocol = "loloha"
epsilon = 1.0
epsilon_inf = 3.0

[metrics.site]
kind = "string"

[metrics.hadamard]
kind = "categorical"
categories = ["a", "b", "c", "d"]
protocol = "hr"
epsilon = 1.0
"""


@pytest.fixture(scope="module")
def registry():
    return parse_registry(REGISTRY)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


@pytest.mark.statistical
@pytest.mark.parametrize("metric", ["flag", "lflag"])
def test_one_report_is_tight_at_the_epsilon_one_bound(registry, metric):
    """Binary mechanisms attain e^ε₁/(1+e^ε₁) with one report: the interval contains it."""
    spec = registry.get(metric)
    row = distinguish(spec, ("false", "true"), 1, 4000, np.random.default_rng(1))
    eps1 = server_half(spec).epsilon
    assert row.epsilon == pytest.approx(eps1)
    low, high = wider(row)
    assert low <= math.exp(eps1) / (1 + math.exp(eps1)) <= high, row


def wider(row) -> tuple[float, float]:
    """A 99.99 % Clopper–Pearson interval of the attacker's accuracy."""
    from scipy import stats

    ci = stats.binomtest(round(row.accuracy * row.trials), row.trials).proportion_ci(0.9999, method="exact")
    return ci.low, ci.high


@pytest.mark.statistical
@pytest.mark.parametrize("metric,pair", [("flag", ("false", "true")), ("lflag", ("false", "true")),
                                         ("theme", ("light", "dark")), ("bars", ("b0", "b1")),
                                         ("city", ("c0", "c1")), ("site", ("a.example", "b.example"))])
def test_never_significantly_above_the_ledger_bound(registry, metric, pair):
    spec = registry.get(metric)
    rng = np.random.default_rng(2)
    for t in (1, 3, 12):
        row = distinguish(spec, pair, t, GAMES, rng)
        assert not above_bound(round(row.accuracy * row.trials), row.trials, row.bound), row
        # the reported lower bound is the 95 % one (at a tight bound it exceeds ε 2.5 % of the
        # time, so it is not what the check above tests): the logit of the interval's low end
        assert row.epsilon_lower_bound == pytest.approx(logit(row.ci_low) if row.ci_low > 0.5 else 0.0)


#: Games per (metric, T): with the one-sided exact test below at level 1e-4, an attacker 0.035
#: above the bound fails it with probability >= 0.5 and one 0.05 above with >= 0.95 (checked
#: exactly by test_the_bound_check_has_the_power_it_claims); 600 games and a 99.99 % two-sided
#: interval let one ~0.07 above pass half the time.
GAMES = 3000
#: Chance that a correct attacker (accuracy at most the bound) fails one check.
FALSE_FAILURE = 1e-4


def above_bound(correct: int, trials: int, bound: float) -> bool:
    """Exact one-sided binomial test of "accuracy <= bound": P(X >= correct | bound) < 1e-4."""
    from scipy import stats

    return bool(stats.binom.sf(correct - 1, trials, bound) < FALSE_FAILURE)


@pytest.mark.parametrize("bound", [0.6225, 0.7311, 0.924])   # e^ε/(1+e^ε) at ε = 0.5, 1, 2.5
def test_the_bound_check_has_the_power_it_claims(bound):
    """Exactly, from the binomial law: the check fails an attacker at the bound with probability
    <= 1e-4, one 0.035 above (capped below 1) with >= 0.5, and one 0.05 above with >= 0.95."""
    from scipy import stats

    n = GAMES
    first_failing = next(k for k in range(n + 1) if above_bound(k, n, bound))

    def fail_rate(p: float) -> float:
        return float(stats.binom.sf(first_failing - 1, n, min(p, 0.9999)))

    assert fail_rate(bound) <= FALSE_FAILURE
    assert fail_rate(bound + 0.035) >= 0.5 or bound + 0.035 >= 0.96
    assert fail_rate(bound + 0.05) >= 0.95 or bound + 0.05 >= 0.97
    # the old check (600 games, 99.99 % Clopper–Pearson lower bound <= bound) passed an attacker
    # 0.05 above the bound more often than not (that is what made it weak)
    high = min(bound + 0.05, 0.9999)
    ks = range(int(600 * high - 60), min(600, int(600 * high + 60)) + 1)
    old_pass = sum(stats.binom.pmf(k, 600, high) for k in ks
                   if stats.binomtest(k, 600).proportion_ci(0.9999, method="exact").low <= bound)
    assert old_pass > 0.5 or bound > 0.9   # near 1 the binomial is narrow for both checks


@pytest.mark.statistical
def test_memoisation_flattens_the_attacker_at_the_epsilon_inf_bound(registry):
    rng = np.random.default_rng(3)
    memo = distinguish(registry.get("lflag"), ("false", "true"), 40, 1500, rng)
    plain = distinguish(registry.get("flag"), ("false", "true"), 40, 1500, rng)
    eps_inf = server_half(registry.get("lflag")).epsilon_longitudinal
    assert memo.epsilon == pytest.approx(eps_inf)
    assert wider(memo)[0] <= math.exp(eps_inf) / (1 + math.exp(eps_inf))
    assert plain.accuracy > 0.99                       # without memoisation: towards 1
    assert memo.ci_high < plain.ci_low                 # with it: flat at the ε∞ bound


@pytest.mark.statistical
def test_linkability_rappor_links_memoised_l_grr_barely(registry):
    rappor = link(registry.get("site"), "a.example", 1, 400)
    rappor10 = link(registry.get("site"), "a.example", 10, 400)
    lgrr = link(registry.get("theme"), "light", 1, 400)
    # AUC's standard error here is about 0.02: the margins are 4 of them
    assert rappor.auc > 0.56                           # ≈ 0.65 (docs/privacy.md)
    assert rappor10.reidentified > 0.3                 # ≈ 60 % of 400 devices
    assert lgrr.auc < 0.6 and lgrr.reidentified < 0.05  # ≈ 0.5 and < 1 %


def test_auc_and_interval_helpers():
    assert auc_from_scores(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert auc_from_scores(np.array([1.0]), np.array([1.0])) == 0.5
    low, high = accuracy_interval(50, 100)
    assert low < 0.5 < high


def write_registry(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


def test_cli_prints_both_tables_in_every_format(tmp_path):
    path = write_registry(tmp_path)
    runner = CliRunner()
    base = ["audit", "--metrics", str(path), "--metric", "lflag", "--reports", "1,4", "--trials", "100",
            "--link-devices", "30", "--link-history", "1", "--seed", "5"]
    table = runner.invoke(main, base)
    assert table.exit_code == 0, table.output
    assert "distinguishing" in table.output and "linkability" in table.output
    assert "rappor" in table.output and "losue" in table.output
    doc = json.loads(runner.invoke(main, [*base, "--format", "json"]).output)
    assert [r["reports"] for r in doc["distinguishing"]] == [1, 4]
    assert doc["distinguishing"][1]["epsilon"] == pytest.approx(
        server_half(parse_registry(REGISTRY).get("lflag")).epsilon_longitudinal)
    assert {r["protocol"] for r in doc["linkability"]} == {"lgrr", "losue", "loloha", "dbitflip", "rappor"}
    csv_out = runner.invoke(main, [*base, "--format", "csv", "--no-link"]).output
    assert csv_out.splitlines()[0] == "reports,epsilon,bound,accuracy,ci_low,ci_high,epsilon_lower_bound,trials"


def test_cli_errors_name_the_file_and_field(tmp_path):
    path = write_registry(tmp_path)
    runner = CliRunner()
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "site", "--trials", "20"])
    assert out.exit_code != 0 and "--pair" in out.output
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "hadamard", "--trials", "20"])
    assert out.exit_code != 0 and str(path) in out.output and "hadamard" in out.output
    assert out.output.count("'hadamard'") == 1, out.output   # named once, by the CLI's prefix
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "flag", "--reports", "0"])
    assert out.exit_code != 0 and "--reports" in out.output
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "flag", "--pair", "true,true"])
    assert out.exit_code != 0 and "--pair" in out.output


def test_numeric_mean_metrics_memoised_audited_others_refused_with_a_message(tmp_path):
    """A memoised mean (memobitmean) is audited at the ends of its range by default; a mean
    mechanism without a likelihood here is refused with a message, not a TypeError."""
    path = tmp_path / "numeric.toml"
    path.write_text('[metrics.load]\nkind = "numeric"\nrange = [0, 10]\nepsilon = 1.0\nepsilon_inf = 3.0\n'
                    '[metrics.plain]\nkind = "numeric"\nrange = [0, 10]\nepsilon = 1.0\n')
    runner = CliRunner()
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "load", "--trials", "20",
                               "--reports", "1", "--link-devices", "5", "--link-history", "1", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["protocol"] == "memobitmean" and doc["pair"] == [0.0, 10.0]
    assert {r["protocol"] for r in doc["linkability"]} == {"memobitmean", "rappor"}
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "load", "--pair", "1,x"])
    assert out.exit_code != 0 and "--pair" in out.output
    out = runner.invoke(main, ["audit", "--metrics", str(path), "--metric", "plain", "--trials", "20"])
    assert out.exit_code != 0
    assert "internal error" not in out.output and str(path) in out.output and "plain" in out.output


MEAN_REGISTRY = '[metrics.load]\nkind = "numeric"\nrange = [0, 10]\nepsilon = 1.0\nepsilon_inf = 3.0\n'


@pytest.mark.statistical
def test_memoised_mean_is_tight_at_one_report_and_flattens_at_the_epsilon_inf_bound():
    """memobitmean at the range ends: one report is a Duchi bit at ε₁ (bound reached); many
    reports of one value reveal at most the memoised bit at ε∞ (bound approached, not passed)."""
    spec = parse_registry(MEAN_REGISTRY).get("load")
    rng = np.random.default_rng(11)
    one = distinguish(spec, (0.0, 10.0), 1, 3000, rng)
    assert one.epsilon == pytest.approx(1.0)
    # the SDK path draws from the OS CSPRNG (no seed): 99.99 % intervals, not the row's 95 %
    low, high = wider(one)
    assert low <= one.bound <= high, one
    many = distinguish(spec, (0.0, 10.0), 40, 3000, rng)
    assert many.epsilon == pytest.approx(server_half(spec).epsilon_longitudinal)
    low, high = wider(many)
    assert low <= many.bound, many
    assert high >= many.bound - 0.02                    # flattens just below e^ε∞/(1+e^ε∞)
    mid = distinguish(spec, (3.3, 7.1), 40, 3000, rng)  # between grid points: α blurs the value
    assert wider(mid)[0] <= mid.bound and mid.accuracy < many.accuracy


def test_histogram_pair_is_given_as_two_numbers(tmp_path):
    """Bucket labels contain a comma ('[0, 2)'), so --pair takes two numbers of a histogram
    metric and audits the buckets holding them."""
    path = tmp_path / "hist.toml"
    path.write_text('[metrics.h]\nkind = "numeric"\nrange = [0, 10]\nbuckets = [0, 2, 4, 6, 8, 10]\n'
                    'protocol = "dbitflip"\nepsilon = 1.0\nepsilon_inf = 3.0\n')
    runner = CliRunner()
    base = ["audit", "--metrics", str(path), "--metric", "h", "--trials", "20", "--no-link", "--format", "json"]
    out = runner.invoke(main, [*base, "--pair", "1,5"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["pair"] == ["[0, 2)", "[4, 6)"]
    out = runner.invoke(main, [*base, "--pair", "1,1.5"])   # one bucket: nothing to tell apart
    assert out.exit_code != 0 and "--pair" in out.output
