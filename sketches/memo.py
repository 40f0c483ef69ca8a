"""The memoised first-round stream over arrays: the server halves' batch form of a device's memo
source (docs/protocols.md, "L-protocols"; docs/design.md, "Two halves").

A memoised response is a deterministic function of (secret, metric, memo key): its coins are the
SHAKE-256 stream of K = HMAC-SHA256(secret, lp(b"ldpt/memo/v1") ‖ lp(metric) ‖ lp(memo key))
read as little-endian uint32 words (client_sdk.memo, which holds the key derivation and the
device's plain-int source ``MemoWords``). ``MemoRandom`` serves the same stream through the
``RandomSource`` interface of sketches.randomness (``words`` and ``below`` on numpy arrays), so a
server half's vectorised ``first_round`` is the same code whether its coins are fresh
(simulation: each row a new client) or memoised (the conformance vectors, the audits). Bounded
integers use rejection on 32-bit words (exact, no modulo bias), extending the stream when a
word is rejected: the same words in the same order as ``MemoWords``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from client_sdk.hashing import accept_limit
from client_sdk.memo import CHUNK_WORDS, memo_key


class MemoRandom:
    """A deterministic ``RandomSource``: the SHAKE-256 stream of one memo key, read in order."""

    def __init__(self, secret: bytes, metric: str, key: str) -> None:
        self._key = memo_key(secret, metric, key)
        self._words = np.zeros(0, dtype="<u4")
        self._pos = 0

    def _take(self, count: int) -> np.ndarray:
        need = self._pos + count
        if need > self._words.shape[0]:
            size = max(need, self._words.shape[0] + CHUNK_WORDS)
            self._words = np.frombuffer(hashlib.shake_256(self._key).digest(4 * size), dtype="<u4")
        out = self._words[self._pos:need]
        self._pos = need
        return out

    def words(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """The next uint32 words of the stream, in the given shape (row-major, in stream order)."""
        count = shape if isinstance(shape, int) else int(np.prod(shape))
        out = self._take(count).astype(np.uint32)
        return out if isinstance(shape, int) else out.reshape(shape)

    def below(self, high: int | np.ndarray, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform integers in [0, high) by rejection: accept u < ⌊2^32/high⌋·high, return u mod high."""
        if not (isinstance(high, (int, np.integer)) or np.ndim(high) == 0):
            raise ValueError("MemoRandom.below takes a scalar bound")
        high = int(high)
        if high < 1:
            raise ValueError("below() needs high >= 1")
        count = shape if isinstance(shape, int) else int(np.prod(shape))
        limit = accept_limit(high)
        out = np.empty(count, dtype=np.int64)
        for i in range(count):  # a handful of draws per memoised response, never a batch
            u = int(self._take(1)[0])
            while u >= limit:
                u = int(self._take(1)[0])
            out[i] = u % high
        return out if isinstance(shape, int) else out.reshape(shape)


__all__ = ["MemoRandom"]
