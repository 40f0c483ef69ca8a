"""Linear hashing over a prime field: h_a(x) = ⟨a, x⟩ mod g (docs/protocols.md, "Hadamard response").

Shared by the general Hadamard response (hr.py, a fresh direction per report) and OLH's linear
hash family (olh.py, one direction per cohort). A domain index x < g^t is the vector of its t
base-g digits; a *direction* a is one of the m = (g^t−1)/(g−1) projective points of F_g^t (the
nonzero vectors whose leading nonzero digit is 1), numbered s ∈ [m] in increasing order of
their integer code Σ_i a_i g^i. For u ≠ 0 exactly λ = (g^(t−1)−1)/(g−1) directions satisfy
⟨a, u⟩ = 0 (the points of a hyperplane), whatever u: so any two values collide under the same
number of directions, which is what makes both protocols exactly analysable.

Both transforms below are a t-dimensional DFT over Z_g^t (ω = e^{2πi/g}). Every nonzero
u ∈ F_g^t is k·a for exactly one direction a and one k ≠ 0, and 1[⟨a,x⟩ = y] =
(1/g) Σ_k ω^{k(⟨a,x⟩−y)}, so for a table R[s, y] over (direction, residue):

    line_sums(R)(x)  = Σ_s R[s, ⟨a_s,x⟩] = g^(t−1) · IDFT(F)(x),  F(k·a_s) = Σ_y R[s,y] ω^{−ky}
    line_masses(c)[s, y] = Σ_{x: ⟨a_s,x⟩ = y} c(x) = (1/g) Σ_k DFT(c)(k·a_s) ω^{ky}

(F(0) = Σ_s Σ_y R[s, y]). Cost O(g^t log g^t) for the whole domain.

This module holds the plain-Python parts a device needs (the field, the direction codes and the
inner product of one value); the array forms and the transforms are the server's,
sketches.projective.
"""

from __future__ import annotations

import functools
import math
from typing import Any


@functools.cache
def primes(limit: int) -> tuple[int, ...]:
    """Primes up to ``limit`` (sieve of Eratosthenes)."""
    sieve = bytearray([1]) * (limit + 1)  # plain Python: HR's parameters are chosen on devices too
    sieve[:2] = b"\x00\x00"[:min(2, limit + 1)]
    for i in range(2, math.isqrt(limit) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytes(len(range(i * i, limit + 1, i)))
    return tuple(i for i, flag in enumerate(sieve) if flag)


def is_prime(g: int) -> bool:
    """Whether g is a prime (trial division: g is a field size, a few thousand at most)."""
    return g >= 2 and all(g % p for p in range(2, math.isqrt(g) + 1))


def dimension(d: int, g: int) -> int:
    """t = ⌈log_g d⌉ (at least 1): the fewest base-g digits that index d values."""
    t, size = 1, g
    while size < d:
        t, size = t + 1, size * g
    return t


def directions(g: int, t: int) -> int:
    """m = (g^t − 1)/(g − 1): projective points of F_g^t."""
    return (g ** t - 1) // (g - 1)


def hyperplane(g: int, t: int) -> int:
    """λ = (g^(t−1) − 1)/(g − 1): directions orthogonal to a fixed nonzero vector."""
    return (g ** (t - 1) - 1) // (g - 1)


def direction_starts(g: int, t: int) -> list[int]:
    """First direction number whose leading digit is digit j: (g^j − 1)/(g − 1)."""
    return [(g ** j - 1) // (g - 1) for j in range(t)]


def direction_code_one(s: int, g: int, t: int) -> int:
    """``direction_codes`` for one Python integer (the single-report path)."""
    starts = direction_starts(g, t)
    j = t - 1
    while starts[j] > s:
        j -= 1
    return g ** j + s - starts[j]


def inner_one(u: int, x: int, g: int) -> int:
    """⟨u, x⟩ mod g for Python integers."""
    acc = 0
    while u and x:
        acc += (u % g) * (x % g)
        u, x = u // g, x // g
    return acc % g


def check_field(reader: Any) -> None:
    """(4) of a block over the projective field (hr, olh's linear family): g a prime, t = ⌈log_g d⌉,
    m = (g^t − 1)/(g − 1) (a ``client_sdk.protocols.blocks.BlockReader``)."""
    d, g, t, m = (reader.int(k) for k in ("d", "g", "t", "m"))
    if not is_prime(g):
        reader.fail("g", f"g = {g} must be a prime (the field size)")
    if t != dimension(d, g):
        reader.fail("t", f"t = {t} must be ⌈log_g d⌉ = {dimension(d, g)} (g^(t−1) < d ≤ g^t)")
    if m != directions(g, t):
        reader.fail("m", f"m = {m} must be (g^t − 1)/(g − 1) = {directions(g, t)}")
