"""The numbers a device repeats in every report (estimators/linking.py) and `ldpt metrics
check`'s linkability bits (issue 26 §5: a discover device's group, a permanent log₂(L+1)-bit
number per metric, was missing from both docs/privacy.md and the check)."""

from __future__ import annotations

import math

import numpy as np
from click.testing import CliRunner

from cli.main import main
from client_sdk.registry import parse_registry
from estimators.linking import DAILY, PERMANENT, linking_numbers, permanent_bits
from sketches import server_half

METRICS = {
    "home": {"kind": "string", "protocol": "discover", "epsilon": 4.0},                 # L = 16
    "short": {"kind": "string", "protocol": "discover", "epsilon": 4.0, "max_length": 8},
    "page": {"kind": "string", "protocol": "rappor", "epsilon": 2.0},                    # m = 64
    "page2": {"kind": "string", "protocol": "rappor", "epsilon": 2.0, "cohorts": 24},
    "mood": {"kind": "categorical", "categories": ["a", "b", "c", "d", "e", "f"], "protocol": "loloha",
             "hash_range": 2, "epsilon": 1.0, "epsilon_inf": 3.0},
    "hist": {"kind": "categorical", "categories": [f"c{i}" for i in range(12)], "protocol": "dbitflip",
             "epsilon": 1.0, "epsilon_inf": 3.0},
    "theme": {"kind": "categorical", "categories": ["a", "b", "c"], "protocol": "olh", "epsilon": 1.0},
    "plain": {"kind": "boolean", "epsilon": 1.0},
}


def test_every_repeated_number_with_its_range_and_bits():
    registry = parse_registry({"metrics": METRICS})
    found = {n.what + ":" + ",".join(n.metrics): n for n in linking_numbers(registry)}
    groups = found["discover group:home"]
    assert groups.values == 17 and groups.lasts == PERMANENT and math.isclose(groups.bits, math.log2(17))
    assert f"{groups.bits:.2f}" == "4.09"
    assert found["discover group:short"].values == 9
    # one RAPPOR cohort per device for all its RAPPOR metrics: the HMAC word mod 64 and mod 24
    # together are that word mod lcm(64, 24) = 192
    assert found["RAPPOR cohort:page,page2"].values == 192
    assert found["LOLOHA cohort:mood"].values == server_half(registry.get("mood")).params.m
    assert found["dBitFlipPM window:hist"].values == 12
    assert found["OLH cohort:theme"].lasts == DAILY
    assert len(found) == 6                                   # the boolean metric repeats nothing
    expected = sum(math.log2(v) for v in (17, 9, 192, server_half(registry.get("mood")).params.m, 12))
    assert math.isclose(permanent_bits(linking_numbers(registry)), expected)


def test_the_group_really_is_the_same_in_every_report_of_a_device():
    """What the count rests on: the SDK path sends the secret's group as the first field of
    each report, whatever the value and the report."""
    proto = server_half(parse_registry({"metrics": {"home": METRICS["home"]}}).get("home"))
    secrets = [bytes([i]) * 32 for i in range(40)]
    for secret in secrets:
        firsts = {proto.encode_secret_one(v, secret, "home")[0] for v in ("a.example", "b.example", "c") * 3}
        assert firsts == {proto.group_of(secret, "home")}
    spread = np.bincount([proto.group_of(s, "home") for s in secrets], minlength=17)
    assert (spread > 0).sum() >= 10                          # and it differs between devices


def test_metrics_check_prints_the_numbers_and_their_total(tmp_path):
    reg = tmp_path / "m.toml"
    reg.write_text('[dimensions.os]\nvalues = ["android", "ios"]\n\n'
                   '[metrics.home]\nkind = "string"\nprotocol = "discover"\nepsilon = 4.0\ndimensions = ["os"]\n',
                   encoding="utf-8")
    out = CliRunner().invoke(main, ["metrics", "check", str(reg)])
    assert out.exit_code == 0, out.output
    assert "discover group" in out.output and "4.09" in out.output
    # the group's log2 17 and the dimensions' log2 (2 + 2) = 2 bits
    assert "linkability: 6.09 bits repeat in a device's batches across days" in out.output
    assert "warning" not in out.output
    reg.write_text(reg.read_text(encoding="utf-8") + '\n[metrics.page]\nkind = "string"\nprotocol = "rappor"\n'
                   'epsilon = 2.0\n', encoding="utf-8")
    out = CliRunner().invoke(main, ["metrics", "check", str(reg)])
    assert out.exit_code == 0, out.output
    assert "linkability: 12.09 bits" in out.output                       # + RAPPOR's 6
    assert "warning: 12.09 bits of linking numbers exceed max_bits = 10" in out.output


def test_a_registry_without_such_numbers_prints_none(tmp_path):
    reg = tmp_path / "m.toml"
    reg.write_text('[metrics.plain]\nkind = "boolean"\nepsilon = 1.0\n', encoding="utf-8")
    out = CliRunner().invoke(main, ["metrics", "check", str(reg)])
    assert out.exit_code == 0 and "linking numbers" not in out.output and "linkability" not in out.output
