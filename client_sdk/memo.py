"""Memoised first-round coins derived from the client secret (docs/protocols.md, "L-protocols").

The two-round longitudinal protocols (L-GRR, L-OSUE, LOLOHA; Arcolezi et al. 2022, 2023)
randomise a value twice: a *memoised* first round, the same every time the device reports the
same value (or, for LOLOHA, the same hashed value), and a fresh second round per report. As
RAPPOR's permanent randomised response (Erlingsson et al. 2014; client_sdk.hashing), the
memoised response is a deterministic function of (secret, metric, memo key): nothing is
stored, a new secret gives new responses, and the first-round coins are::

    K      = HMAC-SHA256(secret, lp(b"ldpt/memo/v1") ‖ lp(metric) ‖ lp(memo key))
    stream = SHAKE-256(K), read as little-endian uint32 words

``MemoRandom`` serves that stream through the ``RandomSource`` interface of
client_sdk.randomness (``words`` and ``below``), so a protocol's first round is the same code
whether its coins are fresh (simulation: each row a new client) or memoised (the SDK).
Bounded integers use rejection on 32-bit words (exact, no modulo bias), extending the stream
when a word is rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from ._lazy import np
from .hashing import accept_limit, check_secret, encode_text, lp
from .randomness import WordSource

TAG_MEMO = b"ldpt/memo/v1"
#: Words read per SHAKE call; the stream is extended (an XOF: prefixes agree) when exhausted.
CHUNK_WORDS = 64


def memo_key(secret: bytes, metric: str, key: str) -> bytes:
    """K = HMAC-SHA256(secret, lp(tag) ‖ lp(metric) ‖ lp(key)): seeds one memoised response."""
    return hmac.digest(check_secret(secret), lp(TAG_MEMO, encode_text(metric), encode_text(key)), "sha256")


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


class MemoWords(WordSource):
    """``MemoRandom``'s stream as Python ints (the SDK's one-report path, no numpy).

    The same words in the same order: ``word`` is the next stream word, ``word64`` two of
    them (low first, as ``sketches.numeric.words64``), ``below`` the rejection of ``MemoRandom.below``.
    """

    __slots__ = ("_key", "_buf", "_pos")

    def __init__(self, secret: bytes, metric: str, key: str) -> None:
        self._key = memo_key(secret, metric, key)
        self._buf: tuple[int, ...] = ()
        self._pos = 0

    def word(self) -> int:
        if self._pos >= len(self._buf):
            size = len(self._buf) + CHUNK_WORDS  # a prefix of the XOF is the same stream
            self._buf = struct.unpack(f"<{size}I", hashlib.shake_256(self._key).digest(4 * size))
        u = self._buf[self._pos]
        self._pos += 1
        return u

    def word64(self) -> int:
        low = self.word()
        return low | (self.word() << 32)

    def words(self, count: int) -> list[int]:
        return [self.word() for _ in range(count)]

    def below(self, high: int) -> int:
        return self.below32(high)


#: Memoised responses kept per protocol object (deterministic, so caching is unobservable;
#: in memory only, never on disk).
MEMO_CACHE_SIZE = 4096


class MemoCache:
    """A bounded in-memory map (secret, metric, memo key) -> first-round response."""

    def __init__(self) -> None:
        self._cache: dict[tuple[bytes, str, str], object] = {}

    def get(self, secret: bytes, metric: str, key: str, make) -> object:
        """The cached response, or ``make(MemoWords(...))`` computed once and cached."""
        k = (secret, metric, key)
        value = self._cache.get(k)
        if value is None:
            if len(self._cache) >= MEMO_CACHE_SIZE:
                self._cache.clear()
            value = self._cache[k] = make(MemoWords(secret, metric, key))
        return value


__all__ = ["MemoCache", "MemoRandom", "MemoWords", "TAG_MEMO", "memo_key"]
