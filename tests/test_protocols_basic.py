"""The four verbs and the wire format of every frequency-oracle protocol.

Round trips (encode -> wire -> msgpack -> wire -> validate), rejection of malformed reports
with the report index named, additive sketches, DomainError on bad inputs, the OS-CSPRNG
path, and a chi-square check that encode samples exactly the distribution
``output_probabilities`` states (the one the privacy audit certifies).

olh is written separately: its cases run when ``client_sdk/protocols/olh.py`` exists.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc

import msgpack
import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import DomainError, InvalidPayload
from sketches import build_server
from sketches.base import Sketch

#: (protocol, d, epsilon) for the round-trip and contract tests.
CASES = [("rr", 2, 1.0), ("grr", 5, 1.0), ("oue", 10, 1.0), ("sue", 13, 2.0), ("ss", 10, 1.0),
         ("ss", 300, 3.0), ("hr", 10, 1.0), ("olh", 10, 2.0)]
IDS = [f"{name}-d{d}" for name, d, _ in CASES]


def build(name: str, d: int, epsilon: float):
    """The protocol via the factory, with default options."""
    return build_server(name, d, epsilon, {})


def batch(d: int, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, d, n)


def sketch_of(proto, payloads) -> Sketch:
    sk = proto.new_sketch()
    proto.accumulate(sk, payloads)
    return sk


def assert_payloads_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


def take(payloads: dict, rows) -> dict:
    return {k: np.asarray(v)[rows] for k, v in payloads.items()}


def assert_cells_fit(observed, probs, size: float, label) -> None:
    """Each cell's count against its exact Binomial(n, p) law, two-sided, Bonferroni over the cells.

    For draws of the unseeded OS CSPRNG: the union bound makes the check's false-failure rate at
    most ``size`` with no large-sample approximation (a chi-square p-value is not reliable at
    such small sizes where some expected counts are small)."""
    observed, probs = np.asarray(observed, dtype=np.int64), np.asarray(probs, dtype=np.float64)
    n = int(observed.sum())
    two_sided = np.minimum(1.0, 2 * np.minimum(stats.binom.cdf(observed, n, probs),
                                               stats.binom.sf(observed - 1, n, probs)))
    worst = int(np.argmin(two_sided))
    assert two_sided[worst] > size / probs.size, (label, worst, int(observed[worst]), n * probs[worst],
                                                  float(two_sided[worst]))


# --- round trip and contract -----------------------------------------------------------------

@pytest.mark.parametrize("name,d,eps", CASES, ids=IDS)
def test_round_trip_through_msgpack(name, d, eps):
    proto = build(name, d, eps)
    payloads = proto.encode(batch(d, 400), np.random.default_rng(1))
    proto.validate(payloads)
    wire = proto.to_wire(payloads)
    assert len(wire) == 400
    decoded = msgpack.unpackb(msgpack.packb(wire), raw=False)
    back = proto.from_wire(decoded)
    proto.validate(back)
    assert_payloads_equal(payloads, back)
    assert proto.epsilon <= eps + 1e-12 and proto.epsilon > 0
    assert proto.payload_bits >= 1


@pytest.mark.parametrize("name,d,eps", CASES, ids=IDS)
def test_secure_random_path(name, d, eps):
    proto = build(name, d, eps)
    for i in (0, d - 1):
        one = proto.encode(np.array([i]))  # rng=None: the OS CSPRNG
        proto.validate(one)
        assert_payloads_equal(one, proto.from_wire(proto.to_wire(one)))
    many = proto.encode(batch(d, 300))
    proto.validate(many)
    assert sketch_of(proto, many).total_reports == 300


@pytest.mark.parametrize("name,d,eps", CASES, ids=IDS)
def test_accumulate_is_additive(name, d, eps):
    proto = build(name, d, eps)
    rng = np.random.default_rng(2)
    a = proto.encode(batch(d, 300, 3), rng)
    b = proto.encode(batch(d, 200, 4), rng)
    both = {k: np.concatenate([np.asarray(a[k]), np.asarray(b[k])]) for k in a}
    whole = sketch_of(proto, both)
    merged = sketch_of(proto, a).merge(sketch_of(proto, b))
    np.testing.assert_array_equal(whole.counts, merged.counts)
    np.testing.assert_array_equal(whole.reports, merged.reports)
    assert whole.total_reports == 500
    assert whole.counts.shape == (proto.cohorts, *proto.cell_shape)
    twice = sketch_of(proto, a)
    proto.accumulate(twice, b)  # in place, in two steps
    np.testing.assert_array_equal(twice.counts, whole.counts)
    est = proto.estimate(whole)
    assert est.counts.shape == est.variances.shape == (d,) and est.n == 500
    assert np.all(np.isfinite(est.counts)) and np.all(est.variances > 0)


@pytest.mark.parametrize("name,d,eps", CASES, ids=IDS)
def test_domain_errors(name, d, eps):
    proto = build(name, d, eps)
    rng = np.random.default_rng(0)
    for bad in ([d], [-1], [0, 1, d + 5]):
        with pytest.raises(DomainError, match="outside the domain"):
            proto.encode(np.array(bad), rng)
    with pytest.raises(DomainError, match="position 2"):
        proto.encode(np.array([0, 1, d, 0]), rng)
    with pytest.raises(DomainError, match="integers"):
        proto.encode(np.array([0.5]), rng)
    assert proto.encode(np.array([], dtype=np.int64), rng)  # an empty batch is fine


@pytest.mark.parametrize("name,d,eps", CASES, ids=IDS)
def test_wire_rejects_wrong_type_with_index(name, d, eps):
    proto = build(name, d, eps)
    wire = proto.to_wire(proto.encode(batch(d, 6), np.random.default_rng(5)))
    for junk in ("garbage", 1.5, None, [0.5, "x", None], {"y": 1}):
        objects = list(wire)
        objects[3] = junk
        with pytest.raises(InvalidPayload) as info:
            proto.from_wire(objects)
        assert info.value.index == 3


def test_constructors_do_no_per_value_work_for_a_million_values():
    """`auto` instantiates every protocol, even for d = 1,000,000: nothing may be O(d).

    Measured by memory, not time (a wall-clock bound fails on a busy machine): any per-value
    array at d = 10⁶ is megabytes, while constructing and asking for ε, the payload size and
    one variance allocates a few kilobytes.
    """
    for name in ("grr", "oue", "sue", "ss", "hr", "olh"):
        tracemalloc.start()
        try:
            proto = build_server(name, 1_000_000, 1.0, {})
            proto.variance(1000, 0.0)
            _ = proto.payload_bits, proto.epsilon
        except ValueError:
            pass  # a protocol may refuse huge domains (olh's dense decoder); `auto` skips it
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < 256 * 1024, (name, peak)


# --- protocol-specific malformed payloads ----------------------------------------------------

def expect_invalid(call, index: int | None) -> None:
    with pytest.raises(InvalidPayload) as info:
        call()
    assert info.value.index == index, str(info.value)
    if index is not None:
        assert f"report {index}" in str(info.value)


def test_rr_malformed():
    proto = build("rr", 2, 1.0)
    expect_invalid(lambda: proto.from_wire([0, 1, True]), 2)  # msgpack true decodes as bool
    expect_invalid(lambda: proto.from_wire([0, 2]), 1)
    expect_invalid(lambda: proto.from_wire([0, 1 << 70]), 1)
    expect_invalid(lambda: proto.validate({"y": np.array([0, 1, 1, -1])}), 3)
    expect_invalid(lambda: proto.validate({"y": np.array([0, 2])}), 1)
    expect_invalid(lambda: proto.validate({"y": np.array([True, False])}), None)
    expect_invalid(lambda: proto.validate({}), None)
    with pytest.raises(ValueError, match="boolean"):
        build_server("rr", 3, 1.0, {})


def test_grr_malformed():
    proto = build("grr", 5, 1.0)
    expect_invalid(lambda: proto.validate({"y": np.array([0, 4, 5])}), 2)
    expect_invalid(lambda: proto.validate({"y": np.array([-1])}), 0)
    expect_invalid(lambda: proto.from_wire([1, False]), 1)


@pytest.mark.parametrize("name", ["oue", "sue"])
def test_unary_malformed(name):
    proto = build(name, 13, 2.0)  # 2 bytes per report, 3 padding bits
    good = proto.encode(batch(13, 5), np.random.default_rng(0))
    wire = proto.to_wire(good)
    assert all(type(w) is bytes and len(w) == 2 for w in wire)
    expect_invalid(lambda: proto.from_wire(wire[:2] + [b"\x00"]), 2)
    expect_invalid(lambda: proto.from_wire(wire[:1] + [b"\x00\x00\x00"]), 1)
    expect_invalid(lambda: proto.from_wire([bytearray(2)]), 0)
    for bit in (13, 14, 15):  # padding bits beyond item 12 must be zero
        bits = good["bits"].copy()
        bits[4, 1] |= 1 << (bit - 8)
        expect_invalid(lambda b=bits: proto.validate({"bits": b}), 4)
    bits = good["bits"].copy()
    bits[3, 1] |= 1 << 4  # item 12 is a real bit: fine
    proto.validate({"bits": bits})
    expect_invalid(lambda: proto.validate({"bits": good["bits"][:, :1]}), None)
    expect_invalid(lambda: proto.validate({"bits": good["bits"].astype(np.int64)}), None)
    eight = build(name, 8, 1.0)  # no padding when d is a multiple of 8
    eight.validate({"bits": np.full((3, 1), 0xFF, dtype=np.uint8)})


def test_ss_malformed():
    proto = build("ss", 10, 1.0)
    s = proto.s
    assert s == math.ceil(10 / (math.e + 1)) == 3
    good = proto.encode(batch(10, 4), np.random.default_rng(0))
    assert good["subset"].shape == (4, 3) and good["subset"].dtype == np.uint32
    wire = proto.to_wire(good)
    assert all(type(w) is bytes and len(w) == 2 * s for w in wire)  # uint16 little-endian
    expect_invalid(lambda: proto.from_wire(wire[:3] + [wire[3][:-2]]), 3)
    expect_invalid(lambda: proto.from_wire([wire[0] + b"\x00\x00"]), 0)
    for row, label in (([1, 1, 4], "duplicate"), ([4, 2, 7], "unsorted"), ([1, 2, 10], "out of range")):
        sub = good["subset"].copy()
        sub[2] = row
        with pytest.raises(InvalidPayload, match="report 2") as info:
            proto.validate({"subset": sub})
        assert info.value.index == 2, label
    sub = good["subset"].astype(np.int64)
    sub[1, 0] = -1
    expect_invalid(lambda: proto.validate({"subset": sub}), 1)
    expect_invalid(lambda: proto.validate({"subset": good["subset"][:, :2]}), None)
    expect_invalid(lambda: proto.validate({"subset": good["subset"].astype(np.float64)}), None)
    # duplicates arriving over the wire are caught by validate, with the index
    dup = proto.from_wire([wire[0], np.array([5, 5, 6], dtype="<u2").tobytes()])
    expect_invalid(lambda: proto.validate(dup), 1)


def test_ss_wide_domains_use_uint32_on_the_wire():
    proto = build("ss", 70_000, 8.0)
    payloads = proto.encode(np.array([69_999, 3]), np.random.default_rng(0))
    wire = proto.to_wire(payloads)
    assert len(wire[0]) == 4 * proto.s
    assert_payloads_equal(payloads, proto.from_wire(wire))
    assert (payloads["subset"] < 70_000).all()


def test_hr_malformed():
    proto = build("hr", 10, 1.0)
    assert (proto.g, proto.t, proto.m, proto.k, proto.payload_bits) == (5, 2, 6, 30, 5)
    expect_invalid(lambda: proto.validate({"y": np.array([0, 29, 30])}), 2)
    expect_invalid(lambda: proto.validate({"y": np.array([-3])}), 0)
    expect_invalid(lambda: proto.validate({"y": np.array([1.5])}), None)
    expect_invalid(lambda: proto.from_wire([3, 30]), 1)
    expect_invalid(lambda: proto.from_wire([3, False]), 1)


@pytest.mark.parametrize("d, eps", [(10, 1.0), (30, 2.0), (9, 0.3), (40, 0.05)])
def test_hr_sets_form_a_symmetric_design_and_the_transform_counts_them(d, eps):
    """|C_x| = m and |C_x ∩ C_x'| = λ for every pair, so the protocol is pure; the DFT over
    Z_g^t gives exactly Σ_{y∈C_x} h[y] for every x."""
    proto = build("hr", d, eps)
    inside = np.stack([proto.output_probabilities(x) > proto.output_probabilities(x).min()
                       for x in range(d)]).astype(np.int64)
    assert (inside.sum(axis=1) == proto.m).all()
    overlap = inside @ inside.T
    assert (overlap[~np.eye(d, dtype=bool)] == proto.params.lam).all()
    sk = proto.new_sketch()
    sk.counts[0] = np.random.default_rng(0).integers(0, 1000, proto.k)
    sk.reports[0] = int(sk.counts.sum())
    np.testing.assert_array_equal(proto.support_counts(sk), inside @ sk.counts[0])


def test_hr_estimates_a_million_values_by_one_transform():
    """All d estimates from one DFT over Z_g^t (its speed: bench/throughput.py)."""
    proto = build("hr", 1_000_000, 2.0)
    sk = proto.new_sketch()
    sk.counts[0] = np.random.default_rng(0).integers(0, 50, proto.k)
    sk.reports[0] = int(sk.counts.sum())
    est = proto.estimate(sk)
    assert est.counts.shape == (1_000_000,)
    for x in (0, 12_345, 999_999):  # spot-check the transform against the definition
        probs = proto.output_probabilities(x)
        support = sk.counts[0][probs > probs.min()].sum()
        assert est.counts[x] == pytest.approx((support - sk.reports[0] * proto.q) / (proto.p - proto.q))


def test_tiny_epsilon_is_rejected_not_silently_zero():
    for name in ("rr", "oue", "sue", "ss", "hr"):
        with pytest.raises(ValueError, match="too small"):
            build_server(name, 2, 1e-12, {})


# --- encode samples exactly the audited distribution -------------------------------------------

def outcome_index(name: str, proto, payloads: dict) -> np.ndarray:
    """Map each report to its position in ``output_probabilities``' enumeration."""
    if name in ("rr", "grr", "hr"):
        return np.asarray(payloads["y"], dtype=np.int64)
    if name in ("oue", "sue"):
        bits = np.asarray(payloads["bits"], dtype=np.int64)
        return (bits << (8 * np.arange(bits.shape[1]))).sum(axis=1)
    if name == "ss":
        lookup = {c: i for i, c in enumerate(itertools.combinations(range(proto.domain_size), proto.s))}
        return np.array([lookup[tuple(row)] for row in payloads["subset"].tolist()])
    raise ValueError(f"no outcome enumeration for {name} in this test")


GOF_CASES = [("rr", 2, 1.0), ("grr", 5, 1.0), ("oue", 6, 1.0), ("sue", 6, 2.0), ("ss", 7, 1.0),
             ("ss", 8, 0.5), ("ss", 6, 3.0), ("hr", 6, 1.0), ("hr", 7, 4.0)]


@pytest.mark.statistical
@pytest.mark.parametrize("name,d,eps", GOF_CASES, ids=[f"{c[0]}-d{c[1]}-e{c[2]}" for c in GOF_CASES])
def test_encode_matches_output_probabilities(name, d, eps):
    """Chi-square goodness of fit of 200,000 seeded reports per true value (batch path)."""
    proto = build(name, d, eps)
    rng = np.random.default_rng(11)
    for x in (0, d - 1):
        probs = proto.output_probabilities(x)
        got = np.bincount(outcome_index(name, proto, proto.encode(np.full(200_000, x), rng)),
                          minlength=probs.size)
        assert got.size == probs.size
        expected = 200_000 * probs
        assert expected.min() >= 5  # chi-square approximation holds
        p_value = stats.chisquare(got, expected).pvalue
        assert p_value > 1e-4, (x, p_value)


@pytest.mark.parametrize("d,eps", [(7, 1.0), (10, 1.0), (100, 3.0), (64, 0.3), (1000, 5.0)])
def test_ss_floyd_samplers_agree_on_the_same_draws(d, eps):
    """Both batch samplers are the same function of (include, draws): Floyd's algorithm."""
    from sketches.randomness import as_random_source, bernoulli

    proto = build("ss", d, eps)
    rng = np.random.default_rng(1)
    source = as_random_source(rng)
    x = rng.integers(0, d, 5000)
    include = bernoulli(source, proto.params.include_threshold, x.size)
    draws = np.stack([source.below(d - proto.s + i, x.size) for i in range(proto.s)])
    dense = proto._floyd_dense(x, include, draws)
    np.testing.assert_array_equal(dense, proto._floyd_sparse(x, include, draws))
    one = [proto.floyd_one(int(x[r]), bool(include[r]), draws[:, r].tolist()) for r in range(50)]
    np.testing.assert_array_equal(np.stack(one), dense[:50])


@pytest.mark.statistical
@pytest.mark.parametrize("path", ["dense", "sparse"])
@pytest.mark.parametrize("d,eps", [(7, 1.0), (8, 0.5), (10, 1.0), (9, 2.0)])
def test_both_ss_floyd_paths_match_output_probabilities(monkeypatch, path, d, eps):
    """SS has two batch samplers (domain bitmap / sort-based); force each on small params."""
    from sketches import ss as ss_module

    monkeypatch.setattr(ss_module, "SPARSE_RATIO", 0 if path == "sparse" else 10**9)
    proto = build("ss", d, eps)
    assert proto.s >= 2
    rng = np.random.default_rng(13)
    for x in (0, d // 2, d - 1):
        probs = proto.output_probabilities(x)
        got = np.bincount(outcome_index("ss", proto, proto.encode(np.full(100_000, x), rng)),
                          minlength=probs.size)
        assert (100_000 * probs).min() >= 5
        assert stats.chisquare(got, 100_000 * probs).pvalue > 1e-4, (x, path)


@pytest.mark.statistical
@pytest.mark.parametrize("name,d,eps", [("ss", 7, 1.0), ("ss", 8, 0.5), ("hr", 6, 1.0), ("oue", 5, 1.0)],
                         ids=["ss-d7", "ss-d8", "hr-d6", "oue-d5"])
def test_single_report_path_matches_output_probabilities(name, d, eps):
    """The batch-of-one path (separate Python code for SS) samples the same distribution."""
    proto = build(name, d, eps)
    rng = np.random.default_rng(12)
    x = d // 2
    probs = proto.output_probabilities(x)
    n = 20_000
    payloads = [proto.encode(np.array([x]), rng) for _ in range(n)]
    merged = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
    got = np.bincount(outcome_index(name, proto, merged), minlength=probs.size)
    assert (n * probs).min() >= 5
    assert stats.chisquare(got, n * probs).pvalue > 1e-4


# --- randomness sources (the fast paths the encoders rely on) -----------------------------------

@pytest.mark.statistical
@pytest.mark.parametrize("source", ["secure", "pcg64", "mt19937"])
def test_sources_draw_uniform_words_and_bounded_integers(source):
    from client_sdk.randomness import SCALE
    from sketches.randomness import GeneratorRandom, SecureRandom, bernoulli

    src = {"secure": SecureRandom(), "pcg64": GeneratorRandom(np.random.default_rng(7)),
           "mt19937": GeneratorRandom(np.random.Generator(np.random.MT19937(7)))}[source]

    def uniform(counts, label) -> None:
        if source == "secure":
            # unseeded: 6 exact checks at size 1e-7 / 6 each, 1e-7 per run (was chi-square at 1e-4
            # each: 6e-4); a cell off by ~6 σ fails (σ = 1 % of a nibble's 9,375 draws)
            assert_cells_fit(counts, np.full(counts.size, 1 / counts.size), 1e-7 / 6, label)
        else:   # seeded: the same outcome every run
            assert stats.chisquare(counts).pvalue > 1e-4, label

    words = src.words((50_000, 3))
    assert words.dtype == np.uint32 and words.shape == (50_000, 3)
    for shift in (0, 28):  # low and high nibbles are uniform
        uniform(np.bincount(((words >> shift) & 0xF).ravel(), minlength=16), ("nibble", shift))
    highs = np.array([1, 2, 3, 7, 10, 1 << 40])
    drawn = src.below(highs, (40_000, 6))
    assert drawn.dtype == np.int64 and drawn.shape == (40_000, 6)
    assert ((drawn >= 0) & (drawn < highs)).all()
    for col, h in enumerate(highs[1:5], start=1):
        uniform(np.bincount(drawn[:, col], minlength=h), ("below", int(h)))
    one = src.below(5, 1)
    assert one.shape == (1,) and 0 <= one[0] < 5
    assert src.below(5, (1, 1)).shape == (1, 1)
    assert bernoulli(src, 0, 100).sum() == 0 and bernoulli(src, SCALE, 100).all()
    with pytest.raises(ValueError):
        src.below(np.array([3, 0]), 2) if source == "secure" else SecureRandom().below(0, 3)


@pytest.mark.parametrize("name", ["rr", "grr", "hr"])
def test_from_wire_rejects_huge_integers_with_the_report_index(name):
    """msgpack can carry integers up to 2^64; they must be an InvalidPayload, not an OverflowError."""
    from client_sdk.errors import InvalidPayload
    from sketches import build_server

    proto = build_server(name, 2 if name == "rr" else 16, 1.0, {})
    for huge in (2**63, 2**64 - 1, -(2**63) - 1):
        with pytest.raises(InvalidPayload, match="report 1"):
            proto.from_wire([0, huge])


@pytest.mark.parametrize("name, d", [("rr", 2), ("grr", 5), ("hr", 5), ("oue", 5), ("sue", 4), ("ss", 6), ("olh", 6)])
def test_encode_one_samples_the_exact_mechanism(name, d):
    """The SDK's single-report path (OS CSPRNG, plain integers where overridden) has the output
    distribution of ``output_probabilities`` (an exact per-cell check per true value: the OS CSPRNG
    is unseeded, so 14 checks at size 5e-8, 7e-7 per run, where chi-square at p > 1e-4 over 3,000
    or 20,000 draws made 1.4e-3; 40,000 draws: a cell off by ~6 σ fails, for rr's kept bit
    σ = 0.22 %, so a threshold off by 1.3 % of probability, or ε by ~0.07, is caught)."""
    proto = build_server(name, d, 1.0, {})
    draws = 40_000
    cohort = 0 if proto.uses_cohorts else None
    for x in (0, d - 1):
        decoded = proto.from_wire([proto.randomise(x, cohort) for _ in range(draws)])
        proto.validate(decoded)
        probs = np.asarray(proto.output_probabilities(x))
        if name == "olh":  # per-cohort distribution over y
            assert (decoded["cohort"] == cohort).all()
            probs, index = probs[cohort], np.asarray(decoded["y"], dtype=np.int64)
        else:
            index = outcome_index(name, proto, decoded)
        observed = np.bincount(index, minlength=probs.size)
        keep = probs > 0
        assert observed[~keep].sum() == 0
        assert_cells_fit(observed[keep], probs[keep] / probs[keep].sum(), 5e-8, (name, x))


def test_encode_one_rejects_values_outside_the_domain():
    from client_sdk.errors import DomainError

    for name in ("rr", "grr", "hr", "oue"):
        proto = build_server(name, 2 if name == "rr" else 5, 1.0, {})
        for bad in (-1, proto.domain_size):
            with pytest.raises(DomainError):
                proto.randomise(bad)
