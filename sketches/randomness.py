"""The vectorised randomness sources of the server halves: numpy arrays of uniform words for
simulation (``encode`` over a batch), the OS CSPRNG or a seeded ``numpy.random.Generator``.

Every probabilistic choice is an integer threshold test ``u < T`` on a uniform 32-bit word
(docs/math.md §11), as on the device: client_sdk.randomness holds the thresholds and the
plain-Python word sources of the one-report path (``OSWords``, ``SeededWords``); these are the
same draws over arrays (``SecureRandom.below`` is ``WordSource.below`` elementwise: 64-bit words,
u < ⌊2^64/h⌋·h accepted, then u mod h), and tests/test_pure_path.py checks the two paths give the
same output law. Randomness is always a parameter (``rng``): None is the OS CSPRNG, a Generator
a seeded source for tests and simulation.
"""

from __future__ import annotations

import math
import os
from typing import Any, TypeAlias
from typing import Protocol as TypingProtocol

import numpy as np

from client_sdk.randomness import SCALE

_TWO64 = 1 << 64


def raw64_bit_generators() -> tuple[type, ...]:
    """numpy bit generators whose raw output is 64 uniform bits (MT19937's raw output is 32).
    A function, not a constant: numpy.random loads on first use, so an estimate, which draws
    nothing, does not import it."""
    return (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def _count(shape: int | tuple[int, ...]) -> int:
    """Number of elements of an int or tuple shape."""
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
        """Uniform uint32 words: 4 bytes of ``os.urandom`` each, little-endian."""
        words = np.frombuffer(os.urandom(4 * _count(shape)), dtype=np.uint32)
        return words if isinstance(shape, int) else words.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform int64 integers in [0, high) from 64-bit words, by rejection."""
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
        if count == 1:  # a batch of one: plain Python integers are ~10x cheaper
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
        self._raw64 = isinstance(generator.bit_generator, raw64_bit_generators())

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform uint32 words: halves of the raw 64-bit output, else ``Generator.integers``."""
        if not self._raw64:
            return self.generator.integers(0, SCALE, size=shape, dtype=np.uint32)
        count = _count(shape)
        raw = self.generator.bit_generator.random_raw((count + 1) // 2)
        words = raw.view(np.uint32)[:count]
        return words if isinstance(shape, int) else words.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform int64 integers in [0, high) (``Generator.integers``)."""
        return self.generator.integers(0, high, size=shape, dtype=np.int64)


#: A source, a seeded numpy Generator (named lazily: numpy.random loads on first use), or None.
RandomLike: TypeAlias = "RandomSource | np.random.Generator | None"


def as_random_source(rng: RandomLike) -> RandomSource:
    """None -> the OS CSPRNG; a numpy Generator -> seeded source; a source passes through."""
    if rng is None:
        return SecureRandom()
    if isinstance(rng, np.random.Generator):
        return GeneratorRandom(rng)
    return rng


def below_threshold(words: np.ndarray, threshold: int) -> np.ndarray:
    """``words < threshold`` for uint32 words and a scalar threshold in [0, 2^32]."""
    if threshold >= SCALE:
        return np.ones(words.shape, dtype=bool)
    return words < np.uint32(threshold)


def bernoulli(source: Any, threshold: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
    """Boolean array, True with probability threshold/2^32 (threshold may be an array); ``source``
    is a ``RandomSource``."""
    if isinstance(threshold, int):
        return _scalar_test(source, threshold, shape)
    t = np.asarray(threshold, dtype=np.uint64)
    return source.words(shape).astype(np.uint64) < t if t.ndim else _scalar_test(source, int(t), shape)


def _scalar_test(source: Any, threshold: int, shape: int | tuple[int, ...]) -> np.ndarray:
    if threshold >= SCALE:
        return np.ones(shape, dtype=bool)
    return source.words(shape) < np.uint32(threshold)


__all__ = ["GeneratorRandom", "RandomLike", "RandomSource", "SecureRandom",
           "as_random_source", "below_threshold", "bernoulli", "raw64_bit_generators"]
