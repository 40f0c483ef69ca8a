"""Randomness sources for encoders: the OS CSPRNG in production, seeded numpy in simulation.

Every probabilistic choice an encoder makes is an *integer threshold* test on a uniform
32-bit word (docs/math.md §11): ``u < T`` with ``u ~ U[0, 2^32)`` happens with probability
exactly ``T / 2^32``. Protocols quantise their probabilities to such thresholds once, and
compute epsilon and the estimator from the quantised values, so the guarantee we quote is
the one the mechanism actually has, whatever randomness source drives it.

The single-report SDK path (``encode_one``) runs in plain Python integers, without numpy, over
a ``WordSource``: ``OSWords`` (the OS CSPRNG) in production, ``SeededWords`` in tests. It makes
the same threshold tests on the same kind of words as the vectorised ``encode`` (numpy arrays
over a ``RandomSource``), and tests/test_pure_path.py checks the two give the same output law.
"""

from __future__ import annotations

import math
import os
import random
import struct
from typing import Protocol as TypingProtocol
from typing import Union

from ._lazy import np

SCALE_BITS = 32
SCALE = 1 << SCALE_BITS  # thresholds live in [0, 2^32]

_TWO64 = 1 << 64


def _raw64_bit_generators() -> tuple[type, ...]:
    """numpy bit generators whose raw output is 64 uniform bits (read when numpy is in use)."""
    return (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def threshold_floor(probability: float) -> int:
    """Largest threshold T with T/2^32 <= probability (rounds a probability down)."""
    return max(0, min(SCALE, math.floor(probability * SCALE)))


def threshold_ceil(probability: float) -> int:
    """Smallest threshold T with T/2^32 >= probability (rounds a probability up)."""
    return max(0, min(SCALE, math.ceil(probability * SCALE)))


def realised(threshold: int) -> float:
    """The probability a threshold actually implements (exact in binary64)."""
    return threshold / SCALE


def _count(shape: int | tuple[int, ...]) -> int:
    """Number of elements of an int or tuple shape (no numpy reduction: SDK hot path)."""
    return shape if isinstance(shape, int) else math.prod(shape)


class RandomSource(TypingProtocol):
    """What encoders need: uniform 32-bit words and unbiased bounded integers."""

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform uint32 words."""

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform integers in [0, high) (high broadcastable to shape), as int64."""


class SecureRandom:
    """OS CSPRNG (``os.urandom``); bounded integers by rejection, so no modulo bias."""

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        words = np.frombuffer(os.urandom(4 * _count(shape)), dtype=np.uint32)
        return words if isinstance(shape, int) else words.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        if isinstance(high, (int, np.integer)) or np.ndim(high) == 0:
            return self._below_scalar(int(high), shape)
        # Per-element bounds, one urandom call. r = u mod h is exactly uniform when u is
        # below 2^64 − (2^64 mod h), a multiple of h; equivalently u − r <= 2^64 − h, which in
        # wrapping uint64 arithmetic is (u − r) <= (0 − h). Rejection odds < h/2^64 each.
        h = np.asarray(high, dtype=np.uint64)
        if h.shape != ((shape,) if isinstance(shape, int) else shape):
            h = np.broadcast_to(h, shape)
        h = h.ravel()
        if not h.all():
            raise ValueError("below() needs high >= 1")
        u = np.frombuffer(os.urandom(8 * h.size), dtype=np.uint64).copy()
        r = u % h
        bad = (u - r) > (np.uint64(0) - h)
        while bad.any():  # practically never loops
            u[bad] = np.frombuffer(os.urandom(8 * int(bad.sum())), dtype=np.uint64)
            r = u % h
            bad = (u - r) > (np.uint64(0) - h)
        out = r.astype(np.int64)
        return out if isinstance(shape, int) else out.reshape(shape)

    @staticmethod
    def _below_scalar(high: int, shape: int | tuple[int, ...]) -> np.ndarray:
        if high < 1:
            raise ValueError("below() needs high >= 1")
        # Accept u < limit, the largest multiple of high <= 2^64; then u % high is exactly
        # uniform. Rejection probability is < high / 2^64, so the retry loop almost never runs.
        limit = (_TWO64 // high) * high
        count = _count(shape)
        if count == 1:  # the SDK's batch of one: plain Python integers are ~10x cheaper
            u = int.from_bytes(os.urandom(8), "little")
            while u >= limit:
                u = int.from_bytes(os.urandom(8), "little")
            out = np.array([u % high], dtype=np.int64)
            return out if isinstance(shape, int) else out.reshape(shape)
        u = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
        if limit < _TWO64:
            bad = u >= np.uint64(limit)
            while bad.any():
                u = u.copy()
                k = int(bad.sum())
                u[bad] = np.frombuffer(os.urandom(8 * k), dtype=np.uint64)
                bad = u >= np.uint64(limit)
        out = (u % np.uint64(high)).astype(np.int64)
        return out if isinstance(shape, int) else out.reshape(shape)


class GeneratorRandom:
    """A seeded ``numpy.random.Generator``: for tests and simulation only."""

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator
        # 64-bit bit generators emit uniform 64-bit raw words: split each into two uint32
        # words, ~6x faster than Generator.integers (MT19937's raw output is only 32 bits).
        self._raw64 = isinstance(generator.bit_generator, _raw64_bit_generators())

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        if not self._raw64:
            return self.generator.integers(0, SCALE, size=shape, dtype=np.uint32)
        count = _count(shape)
        raw = self.generator.bit_generator.random_raw((count + 1) // 2)
        words = raw.view(np.uint32)[:count]
        return words if isinstance(shape, int) else words.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        return self.generator.integers(0, high, size=shape, dtype=np.int64)


RandomLike = Union[RandomSource, "np.random.Generator", None]


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
    """Uniform words as Python ints for the one-report encoders (``Protocol.encode_one``).

    Subclasses give ``word`` (32 bits) and ``word64``; bounded integers are drawn by rejection
    so there is no modulo bias. ``below`` takes 64-bit words (as ``SecureRandom.below``),
    ``below32`` 32-bit ones (as ``MemoRandom.below`` and the numeric cell draws): each is the
    plain-Python twin of the vectorised draw the same protocol makes.
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


def as_random_source(rng: RandomLike) -> RandomSource:
    """None -> the OS CSPRNG; a numpy Generator -> seeded source; a source passes through."""
    if rng is None:
        return SecureRandom()
    if isinstance(rng, np.random.Generator):
        return GeneratorRandom(rng)
    return rng


def bernoulli(source: RandomSource, threshold: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
    """Boolean array, True with probability threshold/2^32 (threshold may be an array)."""
    if isinstance(threshold, int):
        return _scalar_test(source, threshold, shape)
    t = np.asarray(threshold, dtype=np.uint64)
    return source.words(shape).astype(np.uint64) < t if t.ndim else _scalar_test(source, int(t), shape)


def below_threshold(words: np.ndarray, threshold: int) -> np.ndarray:
    """``words < threshold`` for uint32 words and a scalar threshold in [0, 2^32]."""
    if threshold >= SCALE:
        return np.ones(words.shape, dtype=bool)
    return words < np.uint32(threshold)


def _scalar_test(source: RandomSource, threshold: int, shape: int | tuple[int, ...]) -> np.ndarray:
    if threshold >= SCALE:
        return np.ones(shape, dtype=bool)
    return source.words(shape) < np.uint32(threshold)
