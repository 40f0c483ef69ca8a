"""`ldpt plan --shuffled` and `--central-epsilon` (cli/plan_shuffle.py, estimators/shuffle_plan.py):
the central ε printed next to the local one, rounded up; the inverse question; the metric claim."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk.protocols.factory import choose_protocol, per_item_variance
from estimators.amplification import Theorem, central_epsilon, fmt21_numerical, krr_clones
from estimators.shuffle_plan import central_rows, inverse_plan, metric_claims, round_up
from sketches import build_server, server_half


def run(*args: str) -> str:
    result = CliRunner().invoke(main, ["plan", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_round_up_never_rounds_down():
    for x in (0.020593419671058655, 0.2149280309677124, 1.0, 0.05, 123.456, 9.9996, 1e-7):
        shown = round_up(x)
        assert shown >= x and float(f"{shown:.3g}") >= x and shown <= x * 1.01 + 1e-12


def test_shuffled_table_prints_the_bar_points():
    out = run("--shuffled", "--clients", "100000")
    rows = {float(m[0]): float(m[1]) for m in re.findall(r"^\s+([124])\s+([0-9.]+)\s+Feldman", out, re.M)}
    assert set(rows) == {1.0, 2.0, 4.0}
    for e0, shown in rows.items():
        bound = fmt21_numerical(100_000, e0, 1e-8)
        assert bound <= shown <= bound * 1.01          # the bound, rounded up, never below it
    assert "delta = 1e-08" in out and "collude" in out


def test_shuffled_json_and_domain_columns():
    data = json.loads(run("--shuffled", "--clients", "100000", "--domain", "16", "--format", "json"))
    rows = {r["epsilon0"]: r for r in data["rows"]}
    assert rows[4.0]["auto_protocol"] == "grr"
    assert rows[4.0]["auto_theorem"] == Theorem.KRR_CLONES.value
    assert rows[4.0]["auto_central_epsilon"] < rows[4.0]["central_epsilon"]
    one = json.loads(run("--shuffled", "--clients", "5000", "--epsilon", "3", "--delta", "1e-6", "--format", "json"))
    assert [r["epsilon0"] for r in one["rows"]] == [3.0] and one["delta"] == 1e-6
    assert one["rows"][0]["central_epsilon"] == central_epsilon(5000, 3.0, 1e-6).epsilon
    csv = run("--shuffled", "--clients", "100000", "--format", "csv")
    assert csv.splitlines()[0].startswith("epsilon0,clients,delta,central_epsilon")


def test_no_amplification_prints_the_local_epsilon():
    data = json.loads(run("--shuffled", "--clients", "30", "--epsilon", "4", "--format", "json"))
    assert data["rows"][0]["central_epsilon"] == 4.0
    assert data["rows"][0]["theorem"] == Theorem.LOCAL.value


def test_inverse_question_categorical():
    plan = inverse_plan(0.5, 100_000, 1e-8, domain=16)
    assert plan["protocol"] == "grr" and plan["chosen_by"] == "auto"
    assert plan["central_epsilon"] <= 0.5
    assert plan["epsilon0"] > plan["generic_epsilon0"] > 5          # k-RR's clones allow more
    local = build_server(choose_protocol(16, 0.5), 16, 0.5, {})
    assert plan["variance_ratio"] == pytest.approx(per_item_variance(local) / plan["variance"])
    assert plan["variance_ratio"] > 1000
    # the next ε₀ up is not certified for either reduction
    assert krr_clones(100_000, plan["epsilon0"] + 2e-4, 16, 1e-8) > 0.5
    out = run("--central-epsilon", "0.5", "--clients", "100000", "--domain", "16")
    assert "6.175" in out and "grr" in out and "x lower" in out


def test_inverse_question_mean_and_hopeless_batch():
    plan = inverse_plan(1.0, 50_000, 1e-8, value_range=(0.0, 120.0))
    assert plan["central_epsilon"] <= 1.0 and plan["epsilon0"] > 4 and plan["variance_ratio"] > 10
    data = json.loads(run("--central-epsilon", "0.01", "--clients", "10", "--domain", "4", "--format", "json"))
    assert data["epsilon0"] <= 0.01 and data["note"] and data["variance_ratio"] == pytest.approx(1.0, rel=0.05)
    assert "no epsilon0 above 0.01" in run("--central-epsilon", "0.01", "--clients", "10", "--domain", "4")


def test_metric_claim_from_the_registry():
    out = run("--shuffled", "--clients", "100000", "--metrics", "docs/examples/longitudinal.toml", "--metric", "theme")
    assert "across windows" in out and "epsilon_inf" in out
    from cli.common import load_metric

    spec = load_metric("docs/examples/metrics.toml", "crashed_today")[1]
    claim = metric_claims(spec, 100_000)["claim"]
    assert claim.theorem is Theorem.KRR_CLONES and claim.n == 100_000


def test_metric_claim_with_several_reports_per_window(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[metrics.flag]\nkind = "boolean"\nprotocol = "rr"\nepsilon = 2.0\nreports_per_window = 2\n',
                    encoding="utf-8")
    from cli.common import load_metric

    claims = metric_claims(load_metric(str(path), "flag")[1], 100_000)
    assert claims["separate"].envelopes == 2 and claims["bundled"].epsilon0 == pytest.approx(4.0, rel=1e-6)
    assert claims["claim"].epsilon == max(claims["separate"].epsilon, claims["bundled"].epsilon)
    data = json.loads(run("--shuffled", "--clients", "100000", "--metrics", str(path), "--metric", "flag",
                          "--format", "json"))
    assert data["claim"]["epsilon"] == claims["claim"].epsilon


@pytest.mark.parametrize("args,message", [
    (["--shuffled", "--central-epsilon", "0.5", "--clients", "10"], "give one of them"),
    (["--central-epsilon", "0.5", "--clients", "10"], "--domain"),
    (["--central-epsilon", "0.5", "--clients", "10", "--domain", "4", "--epsilon", "1"], "leave out"),
    (["--shuffled", "--clients", "10", "--range", "0,1"], "leave out --range"),
    (["--shuffled", "--clients", "10", "--metric", "theme"], "go together"),
    (["--shuffled", "--clients", "10", "--discover"], "--discover"),
    (["--shuffled", "--clients", "10", "--delta", "0"], "delta"),
])
def test_bad_combinations_are_usage_errors(args, message):
    result = CliRunner().invoke(main, ["plan", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_central_rows_match_the_library():
    for r in central_rows(100_000, 1e-8, (1.0, 4.0), domain=2):
        assert r["auto_protocol"] == "rr"
        assert r["auto_central_epsilon"] == krr_clones(100_000, r["auto_epsilon0"], 2, 1e-8)


def test_metric_window_cohorts_and_memoised_bundles(tmp_path):
    from cli.common import load_metric
    from estimators.shuffle_plan import metric_window

    path = tmp_path / "m.toml"
    path.write_text('[metrics.theme]\nkind = "categorical"\ncategories = ["a", "b", "c"]\nprotocol = "lgrr"\n'
                    'epsilon = 1.0\nepsilon_inf = 3.0\nreports_per_window = 2\n\n'
                    '[metrics.page]\nkind = "string"\nprotocol = "discover"\nepsilon = 4.0\n', encoding="utf-8")
    theme = load_metric(str(path), "theme")[1]
    bundled = metric_window(theme, 100_000, bundled=True)
    assert bundled.envelope_epsilon == pytest.approx(6.0, rel=1e-6) and bundled.envelopes_per_device == 1
    claims = metric_claims(theme, 100_000)
    assert not claims["separate"].amplified and claims["claim"] is claims["separate"]
    page = metric_window(load_metric(str(path), "page")[1], 100_000)
    groups = server_half(load_metric(str(path), "page")[1]).params.groups
    assert page.cohorts_permanent and page.smallest_cohort < 100_000 / groups
    assert central_claim_n(page) == page.smallest_cohort


def central_claim_n(w):
    from estimators.amplification import central_claim

    return central_claim(w).n
