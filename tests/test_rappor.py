"""RAPPOR client side: parameters, epsilons and their exact audit, hashing, PRR/IRR, wire.

The audit: for small k we enumerate every Bloom pattern with 1..h set bits and every one
of the 2^k reports, and check that the worst ratio P(y|B)/P(y|B') over patterns and outputs
equals e^ε₁ (one report) and, over PRR outputs, e^ε∞ — exactly, from the realised
probabilities — and chi-square tests show that ``encode`` (both the simulation path and the
SDK path with a client secret) samples those very distributions. A negative control (a
client that never reports a true 1 bit as 0, the bug pure-LDP shipped) fails the audit.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math

import msgpack
import numpy as np
import pytest
from scipy import stats

from client_sdk import hashing
from client_sdk.errors import DomainError, InvalidPayload
from client_sdk.protocols import rappor as rp
from client_sdk.protocols.rappor import Rappor, RapporParams, from_options, worst_case_epsilon
from client_sdk.randomness import SCALE
from client_sdk.registry import parse_registry
from sketches import build_server, server_half
from sketches.hashing import bloom_positions, bloom_positions_one, prr_words
from sketches.rappor import RapporServer

SECRET = bytes(range(32))
RELATIVE_SLACK = 1e-9


def small(k: int = 4, h: int = 2, m: int = 1, f: float = 0.5, p: float = 0.5, q: float = 0.75) -> RapporServer:
    return server_half(Rappor(RapporParams(k=k, h=h, m=m, f=f, p=p, q=q)))


# --- parameters and epsilons ---------------------------------------------------------------------

def test_defaults_and_their_epsilons():
    proto = build_server("rappor", None, None, {})
    p = proto.params
    assert (p.k, p.h, p.m, p.f, p.p, p.q) == (128, 2, 64, 0.5, 0.5, 0.75)
    assert p.p_star == 0.5625 and p.q_star == 0.6875  # exact on the 2^-32 grid
    assert proto.epsilon == pytest.approx(2 * math.log(0.6875 * 0.4375 / (0.5625 * 0.3125)), rel=1e-12)
    assert proto.epsilon_longitudinal == pytest.approx(4 * math.log(3), rel=1e-12)
    assert proto.cohorts == 64 and proto.cell_shape == (128,) and proto.payload_bits == 128 + 6


@pytest.mark.parametrize("f,p,q,h,eps_inf,eps_one", [
    (0.5, 0.25, 0.75, 2, 4 * math.log(3), 2.04),     # Chromium NORMAL_NOISE
    (0.25, 0.25, 0.75, 2, 4 * math.log(7), 3.15),    # Chromium SPARSE_NOISE
    (0.25, 0.125, 0.875, 2, 4 * math.log(7), 5.09),  # Chromium "weak"
    (0.5, 0.5, 0.75, 2, 4 * math.log(3), 1.07),      # google/rappor demo
])
def test_ldp_facts_parameter_table(f, p, q, h, eps_inf, eps_one):
    params = RapporParams(k=128, h=h, m=128, f=f, p=p, q=q)
    assert params.epsilon_inf == pytest.approx(eps_inf, rel=1e-12)
    assert params.epsilon_one == pytest.approx(eps_one, abs=0.006)
    ps, qs = params.p_star, params.q_star
    assert params.epsilon_one == pytest.approx(h * math.log(qs * (1 - ps) / (ps * (1 - qs))), rel=1e-12)


def test_epsilon_is_a_cap():
    assert from_options(None, 1.1, {}).epsilon < 1.1
    with pytest.raises(ValueError, match="epsilon_1 = 1.07"):
        from_options(None, 1.0, {})
    assert from_options(None, None, {"prob_f": 0.75}).epsilon < 1.0


@pytest.mark.parametrize("options,words", [
    ({"prob_f": 0}, "longitudinal"),
    ({"prob_p": 0.8}, "p < q"),
    ({"prob_f": 1.0}, "f must be"),
    ({"bloom_bits": 0}, "k must be"),
    ({"bloom_bits": True}, "bloom_bits must be an integer"),
    ({"hashes": 2.0}, "hashes must be an integer"),
    ({"cohorts": 1 << 17}, "m must be"),
    ({"prob_q": "0.75"}, "prob_q must be a number"),
    ({"prob_q": math.nan}, "prob_q must be a number"),
    ({"colour": 1}, "unknown option"),
    ({"prob_p": 0.5, "prob_q": 0.5 + 2**-34}, "p < q|grid"),
    ({"prob_f": 1 - 1e-11}, "grid"),  # f/2 rounds up to ½: q* = p*, the estimator divided by 0
])
def test_bad_options_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        from_options(None, None, options)


def test_no_noise_means_infinite_epsilons():
    params = RapporParams(k=8, h=2, m=1, f=0.0, p=0.0, q=1.0)  # decodable (google files), not private
    assert params.epsilon_one == math.inf and params.epsilon_inf == math.inf


def test_registry_string_metric_without_epsilon():
    reg = parse_registry('[metrics.home]\nkind = "string"\nbloom_bits = 64\nhashes = 2\ncohorts = 32\n'
                         'prob_f = 0.5\nprob_p = 0.25\nprob_q = 0.75\n')
    spec = reg.get("home")
    proto = server_half(spec)
    assert spec.protocol == "rappor" and spec.epsilon is None
    assert (proto.params.k, proto.params.m) == (64, 32)
    assert spec.to_json()["epsilon_longitudinal"] == pytest.approx(4 * math.log(3))


def test_quantisation_rounds_towards_noise():
    params = RapporParams(k=8, h=2, m=1, f=0.3, p=0.1 + 1e-12, q=0.9 - 1e-12)
    assert params.f_realised >= 0.3 and params.p_realised >= params.p and params.q_realised <= params.q
    assert params.half_f_threshold / SCALE >= 0.15


# --- the exact audit ----------------------------------------------------------------------------------

def patterns(k: int, h: int) -> list[int]:
    """Every Bloom pattern a value can have: 1..h distinct set bits of k."""
    return [sum(1 << b for b in bits) for r in range(1, h + 1) for bits in itertools.combinations(range(k), r)]


def worst_ratio(rows: np.ndarray) -> float:
    """max over outputs and pairs of inputs of P(y|x)/P(y|x'); inf when a support differs."""
    hi, lo = rows.max(axis=0), rows.min(axis=0)
    if np.any((hi > 0) & (lo <= 0)):
        return math.inf
    return float((hi / lo).max())


AUDIT_CASES = [(4, 2, 0.5, 0.5, 0.75), (6, 2, 0.5, 0.25, 0.75), (5, 1, 0.25, 0.125, 0.875),
               (6, 3, 0.3, 0.4, 0.7), (3, 2, 0.5, 0.5, 0.75), (4, 2, 0.1 + 1e-9, 0.2, 0.9)]


@pytest.mark.parametrize("k,h,f,p,q", AUDIT_CASES)
def test_exact_audit_of_epsilon_one_and_infinity(k, h, f, p, q):
    proto = small(k=k, h=h, f=f, p=p, q=q)
    pats = patterns(k, h)
    report = np.stack([proto.output_probabilities(x) for x in pats])
    prr = np.stack([proto.prr_output_probabilities(x) for x in pats])
    np.testing.assert_allclose(report.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(prr.sum(axis=1), 1.0, atol=1e-12)
    # the quoted epsilons are the mechanism's exact worst case (not a loose bound)
    assert math.isclose(worst_ratio(report), math.exp(proto.epsilon), rel_tol=RELATIVE_SLACK)
    assert math.isclose(worst_ratio(prr), math.exp(proto.epsilon_longitudinal), rel_tol=RELATIVE_SLACK)
    if k >= 2 * h:  # disjoint filters exist: the closed forms of docs/math.md §7
        ps, qs, half = proto.params.p_star, proto.params.q_star, proto.params.f_realised / 2
        assert proto.epsilon == pytest.approx(h * math.log(qs * (1 - ps) / (ps * (1 - qs))), rel=1e-12)
        assert proto.epsilon_longitudinal == pytest.approx(2 * h * math.log((1 - half) / half), rel=1e-12)


def test_one_report_reveals_less_than_the_prr():
    proto = small(k=6, h=2)
    assert proto.epsilon < proto.epsilon_longitudinal


def chi_square_p(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    expected = expected_probs * observed.sum()
    keep = expected > 0
    assert observed[~keep].sum() == 0
    return float(stats.chisquare(observed[keep], expected[keep]).pvalue)


def as_ints(irr: np.ndarray, k: int) -> np.ndarray:
    bits = np.unpackbits(irr, axis=1, count=k, bitorder="little").astype(np.int64)
    return bits @ (1 << np.arange(k))


@pytest.mark.statistical
def test_encoder_samples_the_audited_distribution_simulation_path():
    proto = small(k=4, h=2, m=3)
    value = "example.com"
    for cohort in range(3):
        pattern = int(sum(1 << int(b) for b in set(bloom_positions_one(value, cohort, 4, 2))))
        payloads = proto.encode([value] * 40_000, np.random.default_rng(cohort), cohorts=np.full(40_000, cohort))
        observed = np.bincount(as_ints(payloads["irr"], 4), minlength=16)
        assert chi_square_p(observed, proto.output_probabilities(pattern)) > 1e-4


@pytest.mark.statistical
def test_encoder_samples_the_audited_distribution_sdk_path():
    """Across client secrets (HMAC-derived PRR), one report each: the same distribution."""
    proto = small(k=4, h=2, m=1)
    value = "example.com"
    pattern = int(sum(1 << int(b) for b in set(bloom_positions_one(value, 0, 4, 2))))
    rng = np.random.default_rng(5)
    secrets = [rng.bytes(32) for _ in range(20_000)]
    reports = np.concatenate([proto.encode([value], rng, secret=s, metric="m")["irr"] for s in secrets])
    observed = np.bincount(as_ints(reports, 4), minlength=16)
    assert chi_square_p(observed, proto.output_probabilities(pattern)) > 1e-4
    prr = np.array([proto.permanent_response(s, "m", value, 0) for s in secrets]).astype(np.int64) @ (1 << np.arange(4))
    assert chi_square_p(np.bincount(prr, minlength=16), proto.prr_output_probabilities(pattern)) > 1e-4


class NeverZero(RapporServer):
    """The negative control: a true 1 bit is always reported as 1 (PRR and IRR both keep it)."""

    def bit_probabilities(self):
        zero_rate, _ = super().bit_probabilities()["report"]
        half, _ = super().bit_probabilities()["prr"]
        return {"report": (zero_rate, 1.0), "prr": (half, 1.0)}

    def _prr_from_words(self, bloom, words):
        self._true_bits = bloom                      # the bug needs the true bits at IRR time
        return super()._prr_from_words(bloom, words) | bloom

    def _irr(self, prr, words):
        return super()._irr(prr, words) | self._true_bits


def test_audit_catches_a_client_that_never_reports_a_true_one_as_zero():
    broken = NeverZero(Rappor(RapporParams(k=4, h=2, m=1, f=0.5, p=0.5, q=0.75)))
    value = "example.com"
    bits = sorted(set(bloom_positions_one(value, 0, 4, 2).tolist()))
    pattern = sum(1 << b for b in bits)
    irr = broken.encode([value] * 5000, np.random.default_rng(0))["irr"]
    ints = as_ints(irr, 4)
    assert np.all((ints & pattern) == pattern)  # its output_probabilities tell the truth
    assert chi_square_p(np.bincount(ints, minlength=16), broken.output_probabilities(pattern)) > 1e-4
    rows = np.stack([broken.output_probabilities(x) for x in patterns(4, 2)])
    assert worst_ratio(rows) == math.inf
    assert broken.params.epsilon_one < math.inf  # what it would have claimed
    assert worst_case_epsilon(1.0, broken.params.p_star, 2, 4) == math.inf


def test_worst_case_epsilon_when_filters_cannot_be_disjoint():
    a = math.log(0.75 / 0.25)
    assert worst_case_epsilon(0.75, 0.25, 2, 3) == pytest.approx(3 * a)   # u + v <= k = 3
    assert worst_case_epsilon(0.75, 0.25, 2, 8) == pytest.approx(4 * a)
    assert worst_case_epsilon(0.75, 0.75, 2, 8) == 0.0


def test_enumeration_is_refused_for_large_k():
    with pytest.raises(ValueError, match="refusing"):
        build_server("rappor", None, None, {}).output_probabilities(1)
    with pytest.raises(ValueError, match="mask"):
        small(k=4).output_probabilities(16)


# --- hashing: the frozen specification ---------------------------------------------------------------

def reference_bloom(value: str, k: int, h: int, m: int) -> list[list[int]]:
    """The documented spec, written out plainly (client_sdk/hashing.py docstring)."""
    limit = (2**32 // k) * k
    data = value.encode("utf-8", "surrogatepass")
    stream = hashlib.shake_256(b"ldpt/rappor/bloom/v1" + len(data).to_bytes(4, "big") + data).digest(4 * 4 * m * h)
    accepted = [u % k for u in np.frombuffer(stream, "<u4").tolist() if u < limit]
    return [accepted[c * h:(c + 1) * h] for c in range(m)]


def reference_cohort(secret: bytes, metric: str, m: int) -> int:
    def lp(*parts):
        return b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    counter = 0
    while True:
        block = hmac.new(secret, lp(b"ldpt/rappor/cohort/v1", metric.encode(), counter.to_bytes(4, "big")),
                         hashlib.sha256).digest()
        for u in np.frombuffer(block, "<u4").tolist():
            if u < (2**32 // m) * m:
                return u % m
        counter += 1


def test_golden_values():
    assert hashing.derive_cohort(SECRET, "home_page", 64) == 27
    assert hashing.derive_cohort(SECRET, "process", 64) == 58
    assert hashing.derive_cohort(SECRET, "home_page", 1000) == 219
    assert prr_words(SECRET, "home_page", "google.com", 4).tolist() == \
        [2585396905, 1414180298, 456577655, 2662514786]
    assert bloom_positions(["google.com", "", "ünïcode"], 128, 2, 3).tolist() == \
        [[[116, 119], [10, 104], [81, 100]], [[66, 63], [104, 57], [124, 112]], [[51, 35], [75, 70], [19, 24]]]
    assert bloom_positions(["google.com"], 100, 2, 3).tolist() == [[[80, 63], [86, 48], [81, 96]]]


@pytest.mark.parametrize("k", [128, 100, 3, 1000])
def test_bloom_hash_follows_the_spec(k):
    rng = np.random.default_rng(k)
    values = ["", "a", "a\x00", "ünï\ud800", *[rng.bytes(int(rng.integers(1, 20))).hex() for _ in range(40)]]
    many = bloom_positions(values, k, 2, 16)
    for i, v in enumerate(values):
        assert many[i].tolist() == reference_bloom(v, k, 2, 16)
        assert bloom_positions_one(v, 11, k, 2).tolist() == many[i, 11].tolist()


def test_bloom_rejection_path_matches_the_spec():
    # k close to 2^32: about half of all words are rejected, so the slow path runs
    k = 2**31 + 12345
    values = [f"v{i}" for i in range(30)]
    many = bloom_positions(values, k, 3, 5)
    for i, v in enumerate(values):
        assert many[i].tolist() == reference_bloom(v, k, 3, 5)
        assert bloom_positions_one(v, 4, k, 3).tolist() == many[i, 4].tolist()


def test_cohort_follows_the_spec_and_is_uniform():
    rng = np.random.default_rng(3)
    secrets = [rng.bytes(32) for _ in range(6400)]
    cohorts = np.array([hashing.derive_cohort(s, "metric", 64) for s in secrets])
    assert [hashing.derive_cohort(s, "metric", 64) for s in secrets[:20]] == \
        [reference_cohort(s, "metric", 64) for s in secrets[:20]]
    assert stats.chisquare(np.bincount(cohorts, minlength=64)).pvalue > 1e-4
    assert hashing.derive_cohort(secrets[0], "metric", 1) == 0


def test_bloom_bits_are_uniform_without_modulo_bias():
    values = [f"s{i}" for i in range(20_000)]
    bits = bloom_positions(values, 100, 2, 2).reshape(-1)
    assert stats.chisquare(np.bincount(bits, minlength=100)).pvalue > 1e-4


def test_secret_must_be_bytes_of_reasonable_length():
    with pytest.raises(ValueError, match="at least"):
        hashing.derive_cohort(b"short", "m", 8)
    with pytest.raises(ValueError, match="bytes"):
        build_server("rappor", None, None, {}).encode(["x"], secret="not bytes")


# --- PRR and IRR ----------------------------------------------------------------------------------------

def test_prr_is_stable_and_differs_across_values_metrics_and_secrets():
    proto = build_server("rappor", None, None, {})
    other = bytes(range(1, 33))
    c = proto.cohort_of(SECRET, "home")
    base = proto.permanent_response(SECRET, "home", "google.com", c)
    assert np.array_equal(base, proto.permanent_response(SECRET, "home", "google.com", c))
    assert not np.array_equal(base, proto.permanent_response(SECRET, "home", "example.com", c))
    assert not np.array_equal(base, proto.permanent_response(SECRET, "other", "google.com", c))
    assert not np.array_equal(base, proto.permanent_response(other, "home", "google.com", c))
    # a fresh object (nothing memoised) derives the same PRR and cohort
    again = build_server("rappor", None, None, {})
    assert again.cohort_of(SECRET, "home") == c
    assert np.array_equal(again.permanent_response(SECRET, "home", "google.com", c), base)


@pytest.mark.statistical
def test_reports_of_one_value_share_the_prr_and_have_fresh_irr():
    proto = build_server("rappor", None, None, {})
    rng = np.random.default_rng(2)
    R = 4000
    payloads = proto.encode(["google.com"] * R, rng, secret=SECRET, metric="home")
    assert np.all(payloads["cohort"] == proto.cohort_of(SECRET, "home"))
    bits = np.unpackbits(payloads["irr"], axis=1, count=128, bitorder="little").astype(float)
    prr = proto.permanent_response(SECRET, "home", "google.com", proto.cohort_of(SECRET, "home"))
    lam = np.where(prr, proto.params.q_realised, proto.params.p_realised)
    z = (bits.mean(axis=0) - lam) / np.sqrt(lam * (1 - lam) / R)
    assert np.abs(z).max() < 4.5            # every bit's rate is q where B'=1 and p where B'=0
    # two reports of the same value differ in bit i with probability 2λ(1−λ) (IRR is fresh)
    differ = (bits[0::2] != bits[1::2]).mean()
    expected = (2 * lam * (1 - lam)).mean()
    assert abs(differ - expected) < 4 * math.sqrt(expected * (1 - expected) / (R // 2 * 128))
    # the OS-CSPRNG path gives fresh noise too
    one = proto.encode(["google.com"], secret=SECRET, metric="home")["irr"]
    two = proto.encode(["google.com"], secret=SECRET, metric="home")["irr"]
    assert one.shape == (1, 16) and not np.array_equal(one, two)


def test_secret_path_refuses_other_cohorts_and_batches_work():
    proto = build_server("rappor", None, None, {})
    c = proto.cohort_of(SECRET, "home")
    batch = proto.encode(["a", "b", "c"], np.random.default_rng(0), secret=SECRET, metric="home",
                         cohorts=np.full(3, c))
    assert batch["irr"].shape == (3, 16) and set(batch["cohort"]) == {c}
    with pytest.raises(ValueError, match="derived"):
        proto.encode(["a"], secret=SECRET, metric="home", cohorts=np.array([(c + 1) % 64]))
    empty = proto.encode([], secret=SECRET, metric="home")
    assert empty["irr"].shape == (0, 16)


def test_values_must_be_strings():
    proto = build_server("rappor", None, None, {})
    with pytest.raises(DomainError, match="position 1"):
        proto.encode(["a", 3, "b"], np.random.default_rng(0))
    with pytest.raises(DomainError, match="sequence"):
        proto.encode("abc", np.random.default_rng(0))
    assert proto.encode(np.array(["a", "b"]), np.random.default_rng(0))["irr"].shape == (2, 16)
    with pytest.raises(ValueError, match="cohorts"):
        proto.encode(["a"], np.random.default_rng(0), cohorts=np.array([64]))


# --- sketch, wire, validation --------------------------------------------------------------------------

def test_wire_round_trip_and_accumulate():
    proto = small(k=12, h=2, m=5)
    rng = np.random.default_rng(1)
    values = [f"v{i % 7}" for i in range(500)]
    payloads = proto.encode(values, rng)
    wire = msgpack.unpackb(msgpack.packb(proto.to_wire(payloads)), raw=False)
    assert wire[0][0] == int(payloads["cohort"][0]) and isinstance(wire[0][1], bytes) and len(wire[0][1]) == 2
    back = proto.from_wire(wire)
    proto.validate(back)
    for key in ("cohort", "irr"):
        np.testing.assert_array_equal(back[key], payloads[key])
    sk = proto.new_sketch()
    proto.accumulate(sk, back)
    bits = np.unpackbits(payloads["irr"], axis=1, count=12, bitorder="little")
    for c in range(5):
        rows = payloads["cohort"] == c
        np.testing.assert_array_equal(sk.counts[c], bits[rows].sum(axis=0))
        assert sk.reports[c] == rows.sum()
    # additive: two halves sum to the whole
    a, b = proto.new_sketch(), proto.new_sketch()
    proto.accumulate(a, {k: v[:200] for k, v in payloads.items()})
    proto.accumulate(b, {k: v[200:] for k, v in payloads.items()})
    merged = a.merge(b)
    np.testing.assert_array_equal(merged.counts, sk.counts)
    np.testing.assert_array_equal(merged.reports, sk.reports)


def expect_invalid(call, index, field=None):
    with pytest.raises(InvalidPayload) as info:
        call()
    assert info.value.index == index
    if field:
        assert info.value.field == field


def test_malformed_reports_are_rejected_with_their_index():
    proto = small(k=12, h=2, m=5)
    good = [0, b"\x01\x02"]
    expect_invalid(lambda: proto.from_wire([good, [1, b"\x01"]]), 1, "irr")             # wrong length
    expect_invalid(lambda: proto.from_wire([good, good, [True, b"\x00\x00"]]), 2, "cohort")
    expect_invalid(lambda: proto.from_wire([[1.0, b"\x00\x00"]]), 0, "cohort")
    expect_invalid(lambda: proto.from_wire([good, [1, "ab"]]), 1, "irr")
    expect_invalid(lambda: proto.from_wire([good, [1]]), 1, "payload")
    expect_invalid(lambda: proto.from_wire([5]), 0, "payload")
    expect_invalid(lambda: proto.from_wire([good, [2**70, b"\x00\x00"]]), 1, "cohort")
    expect_invalid(lambda: proto.validate(proto.from_wire([good, [5, b"\x00\x00"]])), 1, "cohort")
    expect_invalid(lambda: proto.validate(proto.from_wire([good, [-1, b"\x00\x00"]])), 1, "cohort")
    # bits 12..15 of the last byte are padding: an honest client sends zeros
    expect_invalid(lambda: proto.validate(proto.from_wire([good, good, [0, b"\x00\x10"]])), 2, "irr")
    proto.validate(proto.from_wire([good, [4, b"\xff\x0f"]]))
    with pytest.raises(InvalidPayload, match="missing"):
        proto.validate({"cohort": np.array([0])})
    with pytest.raises(InvalidPayload, match="uint8"):
        proto.validate({"cohort": np.array([0]), "irr": np.zeros((1, 3), dtype=np.uint8)})
    with pytest.raises(InvalidPayload, match="integer"):
        proto.validate({"cohort": np.array([0.0]), "irr": np.zeros((1, 2), dtype=np.uint8)})


# --- bit-count estimator ------------------------------------------------------------------------------

@pytest.mark.statistical
def test_bit_count_estimator_is_unbiased_with_the_stated_variance():
    """R sketches of one fixed population (cohorts fixed, so true bit counts t are known)."""
    proto = small(k=16, h=2, m=4, f=0.5, p=0.25, q=0.75)
    k, m, R, n = 16, 4, 300, 800
    rng = np.random.default_rng(11)
    values = np.array([f"s{i % 5}" for i in range(n)], dtype=object)
    cohorts = rng.integers(0, m, n)
    positions = bloom_positions([f"s{i}" for i in range(5)], k, 2, m)
    truth = np.zeros((m, k))
    for i in range(n):
        truth[cohorts[i], list(set(positions[i % 5, cohorts[i]].tolist()))] += 1
    n_cohort = np.bincount(cohorts, minlength=m)
    estimates, plug_in = [], []
    for _ in range(R):
        sk = proto.new_sketch()
        proto.accumulate(sk, proto.encode(values, rng, cohorts=cohorts))
        est = proto.estimate(sk)
        estimates.append(est.counts.reshape(m, k))
        plug_in.append(est.variances.reshape(m, k))
    estimates = np.array(estimates)
    theory = proto.variance(n_cohort[:, None], truth)
    bias_z = (estimates.mean(axis=0) - truth) / np.sqrt(theory / R)
    assert np.abs(bias_z).max() < 4.0                      # 64 cells, Bonferroni-safe at 3σ-ish
    ratio = estimates.var(axis=0, ddof=1) / theory
    assert abs(ratio.mean() - 1) < 3 * math.sqrt(2 / (R - 1)) / math.sqrt(m * k)
    assert np.all(np.abs(ratio - 1) < 4 * math.sqrt(2 / (R - 1)))
    assert abs(np.mean(plug_in) / theory.mean() - 1) < 0.02  # the plug-in variance is on target


def test_estimate_shape_and_variance_formula():
    proto = build_server("rappor", None, None, {})
    sk = proto.new_sketch()
    sk.reports[:] = 100
    sk.counts[:] = 60
    est = proto.estimate(sk)
    assert est.counts.shape == (64 * 128,) and est.n == 6400 and est.extra["shape"] == (64, 128)
    t = (60 - 0.5625 * 100) / 0.125
    assert est.counts[0] == pytest.approx(t)
    assert est.variances[0] == pytest.approx(float(proto.variance(100, t)))
    assert float(proto.variance(100, 0)) == pytest.approx(100 * 0.5625 * 0.4375 / 0.125**2)


def test_constructor_is_cheap_and_module_contract():
    assert rp.OPTION_KEYS == {"bloom_bits", "hashes", "cohorts", "prob_f", "prob_p", "prob_q"}
    proto = from_options(None, None, {"bloom_bits": 4096, "cohorts": 4096})
    assert proto.domain_size == 4096 * 4096


def test_parameter_table_in_the_docs_matches_the_code():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "rappor.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line.count("|") == 12
            and line.split("|")[2].strip().isdigit()]
    assert len(rows) == 5
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        k, h, m = (int(c) for c in cells[1:4])
        f, p, q = (float(c) for c in cells[4:7])
        params = RapporParams(k=k, h=h, m=m, f=f, p=p, q=q)
        assert f"{params.p_star:.4f}" == cells[7] and f"{params.q_star:.4f}" == cells[8], line
        assert f"{params.epsilon_one:.4f}" == cells[9] and f"{params.epsilon_inf:.4f}" == cells[10], line


def test_sdk_single_report_path_matches_encode_with_a_secret():
    """encode_secret_one (the SDK path, with its PRR cache) has the same cohort and PRR as
    encode(secret=...): with the IRR switched off (p=0, q=1) both return the PRR itself."""
    from sketches import build_server

    options = {"bloom_bits": 24, "hashes": 2, "cohorts": 8, "prob_f": 0.5, "prob_p": 0.0, "prob_q": 1.0}
    proto = build_server("rappor", None, None, options)
    for value in ("a.example", "b.example", "a.example"):
        fast = proto.encode_secret_one(value, SECRET, "home")
        slow = proto.to_wire(proto.encode([value], secret=SECRET, metric="home"))[0]
        assert fast == slow
    other = build_server("rappor", None, None, options).encode_secret_one("a.example", SECRET, "process")
    assert other[0] == fast[0]  # one cohort per client across metrics
