"""Randomness for the device's encoders: integer thresholds and plain-Python word sources.

Every probabilistic choice an encoder makes is an *integer threshold* test on a uniform
32-bit word (docs/math.md §11): ``u < T`` with ``u ~ U[0, 2^32)`` happens with probability
exactly ``T / 2^32``. Protocols quantise their probabilities to such thresholds once, and
compute epsilon and the estimator from the quantised values, so the guarantee we quote is
the one the mechanism actually has, whatever randomness source drives it.

The single-report SDK path (``encode_one``) runs in plain Python integers, without numpy, over
a ``WordSource``: ``OSWords`` (the OS CSPRNG) in production, ``SeededWords`` in tests. The
server halves' vectorised ``encode`` makes the same threshold tests on the same kind of words
over numpy arrays (sketches.randomness: ``SecureRandom``, ``GeneratorRandom``), and
tests/test_pure_path.py checks the two give the same output law.
"""

from __future__ import annotations

import math
import os
import random
import struct

SCALE_BITS = 32
SCALE = 1 << SCALE_BITS  # thresholds live in [0, 2^32]

_TWO64 = 1 << 64


def threshold_floor(probability: float) -> int:
    """Largest threshold T with T/2^32 <= probability (rounds a probability down)."""
    return max(0, min(SCALE, math.floor(probability * SCALE)))


def threshold_ceil(probability: float) -> int:
    """Smallest threshold T with T/2^32 >= probability (rounds a probability up)."""
    return max(0, min(SCALE, math.ceil(probability * SCALE)))


def realised(threshold: int) -> float:
    """The probability a threshold actually implements (exact in binary64)."""
    return threshold / SCALE


def secure_below(high: int) -> int:
    """A uniform integer in [0, high) from the OS CSPRNG, by rejection (no modulo bias)."""
    if high < 1:
        raise ValueError("secure_below() needs high >= 1")
    limit = (_TWO64 // high) * high
    while True:
        u = int.from_bytes(os.urandom(8), "little")
        if u < limit:
            return u % high


# --- the one-report path: plain Python integers, no numpy -------------------------------------------

class WordSource:
    """Uniform words as Python ints for the one-report encoders (a device half's ``encode_one``).

    Subclasses give ``word`` (32 bits) and ``word64``; bounded integers are drawn by rejection
    so there is no modulo bias. ``below`` takes 64-bit words (as sketches.randomness's
    ``SecureRandom.below``), ``below32`` 32-bit ones (as ``MemoRandom.below`` and the numeric cell
    draws): each is the plain-Python twin of the vectorised draw the same protocol makes.
    """

    __slots__ = ()

    def word(self) -> int:
        raise NotImplementedError

    def word64(self) -> int:
        raise NotImplementedError

    def words(self, count: int) -> list[int]:
        """``count`` uniform 32-bit words."""
        return [self.word() for _ in range(count)]

    def below(self, high: int) -> int:
        """Uniform in [0, high): u < ⌊2^64/high⌋·high accepted, then u mod high."""
        if high < 1:
            raise ValueError("below() needs high >= 1")
        limit = (_TWO64 // high) * high
        u = self.word64()
        while u >= limit:
            u = self.word64()
        return u % high

    def below32(self, high: int) -> int:
        """Uniform in [0, high), high <= 2^32: u < ⌊2^32/high⌋·high accepted, then u mod high."""
        if not 1 <= high <= SCALE:
            raise ValueError("below32() needs 1 <= high <= 2^32")
        limit = (SCALE // high) * high
        u = self.word()
        while u >= limit:
            u = self.word()
        return u % high

    def belows(self, highs: list[int]) -> list[int]:
        """One uniform integer in [0, h) for each h (``below`` each)."""
        return [self.below(h) for h in highs]


class OSWords(WordSource):
    """The OS CSPRNG (``os.urandom``): production randomness of every one-report encoder."""

    __slots__ = ()

    def word(self) -> int:
        return int.from_bytes(os.urandom(4), "little")

    def word64(self) -> int:
        return int.from_bytes(os.urandom(8), "little")

    def words(self, count: int) -> list[int]:
        return list(struct.unpack(f"<{count}I", os.urandom(4 * count)))

    def below(self, high: int) -> int:
        return secure_below(high)

    def belows(self, highs: list[int]) -> list[int]:
        # One urandom call; a (rare, < h/2^64) rejected word is redrawn alone.
        words = struct.unpack(f"<{len(highs)}Q", os.urandom(8 * len(highs)))
        return [u % h if u < (_TWO64 // h) * h else secure_below(h) for u, h in zip(words, highs)]


class SeededWords(WordSource):
    """A seeded stream (``random.Random``): for tests of the one-report encoders only.

    Not a CSPRNG: production always uses ``OSWords``.
    """

    __slots__ = ("_bits",)

    def __init__(self, seed: int) -> None:
        self._bits = random.Random(seed).getrandbits

    def word(self) -> int:
        return self._bits(32)

    def word64(self) -> int:
        return self._bits(64)


#: The production source of the one-report path (stateless; shared).
OS_WORDS = OSWords()
