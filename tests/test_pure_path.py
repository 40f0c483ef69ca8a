"""The one-report encoders (plain Python, ``encode_one``) are the vectorised mechanism.

For every protocol, on a small domain:

1. exact: the law of ``encode_one`` over all paths through its integer threshold tests
   (tests/exact_words.py, exact fractions) equals ``output_probabilities``, the table the
   privacy audit and the estimators use. The table is float64 from the realised thresholds,
   so entries agree to rounding (relative 1e-12); one threshold off by one moves an entry by
   at least 2^-32 of a probability, ~1e-10 relative, which this catches.
2. sampled: 20,000 reports of ``encode_one`` driven by a seeded word source and 20,000 of the
   vectorised ``encode`` from a seeded numpy generator each pass a chi-square goodness-of-fit
   test against that law (fixed seeds; fails below p = 1e-4; bins with expected count < 5
   pooled).
"""

from __future__ import annotations

import itertools
import struct
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from client_sdk.randomness import SeededWords
from sketches import build_server, server_half

from .exact_words import exact_law

N = 20_000
P_MIN = 1e-4


def _bits(b: bytes) -> int:
    return int.from_bytes(b, "little")


def _case(name, d, eps, options=None, x=1, cohort=None, key=lambda w: w, table=None, batch=None):
    return pytest.param(name, d, eps, options or {}, x, cohort, key, table, batch, id=name)


def _ss_key(proto):
    order = {c: i for i, c in enumerate(itertools.combinations(range(proto.params.d), proto.s))}
    return lambda w: order[struct.unpack(f"<{proto.s}{proto.wire_char}", w)]


CASES = [
    _case("rr", 2, 1.0),
    _case("grr", 4, 1.0),
    _case("oue", 4, 1.0, key=_bits),
    _case("sue", 4, 1.0, key=_bits),
    _case("hr", 5, 1.0),
    _case("olh", 5, 1.0, cohort=2, key=lambda w: w[1]),
    _case("ss", 5, 1.0, key="ss"),
    _case("lgrr", 3, 1.0, {"epsilon_inf": 4.0}),
    _case("losue", 4, 1.0, {"epsilon_inf": 4.0}, key=_bits),
    _case("loloha", 4, 1.0, {"epsilon_inf": 3.0}, cohort=3, key=lambda w: w[1]),
    _case("dbitflip", 4, 1.0, {"epsilon_inf": 3.0}, cohort=1, key=lambda w: w[1]),
    _case("duchi", None, 1.0, {"grid": 4}),
    _case("laplace", None, 2.0, {"grid": 4}),
    _case("piecewise", None, 1.0, {"grid": 4}),
    _case("hybrid", None, 1.5, {"grid": 4}),
    _case("memobitmean", None, 1.0, {"grid": 4, "epsilon_inf": 3.0}),
]


def _setup(name, d, eps, options, x, cohort, key):
    proto = build_server(name, d, eps, options)
    key = _ss_key(proto) if key == "ss" else key
    probs = np.asarray(proto.output_probabilities(x), dtype=np.float64)
    if cohort is not None:
        probs = probs[cohort]  # the law given the cohort (cohorts do not depend on the value)
    return proto, key, probs.ravel()


def _exact(proto, x, cohort, key):
    return exact_law(lambda src: key(proto.randomise(x, cohort, src)))


@pytest.mark.parametrize("name, d, eps, options, x, cohort, key, table, batch", CASES)
def test_exact_law_of_encode_one_is_the_output_table(name, d, eps, options, x, cohort, key, table, batch):
    proto, key, probs = _setup(name, d, eps, options, x, cohort, key)
    law = _exact(proto, x, cohort, key)
    assert set(law) <= set(range(len(probs))), f"{name}: outputs outside the table"
    for y, p in enumerate(probs):
        exact = law.get(y, Fraction(0))
        assert abs(Fraction(float(p)) - exact) <= Fraction(1, 10**12) * exact, (name, y, float(exact), p)


def test_exact_law_of_rappor_reports_is_the_output_table():
    proto = build_server("rappor", None, None, {"bloom_bits": 4, "hashes": 1, "cohorts": 1})
    for pattern in (0b0000, 0b0101, 0b1111):
        bloom = {i for i in range(4) if pattern >> i & 1}
        law = exact_law(lambda src, b=bloom: _bits(proto.irr_one(proto.prr_one(b, src.words(4)), src)))
        probs = proto.output_probabilities(pattern)
        for y, p in enumerate(probs):
            exact = law.get(y, Fraction(0))
            assert abs(Fraction(float(p)) - exact) <= Fraction(1, 10**12) * exact, (pattern, y)


def _chi_square(observed: dict, law: dict, label: str) -> None:
    keys = sorted(law, key=lambda k: -law[k])
    expected = np.array([float(law[k]) * N for k in keys])
    counts = np.array([observed.get(k, 0) for k in keys], dtype=np.float64)
    assert sum(observed.values()) == N and set(observed) <= set(law), label
    small = expected < 5
    if small.any():  # pool the rare outputs into one bin
        expected = np.append(expected[~small], expected[small].sum())
        counts = np.append(counts[~small], counts[small].sum())
    p = stats.chisquare(counts, expected).pvalue
    assert p > P_MIN, f"{label}: chi-square p = {p:.2e}"


def _vectorised_keys(proto, x, cohort, key, rng):
    xs = np.full(N, x, dtype=np.int64)
    cohorts = None if cohort is None else np.full(N, cohort, dtype=np.int64)
    return [key(w) for w in proto.to_wire(proto.encode(xs, rng, cohorts))]


@pytest.mark.statistical
@pytest.mark.parametrize("name, d, eps, options, x, cohort, key, table, batch", CASES)
def test_seeded_samples_of_both_paths_fit_the_exact_law(name, d, eps, options, x, cohort, key, table, batch):
    proto, key, _ = _setup(name, d, eps, options, x, cohort, key)
    law = _exact(proto, x, cohort, key)
    src = SeededWords(19)
    pure: dict = {}
    for _ in range(N):
        y = key(proto.randomise(x, cohort, src))
        pure[y] = pure.get(y, 0) + 1
    _chi_square(pure, law, f"{name} encode_one")
    vec: dict = {}
    for y in _vectorised_keys(proto, x, cohort, key, np.random.default_rng(19)):
        vec[y] = vec.get(y, 0) + 1
    _chi_square(vec, law, f"{name} encode")


def test_the_gf2_rank_certificate_agrees_with_the_numpy_check():
    """OLH's design check on a device (client_sdk/protocols/olh.py, ``full_rank_mod2``): whenever
    it certifies full rank, the numpy Cholesky check accepts the design too; designs it cannot
    certify go to the exact rank modulo a prime on the device, and to that check on the server
    (sketches/olh.py): the two decide alike."""
    from client_sdk.protocols.olh import OLH, OLHParams

    certified = uncertified = deficient = 0
    for d in range(2, 13):
        for g in (2, 3, 5):
            for m in range(max(1, -(-(d - 1) // (g - 1))), 9):
                proto = OLH(OLHParams(d=d, epsilon=2.0, m=m, g=g))
                half = server_half(proto)
                if proto.full_rank_mod2():
                    certified += 1
                    half._equal_factor  # noqa: B018 - raises ValueError if numpy finds it singular
                else:
                    uncertified += 1
                    try:
                        half.check_design()
                        numpy_accepts = True
                    except ValueError:
                        numpy_accepts, deficient = False, deficient + 1
                    assert proto._full_rank_mod_prime() == numpy_accepts, (d, g, m)
    assert certified > 100 and uncertified > 10 and deficient  # every branch exercised


SECRETS = [bytes([i]) * 32 for i in range(1, 9)]


@pytest.mark.parametrize("name, d, options", [
    ("lgrr", 5, {"epsilon_inf": 4.0}), ("losue", 6, {"epsilon_inf": 4.0}),
    ("loloha", 6, {"epsilon_inf": 3.0}), ("dbitflip", 6, {"epsilon_inf": 3.0}),
    ("memobitmean", None, {"grid": 8, "epsilon_inf": 3.0}),
])
def test_memoised_first_rounds_are_the_same_words_on_both_paths(name, d, options):
    """A device's memoised response (MemoWords, plain Python) is the batch path's (MemoRandom)."""
    from client_sdk.memo import MemoWords
    from sketches.memo import MemoRandom

    proto = build_server(name, d, 1.0, options)
    for secret in SECRETS:
        for memo_in in range(proto.memo_key_space):
            key = f"{name}:{memo_in}"
            pure = proto.first_round_one(memo_in, MemoWords(secret, "m", key))
            batch = proto.first_round(np.array([memo_in], dtype=np.int64), MemoRandom(secret, "m", key))
            assert np.array_equal(np.asarray(pure).reshape(batch.shape), batch), (secret, memo_in)


def test_rappor_prr_and_bloom_bits_are_the_same_on_both_paths():
    from client_sdk import hashing
    from sketches.hashing import bloom_positions_one, prr_words

    proto = build_server("rappor", None, None, {})
    k, h, m = proto.params.k, proto.params.h, proto.params.m
    for secret in SECRETS:
        for value in ("", "a", "www.example.org", "\udcff surrogate", "x" * 300):
            cohort = proto.cohort_of(secret, "home")
            assert hashing.bloom_positions_one_list(value, cohort, k, h) == \
                bloom_positions_one(value, cohort, k, h).tolist()
            assert hashing.prr_words_list(secret, "home", value, k) == \
                prr_words(secret, "home", value, k).tolist()
            bloom = set(hashing.bloom_positions_one_list(value, cohort, k, h))
            pure = proto.prr_one(bloom, hashing.prr_words_list(secret, "home", value, k))
            assert pure == proto.permanent_response(secret, "home", value, cohort).tolist()
    # a k that does not divide 2^32 takes the rejection path
    for value in ("a", "b", "c"):
        for cohort in range(4):
            assert hashing.bloom_positions_one_list(value, cohort, 100, 3) == \
                bloom_positions_one(value, cohort, 100, 3).tolist()
    assert m >= 1
