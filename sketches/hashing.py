"""RAPPOR's hashes over numpy arrays: the Bloom bits of many values at once and the PRR words of a
value as a uint32 array, for the server half's batch encoder and the decoder's candidate matrix
(Erlingsson, Pihur, Korolova 2014; docs/rappor.md, "Hashing specification").

The specification is client_sdk.hashing's (its module docstring; frozen, pinned by golden values
in tests/test_rappor.py): the device computes the same words and bits in plain Python
(``prr_words_list``, ``bloom_positions_one_list``) and tests/test_pure_path.py checks the two paths
agree word for word. Bloom bits::

    stream(v)  = SHAKE-256(b"ldpt/rappor/bloom/v1" ‖ lp(v))   read as little-endian uint32 words
    accept u   iff u < L, L = ⌊2^32 / k⌋·k (rejection: bit = u mod k is exactly uniform on [k])
    the r-th accepted word (r = 0, 1, ...) is hash r mod h of cohort r div h

and the PRR words of a value are SHAKE-256(prr_key(secret, metric, value)) read the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from client_sdk.hashing import SLACK_WORDS, TAG_BLOOM, accept_limit, check_secret, encode_text, lp, prr_key

_TWO32 = 1 << 32


def prr_words(secret: bytes, metric: str, value: str, k: int) -> np.ndarray:
    """The k uniform uint32 words behind the permanent randomised response of ``value``."""
    return prr_words_checked(check_secret(secret), metric, value, k)


def prr_words_checked(secret: bytes, metric: str, value: str, k: int) -> np.ndarray:
    """``prr_words`` for a secret already validated by ``check_secret`` (the batch encoder's path)."""
    return np.frombuffer(hashlib.shake_256(prr_key(secret, metric, value)).digest(4 * k), dtype="<u4")


def _stream_words(value: bytes, count: int) -> np.ndarray:
    """First ``count`` words of a value's Bloom stream (SHAKE-256 is an XOF: prefixes agree)."""
    seed = b"".join((TAG_BLOOM, len(value).to_bytes(4, "big"), value))
    return np.frombuffer(hashlib.shake_256(seed).digest(4 * count), dtype="<u4")


def _accepted_slow(value: bytes, need: int, k: int, limit: int) -> np.ndarray:
    """First ``need`` accepted words mod k, extending the stream until there are enough."""
    count = need + SLACK_WORDS
    while True:
        words = _stream_words(value, count).astype(np.uint64)
        ok = words[words < limit]
        if ok.shape[0] >= need:
            return (ok[:need] % np.uint64(k)).astype(np.int64)
        count *= 2


def bloom_positions(values: Sequence[str], k: int, h: int, m: int) -> np.ndarray:
    """Bloom bit of every (value, cohort, hash): int64 array (len(values), m, h), bits in [0, k).

    One SHAKE-256 call per value (not per cohort); the rejection test and the reduction are
    vectorised over all values. Rows that hit a rejected word (probability ≈ m·h·k/2^32)
    are redone one by one.
    """
    need = m * h
    limit = accept_limit(k)
    encoded = [encode_text(v) for v in values]
    if not encoded:
        return np.zeros((0, m, h), dtype=np.int64)
    width = need + SLACK_WORDS
    blob = b"".join(hashlib.shake_256(TAG_BLOOM + lp(v)).digest(4 * width) for v in encoded)
    words = np.frombuffer(blob, dtype="<u4").reshape(len(encoded), width)
    head = words[:, :need]
    if limit == _TWO32:  # k divides 2^32: every word is accepted
        return (head % np.uint32(k)).astype(np.int64).reshape(-1, m, h)
    out = (head % np.uint32(k)).astype(np.int64)
    rejected = (head.astype(np.uint64) >= limit).any(axis=1)
    for row in np.flatnonzero(rejected):  # rare: a handful of rows per million values
        out[row] = _accepted_slow(encoded[row], need, k, limit)
    return out.reshape(-1, m, h)


def bloom_positions_one(value: str, cohort: int, k: int, h: int) -> np.ndarray:
    """The h Bloom bits of one value in one cohort: int64 array (h,) (the batch encoder with a
    secret, one client's values)."""
    need = (cohort + 1) * h
    limit = accept_limit(k)
    encoded = encode_text(value)
    if limit == _TWO32:  # k divides 2^32: no word is ever rejected
        return (_stream_words(encoded, need)[cohort * h:] % np.uint32(k)).astype(np.int64)
    head = _stream_words(encoded, need + SLACK_WORDS)[:need]
    if not (head >= limit).any():
        return (head[cohort * h:] % np.uint32(k)).astype(np.int64)
    return _accepted_slow(encoded, need, k, limit)[cohort * h:]


__all__ = ["bloom_positions", "bloom_positions_one", "prr_words", "prr_words_checked"]
