"""The report-size budget (registry key ``max_report_bytes``) and `auto` at the optimum.

`auto` picks the smallest per-item variance among protocols whose report fits the budget
(docs/protocols.md, "Report size"). The bars of issue 14, with the optimum 4e^ε/(e^ε−1)² per
value (n·Var[f̂], OUE/OLH's constant; docs/math.md §2):

- max_report_bytes = 64: at most 1.25× the optimum at d ∈ {10⁴, 10⁵, 10⁶}, ε ∈ {1, 2, 4}, and
  at most 1.1× at d <= 1,024 for every ε, checked exactly from each protocol's variance;
- and measured: the MSE of one n = 2·10⁵ run at d = 10⁵, ε = 2 is within its sampling error
  of the stated variance (the mean of d squared errors: relative SE sqrt(2/d)·(1 + kurtosis)).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from client_sdk.errors import RegistryError
from client_sdk.protocols.factory import choose_protocol, per_item_variance, report_bytes
from client_sdk.registry import parse_registry
from sketches import build_server, server_half


def optimum(eps: float) -> float:
    e = math.exp(eps)
    return 4 * e / (e - 1) ** 2


def registry(d: int, eps: float, **fields) -> str:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())
    return (f'[metrics.m]\nkind = "categorical"\nepsilon = {eps}\n'
            f'categories = [{", ".join(chr(34) + f"c{i}" + chr(34) for i in range(d))}]\n{extra}')


@pytest.mark.parametrize("d", [10_000, 100_000, 1_000_000])
@pytest.mark.parametrize("eps", [1.0, 2.0, 4.0])
def test_auto_within_64_bytes_is_near_the_optimum_for_large_domains(d, eps):
    name = choose_protocol(d, eps, max_report_bytes=64)
    proto = build_server(name, d, eps, {})
    assert report_bytes(proto) <= 64
    assert per_item_variance(proto) <= 1.25 * optimum(eps), name


@pytest.mark.parametrize("d", [2, 3, 16, 128, 1024])
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 4.0, 8.0])
def test_auto_within_64_bytes_is_near_the_optimum_for_small_domains(d, eps):
    name = choose_protocol(d, eps, max_report_bytes=64)
    proto = build_server(name, d, eps, {})
    assert report_bytes(proto) <= 64
    assert per_item_variance(proto) <= 1.1 * optimum(eps), name


def test_the_budget_is_parsed_respected_and_round_trips():
    spec = parse_registry(registry(1000, 1.0, max_report_bytes=64)).get("m")
    assert spec.max_report_bytes == 64 and report_bytes(server_half(spec)) <= 64
    assert spec.to_toml_table()["max_report_bytes"] == 64
    again = parse_registry({"metrics": {"m": spec.to_toml_table()}}).get("m")
    assert again == spec and again.fingerprint == spec.fingerprint
    unbounded = parse_registry(registry(1000, 1.0)).get("m")
    assert unbounded.max_report_bytes is None and "max_report_bytes" not in unbounded.to_toml_table()
    # the budget only chooses: it is not part of what a report means
    same = parse_registry(registry(1000, 1.0, protocol="hr", max_report_bytes=64)).get("m")
    assert same.fingerprint == parse_registry(registry(1000, 1.0, protocol="hr")).get("m").fingerprint


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"max_report_bytes": 0}, "positive integer"),
    ({"max_report_bytes": 2.5}, "positive integer"),
    ({"max_report_bytes": True}, "positive integer"),
    ({"max_report_bytes": 1}, "no protocol's report fits max_report_bytes = 1"),
    ({"protocol": "oue", "max_report_bytes": 64}, "oue report takes 125 bytes"),
])
def test_bad_budgets_name_the_field(fields, fragment):
    with pytest.raises(RegistryError, match=fragment) as info:
        parse_registry(registry(1000, 1.0, **fields))
    assert info.value.field == "max_report_bytes"


@pytest.mark.statistical
def test_measured_mse_of_auto_at_a_large_domain_matches_its_variance():
    d, eps, n = 100_000, 2.0, 200_000
    proto = server_half(parse_registry(registry(d, eps, max_report_bytes=64)).get("m"))
    rng = np.random.default_rng(14)
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    c = rng.multinomial(n, w / w.sum())
    sketch = proto.new_sketch()
    proto.accumulate(sketch, proto.encode(np.repeat(np.arange(d), c), rng))
    est = proto.estimate(sketch)
    mse = float(np.mean((est.counts - c) ** 2)) / n   # n·mean Var[f̂]
    stated = float(np.mean(proto.variance(n, c.astype(float)))) / n
    assert abs(mse / stated - 1) <= 4 * math.sqrt(2 / d) * 1.5
    assert mse <= 1.25 * optimum(eps)


def test_every_protocol_obeys_the_report_size_limit(tmp_path):
    """An explicit protocol = "ss" at d = 10⁵ made 57 KB reports and was accepted: the default
    budget (8,192 bytes) steered only `auto`. Now every protocol is held to it, with a refusal
    naming the size and the limit — in parsing (collector, SDK) and in `ldpt metrics check`."""
    from click.testing import CliRunner

    from cli.main import main

    table = {"kind": "categorical", "categories": [f"c{i}" for i in range(100_000)], "protocol": "ss",
             "epsilon": 1.0}
    with pytest.raises(RegistryError, match=r"ss report takes 57,152 bytes, above max_report_bytes = "
                                            r"8,192 \(the default\)") as err:
        parse_registry({"metrics": {"big": table}})
    assert err.value.field == "max_report_bytes"
    assert parse_registry({"metrics": {"big": {**table, "max_report_bytes": 60_000}}}).get("big").protocol == "ss"
    cats = ", ".join(f'"c{i}"' for i in range(100_000))
    path = tmp_path / "m.toml"
    path.write_text(f'[metrics.big]\nkind = "categorical"\nprotocol = "oue"\nepsilon = 1.0\ncategories = [{cats}]\n')
    out = CliRunner().invoke(main, ["metrics", "check", str(path)])
    assert out.exit_code != 0 and "oue report takes 12,500 bytes" in out.output and "8,192" in out.output
