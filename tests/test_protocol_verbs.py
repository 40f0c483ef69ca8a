"""What a caller asks of a protocol, each declared once by its halves (issue 29 §2): the verbs that
replaced the type and name dispatch of estimators/compare.py, estimators/frequency.py and
client_sdk/joint.py, and discover's groups, checked against their own definitions on distinct
inputs."""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.errors import InvalidPayload
from client_sdk.protocols import LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from client_sdk.protocols.factory import carries_joint, joint_protocols, reports_strings
from client_sdk.protocols.olh import hash_one
from sketches import build_server

#: One server half of every count protocol, at parameters where each variant is distinct.
COUNT_PROTOCOLS = {
    "rr": (2, 1.0, {}), "grr": (6, 1.0, {}), "oue": (6, 1.0, {}), "sue": (6, 1.0, {}),
    "hr": (6, 1.0, {}), "ss": (8, 1.0, {}),
    "olh": (12, 1.0, {}), "olh-linear-1": (12, 2.0, {"hash_family": "linear", "hash_range": 13}),
    "olh-linear": (12, 1.0, {"hash_family": "linear"}),
    "lgrr": (6, 1.0, {"epsilon_inf": 3.0}), "losue": (6, 1.0, {"epsilon_inf": 3.0}),
    "loloha": (6, 1.0, {"epsilon_inf": 3.0}), "dbitflip": (6, 1.0, {"epsilon_inf": 3.0}),
}


def count_server(label: str):
    d, eps, options = COUNT_PROTOCOLS[label]
    return build_server(label.split("-")[0], d, eps, options)


def filled_sketch(proto, n: int = 3_000, seed: int = 7):
    """A sketch of ``n`` seeded reports of a skewed population, and their payloads."""
    rng = np.random.default_rng(seed)
    d = proto.domain_size
    weights = np.arange(1, d + 1, dtype=np.float64)
    x = rng.choice(d, size=n, p=weights / weights.sum())
    payloads = proto.encode(x, rng)
    sketch = proto.new_sketch()
    proto.accumulate(sketch, payloads)
    return sketch, payloads


def test_the_olh_families_are_the_variants_the_table_names():
    """The parameters above give what their labels say (else the tests below test less)."""
    assert not count_server("olh").linear
    assert count_server("olh-linear-1").linear and count_server("olh-linear-1").params.m == 1
    assert count_server("olh-linear").linear and count_server("olh-linear").params.m > 1


@pytest.mark.parametrize("label", sorted(COUNT_PROTOCOLS))
def test_support_counts_are_each_value_s_supporting_reports_or_none(label):
    """``support_counts`` is Σᵢ 1[v ∈ S(yᵢ)], counted here from the reports themselves, for the pure
    protocols and OLH's tabulated families; None for the memoised LOLOHA, dBitFlipPM (no one-count
    law) and the linear OLH with several cohorts (H_s(v) not tabulated)."""
    proto = count_server(label)
    sketch, payloads = filled_sketch(proto)
    got = proto.support_counts(sketch)
    if label in ("loloha", "dbitflip", "olh-linear"):
        assert got is None
        return
    d = proto.domain_size
    if label == "olh":   # a report in cohort s supports v when y = H_s(v) (the device's hash)
        g = proto.params.g
        want = np.zeros(d, dtype=np.int64)
        for s, y in zip(payloads["cohort"].tolist(), payloads["y"].tolist()):
            want += np.array([hash_one(s, v, g) == y for v in range(d)])
    elif label in ("rr", "grr", "lgrr", "olh-linear-1"):   # one value a report: S(y) = {y} (t = 1: H(v) = v)
        want = np.bincount(payloads["y"], minlength=d)[:d]
    elif label in ("oue", "sue", "losue"):   # a report supports the values whose bit is set
        want = np.unpackbits(payloads["bits"], axis=1, bitorder="little")[:, :d].sum(axis=0)
    elif label == "ss":   # a report supports the values of its subset
        want = np.bincount(payloads["subset"].ravel().astype(np.int64), minlength=d)
    else:   # HR: the values whose Hadamard row agrees with the output; the pure estimator's S
        want = proto.support_counts(sketch)
        counts, _ = pure_counts(proto, want, sketch.total_reports)
        np.testing.assert_allclose(counts, proto.estimate(sketch).counts, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64))


def pure_counts(proto, support, n):
    from sketches.base import pure_estimate

    return pure_estimate(support, n, proto.p, proto.q)


@pytest.mark.parametrize("label", sorted(COUNT_PROTOCOLS))
def test_the_small_count_model_is_the_pure_estimate_s_law(label):
    """``small_count_model``: (S, p*, q*) exactly where the estimate is the pure one — every pure
    protocol and the one-cohort linear OLH (GRR on [g]) — so (S − n q*)/(p* − q*) is the estimate."""
    proto = count_server(label)
    sketch, _ = filled_sketch(proto)
    model = proto.small_count_model(sketch)
    pure = label in ("rr", "grr", "oue", "sue", "hr", "ss", "olh-linear-1", "lgrr", "losue")
    assert (model is not None) == pure, label
    if model is not None:
        support, p, q = model
        counts, _ = pure_counts(proto, support, sketch.total_reports)
        np.testing.assert_allclose(counts, proto.estimate(sketch).counts, rtol=1e-9, atol=1e-6)
        given = np.arange(proto.domain_size, dtype=np.float64)   # a support passed in is the one used
        assert proto.small_count_model(sketch, given)[0] is given or label == "olh-linear-1"


@pytest.mark.parametrize("label", sorted(COUNT_PROTOCOLS))
def test_variance_from_count_means_the_variance_is_the_pure_formula(label):
    """Where ``variance_from_count`` holds, ``variance(n, c)`` is docs/math.md §2's formula at c for
    any c (so compare may evaluate it at a pooled count); it holds for the pure protocols only."""
    proto = count_server(label)
    pure = label in ("rr", "grr", "oue", "sue", "hr", "ss", "lgrr", "losue")
    assert proto.variance_from_count == pure, label
    if pure:
        n, c = 5_000, np.array([0.0, 17.5, 2_500.0])
        delta = proto.p - proto.q
        want = n * proto.q * (1 - proto.q) / delta ** 2 + c * (1 - proto.p - proto.q) / delta
        np.testing.assert_allclose(proto.variance(n, c), want, rtol=1e-12)


def test_joint_protocols_are_those_whose_pair_law_is_derived():
    """A device half carries a joint metric (its module's CARRIES_JOINT) exactly where its server
    half gives the pair probabilities the joint covariance needs (estimators/joint.py)."""
    for name in PROTOCOL_NAMES + LONGITUDINAL_PROTOCOL_NAMES:
        if reports_strings(name):
            assert not carries_joint(name)
            continue
        d, eps, options = COUNT_PROTOCOLS[name]
        assert carries_joint(name) == (build_server(name, d, eps, options).pair_probabilities() is not None), name
    assert joint_protocols() == ("grr", "oue", "sue", "ss")
    assert not carries_joint("no-such-protocol")


def test_a_joint_metric_of_another_protocol_is_refused_with_the_list():
    from client_sdk.errors import RegistryError
    from client_sdk.registry import parse_metric

    table = {"kind": "joint", "epsilon": 2.0, "protocol": "olh",
             "of": [{"name": "os", "kind": "categorical", "categories": ["a", "b"]}, {"name": "x", "kind": "boolean"}]}
    with pytest.raises(RegistryError, match="auto or one of grr, oue, sue, ss"):
        parse_metric("j", table)
    assert parse_metric("j", dict(table, protocol="ss")).protocol == "ss"


@pytest.mark.parametrize(("max_length", "seeds"), [(3, 5), (5, 2)])
def test_discover_clear_cohorts_and_held_out_groups_are_its_groups(max_length, seeds):
    """Both are the L + 1 groups, each for its own reason, checked on parameters where groups,
    seeds and cohorts (groups × seeds) all differ: the group in clear ranges over exactly the
    groups (the wire refuses the next one), and the held-out group (the last) holds a 1/G share of
    the devices, G = held_out_groups, so G·n_h estimates n."""
    proto = build_server("discover", None, 4.0, {"max_length": max_length, "seeds": seeds})
    groups = max_length + 1
    assert len({groups, seeds, proto.cohorts}) == 3
    assert proto.clear_cohorts == groups
    assert proto.held_out_groups == groups
    n = 40_000
    payloads = proto.encode(["www.example"] * n, np.random.default_rng(3))
    assert set(np.unique(payloads[proto.cohort_field]).tolist()) == set(range(proto.clear_cohorts))
    proto.from_wire([[proto.clear_cohorts - 1, 0, 0]])
    with pytest.raises(InvalidPayload) as refused:
        proto.from_wire([[proto.clear_cohorts, 0, 0]])
    assert refused.value.field == proto.cohort_field
    held = int((payloads["group"] == groups - 1).sum())
    share = 1 / proto.held_out_groups
    assert abs(proto.held_out_groups * held - n) <= 4 * proto.held_out_groups * np.sqrt(n * share * (1 - share))


def test_the_audit_encodes_olh_in_the_cohort_of_each_day():
    """The audit's SDK path (the device half's encode_one) puts day k's report in the cohort
    HMAC(secret, "olh", metric, k) — a different one most days — and the attacker's likelihood
    then takes each report's own cohort (``daily_cohorts``), OLH's alone among the protocols."""
    from client_sdk.hashing import derive_cohort
    from client_sdk.registry import parse_metric
    from estimators.audit import daily_cohorts, linkable, sdk_reports

    spec = parse_metric("olh_m", {"kind": "categorical", "categories": [f"v{i}" for i in range(12)],
                                  "protocol": "olh", "epsilon": 1.0})
    secret = bytes(range(32))
    wires = sdk_reports(spec, secret, "v3", 20)
    m = spec.protocol_impl.cohorts
    assert [w[0] for w in wires] == [derive_cohort(secret, f"olh\x00olh_m\x00{day}", m) for day in range(20)]
    assert len({w[0] for w in wires}) > 1
    assert daily_cohorts(spec) and not linkable(spec)
    for name, (d, eps, options) in COUNT_PROTOCOLS.items():
        other = parse_metric("x", {"kind": "categorical", "categories": [f"v{i}" for i in range(d)],
                                   "protocol": name.split("-")[0], "epsilon": eps, **options})
        assert daily_cohorts(other) == name.startswith("olh"), name


@pytest.mark.parametrize("value", [0.0, 3.3, 7.25, 10.0])
def test_memobitmean_audit_inputs_are_the_alpha_rounding_law(value):
    """The attacker's mixture (``audit_inputs``) is the law of the grid point devices' secret α
    round ``value`` to (``report_index``, the SDK's): over 4,000 secrets the share rounded up is
    the mixture's weight within 4 standard errors, and only its two grid points occur."""
    from client_sdk.registry import parse_metric
    from estimators.audit import audit_inputs, normalised

    spec = parse_metric("mm", {"kind": "numeric", "range": [0, 10], "protocol": "memobitmean",
                               "epsilon": 1.0, "epsilon_inf": 3.0})
    mixture = dict((j, w) for w, j in audit_inputs(spec, value))
    assert abs(sum(mixture.values()) - 1.0) < 1e-12
    device = spec.protocol_impl
    n = 4_000
    got = [device.report_index(normalised(spec, value), i.to_bytes(4, "big") * 8, "mm") for i in range(n)]
    assert set(got) <= set(mixture)
    for j, w in mixture.items():
        share = got.count(j) / n
        assert abs(share - w) <= 4 * np.sqrt(w * (1 - w) / n) + 1e-12, (j, share, w)


@pytest.mark.statistical
def test_a_histogram_metric_is_audited_by_its_bucket():
    """A histogram's values are bucket labels: the attacker's chain is its bucket's (it used to be
    handed the label itself and failed), and its accuracy stays under the ε bound."""
    from client_sdk.registry import parse_metric
    from estimators.audit import distinguish

    spec = parse_metric("h", {"kind": "numeric", "range": [0, 10], "buckets": 5, "protocol": "grr", "epsilon": 1.0})
    row = distinguish(spec, ("[0, 2)", "[8, 10]"), 2, 400, np.random.default_rng(5))
    assert row.ci_low <= row.bound and row.accuracy > 0.5


def test_a_server_half_reads_its_device_half_s_public_names_only():
    """A server half reads a protocol constant through its device half (OLH's hash of one value,
    the keep threshold), never a private name of it: that would cross the packages (issue 29 §2)."""
    proto = count_server("olh")
    assert proto.cohort_hash(2, 5) == hash_one(2, 5, proto.params.g)
    assert proto.keep_threshold == proto.device.keep_threshold
    proto.device._probe = 1   # a private name the device half has
    with pytest.raises(AttributeError):
        proto._probe  # noqa: B018
