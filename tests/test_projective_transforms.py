"""The projective transforms behind hr and OLH's linear family against their definitions.

``line_sums`` and ``line_masses`` compute, by half-spectrum DFTs over Z_g^t, what the module
docstring of client_sdk/protocols/projective.py defines as sums over lines; here both are
computed the slow way, directly from the definitions, for every prime g a domain can get
(g = 2 too, where the half spectrum is the whole of the last axis) and for domains shorter
than g^t."""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.protocols.projective import directions
from sketches import projective as P
from sketches.projective import direction_codes, inner, line_masses, line_sums

CASES = [(2, 5, 32), (2, 4, 11), (3, 4, 80), (3, 3, 20), (5, 3, 125), (7, 2, 40), (11, 3, 1_000), (13, 2, 169),
         (17, 2, 100), (11, 1, 5), (5, 2, 1), (23, 2, 500)]


def incidence(g: int, t: int, d: int) -> np.ndarray:
    """H[s, x] = ⟨a_s, x⟩ mod g for every direction s and value x < d."""
    codes = direction_codes(np.arange(directions(g, t), dtype=np.int64), g, t)
    return inner(codes[:, None], np.arange(d, dtype=np.int64)[None, :], g, t)


@pytest.mark.parametrize("g,t,d", CASES)
def test_line_sums_are_sums_over_lines(g: int, t: int, d: int) -> None:
    rng = np.random.default_rng(g * 100 + t)
    m = directions(g, t)
    table = rng.normal(size=(m, g)) * 10 + rng.integers(0, 50, (m, g))
    h = incidence(g, t, d)
    want = table[np.arange(m)[:, None], h].sum(axis=0)
    np.testing.assert_allclose(line_sums(table, g, t, d), want, rtol=1e-10, atol=1e-8 * np.abs(table).sum())


@pytest.mark.parametrize("g,t,d", [(2, 4, 11), (11, 3, 1_000), (23, 2, 500)])
def test_line_sums_of_integer_and_strided_tables(g: int, t: int, d: int) -> None:
    """An integer table (hr's counts) and a Fortran-ordered one transform as their float64 C-order copy."""
    table = np.random.default_rng(g + t).integers(0, 10_000, (directions(g, t), g))
    want = line_sums(np.ascontiguousarray(table, dtype=np.float64), g, t, d)
    np.testing.assert_array_equal(line_sums(table, g, t, d), want)
    np.testing.assert_array_equal(line_sums(np.asfortranarray(table), g, t, d), want)


@pytest.mark.parametrize("g,t,d", CASES)
def test_line_masses_are_masses_on_lines(g: int, t: int, d: int) -> None:
    rng = np.random.default_rng(g * 100 + t + 1)
    c = rng.poisson(3.0, d).astype(np.float64) + rng.random(d)
    h = incidence(g, t, d)
    want = np.zeros((directions(g, t), g))
    for s in range(want.shape[0]):
        np.add.at(want[s], h[s], c)
    got = line_masses(c, g, t)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9 * c.sum())


@pytest.mark.parametrize("g,t", [(2, 1), (2, 5), (3, 4), (5, 3), (7, 2), (11, 3), (13, 2)])
def test_multiples_are_every_multiple_of_every_direction(g: int, t: int) -> None:
    """The block-by-block table equals k·a_s computed digit by digit from each direction's code."""
    m = P.directions(g, t)
    codes = P.direction_codes(np.arange(m, dtype=np.int64), g, t)
    digits = [(codes // g ** i) % g for i in range(t)]
    expected = np.zeros((m, g), dtype=np.int64)
    for k in range(1, g):
        for i, digit in enumerate(digits):
            expected[:, k] += (k * digit % g) * g ** i
    got = P.multiples(g, t)
    assert np.array_equal(got, expected)
    assert sorted(got[:, 1:].ravel().tolist()) == list(range(1, g ** t))
