"""Memoised first-round coins derived from the client secret (docs/protocols.md, "L-protocols").

The two-round longitudinal protocols (L-GRR, L-OSUE, LOLOHA; Arcolezi et al. 2022, 2023)
randomise a value twice: a *memoised* first round, the same every time the device reports the
same value (or, for LOLOHA, the same hashed value), and a fresh second round per report. As
RAPPOR's permanent randomised response (Erlingsson et al. 2014; client_sdk.hashing), the
memoised response is a deterministic function of (secret, metric, memo key): nothing is
stored, a new secret gives new responses, and the first-round coins are::

    K      = HMAC-SHA256(secret, lp(b"ldpt/memo/v1") ‖ lp(metric) ‖ lp(memo key))
    stream = SHAKE-256(K), read as little-endian uint32 words

``MemoWords`` serves that stream to the device's one-report path as Python ints, through the
``WordSource`` interface of client_sdk.randomness (``word`` and ``below``); its server-side twin
over numpy arrays, the same words in the same order for a batch's vectorised first round, is
``sketches.memo.MemoRandom``. Bounded integers use rejection on 32-bit words (exact, no modulo
bias), extending the stream when a word is rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from .hashing import check_secret, encode_text, lp
from .randomness import WordSource

TAG_MEMO = b"ldpt/memo/v1"
#: Words read per SHAKE call; the stream is extended (an XOF: prefixes agree) when exhausted.
CHUNK_WORDS = 64


def memo_key(secret: bytes, metric: str, key: str) -> bytes:
    """K = HMAC-SHA256(secret, lp(tag) ‖ lp(metric) ‖ lp(key)): seeds one memoised response."""
    return hmac.digest(check_secret(secret), lp(TAG_MEMO, encode_text(metric), encode_text(key)), "sha256")


class MemoWords(WordSource):
    """The memo stream as Python ints (the SDK's one-report path, no numpy).

    The same words in the same order as ``sketches.memo.MemoRandom``: ``word`` is the next stream
    word, ``word64`` two of them (low first, as ``sketches.numeric.words64``), ``below`` the
    rejection of ``MemoRandom.below``.
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


__all__ = ["MemoCache", "MemoWords", "TAG_MEMO", "memo_key"]
