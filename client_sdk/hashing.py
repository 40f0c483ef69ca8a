"""Stable hashes and HMAC derivations: one specification for SDK, collector and estimators.

Everything here defines what a report *means*, so it is frozen: each function is versioned
by a domain-separation tag and pinned by golden values in tests/test_rappor.py. Changing a
byte of it is a new protocol version.

Encoding (no two different tuples encode to the same bytes)::

    lp(x)  = len(x) as 4-byte big-endian ‖ x           (length prefix)
    text   = UTF-8, lone surrogates passed through ("surrogatepass")

Unkeyed — RAPPOR Bloom bits (public: the server hashes candidates the same way)::

    stream(v)  = SHAKE-256(b"ldpt/rappor/bloom/v1" ‖ lp(v))   read as little-endian uint32 words
    accept u   iff u < L, L = ⌊2^32 / k⌋·k (rejection: bit = u mod k is exactly uniform on [k])
    the r-th accepted word (r = 0, 1, ...) is hash r mod h of cohort r div h

so cohort c's h Bloom bits are accepted words c·h .. c·h+h−1 (docs/math.md §7: "each cohort
has its own h hashes"). Two hashes may hit the same bit; the filter then has fewer than h ones.

Keyed by the client secret (never leaves the device; docs/math.md §11)::

    cohort(secret, metric, m): words of HMAC-SHA256(secret, lp(b"ldpt/rappor/cohort/v1") ‖
        lp(metric) ‖ lp(counter)) for counter = 0, 1, ...; the first word u < ⌊2^32/m⌋·m gives
        u mod m.
    prr_words_list(secret, metric, value, k): K = prr_key(secret, metric, value) =
        HMAC-SHA256(secret, lp(b"ldpt/rappor/prr/v1") ‖ lp(metric) ‖ lp(value)); the k words are
        SHAKE-256(K) read as little-endian uint32. RAPPOR's permanent randomised response
        thresholds these words, so it is a deterministic function of (secret, metric, value):
        memoised without storing anything, different for every metric, and recomputed — never
        cached on disk — at each report.

This module is the device's plain-Python side of the specification (one value, one cohort); the
same words and bits over numpy arrays — the Bloom bits of many values, for the server half's batch
encoder and the decoder's candidate matrix — are sketches/hashing.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

TAG_BLOOM = b"ldpt/rappor/bloom/v1"
TAG_COHORT = b"ldpt/rappor/cohort/v1"
TAG_PRR = b"ldpt/rappor/prr/v1"

_TWO32 = 1 << 32
#: Words read beyond the m·h needed before falling back to a longer stream (rejections are
#: rare: at most k/2^32 per word).
SLACK_WORDS = 8
#: Shortest secret accepted (the SDK's secrets are 32 bytes; google/rappor's 128).
MIN_SECRET_BYTES = 16


def encode_text(text: str) -> bytes:
    """UTF-8 bytes of a metric name or value (lone surrogates passed through, never an error)."""
    return text.encode("utf-8", "surrogatepass")


def lp(*parts: bytes) -> bytes:
    """Length-prefixed concatenation: 4-byte big-endian length, then the bytes, per part."""
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def accept_limit(k: int) -> int:
    """L = ⌊2^32/k⌋·k: uint32 words below L reduce mod k without bias."""
    if k < 1 or k > _TWO32:
        raise ValueError(f"k must be in [1, 2^32], got {k}")
    return (_TWO32 // k) * k


def check_secret(secret: bytes) -> bytes:
    """The secret as bytes; ValueError if it is not bytes or too short to be a secret."""
    if not isinstance(secret, (bytes, bytearray, memoryview)):
        raise ValueError(f"the client secret must be bytes, got {type(secret).__name__}")
    secret = bytes(secret)
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the client secret must have at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return secret


# --- keyed: client secret --------------------------------------------------------------------------

def derive_cohort(secret: bytes, metric: str, m: int) -> int:
    """This client's RAPPOR cohort in [0, m) for ``metric`` (uniform, stable, HMAC-derived)."""
    if m < 1:
        raise ValueError(f"the number of cohorts must be at least 1, got {m}")
    key = check_secret(secret)
    limit = accept_limit(m)
    metric_bytes = encode_text(metric)
    counter = 0
    while True:  # one HMAC block almost always suffices (8 words, each rejected w.p. < m/2^32)
        block = hmac.digest(key, lp(TAG_COHORT, metric_bytes, counter.to_bytes(4, "big")), "sha256")
        for u in struct.unpack("<8I", block):
            if u < limit:
                return u % m
        counter += 1


_LP_TAG_PRR = lp(TAG_PRR)


def prr_key(secret: bytes, metric: str, value: str) -> bytes:
    """K = HMAC-SHA256(secret, lp(tag) ‖ lp(metric) ‖ lp(value)): seeds the PRR coins of one value."""
    m, v = encode_text(metric), encode_text(value)
    msg = b"".join((_LP_TAG_PRR, len(m).to_bytes(4, "big"), m, len(v).to_bytes(4, "big"), v))
    return hmac.digest(secret, msg, "sha256")


def prr_words_list(secret: bytes, metric: str, value: str, k: int) -> list[int]:
    """The k uniform 32-bit words behind the permanent randomised response of ``value``, as Python
    ints (the SDK's one-report path, no numpy; sketches.hashing.prr_words is the array form)."""
    return list(struct.unpack(f"<{k}I", hashlib.shake_256(prr_key(secret, metric, value)).digest(4 * k)))


# --- unkeyed: Bloom bits ---------------------------------------------------------------------------

def bloom_positions_one_list(value: str, cohort: int, k: int, h: int) -> list[int]:
    """The h Bloom bits of one value in one cohort as Python ints (the SDK's one-report path, no
    numpy; sketches.hashing.bloom_positions_one is the array form): accepted words
    c·h .. c·h+h−1 of the value's stream, each mod k."""
    need = (cohort + 1) * h
    limit = accept_limit(k)
    seed = TAG_BLOOM + lp(encode_text(value))
    count = need + SLACK_WORDS
    while True:
        words = struct.unpack(f"<{count}I", hashlib.shake_256(seed).digest(4 * count))
        accepted = [u % k for u in words if u < limit]
        if len(accepted) >= need:
            return accepted[cohort * h:need]
        count *= 2
