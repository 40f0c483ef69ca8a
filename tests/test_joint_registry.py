"""Joint metrics in the registry and the SDK: parsing, strict errors naming the field, the
round trip, the product domain, and one report (one ε) per tuple."""

from __future__ import annotations

import pytest

from client_sdk.errors import DomainError, RegistryError
from client_sdk.registry import Kind, parse_registry
from sketches import server_half

JOINT = """
[metrics.crash_by_os]
kind = "joint"
epsilon = 2.0
reports_per_window = 2
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows"] },
  { name = "crashed", kind = "boolean" },
]

[metrics.startup_by_os]
kind = "joint"
epsilon = 2.0
protocol = "grr"
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios"] },
  { name = "startup_ms", kind = "numeric", range = [0, 5000], buckets = [0, 500, 1000, 5000], unit = "ms" },
]
"""


def test_joint_metric_is_a_categorical_metric_over_the_product():
    reg = parse_registry(JOINT)
    spec = reg.get("crash_by_os")
    assert spec.kind is Kind.JOINT and spec.joint.shape == (3, 2)
    assert spec.domain == ("android|false", "android|true", "ios|false", "ios|true",
                           "windows|false", "windows|true")
    assert spec.protocol in ("grr", "oue", "sue", "ss")
    assert server_half(spec).domain_size == 6
    # tuple, list, dict by name, label; booleans in any accepted spelling
    assert spec.indices([("ios", True), ["windows", 0], {"crashed": "true", "os": "android"},
                         "ios|false"]) == [3, 4, 1, 2]
    hist = reg.get("startup_by_os")
    assert hist.domain[:3] == ("android|[0, 500)", "android|[500, 1000)", "android|[1000, 5000]")
    assert hist.indices([("ios", 750), ("ios", 99999), ("android", -3)]) == [4, 5, 0]  # clipped
    assert hist.joint.parts[1].midpoints == (250.0, 750.0, 3000.0)
    with pytest.raises(DomainError, match="crash_by_os"):
        spec.indices([("linux", True)])
    with pytest.raises(DomainError):
        spec.indices([("ios",)])


def test_round_trip_keeps_every_field_and_the_fingerprint():
    reg = parse_registry(JOINT)
    again = parse_registry(reg.to_toml())
    for name in ("crash_by_os", "startup_by_os"):
        a, b = reg.get(name), again.get(name)
        assert a == b and a.fingerprint == b.fingerprint
        assert a.to_toml_table() == b.to_toml_table()
    # the parts are in the fingerprint: another category is another metric
    other = parse_registry(JOINT.replace('"windows"]', '"linux"]'))
    assert other.get("crash_by_os").fingerprint != reg.get("crash_by_os").fingerprint


def test_published_json_builds_the_same_metric():
    from client_sdk.remote import registry_from_json

    reg = parse_registry(JOINT)
    again = registry_from_json(reg.to_json())
    assert again.get("crash_by_os").fingerprint == reg.get("crash_by_os").fingerprint


@pytest.mark.parametrize(("of", "field", "message"), [
    ('[{ name = "os", kind = "boolean" }]', "of", "2 or 3 parts"),
    ('"os"', "of", "2 or 3 parts"),
    ('[{ name = "a", kind = "boolean" }, "b"]', "of[1]", "must be a table"),
    ('[{ name = "a", kind = "boolean" }, { name = "a", kind = "boolean" }]', "of", "more than once"),
    ('[{ name = "1a", kind = "boolean" }, { name = "b", kind = "boolean" }]', "of[0].name", "part name"),
    ('[{ name = "a", kind = "string" }, { name = "b", kind = "boolean" }]', "of[0].kind", "categorical"),
    ('[{ name = "a", kind = "boolean", categories = ["x"] }, { name = "b", kind = "boolean" }]',
     "of[0].categories", "boolean part takes"),
    ('[{ name = "a", kind = "categorical", categories = ["x"] }, { name = "b", kind = "boolean" }]',
     "of[0].categories", "at least 2"),
    ('[{ name = "a", kind = "categorical", categories = ["x|y", "z"] }, { name = "b", kind = "boolean" }]',
     "of[0].categories", "joins"),
    ('[{ name = "a", kind = "boolean" }, { name = "t", kind = "numeric", range = [5, 1], buckets = 2 }]',
     "of[1].range", "lo < hi"),
    ('[{ name = "a", kind = "boolean" }, { name = "t", kind = "numeric", range = [0, 1] }]',
     "of[1].buckets", "bucketed"),
    ('[{ name = "a", kind = "boolean" }, { name = "t", kind = "numeric", range = [0, 1], buckets = [0, 2, 1] }]',
     "of[1].buckets", "increase"),
    ('[{ name = "a", kind = "categorical", categories = [' + ",".join(f'"a{i}"' for i in range(300)) + '] }, '
     '{ name = "b", kind = "categorical", categories = [' + ",".join(f'"b{i}"' for i in range(300)) + '] }]',
     "of", "cells"),
])
def test_bad_parts_are_refused_naming_the_field(of, field, message):
    with pytest.raises(RegistryError, match=message) as info:
        parse_registry(f'[metrics.j]\nkind = "joint"\nepsilon = 1.0\nof = {of}\n')
    assert info.value.field == field


def test_joint_only_fields_and_protocols():
    with pytest.raises(RegistryError) as info:
        parse_registry('[metrics.j]\nkind = "boolean"\nepsilon = 1.0\nof = []\n')
    assert info.value.field == "of"
    base = '[metrics.j]\nkind = "joint"\nepsilon = 1.0\nof = [{ name = "a", kind = "boolean" }, ' \
           '{ name = "b", kind = "boolean" }]\n'
    with pytest.raises(RegistryError, match="joint metric uses auto") as info:
        parse_registry(base + 'protocol = "olh"\n')
    assert info.value.field == "protocol"
    with pytest.raises(RegistryError, match="not memoised") as info:
        parse_registry(base + 'epsilon_inf = 4.0\n')
    assert info.value.field == "epsilon_inf"
    with pytest.raises(RegistryError) as info:
        parse_registry(base.replace('kind = "joint"\n', 'kind = "joint"\ncategories = ["x", "y"]\n'))
    assert info.value.field == "categories"


def test_sdk_reports_a_tuple_as_one_value_for_one_epsilon(tmp_path):
    from client_sdk import TelemetryClient
    from client_sdk.testing import MemoryTransport
    from collector.testing import FakeCollector

    reg = parse_registry(JOINT)
    fake = FakeCollector(reg)
    client = TelemetryClient(registry=reg, transport=MemoryTransport(fake), state_dir=tmp_path / "s")
    assert client.report("crash_by_os", ("ios", True))
    assert client.report("crash_by_os", {"os": "android", "crashed": False})
    assert not client.report("crash_by_os", ("ios", "maybe"))       # not in the domain: refused
    assert client.report("startup_by_os", ("ios", 1234.5))
    assert client.flush(5.0)
    assert fake.accepted_reports == 3
    eps = server_half(reg.get("crash_by_os")).epsilon
    acct = client.ledger_snapshot()["crash_by_os"]
    assert acct.window_epsilon == pytest.approx(2 * eps)           # one ε per tuple, not per part
    assert fake.sketch("crash_by_os").total_reports == 2
    client.close()
