"""Metric registry: validation messages, auto choice, fingerprints, exact round trip."""

from __future__ import annotations

import dataclasses
import math

import pytest

from client_sdk.errors import DomainError, RegistryError, UnknownMetricError
from client_sdk.protocols.factory import choose_protocol
from client_sdk.registry import Kind, load_registry, parse_registry
from sketches import server_half
from sketches.metric_arrays import index_of

BASE = '[metrics.theme]\nkind = "categorical"\ncategories = ["light", "dark", "system"]\nepsilon = 1.0\n'


def test_example_from_the_issue_loads(registry_file):
    reg = load_registry(registry_file)
    theme = reg.get("theme")
    assert theme.kind is Kind.CATEGORICAL
    assert theme.requested_protocol == "auto"
    assert theme.protocol == choose_protocol(3, 1.0) == "grr"  # d < 3e^ε + 2
    assert theme.domain_size == 3
    assert theme.indices(["dark", "light", "system"]) == [1, 0, 2]
    arr = index_of(theme, ["dark", "light", "system"])   # the server's array of the same indices
    assert arr.dtype.name == "int64" and arr.tolist() == [1, 0, 2]
    assert reg.get("crash").domain == ("false", "true")
    assert reg.get("crash").indices([True, False, 1, "true"]) == [1, 0, 1, 1]


def test_round_trip_compares_every_field(registry_file):
    reg = load_registry(registry_file)
    again = parse_registry(reg.to_toml(), source="dumped")
    assert list(again.metrics) == list(reg.metrics)
    for name, spec in reg.metrics.items():
        other = again.get(name)
        for field in dataclasses.fields(spec):
            assert getattr(other, field.name) == getattr(spec, field.name), (name, field.name)
        assert other.fingerprint == spec.fingerprint


def test_round_trip_with_optional_fields():
    text = BASE + 'description = "UI theme"\nreports_per_window = 3\nlifetime_epsilon = 30.0\n'
    spec = parse_registry(text).get("theme")
    again = parse_registry(parse_registry(text).to_toml()).get("theme")
    assert again == spec
    assert (spec.description, spec.reports_per_window, spec.lifetime_epsilon) == ("UI theme", 3, 30.0)


def test_fingerprint_changes_with_any_parameter():
    fp = parse_registry(BASE).get("theme").fingerprint
    assert parse_registry(BASE.replace("1.0", "1.5")).get("theme").fingerprint != fp
    assert parse_registry(BASE.replace('"system"', '"auto"')).get("theme").fingerprint != fp
    assert parse_registry(BASE + 'protocol = "oue"\n').get("theme").fingerprint != fp
    # descriptions and SDK limits do not change what a report means
    assert parse_registry(BASE + 'description = "x"\n').get("theme").fingerprint == fp


@pytest.mark.parametrize("text, field, words", [
    (BASE.replace("categorical", "weird"), "kind", "boolean, categorical, string, numeric"),
    (BASE.replace("epsilon = 1.0", "epsilon = -1"), "epsilon", "(0, 20]"),
    (BASE.replace("epsilon = 1.0", 'epsilon = "high"'), "epsilon", "number"),
    (BASE.replace("epsilon = 1.0\n", ""), "epsilon", "missing"),
    (BASE + 'protocol = "laplace"\n', "protocol", "auto or one of"),
    (BASE.replace('"light", "dark", "system"', '"a", "a"'), "categories", "more than once"),
    (BASE.replace('["light", "dark", "system"]', '["only"]'), "categories", "at least 2"),
    (BASE + 'protocol = "rr"\n', "protocol", "binary"),
    (BASE + "bloom_bits = 16\n", "bloom_bits", "unknown field"),
    (BASE + "reports_per_window = 0\n", "reports_per_window", "positive integer"),
])
def test_validation_errors_name_file_metric_and_field(text, field, words):
    with pytest.raises(RegistryError) as info:
        parse_registry(text, source="metrics.toml")
    message = str(info.value)
    assert message.startswith("metrics.toml: metric 'theme': field")
    assert repr(field) in message and words in message


def test_file_level_errors(tmp_path):
    with pytest.raises(RegistryError, match="file not found"):
        load_registry(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[metrics.x\nkind=", encoding="utf-8")
    with pytest.raises(RegistryError, match=r"bad.toml: not valid TOML"):
        load_registry(bad)
    with pytest.raises(RegistryError, match="no metrics declared"):
        parse_registry("")
    with pytest.raises(RegistryError, match="unknown top-level"):
        parse_registry(BASE + "[other]\nx = 1\n")


def test_unknown_metric_and_out_of_domain_value():
    reg = parse_registry(BASE, source="m.toml")
    with pytest.raises(UnknownMetricError, match="unknown metric 'nope'.*theme"):
        reg.get("nope")
    with pytest.raises(DomainError, match="'purple'"):
        reg.get("theme").indices(["dark", "purple"])


@pytest.mark.parametrize("d, eps", [(2, 0.5), (3, 1.0), (16, 1.0), (16, 4.0), (128, 1.0), (1024, 4.0)])
def test_auto_follows_the_variance_rule(d, eps):
    """GRR wins iff d < 3e^ε + 2 (docs/math.md §2); otherwise a unary/subset-selection protocol."""
    name = choose_protocol(d, eps)
    if d == 2:
        assert name in ("rr", "grr")
    elif d < 3 * math.exp(eps) + 2:
        assert name in ("grr", "ss")  # SS equals GRR when s = 1
    else:
        assert name in ("oue", "olh", "ss")


def test_metric_names_are_matched_whole():
    """``$`` also matches before a trailing newline: "theme\\n" must not pass as a metric name."""
    with pytest.raises(RegistryError, match="metric names"):
        parse_registry('[metrics."theme\\n"]\nkind = "boolean"\nepsilon = 1.0\n')
    with pytest.raises(RegistryError, match="metric names"):
        parse_registry({"metrics": {7: {"kind": "boolean", "epsilon": 1.0}}})


def test_a_duplicate_in_a_large_domain_is_found():
    """200,000 categories: a pairwise (quadratic) search would run into the test timeout."""
    cats = [f"v{i}" for i in range(200_000)] + ["v199999"]
    with pytest.raises(RegistryError, match="'v199999' appears more than once"):
        parse_registry({"metrics": {"big": {"kind": "categorical", "categories": cats, "epsilon": 1.0}}})


def test_fingerprint_covers_resolved_defaults(monkeypatch):
    """A version that changes a protocol default (here OLH's cohort count) changes the fingerprint."""
    from client_sdk.protocols import olh

    text = BASE + 'protocol = "olh"\n'
    before = parse_registry(text).get("theme")
    assert before.canonical()["resolved"]["m"] == olh.tight_cohorts(3, server_half(before).params.g)
    monkeypatch.setattr(olh, "TIGHT_DOF_FACTOR", olh.TIGHT_DOF_FACTOR + 1)
    after = parse_registry(text).get("theme")
    assert server_half(after).params.m != server_half(before).params.m
    assert after.fingerprint != before.fingerprint


@pytest.mark.parametrize("extra, words", [
    ("lifetime_epsilon = 0.5\n", "below the 1 one report costs"),
    ('protocol = "lgrr"\nepsilon_inf = 3.0\nlifetime_epsilon = 2.0\n', "below the 3 one report costs"),
])
def test_a_lifetime_budget_below_one_report_is_refused(extra, words):
    """Such a metric could never report: the ledger would refuse its first report on every device."""
    with pytest.raises(RegistryError, match=words) as info:
        parse_registry(BASE + extra, source="m.toml")
    assert "m.toml: metric 'theme': field 'lifetime_epsilon'" in str(info.value)


def test_a_lifetime_budget_of_exactly_one_report_loads():
    assert parse_registry(BASE + "lifetime_epsilon = 1.0\n", source="m.toml").get("theme").lifetime_epsilon == 1.0


@pytest.mark.parametrize("device, field", [
    ("epsilon_per_window = 0.5", "device.epsilon_per_window"),
    ("lifetime_epsilon = 0.9", "device.lifetime_epsilon"),
])
def test_a_device_cap_below_one_report_of_a_metric_is_refused(device, field):
    with pytest.raises(RegistryError, match="metric 'theme' could never report") as info:
        parse_registry(BASE + f"[device]\n{device}\n", source="m.toml")
    assert f"m.toml: field '{field}'" in str(info.value)
    assert parse_registry(BASE + "[device]\nepsilon_per_window = 1\nlifetime_epsilon = 1\n").device is not None
