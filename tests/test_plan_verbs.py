"""What `ldpt plan`, `ldpt metrics check`, `ldpt audit` and `ldpt rappor export` ask of a protocol
is a verb of its server half (issue 29 §2), declared once in sketches/, and the figures they
print come from the library (estimators/plan.py, the factory's mean_count_variance)."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk.protocols.factory import mean_count_variance, per_item_variance
from client_sdk.registry import load_registry
from estimators.plan import plan_rows
from sketches import build_server, server_half
from tests.test_layering import EVERY_PROTOCOL


@pytest.fixture(scope="module")
def every(tmp_path_factory) -> dict:
    """One metric of every protocol (tests/test_layering.py's registry), by protocol name."""
    path = tmp_path_factory.mktemp("every") / "every.toml"
    path.write_text(EVERY_PROTOCOL)
    return {spec.protocol: spec for spec in load_registry(path) if spec.name != "histogram"}


@pytest.mark.parametrize("name", ["rr", "grr", "oue", "sue", "hr", "ss"])
def test_the_mean_count_variance_is_that_of_any_population(name):
    """variance(n, n/d) is the mean of Var[ĉ(v)] over the domain for any counts summing to n
    (the variances are linear in the count): here a skewed population."""
    d = 2 if name == "rr" else 12
    proto = build_server(name, d, 1.0, {})
    n = 10_000
    counts = [n * 2 ** -(i + 1) for i in range(d - 1)]
    counts.append(n - sum(counts))
    direct = sum(float(proto.variance(n, c)) for c in counts) / d
    assert mean_count_variance(proto, n) == pytest.approx(direct, rel=1e-12)
    assert per_item_variance(proto) == pytest.approx(mean_count_variance(proto, n) / n, rel=1e-12)


def test_plan_rows_print_the_factory_variance():
    """The plan's standard error of a count is the root of the figure `auto` scores, at n."""
    n = 5_000
    for row in plan_rows(2.0, 40, n):
        proto = build_server(row["protocol"], 40, 2.0, {})
        assert row["std_err_count"] == math.sqrt(mean_count_variance(proto, n)), row["protocol"]


def test_olh_s_expected_empty_cohorts_is_the_exact_mean():
    """m(1 − 1/m)^n against the enumeration of every placement of n reports in m cohorts; every
    protocol without per-cohort sketches says 0."""
    proto = build_server("olh", 6, 2.0, {"cohorts": 3})
    m, n = proto.params.m, 4
    placements = list(itertools.product(range(m), repeat=n))
    mean = sum(m - len(set(p)) for p in placements) / len(placements)
    assert proto.expected_empty_cohorts(n) == pytest.approx(mean, rel=1e-12)
    for name in ("grr", "oue", "hr", "ss"):
        assert build_server(name, 6, 2.0, {}).expected_empty_cohorts(n) == 0.0, name


def test_the_linear_family_s_note_names_the_reports_that_fill_its_cohorts():
    """With cohorts left empty the note says how many reports fill them (E[empty] < 1/2 there),
    and at that many reports it says no more than the family and the cohorts."""
    proto = build_server("olh", 1_000_000, 2.0, {})
    note = proto.design_note(1_000_000)
    needed = int(re.search(r">= ([\d,]+) reports", note).group(1).replace(",", ""))
    assert proto.expected_empty_cohorts(needed) < 0.5 <= proto.expected_empty_cohorts(needed - proto.params.m)
    assert proto.design_note(needed) == f"linear family, g={proto.params.g}, {proto.params.m:,} cohorts " \
                                        "(inflation ~1 + m/n)"
    assert build_server("hr", 1000, 1.0, {}).design_note(10) == "F_3^7, 3,279 outputs"
    assert build_server("grr", 1000, 1.0, {}).design_note(10) == ""


def test_only_loloha_memoises_per_hashed_value(every):
    """hashed_memo_keys is LOLOHA's g (its device's memo key space); every other protocol memoises
    per value or not at all."""
    keys = {name: server_half(spec).hashed_memo_keys for name, spec in every.items()}
    loloha = every["loloha"].protocol_impl
    assert keys.pop("loloha") == loloha.params.g == loloha.memo_key_space
    assert set(keys.values()) == {None}


def test_only_rappor_exports_google_rappor_s_files(every, tmp_path):
    assert {name for name, spec in every.items() if server_half(spec).exports_google_rappor} == {"rappor"}
    reg = tmp_path / "m.toml"
    reg.write_text('[metrics.theme]\nkind = "categorical"\ncategories = ["a", "b"]\nprotocol = "grr"\n'
                   'epsilon = 1.0\n')
    candidates = tmp_path / "c.txt"
    candidates.write_text("a\n")
    result = CliRunner().invoke(main, ["rappor", "export", "--metrics", str(reg), "--metric", "theme",
                                       "--db", str(tmp_path / "s.sqlite"), "--candidates", str(candidates),
                                       "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "metric 'theme' uses protocol grr, not rappor" in result.output


def test_the_linkability_game_skips_only_a_daily_cohort(every):
    """The game takes a report's cohort as the device's for life: OLH's, re-derived every day, is the
    one protocol it cannot play (and link says so); every other protocol has no cohort or a permanent one."""
    from estimators.audit import AuditError, link, linkable

    assert {name for name, spec in every.items() if not linkable(spec)} == {"olh"}
    with pytest.raises(AuditError, match="olh re-derives its cohort daily"):
        link(every["olh"], "a", 1, 2)
