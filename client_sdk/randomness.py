"""Randomness sources for encoders: the OS CSPRNG in production, seeded numpy in simulation.

Every probabilistic choice an encoder makes is an *integer threshold* test on a uniform
32-bit word (docs/math.md §11): ``u < T`` with ``u ~ U[0, 2^32)`` happens with probability
exactly ``T / 2^32``. Protocols quantise their probabilities to such thresholds once, and
compute epsilon and the estimator from the quantised values, so the guarantee we quote is
the one the mechanism actually has, whatever randomness source drives it.

The single-report SDK path (a batch of one, OS CSPRNG) is latency-sensitive, so shapes are
counted without numpy reductions and a lone bounded integer is drawn in plain Python.
"""

from __future__ import annotations

import math
import os
from typing import Protocol as TypingProtocol

import numpy as np

SCALE_BITS = 32
SCALE = 1 << SCALE_BITS  # thresholds live in [0, 2^32]

_TWO64 = 1 << 64
_RAW64_BIT_GENERATORS = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


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
        self._raw64 = isinstance(generator.bit_generator, _RAW64_BIT_GENERATORS)

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        if not self._raw64:
            return self.generator.integers(0, SCALE, size=shape, dtype=np.uint32)
        count = _count(shape)
        raw = self.generator.bit_generator.random_raw((count + 1) // 2)
        words = raw.view(np.uint32)[:count]
        return words if isinstance(shape, int) else words.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        return self.generator.integers(0, high, size=shape, dtype=np.int64)


RandomLike = RandomSource | np.random.Generator | None


def secure_word() -> int:
    """One uniform 32-bit word from the OS CSPRNG, as a Python int (single-report SDK path)."""
    return int.from_bytes(os.urandom(4), "little")


def secure_below(high: int) -> int:
    """A uniform integer in [0, high) from the OS CSPRNG, by rejection (no modulo bias)."""
    if high < 1:
        raise ValueError("secure_below() needs high >= 1")
    limit = (_TWO64 // high) * high
    while True:
        u = int.from_bytes(os.urandom(8), "little")
        if u < limit:
            return u % high


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
