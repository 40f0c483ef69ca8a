"""Generate the conformance vectors from the Python reference (docs/conformance.md).

    .venv/bin/python -m conformance.generate            # rewrite conformance/vectors/*.json
    .venv/bin/python -m conformance.generate --check    # exit 1 if a file would change

Every vector is computed by the SDK's own code paths: the registry document is
``Registry.to_json()`` (what ``GET /v1/registry`` serves), reports go through the client's
value lookup and encoder (``ClientCore.encode_value``), charges through ``client_sdk.ledger.apply`` and batches
through ``client_sdk.uploader.pack_batch``. The one-report encoders draw their randomness from
``os.urandom``; here it is replaced, for the duration of one report, by a fixed byte stream
(``ByteStream``), so a vector pins "given these bytes, this payload". Nothing in the SDK changes
for that: production keeps reading the OS CSPRNG.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from client_sdk import hashing, memo
from client_sdk.client import ClientCore
from client_sdk.device_clock import EPOCH_SLOTS
from client_sdk.encoder_block import protocol_block
from client_sdk.hashing import encode_text
from client_sdk.ledger import (
    SECONDS_PER_DAY,
    Book,
    Charge,
    MetricAccount,
    Refusal,
    apply,
    parse_ledger,
    record_refusal,
    window_name,
)
from client_sdk.options import ClientOptions
from client_sdk.protocols import discover as disc
from client_sdk.protocols import olh as olh_mod
from client_sdk.protocols import projective as proj
from client_sdk.registry import canonical_value, parse_registry
from client_sdk.state import MemoryState, ledger_key, value_digest
from client_sdk.uploader import pack_batch
from client_sdk.window_charge import WindowCharges
from sketches import build_server, server_half
from sketches.hashing import bloom_positions_one, prr_words
from sketches.memo import MemoRandom
from sketches.numeric import NumericServer

from . import exact

VECTORS = Path(__file__).resolve().parent / "vectors"
SUITE_VERSION = 1

SECRETS = [bytes(range(32)), hashlib.sha256(b"ldpt conformance secret").digest(), b"\xff" * 32]
DAY = 20_000          # 2024-10-04, a UTC day number (the ledger's window, OLH's daily cohort)

REGISTRY_TOML = """
[device]
epsilon_per_window = 40.0
lifetime_epsilon = 1000.0

[metrics.crash]
kind = "boolean"
epsilon = 1.0

[metrics.crash_memo]
kind = "boolean"
epsilon = 1.0
epsilon_inf = 2.0

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system", "high-contrast", "sépia"]
epsilon = 2.0

[metrics.country]
kind = "categorical"
categories = [%(c40)s]
epsilon = 1.0

[metrics.browser]
kind = "categorical"
categories = [%(c16)s]
protocol = "oue"
epsilon = 2.0

[metrics.lang]
kind = "categorical"
categories = [%(c10)s]
protocol = "sue"
epsilon = 2.0

[metrics.page]
kind = "categorical"
categories = [%(c200)s]
epsilon = 2.0
max_report_bytes = 2

[metrics.region]
kind = "categorical"
categories = [%(c20)s]
protocol = "olh"
epsilon = 2.0

[metrics.city]
kind = "categorical"
categories = [%(c30)s]
protocol = "olh"
hash_family = "linear"
epsilon = 2.0

[metrics.url]
kind = "string"
protocol = "rappor"
bloom_bits = 16
hashes = 2
cohorts = 8

[metrics.query]
kind = "string"
protocol = "discover"
epsilon = 4.0
max_length = 4
seeds = 8
hash_range = 5

[metrics.plan]
kind = "categorical"
categories = ["free", "pro", "team", "enterprise"]
epsilon = 1.0
epsilon_inf = 3.0

[metrics.tags]
kind = "categorical"
categories = [%(c40)s]
epsilon = 1.0
epsilon_inf = 2.0

[metrics.model]
kind = "categorical"
categories = [%(c30)s]
protocol = "loloha"
epsilon = 1.0
epsilon_inf = 2.0

[metrics.latency]
kind = "numeric"
range = [0, 500]
buckets = [0, 10, 50, 100, 500]
epsilon = 1.0

[metrics.ratio]
kind = "numeric"
range = [0, 1]
buckets = 3
epsilon = 1.0

[metrics.tiny]
kind = "numeric"
range = [-1e-05, 2.5e-05]
buckets = [-1e-05, 0.0, 5e-06, 2.5e-05]
epsilon = 1.0

[metrics.huge]
kind = "numeric"
range = [0, 1e20]
buckets = [0, 1e15, 1.5e16, 1e20]
epsilon = 1.0

[metrics.latency_memo]
kind = "numeric"
range = [0, 60]
buckets = 6
protocol = "dbitflip"
epsilon = 1.0
epsilon_inf = 2.0
sampled_buckets = 3

[metrics.load]
kind = "numeric"
range = [0, 100]
epsilon = 1.0

[metrics.load_low]
kind = "numeric"
range = [-5, 5]
epsilon = 0.5

[metrics.load_bitmean]
kind = "numeric"
range = [0, 1]
protocol = "bitmean"
epsilon = 1.0
grid = 16

[metrics.load_pw]
kind = "numeric"
range = [10, 20]
protocol = "piecewise"
epsilon = 2.0
grid = 32

[metrics.load_laplace]
kind = "numeric"
range = [0, 8]
protocol = "laplace"
epsilon = 4.0
grid = 8

[metrics.load_memo]
kind = "numeric"
range = [0, 60]
epsilon = 1.0
epsilon_inf = 3.0
"""


def _cats(prefix: str, n: int) -> str:
    return ", ".join(f'"{prefix}{i:02d}"' for i in range(n))


def registry_text() -> str:
    return REGISTRY_TOML % {"c10": _cats("l", 10), "c16": _cats("b", 16), "c20": _cats("r", 20),
                            "c30": _cats("t", 30), "c40": _cats("c", 40), "c200": _cats("p", 200)}


# --- randomness ------------------------------------------------------------------------------------
class ByteStream:
    """A fixed byte sequence served in order as ``os.urandom`` (raises when exhausted)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def __call__(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RuntimeError("conformance byte stream exhausted")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out


def with_bytes(data: bytes, fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn`` with os.urandom serving ``data``; (its result, bytes consumed)."""
    stream = ByteStream(data)
    with mock.patch.object(os, "urandom", stream):
        result = fn()
    return result, stream.pos


def wire_json(obj: Any) -> Any:
    """A wire payload in JSON: bytes become {"bin": hex}, lists stay lists, ints stay ints."""
    if isinstance(obj, (bytes, bytearray)):
        return {"bin": bytes(obj).hex()}
    if isinstance(obj, (list, tuple)):
        return [wire_json(o) for o in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    return obj


# --- the registry document -------------------------------------------------------------------------
def registry_vectors(registry: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(registry.to_json()))
    return {"description": "The published registry document (GET /v1/registry) every report vector "
                           "refers to; an SDK encodes from each metric's `encoder` object.",
            "registry": doc}


# --- reports through the client's code path --------------------------------------------------------
def client_encode(core: ClientCore, name: str, value: Any, secret: bytes) -> dict[str, Any]:
    """What ``report()`` computes for one value, up to the randomised payload
    (``ClientCore.encode_value``: the lookup, the memo key and the ledger digest of a memoised
    metric, the encoder); ``secret`` is the core's own."""
    out = core.encode_value(name, value)
    return {"key": out.key, "index": int(out.index), "clipped": out.clipped, "digest": out.digest,
            "payload": wire_json(out.payload)}


REPORT_VALUES: dict[str, list[Any]] = {
    "crash": [True, False, 0, 1, "true", "false"],
    "crash_memo": [True, False],
    "theme": ["light", "dark", "system", "high-contrast", "sépia"],
    "country": ["c00", "c07", "c39"],
    "browser": ["b00", "b09", "b15"],
    "lang": ["l00", "l09"],
    "page": ["p00", "p199"],
    "region": ["r00", "r13", "r19"],
    "city": ["t00", "t17", "t29"],
    "url": ["example.com", "", "héllo wörld", "\ud800x", "日本語"],
    "query": ["abc", "", "a", "abcdefgh", "é", "\U0001F600z", "\udfffz"],
    "plan": ["free", "pro", "enterprise"],
    "tags": ["c00", "c21", "c39"],
    "model": ["t00", "t11", "t29"],
    "latency": [0, 9.99, 10, 49.5, 100, 499.9, 500, -3, 1e9],
    "latency_memo": [0, 15, 59.9, 60, 33.3],
    "ratio": [0, 0.3, 0.5, 1],
    "tiny": [-1e-05, 0, 3e-06, 1e-05],
    "huge": [0, 1e15, 2e16, 1e20],
    "load": [0, 100, 50, 33.3, 0.1, -1, 250, 99.99999],
    "load_low": [-5, 5, 0, 1.2345, -4.999],
    "load_bitmean": [0, 1, 0.5, 0.123],
    "load_pw": [10, 20, 15, 17.77],
    "load_laplace": [0, 8, 3.3, 7.9],
    "load_memo": [0, 60, 30, 12.345, 59.99],
}
#: Stream prefixes: none, a maximal word first (rejected by every bounded draw whose bound is
#: not a power of two, "never" for thresholds), a zero word first.
PREFIXES = (b"", b"\xff" * 8, b"\x00" * 8)
#: Value-independent streams per (value, secret): seeded bytes behind each prefix.
STREAM_BYTES = 4096


def report_vectors(registry: Any) -> dict[str, Any]:
    cases = []
    rng = random.Random(20)
    for s_index, secret in enumerate(SECRETS[:2]):
        core = ClientCore(registry=registry, state=MemoryState(secret=secret),
                          options=ClientOptions(strict=True, clock=lambda: DAY * 86_400.0 + 3_600.0))
        core.install_registry(registry)
        for name, values in REPORT_VALUES.items():
            for value in values:
                for prefix in PREFIXES:
                    data = prefix + rng.randbytes(STREAM_BYTES)
                    out, used = with_bytes(data, lambda n=name, v=value, c=core, s=secret: client_encode(c, n, v, s))
                    cases.append({"metric": name, "secret": s_index, "day": DAY, "value": value,
                                  "random": data[:used].hex(), **out})
    # OLH's cohort is re-derived per UTC day: the same report one day later
    for day in (DAY + 1, DAY + 365):
        core = ClientCore(registry=registry, state=MemoryState(secret=SECRETS[0]),
                          options=ClientOptions(strict=True, clock=lambda d=day: d * 86_400.0))
        core.install_registry(registry)
        for name in ("region", "city"):
            data = rng.randbytes(64)
            out, used = with_bytes(data, lambda n=name, c=core: client_encode(c, n, REPORT_VALUES[n][0], SECRETS[0]))
            cases.append({"metric": name, "secret": 0, "day": day, "value": REPORT_VALUES[name][0],
                          "random": data[:used].hex(), **out})
    return {"description": "One report per case: metric (registry.json), secret (index into secrets), UTC day, "
                           "the value as the app passes it, and the random bytes the encoder consumes, "
                           "all of them, in order. Expected: key, index, clipped, digest (memoised "
                           "metrics' ledger digest) and the wire payload ({\"bin\": hex} for bytes).",
            "secrets": [s.hex() for s in SECRETS[:2]], "cases": cases}


# --- derivations from the secret and the public hashes ------------------------------------------------
def derivation_vectors() -> dict[str, Any]:
    out: dict[str, Any] = {"secrets": [s.hex() for s in SECRETS]}
    texts = ["", "a", "héllo", "日本語", "\ud800", "x\udfff", "\U0001F600", "\udbff\U0001F600\udc00", "a\x00b"]
    out["text"] = [{"text": t, "utf8": encode_text(t).hex()} for t in texts]
    below = []
    for h in (1, 2, 3, 5, 57, 1000, 1_000_003, (1 << 21) - 1, (1 << 21) + 1, (3 << 30) + 1, (1 << 32) - 1):
        limit = ((1 << 64) // h) * h
        for u in sorted({0, 12345, limit - 1, min(limit, (1 << 64) - 1), (1 << 64) - 1, (1 << 64) - (1 << 32)}):
            below.append({"h": h, "word": str(u), "value": u % h if u < limit else None})
    out["below64"] = below
    out["ledger_key"] = [{"secret": i, "key": ledger_key(s).hex()} for i, s in enumerate(SECRETS)]
    out["value_digest"] = [
        {"secret": i, "fingerprint": fp, "key": key, "digest": value_digest(ledger_key(s), fp, key)}
        for i, s in enumerate(SECRETS) for fp in ("0123456789abcdef0123456789abcdef",)
        for key in ("", "lgrr:3", "example.com", "sépia", "\ud800")]
    scopes = ["rappor", f"olh\x00theme\x00{DAY}", "loloha\x00model", "dbitflip\x00latency_memo",
              "discover\x00query", "é"]
    out["cohort"] = [{"secret": i, "scope": scope, "m": m, "cohort": hashing.derive_cohort(s, scope, m)}
                     for i, s in enumerate(SECRETS) for scope in scopes
                     for m in (1, 3, 8, 64, 1000, 3 << 30, (1 << 32) - 1)]
    out["prr"] = [{"secret": i, "metric": metric, "value": value, "k": k,
                   "key": hashing.prr_key(s, metric, value).hex(),
                   "words": [int(w) for w in prr_words(s, metric, value, k)]}
                  for i, s in enumerate(SECRETS) for metric in ("url", "ü")
                  for value in ("example.com", "", "\ud800") for k in (4, 16)]
    memo_cases = []
    for i, s in enumerate(SECRETS):
        for metric, key in (("plan", "lgrr:0"), ("load_memo", "alpha"), ("model", "loloha:4")):
            words = MemoRandom(s, metric, key).words(20)
            src = MemoRandom(s, metric, key)
            draws = [{"below": h, "value": int(src.below(h, 1)[0])}
                     for h in (3, 5, 2, (3 << 30) + 1, (3 << 30) + 1, 7, (1 << 32) - 1)]
            memo_cases.append({"secret": i, "metric": metric, "key": key,
                               "memo_key": memo.memo_key(s, metric, key).hex(),
                               "words": [int(w) for w in words], "draws": draws})
    out["memo"] = memo_cases
    out["bloom"] = [{"value": v, "k": k, "h": h, "cohort": c,
                     "bits": [int(b) for b in bloom_positions_one(v, c, k, h)]}
                    for v in ("example.com", "", "\ud800", "日本語") for (k, h) in ((16, 2), (128, 2), (100, 3), (3, 64))
                    for c in (0, 1, 7, 63)]
    out["olh_hash"] = [{"cohort": s, "value": v, "g": g, "bucket": olh_mod.hash_one(s, v, g)}
                       for s in (0, 1, 38, 1000) for v in (0, 1, 19, 1023) for g in (2, 3, 5, 8, 1 << 20)]
    out["projective"] = [{"s": s, "g": g, "t": t, "code": proj.direction_code_one(s, g, t),
                          "inner": [proj.inner_one(proj.direction_code_one(s, g, t), x, g) for x in range(0, g ** t, max(1, g ** t // 16))]}
                         for (g, t) in ((2, 7), (3, 3), (5, 2), (7, 1), (11, 3)) for s in range(0, proj.directions(g, t), max(1, proj.directions(g, t) // 5))]
    disc_cases = []
    for value in ("abc", "", "a", "abcdefgh", "é", "\ud800"):
        for max_length in (1, 4, 16):
            b = disc.truncate(value, max_length)
            for level in range(1, max_length + 1, max(1, max_length // 4)):
                kb = disc.key_bytes(b, level)
                fp = disc.fingerprint(kb)
                disc_cases.append({"value": value, "max_length": max_length, "level": level,
                                   "key_bytes": kb.hex(), "fingerprint": str(fp),
                                   "buckets": [{"seed": sd, "g": g, "bucket": disc.bucket_one(sd, fp, g)}
                                               for sd in (0, 7, 1023) for g in (2, 5, 56)]})
    out["discover"] = disc_cases
    pattern = bytes(range(256)) * 2
    out["discover_fingerprint"] = [{"key_bytes": pattern[:n].hex(), "fingerprint": str(disc.fingerprint(pattern[:n]))}
                                   for n in (0, 1, 107, 108, 109, 200, 236, 237, 300)]
    return out


# --- memoised responses and RAPPOR's PRR -------------------------------------------------------------
def memo_vectors(registry: Any) -> dict[str, Any]:
    """The memoised first-round response of given (secret, metric, value): what every report of
    that value re-randomises (L-protocols, memobitmean) and RAPPOR's permanent randomised response."""
    responses = []
    for name, indices in (("plan", (0, 1, 3)), ("crash_memo", (0, 1)), ("tags", (0, 21, 39)), ("model", (0, 11, 29)),
                          ("latency_memo", (0, 2, 5)), ("load_memo", (0, 16, 32))):
        proto = server_half(registry.get(name))
        for i, secret in enumerate(SECRETS[:2]):
            for idx in indices:
                key = proto.memo_key(idx, secret, name)
                memo_in = proto.memo_index(idx, secret, name)
                first = proto.first_round(np.array([memo_in], dtype=np.int64), MemoRandom(secret, name, key))[0]
                response = [int(b) for b in first] if np.ndim(first) else int(first)
                responses.append({"metric": name, "protocol": proto.name, "secret": i, "index": idx, "key": key,
                                  "memo_input": int(memo_in), "response": response})
    prr = []
    spec = registry.get("url")
    proto = server_half(spec)
    for i, secret in enumerate(SECRETS[:2]):
        cohort = proto.cohort_of(secret, "url")
        for value in ("example.com", "", "héllo wörld", "\ud800x"):
            bloom = [int(b) for b in bloom_positions_one(value, cohort, proto.params.k, proto.params.h)]
            bits = proto.permanent_response(secret, "url", value, cohort)
            prr.append({"metric": "url", "secret": i, "value": value, "cohort": cohort, "bloom": bloom,
                        "prr": [int(b) for b in bits]})
    return {"description": "Memoised first rounds: (metric, secret, domain index) -> memo key, memo input (the value, "
                           "its hash, its window position or grid point) and the response drawn from the memo stream "
                           "(an int, or bits). RAPPOR: cohort, Bloom bits and PRR bits of a value.",
            "secrets": [s.hex() for s in SECRETS[:2]], "responses": responses, "prr": prr}


# --- numeric grid roundings --------------------------------------------------------------------------
def rounding_vectors(registry: Any) -> dict[str, Any]:
    """Randomised rounding to the input grid (mean metrics) for given words, and α-point rounding
    (memoised means) for given secrets."""
    cases = []
    for name in ("load", "load_low", "load_bitmean", "load_pw", "load_laplace"):
        spec = registry.get(name)
        proto: NumericServer = server_half(spec)   # type: ignore[assignment]
        lo, hi = spec.bounds
        scale = 2.0 / (hi - lo)
        for x in (lo, hi, (lo + hi) / 2, lo + (hi - lo) / 3, lo + 1e-9 * (hi - lo), hi - 1e-12, lo - 1, hi + 1):
            t = (min(hi, max(lo, x)) - lo) * scale - 1.0   # the client clips first (client_sdk.client)
            pos = (min(1.0, max(-1.0, t)) + 1.0) * (proto.grid / 2)
            frac_threshold = math.floor((pos - math.floor(pos)) * (1 << 32))
            for word in sorted({0, max(0, frac_threshold - 1), frac_threshold, (1 << 32) - 1}):
                data = word.to_bytes(4, "little")
                j, used = with_bytes(data, lambda t=t, p=proto: p.discretise_one(t))
                assert used == 4
                cases.append({"metric": name, "value": x, "t": t, "word": word, "index": j})
    alpha = []
    spec = registry.get("load_memo")
    proto = server_half(spec)
    lo, hi = spec.bounds
    for i, s in enumerate(SECRETS):
        word = int(MemoRandom(s, "load_memo", "alpha").words(1)[0])
        for x in (0.0, 60.0, 30.0, 12.345, 59.99, 0.9375, 1.875):
            t = (x - lo) * (2.0 / (hi - lo)) - 1.0
            alpha.append({"metric": "load_memo", "secret": i, "value": x, "t": t, "alpha_word": word,
                          "index": proto.alpha_round(t, s, "load_memo")})
    return {"description": "x clipped to [lo, hi] -> t = (x − lo)·(2/(hi − lo)) − 1 (binary64, in this order), then the grid index "
                           "for one 32-bit word (mean metrics) or the device's α word (memoised means).",
            "randomised": cases, "alpha_point": alpha}


# --- exact tables ------------------------------------------------------------------------------------
def _check(tab: dict[str, Any], probs: Callable[[Any], np.ndarray]) -> None:
    den = int(tab["denominator"])
    for x, row in zip(tab["inputs"], tab["rows"]):
        want = np.asarray(probs(x), dtype=np.float64).ravel()
        got = np.array([int(v) / den for v in row])
        assert want.shape == got.shape and np.allclose(got, want, rtol=1e-9, atol=1e-300), (x, got[:4], want[:4])


def table_vectors() -> dict[str, Any]:
    configs = []

    def add(label: str, name: str, d: int | None, eps: float | None, options: dict[str, Any],
            tables: Callable[[Any, dict[str, Any]], dict[str, Any]], note: str = "") -> None:
        proto = build_server(name, d, eps, options)
        block = {"version": 1, "protocol": name, **protocol_block(proto)}
        configs.append({"label": label, "protocol": name, "encoder": block,
                        "epsilon": proto.epsilon, "epsilon_longitudinal": proto.epsilon_longitudinal,
                        "note": note, "tables": tables(proto, block)})

    def rr_like(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.direct(b["d"], b["keep_threshold"])
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("rr", "rr", 2, 1.0, {}, rr_like)
    add("grr", "grr", 5, 1.5, {}, rr_like)

    def unary(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.bits(b["d"], lambda x, i: b["p_threshold"] if i == x else b["q_threshold"], range(b["d"]))
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("oue", "oue", 4, 1.0, {}, unary)
    add("sue", "sue", 4, 2.0, {}, unary)

    def ss(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.subsets(b["d"], b["s"], b["include_threshold"])
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("ss", "ss", 6, 0.5, {}, ss)

    def hr(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        g, t = b["g"], b["t"]
        tab = exact.hadamard(b["d"], g, b["m"], b["keep_threshold"],
                             lambda s, x: proj.inner_one(proj.direction_code_one(s, g, t), x, g))
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("hr", "hr", 6, 1.0, {}, hr)

    def olh(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        by_cohort = []
        for s in range(b["m"]):
            tab = exact.direct(b["g"], b["keep_threshold"])
            hashed = [p.cohort_hash(s, x) for x in range(b["d"])]
            by_cohort.append({"hashed": hashed, **tab})
        full = p.output_probabilities  # (m, g) per x
        for s, entry in enumerate(by_cohort):
            den = int(entry["denominator"])
            for x in range(b["d"]):
                got = np.array([int(v) / den for v in entry["rows"][entry["hashed"][x]]])
                assert np.allclose(got, full(x)[s])
        return {"report_given_hash": {"by_cohort": by_cohort}}

    add("olh", "olh", 6, 1.0, {"cohorts": 4, "hash_range": 3}, olh,
        "cohort s, value x: the report is GRR on [g] of H_s(x) = hashed[x]: row hashed[x] of the table")
    add("olh-linear", "olh", 6, 1.0, {"hash_family": "linear", "hash_range": 3}, olh,
        "linear family: H_s(x) = <a_s, x> mod g")

    def rappor(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        k = b["k"]
        irr = exact.bits(k, lambda prr, i: b["q_threshold"] if (prr >> i) & 1 else b["p_threshold"], range(1 << k))
        half = b["half_f_threshold"]
        prr = exact.bits(k, lambda bloom, i: exact.S32 - half if (bloom >> i) & 1 else half, range(1 << k))
        full = exact.compose(prr, irr)
        _check(full, p.output_probabilities)
        _check(prr, p.prr_output_probabilities)
        return {"report_given_prr": irr, "prr_given_bloom": prr, "full": full}

    add("rappor", "rappor", None, None, {"bloom_bits": 4, "hashes": 2, "cohorts": 2}, rappor,
        "inputs are bit patterns Σ b_i 2^i (PRR bits, or Bloom bits); outputs the IRR bits likewise")

    def discover(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        values = ["abc", "", "ab", "b"]
        by_group = []
        for group in range(b["groups"]):
            level = min(group + 1, b["max_length"])
            fps = {v: disc.fingerprint(disc.key_bytes(disc.truncate(v, b["max_length"]), level)) for v in values}
            tab = exact.seeded_grr(values, b["seeds"], b["g"], b["keep_threshold"],
                                   lambda v, s, f=fps: disc.bucket_one(s, f[v], b["g"]))
            want = {v: p.output_distribution(v)[group] for v in values}
            _check(tab, want.__getitem__)
            by_group.append(tab)
        return {"report_by_group": {"by_group": by_group}}

    add("discover", "discover", None, 2.0, {"max_length": 2, "seeds": 3, "hash_range": 4}, discover,
        "group t (derived from the secret): output seed·g + y over the fresh seed and bucket")

    def lgrr(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        first = exact.direct(b["d"], b["p1_threshold"])
        second = exact.direct(b["d"], b["p2_threshold"])
        full = exact.compose(first, second)
        _check(full, p.output_probabilities)
        _check(first, p.memo_output_probabilities)
        return {"memo": first, "report_given_memo": second, "full": full}

    add("lgrr", "lgrr", 4, 1.0, {"epsilon_inf": 3.0}, lgrr)

    def losue(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        d = b["d"]
        first = exact.bits(d, lambda x, i: b["p1_threshold"] if i == x else b["q1_threshold"], range(d))
        t2 = b["p2_threshold"]
        second = exact.bits(d, lambda z, i: t2 if (z >> i) & 1 else exact.S32 - t2, range(1 << d))
        full = exact.compose(first, second)
        _check(full, p.output_probabilities)
        _check(first, p.memo_output_probabilities)
        return {"memo": first, "report_given_memo": second, "full": full}

    add("losue", "losue", 3, 1.0, {"epsilon_inf": 2.0}, losue)

    def loloha(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        g = b["g"]
        first = exact.direct(g, b["p1_threshold"])
        second = exact.direct(g, b["p2_threshold"])
        full = exact.compose(first, second)
        hashed = [[olh_mod.hash_one(s, x, g) for x in range(b["d"])] for s in range(b["m"])]
        probs = [p.output_probabilities(x) for x in range(b["d"])]
        den = int(full["denominator"])
        for s in range(b["m"]):
            for x in range(b["d"]):
                assert np.allclose([int(v) / den for v in full["rows"][hashed[s][x]]], probs[x][s])
        return {"hashed": hashed, "memo_given_hash": first, "report_given_memo": second, "full_given_hash": full}

    add("loloha", "loloha", 5, 1.0, {"epsilon_inf": 2.0, "hash_range": 3, "cohorts": 4}, loloha,
        "cohort s hashes x to hashed[s][x]; the memo is GRR_{ε∞} on [g] of it, the report GRR on [g] of the memo")

    def dbitflip(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        k, ds = b["d"], b["sampled"]
        t1, t2 = b["p1_threshold"], b["p2_threshold"]
        # memo input: position of x in the window, or ds (none)
        first = exact.bits(ds, lambda pos, i: t1 if i == pos else exact.S32 - t1, range(ds + 1))
        second = exact.bits(ds, lambda z, i: t2 if (z >> i) & 1 else exact.S32 - t2, range(1 << ds))
        full = exact.compose(first, second)
        table = p.output_probabilities
        den = int(full["denominator"])
        for x in range(k):
            probs = table(x)
            for s in range(k):
                pos = (x - s) % k
                pos = pos if pos < ds else ds
                assert np.allclose([int(v) / den for v in full["rows"][pos]], probs[s])
        return {"memo_given_position": first, "report_given_memo": second, "full_given_position": full}

    add("dbitflip", "dbitflip", 5, 1.0, {"epsilon_inf": 2.0, "sampled_buckets": 2}, dbitflip,
        "window s = cohort; memo input = (x − s) mod d if below sampled, else sampled")

    def duchi(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.duchi(b["grid"], int(b["low"]), int(b["step"]))
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("duchi", "duchi", None, 1.0, {"grid": 4}, duchi)
    add("bitmean", "bitmean", None, 0.5, {"grid": 2}, duchi)

    def piecewise(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.piecewise(b["grid"], b["window"], b["a"], b["b"])
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("piecewise", "piecewise", None, 2.0, {"grid": 4}, piecewise)

    def hybrid(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        pm = b["piecewise"]
        du = b["duchi"]
        tab = exact.hybrid(b["h"], exact.piecewise(pm["grid"], pm["window"], pm["a"], pm["b"]),
                           exact.duchi(du["grid"], int(du["low"]), int(du["step"])))
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("hybrid", "hybrid", None, 2.0, {"grid": 4}, hybrid)

    def laplace(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        tab = exact.laplace(b["grid"], b["window"], [int(v) for v in b["bounds"]])
        _check(tab, p.output_probabilities)
        return {"report": tab}

    add("laplace", "laplace", None, 6.0, {"grid": 2}, laplace)

    def memobitmean(p: Any, b: dict[str, Any]) -> dict[str, Any]:
        first = exact.duchi(b["grid"], int(b["low"]), int(b["step"]))
        second = exact.flip(b["gamma_threshold"])
        full = exact.compose(first, second)
        _check(full, p.output_probabilities)
        _check(first, p.memo_output_probabilities)
        return {"memo": first, "report_given_memo": second, "full": full}

    add("memobitmean", "memobitmean", None, 1.0, {"epsilon_inf": 3.0, "grid": 4}, memobitmean)
    return {"description": "Exact P(y|x) of small configurations: P(output o | input i) = rows[i][o] / "
                           "denominator. `report*` tables are what one report's fresh randomness draws "
                           "(given the parts derived from the secret); `memo*` the memoised first round "
                           "(over secrets); `full*` both. epsilon / epsilon_longitudinal as quoted.",
            "configs": configs}


# --- ledger charges ----------------------------------------------------------------------------------
def _charge_json(c: Charge) -> dict[str, Any]:
    out = dict(c._asdict())
    out["window_charges"] = None if c.window_charges is None else c.window_charges.to_json()
    return out


BOOT = "boot:conformance"
NOON = 43_200
HOUR = 3_600


def _noon(day: int, plus: int = 0, epoch: str = BOOT) -> tuple[str, int]:
    """The elapsed reading of a right clock at noon of ``day`` (+ seconds): one boot since 1970."""
    return epoch, day * SECONDS_PER_DAY + NOON + plus


def ledger_vectors() -> dict[str, Any]:
    fp_a, fp_b, fp_c = "a" * 32, "b" * 32, "c" * 32
    sequences = []

    def run(label: str, steps: list[tuple[Any, ...]]) -> None:
        """steps: (charge, reading) or (charge, reading, refusal, count) to record a refusal."""
        book = Book()
        out = []
        for step in steps:
            charge, reading = step[0], step[1]
            item: dict[str, Any] = {"charge": _charge_json(charge), "elapsed": list(reading)}
            if len(step) == 4:
                record_refusal(book, charge, step[2], step[3], reading)
                item.update(record_refusal=step[2].value, count=step[3])
            else:
                refusal = apply(book, charge, reading)
                item["outcome"] = None if refusal is None else refusal.value
            item.update(accounts={k: v.to_json() for k, v in book.items()}, clock=book.clock.to_json())
            out.append(item)
        sequences.append({"label": label, "steps": out})

    def honest(charges: list[Charge]) -> list[tuple[Any, ...]]:
        """A right clock: each charge at noon of its day, a minute after the one before."""
        return [(c, _noon(c.day, 60 * i)) for i, c in enumerate(charges)]

    def at(start: tuple[str, int], charges: list[Charge], every: int = 60) -> list[tuple[Any, ...]]:
        return [(c, (start[0], start[1] + every * i)) for i, c in enumerate(charges)]

    plain = dict(metric="m", fingerprint=fp_a, epsilon=1.0, epsilon_longitudinal=None, digest=None,
                 reports_per_window=2, lifetime_budget=4.5)
    run("per-report epsilon, reports_per_window and lifetime_epsilon across windows",
        honest([Charge(day=d, **plain) for d in (DAY, DAY, DAY, DAY + 1, DAY + 1, DAY + 2, DAY + 2, DAY + 5)]))
    memo = dict(metric="mm", fingerprint=fp_b, epsilon=0.5, epsilon_longitudinal=2.0, reports_per_window=3,
                lifetime_budget=5.0)
    run("memoised: epsilon per report in the window, epsilon_inf once per distinct digest",
        honest([Charge(day=d, digest=g, **memo) for d, g in
                ((DAY, "d1"), (DAY, "d1"), (DAY, "d2"), (DAY, "d3"), (DAY + 1, "d3"), (DAY + 1, "d1"),
                 (DAY + 2, "d2"), (DAY + 3, "d4"))]))
    run("memoised: a new fingerprint starts a new memo set",
        honest([Charge(day=DAY, digest="d1", **memo),
                Charge(day=DAY + 1, digest="d1", **{**memo, "fingerprint": fp_c}),
                Charge(day=DAY + 2, digest="d1", **memo)]))
    dev = dict(device_window_budget=1.5, device_lifetime_budget=4.0)
    x = dict(metric="x", fingerprint=fp_a, epsilon=1.0, epsilon_longitudinal=None, digest=None,
             reports_per_window=5, lifetime_budget=None, **dev)
    y = dict(metric="y", fingerprint=fp_b, epsilon=0.25, epsilon_longitudinal=1.0, reports_per_window=5,
             lifetime_budget=None, **dev)
    run("[device] caps: epsilon_per_window and lifetime_epsilon summed over metrics, across windows",
        honest([Charge(day=DAY, **x), Charge(day=DAY, digest="v1", **y), Charge(day=DAY, digest="v1", **y),
                Charge(day=DAY, **x), Charge(day=DAY, digest="v1", **y), Charge(day=DAY + 1, digest="v2", **y),
                Charge(day=DAY + 1, **x), Charge(day=DAY + 1, **x), Charge(day=DAY + 2, digest="v3", **y),
                Charge(day=DAY + 3, **x), Charge(day=DAY + 3, digest="v1", **y)]))
    run("[device] caps: a late charge (clock stepped back) counts in the device's window",
        at(_noon(DAY + 1), [Charge(day=DAY + 1, **x), Charge(day=DAY, digest="v1", **y),
                            Charge(day=DAY, digest="v2", **y), Charge(day=DAY, **x)]))
    ten_years = 3653
    run("clock errors: a window more than 2 days ahead is re-dated to the clock's day, its spend kept "
        "(and the spend made on that day); the day a re-date left resumes; a day later, a new window",
        at(_noon(DAY), [Charge(day=DAY, **plain), Charge(day=DAY + ten_years, **plain), Charge(day=DAY, **plain),
                        Charge(day=DAY + ten_years, **plain), Charge(day=DAY, **plain)])
        + [(Charge(day=DAY + 1, **plain), _noon(DAY + 1, HOUR)), (Charge(day=DAY + 3, **plain), _noon(DAY + 1, 2 * HOUR)),
           (Charge(day=DAY + 1, **plain), _noon(DAY + 1, 3 * HOUR))])
    run("clock errors under [device] caps: every account is re-dated, and a return resumes the window",
        at(_noon(DAY), [Charge(day=DAY, **x), Charge(day=DAY + ten_years, digest="v1", **y), Charge(day=DAY, **x),
                        Charge(day=DAY + ten_years, digest="v2", **y), Charge(day=DAY + 1, digest="v1", **y),
                        Charge(day=DAY + 1, **x)]))
    # memoised windows that reveal more than r·ε₁ (client_sdk.window_charge): the published charges
    lgrr = parse_registry({"metrics": {"w": {
        "kind": "categorical", "categories": [f"v{i}" for i in range(64)], "protocol": "lgrr", "epsilon": 0.01,
        "epsilon_inf": 0.5, "reports_per_window": 10}}}).get("w")
    wide = parse_registry({"metrics": {"w": {
        "kind": "categorical", "categories": [f"v{i}" for i in range(64)], "protocol": "lgrr", "epsilon": 0.01,
        "epsilon_inf": 0.5, "reports_per_window": 70}}}).get("w")
    window = dict(metric="w", fingerprint=fp_c, epsilon=server_half(lgrr).epsilon, epsilon_longitudinal=0.5,
                  reports_per_window=10, lifetime_budget=None, window_charges=lgrr.window_charges)
    run("memoised window charges: ten L-GRR reports of one value spend C(10) = W(10), not 10 x eps1; "
        "the eleventh is refused; a new window starts at C(1)",
        honest([Charge(day=DAY, digest="d1", **window) for _ in range(11)] + [Charge(day=DAY + 1, digest="d2", **window)]))
    short = WindowCharges(lgrr.window_charges.cumulative[:4], wide.window_charges.slope)
    run("memoised window charges beyond the table: C(k) = k x slope past its last entry (a table of 4 here; "
        "the registry's hold min(reports_per_window, 64))",
        at(_noon(DAY), [Charge(day=DAY, digest=f"d{i % 3}", **{**window, "window_charges": short})
                        for i in range(8)], every=10))
    run("memoised window charges under a [device] epsilon_per_window: the cap refuses on C(n + 1) - C(n)",
        honest([Charge(day=DAY, digest="d1", **window, device_window_budget=0.12, device_lifetime_budget=None)
                for _ in range(6)]))
    run("memoised window charges: a window re-dated onto a day it had spent in pays up to C(n + 1) at once; "
        "a new fingerprint in the window pays C(n + 1) - C(n)",
        at(_noon(DAY), [Charge(day=DAY, digest="d1", **window), Charge(day=DAY, digest="d1", **window),
                        Charge(day=DAY + ten_years, digest="d1", **window),
                        Charge(day=DAY + ten_years, digest="d1", **window), Charge(day=DAY, digest="d1", **window),
                        Charge(day=DAY, digest="d1", **{**window, "fingerprint": fp_a}),
                        Charge(day=DAY, digest="d1", **{**window, "window_charges": None})]))
    tenth = dict(metric="t", fingerprint=fp_a, epsilon=0.1, epsilon_longitudinal=None, digest=None,
                 reports_per_window=100, lifetime_budget=1.0)
    run("float sums: ten charges of 0.1 fit a budget of 1.0 (relative slack 1e-9), the eleventh does not",
        honest([Charge(day=DAY, **tenth) for _ in range(11)]))

    # --- the elapsed-time rule (client_sdk/device_clock.py; docs/conformance.md, "The device clock")
    one = dict(metric="c", fingerprint=fp_a, epsilon=1.0, epsilon_longitudinal=None, digest=None,
               reports_per_window=1, lifetime_budget=None, device_window_budget=1.0, device_lifetime_budget=None)
    cycle = [-6, -3, 0]
    run("issue 26: wall readings cycling over today-6, today-3 and today, 15 minutes apart, one boot: "
        "the first window and one opening, every other charge held or re-dated (the SDK tests run all 91)",
        at(_noon(DAY), [Charge(day=DAY + cycle[i % 3], **one) for i in range(31)], every=900))
    run("a steadily advancing fake clock (+1 day every 15 minutes), one boot: two windows",
        at(_noon(DAY), [Charge(day=DAY + i, **one) for i in range(12)], every=900))
    near = dict(one, reports_per_window=1, device_window_budget=None)
    midnight = DAY * SECONDS_PER_DAY - 60      # 23:59 of the day before DAY
    run("a right clock around midnight: 23:59 and 00:01 both open; the next opening needs a day and "
        "2 s (CLOCK_MARGIN) since the opening before the last",
        [(Charge(day=DAY - 1, **near), (BOOT, midnight)),
         (Charge(day=DAY, **near), (BOOT, midnight + 120)),
         (Charge(day=DAY + 1, **near), (BOOT, midnight + SECONDS_PER_DAY + 1)),
         (Charge(day=DAY + 1, **near), (BOOT, midnight + SECONDS_PER_DAY + 2)),
         (Charge(day=DAY + 2, **near), (BOOT, midnight + SECONDS_PER_DAY + 3)),
         (Charge(day=DAY + 2, **near), (BOOT, midnight + 2 * SECONDS_PER_DAY + 121))])
    run("epochs: a new boot gets one opening at once; another process's own clock too; an epoch "
        "that missed the last two openings measures from its next update",
        [(Charge(day=DAY, **near), ("boot:one", 5_000)),
         (Charge(day=DAY + 1, **near), ("boot:one", 5_060)),        # the new epoch's one opening
         (Charge(day=DAY + 2, **near), ("boot:one", 5_120)),        # held
         (Charge(day=DAY + 2, **near), ("boot:two", 40)),           # a reboot: one opening
         (Charge(day=DAY + 3, **near), ("boot:two", 100)),          # held
         (Charge(day=DAY + 3, **near), ("run:0123456789abcdef", 3)),  # a process clock: one opening
         (Charge(day=DAY + 4, **near), ("boot:one", 5_180 + SECONDS_PER_DAY)),   # stale: held
         (Charge(day=DAY + 4, **near), ("boot:one", 5_182 + 2 * SECONDS_PER_DAY)),  # a day on: opens
         (Charge(day=DAY + 5, **near), ("boot:two", 100 + 3 * SECONDS_PER_DAY))])   # stale: held
    run(f"epochs: the book keeps the {EPOCH_SLOTS} most recently used; one forgotten and seen again is new",
        [(Charge(day=DAY, **near), (f"run:{i:016x}", 10)) for i in range(EPOCH_SLOTS + 1)]
        + [(Charge(day=DAY + 1, **near), ("run:0000000000000001", 20)),
           (Charge(day=DAY + 2, **near), ("run:0000000000000000", 30))])
    run("recording refusals: counted in the window, re-dating it when far behind, never opening one",
        [(Charge(day=DAY, **near), _noon(DAY)),
         (Charge(day=DAY + 1, **near), _noon(DAY, 60), Refusal.WINDOW, 3),
         (Charge(day=DAY - 9, **near), _noon(DAY, 120), Refusal.DEVICE_WINDOW, 1),
         (Charge(day=DAY, **near), _noon(DAY, 180), Refusal.LIFETIME, 2),
         (Charge(day=DAY, **near), _noon(DAY, 240))])
    v1 = {"format": "ldpt-ledger", "version": 1, "generation": "v1",
          "metrics": {"m": MetricAccount(window=window_name(DAY), window_reports=1, window_epsilon=1.0,
                                         lifetime_reports=1, lifetime_epsilon=1.0).to_json(),
                      "n": MetricAccount(window=window_name(DAY - 4)).to_json()}}
    migrated, _ = parse_ledger(json.dumps(v1))
    return {"description": "Sequences of charges applied in order to an empty book (client_sdk.ledger.apply, "
                           "or record_refusal where a step has record_refusal/count), each with the elapsed "
                           "reading [epoch, seconds] the ledger read under its lock: each step's outcome "
                           "(null = charged, else the refusal), every account and the device clock after it. "
                           "window = the UTC date of day (days since 1970-01-01). migrations: a version-1 "
                           "file and the clock it is read with.",
            "budget_slack": 1e-9, "sequences": sequences,
            "migrations": [{"file": v1, "clock": migrated.clock.to_json()}]}



# --- delivery: retries, Retry-After, which answers settle a batch -----------------------------------------
DELIVERY_TOML = """
[metrics.a]
kind = "categorical"
categories = ["x", "y", "z"]
protocol = "grr"
epsilon = 1.0
reports_per_window = 1000

[metrics.b]
kind = "categorical"
categories = ["x", "y", "z"]
protocol = "grr"
epsilon = 1.0
reports_per_window = 1000

[metrics.c]
kind = "categorical"
categories = ["v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7"]
protocol = "oue"
epsilon = 1.0
reports_per_window = 1000

[metrics.d]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 1000
"""
#: The reports of every conversation, in this order, in one batch.
DELIVERY_REPORTS = [["a", "x"], ["b", "y"], ["c", "v3"], ["d", True]]
#: The retry policy conversations run with: fast retries, so a runner never waits long.
DELIVERY_POLICY = {"initial": 0.01, "maximum": 0.02, "multiplier": 2.0, "max_retry_after": 3600.0,
                   "flush_interval": 0.01}
_PROBLEM = "https://ldp-telemetry.dev/problems/"


def _problem(status: int, slug: str, retry_after: str | None = None, **members: Any) -> dict[str, Any]:
    doc = {"type": _PROBLEM + slug, "title": slug.replace("-", " "), "status": status,
           "detail": f"{slug} (conformance)", **members}
    if "retry_after_member" in doc:      # the problem's own retry_after, without the header
        doc["retry_after"] = doc.pop("retry_after_member")
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    return {"status": status, "headers": headers, "body": json.dumps(doc)}


def _answer(status: int, body: Any = "", content_type: str = "application/json", **headers: str) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body)
    return {"status": status, "headers": {"content-type": content_type, **headers}, "body": text}


def _posts(*groups: tuple[int | None, list[str]]) -> list[dict[str, Any]]:
    return [{"same_bytes_as": same, "metrics": metrics} for same, metrics in groups]


ALL = ["a", "b", "c", "d"]


def _conversations() -> list[dict[str, Any]]:
    """Scripted answers to a client's POSTs and what it must send next (docs/conformance.md, "Delivery")."""
    out: list[dict[str, Any]] = []

    def case(name: str, sending: str, answers: list[Any], posts: list[dict[str, Any]], *, flush: bool,
             acked: int, rejected: int = 0, duplicates: int = 0, stale: tuple[str, ...] = (),
             min_gap: dict[str, float] | None = None, any_order: bool = False) -> None:
        out.append({"name": name, "sending": sending, "answers": answers, "posts": posts,
                    "any_order": any_order, "flush": flush, "reports_acked": acked,
                    "reports_rejected": rejected, "duplicates": duplicates, "stale_metrics": list(stale),
                    "min_gap": min_gap or {}})

    once = _posts((None, ALL))
    again = _posts((None, ALL), (0, ALL))
    case("the collector's ack settles the batch", "plain", [], once, flush=True, acked=4)
    case("a duplicate ack settles it too (counted as a duplicate)", "plain",
         [_answer(200, {"accepted": 4, "duplicate": True})], once, flush=True, acked=4, duplicates=1)
    case("no response (connection dropped): the same bytes again", "plain", ["drop"], again, flush=True, acked=4)
    case("503 problem: retried, same bytes", "plain", [_problem(503, "overloaded")], again, flush=True, acked=4)
    case("500 without a problem document: 5xx is always retried", "plain",
         [_answer(500, "internal error", "text/plain")], again, flush=True, acked=4)
    case("408 problem (request-timeout): retried", "plain", [_problem(408, "request-timeout")], again,
         flush=True, acked=4)
    case("429 with Retry-After: 1 — the next attempt waits at least 1 s, even during a flush", "plain",
         [_problem(429, "rate-limited", retry_after="1")], again, flush=True, acked=4, min_gap={"1": 1.0})
    case("503 whose problem says retry_after 1 (no header): waits at least 1 s", "plain",
         [_problem(503, "overloaded", retry_after_member=1)],
         again, flush=True, acked=4, min_gap={"1": 1.0})
    case("503 with a Retry-After that is no delay ('soon'): ignored, the client's own back-off", "plain",
         [_problem(503, "overloaded", retry_after="soon")], again, flush=True, acked=4)
    for name, answer in [
        ("an HTML 200 from a captive portal", _answer(200, "<html>login</html>", "text/html")),
        ("a JSON 200 without 'accepted'", _answer(200, {"ok": True})),
        ("204 No Content", _answer(204, "", "text/plain")),
        ("a redirect (302)", _answer(302, "", "text/html", location="https://elsewhere.example/")),
        ("an HTML 404 of a wrong path or proxy", _answer(404, "<html>not found</html>", "text/html")),
        ("a 400 that is no problem document", _answer(400, "bad request", "text/plain")),
        ("the shuffler's 202 sent to a plain client", _answer(202, {"stored": True})),
    ]:
        case(f"not the collector's answer ({name}): kept and retried, same bytes", "plain", [answer], again,
             flush=True, acked=4)
    case("400 problem (invalid-batch): final, the batch is dropped", "plain", [_problem(400, "invalid-batch")],
         once, flush=False, acked=0, rejected=4)
    case("401 problem: final", "plain", [_problem(401, "unauthorized")], once, flush=False, acked=0, rejected=4)
    case("409 problem (batch-id-conflict): final", "plain", [_problem(409, "batch-id-conflict")], once,
         flush=False, acked=0, rejected=4)
    case("422 unknown-metric naming b: b is stale (refused from now on), the rest goes again under a new id",
         "plain", [_problem(422, "unknown-metric", metric="b", report_index=1)],
         _posts((None, ALL), (None, ["a", "c", "d"])), flush=False, acked=3, rejected=1, stale=("b",))
    case("422 fingerprint-mismatch naming c: c is stale, the rest goes again", "plain",
         [_problem(422, "fingerprint-mismatch", metric="c", report_index=2)],
         _posts((None, ALL), (None, ["a", "b", "d"])), flush=False, acked=3, rejected=1, stale=("c",))
    case("403 shuffle-required naming b: b goes only through a shuffler, so it is stale for this client "
         "(refused from now on) and the rest goes again under a new id", "plain",
         [_problem(403, "shuffle-required", metric="b")],
         _posts((None, ALL), (None, ["a", "c", "d"])), flush=False, acked=3, rejected=1, stale=("b",))
    case("422 invalid-report at index 2: that report is dropped, the rest goes again (nothing stale)", "plain",
         [_problem(422, "invalid-report", metric="c", report_index=2)],
         _posts((None, ALL), (None, ["a", "b", "d"])), flush=False, acked=3, rejected=1)
    case("422 invalid-report at an index outside the batch: the whole batch is dropped", "plain",
         [_problem(422, "invalid-report", metric="c", report_index=9)], once, flush=False, acked=0, rejected=4)
    case("413: split in halves, each a new batch (sent in either order)", "plain",
         [_problem(413, "batch-too-large")],
         _posts((None, ALL), (None, ["a", "b"]), (None, ["c", "d"])), flush=True, acked=4, any_order=True)
    case("413 from a proxy (no problem document): split all the same", "plain",
         [_answer(413, "<html>too large</html>", "text/html")],
         _posts((None, ALL), (None, ["a", "b"]), (None, ["c", "d"])), flush=True, acked=4, any_order=True)
    case("503, no response, 503: the same bytes every time", "plain",
         [_problem(503, "overloaded"), "drop", _problem(503, "overloaded")],
         _posts((None, ALL), (0, ALL), (0, ALL), (0, ALL)), flush=True, acked=4)
    # shuffler sending (docs/wire-format.md, "Forwarding: shuffled batches"): the shuffler's 202
    # {"stored": true} settles a batch; its other answers as the collector's
    case("shuffler: 202 {stored: true} settles the batch", "shuffler", [], once, flush=True, acked=4)
    case("shuffler: a duplicate 202 settles it (counted as a duplicate)", "shuffler",
         [_answer(202, {"stored": True, "duplicate": True})], once, flush=True, acked=4, duplicates=1)
    for name, answer in [
        ("the collector's 200 ack", _answer(200, {"accepted": 4, "duplicate": False})),
        ("202 {stored: false}", _answer(202, {"stored": False})),
        ("202 that is not JSON", _answer(202, "ok", "text/plain")),
        ("a redirect", _answer(307, "", "text/html", location="https://elsewhere.example/")),
    ]:
        case(f"shuffler: {name} is not its acknowledgement: retried, same bytes", "shuffler", [answer], again,
             flush=True, acked=4)
    case("shuffler: no response, then 503 with Retry-After: 1", "shuffler",
         ["drop", _problem(503, "overloaded", retry_after="1")], _posts((None, ALL), (0, ALL), (0, ALL)),
         flush=True, acked=4, min_gap={"2": 1.0})
    case("shuffler: 400 problem: final", "shuffler", [_problem(400, "invalid-envelope")], once, flush=False,
         acked=0, rejected=4)
    return out


class _Words:
    """``random.Random`` stand-in whose ``random()`` is a given value (the jitter of a vector)."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


def delivery_vectors() -> dict[str, Any]:
    from client_sdk.transport import Response
    from client_sdk.uploader import RetryPolicy

    registry = parse_registry(DELIVERY_TOML, "conformance/delivery")
    delays = []
    top = 1.0 - 2.0 ** -53
    policies = [{}, {"initial": 0.5, "maximum": 60.0, "multiplier": 1.5},
                {"initial": 1.0, "maximum": 300.0, "multiplier": 1.01}]
    for p in policies:
        policy = RetryPolicy(**p)
        for attempt in (1, 2, 3, 4, 5, 9, 10, 64, 65, 66, 600, 1000, 5000):
            for u in (0.0, 0.5, math.floor(0.3183098861837907 * 2 ** 53) / 2 ** 53, top):   # k/2^53
                delays.append({"policy": p, "attempt": attempt, "retry_after": None, "u": u,
                               "delay": policy.delay(attempt, None, _Words(u))})
        for ra in (0.0, 1.0, 2.5, 3599.0, 3601.0, 1e12):
            delays.append({"policy": p, "attempt": 3, "retry_after": ra, "u": 0.5,
                           "delay": policy.delay(3, ra, _Words(0.5))})
    now = 1_700_000_000.0
    imf = "Tue, 14 Nov 2023 22:13:50 GMT"       # now + 30 s
    after_cases: list[tuple[str | None, Any]] = [
        ("5", None), ("0", None), ("120", None), (" 7 ", None), ("1.5", None), ("99999999999", None),
        ("-1", None), ("+5", None), ("1e3", None), ("0x10", None), ("inf", None), ("nan", None), ("", None),
        ("soon", None), ("5.", None), (".5", None), ("1.5.2", None), ("12abc", None), ("2023-11-14", None),
        ("\u0665", None), (imf, None), ("Tue, 14 Nov 2023 22:12:20 GMT", None),
        ("Tuesday, 14-Nov-23 22:13:50 GMT", None),
        (None, {"retry_after": 5}), (None, {"retry_after": 2.5}), (None, {"retry_after": -3}),
        (None, {"retry_after": True}), (None, {"retry_after": "5"}), (None, {"retry_after": None}),
        (None, {"other": 1}), (None, [5]), (None, None),
        ("7", {"retry_after": 5}), ("soon", {"retry_after": 5}), ("-1", {"retry_after": 5}),
    ]
    afters = []
    for header, body in after_cases:
        headers = {} if header is None else {"retry-after": header}
        text = "" if body is None else json.dumps(body)
        seconds = Response(503, headers, text.encode()).retry_after(now)
        afters.append({"header": header, "body": text, "now": now, "seconds": seconds})
    # a JSON body the json module writes as 1e999 is not a finite delay either
    afters.append({"header": None, "body": '{"retry_after": 1e999}', "now": now,
                   "seconds": Response(503, {}, b'{"retry_after": 1e999}').retry_after(now)})
    return {
        "description": "Delivery (docs/conformance.md, \"Delivery\"). retry_delays: RetryPolicy.delay of attempt k "
                       "(1-based) with jitter u in [0, 1) (k/2^53 exactly): nominal d = min(maximum, "
                       "initial * multiplier^(k-1)) (the maximum when the power overflows), delay d/2 + u*d/2; "
                       "with a Retry-After of r seconds: min(max(r, 0), max_retry_after). retry_after: the "
                       "seconds an answer asks to wait (null: it does not), from the Retry-After header "
                       "(delay-seconds, or an HTTP-date relative to now) else the body's retry_after. "
                       "conversations: a client reports `reports` (registry below), flushes, and the "
                       "collector (or shuffler) answers its POSTs with `answers` in order ('drop': no "
                       "response), then acknowledges (plain: 200 {\"accepted\": n, \"duplicate\": false}; "
                       "shuffler: 202 {\"stored\": true}). posts: every POST the client makes, with the "
                       "metrics of its reports in order and same_bytes_as (the index of an earlier POST "
                       "whose body it repeats byte for byte, or null: a batch with a new id; any_order: the "
                       "POSTs after the first may come in any order); flush: what "
                       "flush() returns; the stats() counters after it; stale_metrics: refused from then "
                       "on; min_gap: {POST index: seconds it must come after the previous one at least}. The plain "
                       "conversations hold unchanged for a batch sealed to a gateway or relay: the answers are "
                       "the collector's, inside the encapsulated response ('drop': no outer response), and a "
                       "resend is the same envelope byte for byte.",
        "registry": json.loads(json.dumps(registry.to_json())),
        "reports": DELIVERY_REPORTS,
        "policy": DELIVERY_POLICY,
        "retry_delays": delays,
        "retry_after": afters,
        "conversations": _conversations(),
    }


# --- batch bytes --------------------------------------------------------------------------------------
def batch_vectors() -> dict[str, Any]:
    batch_id = bytes(range(16))
    fp = "0123456789abcdef0123456789abcdef"
    lists = [
        [("crash", fp, 1)],
        [("theme", fp, 4), ("page", fp, 70_000), ("region", fp, [3, 1]), ("browser", fp, b"\x05\x80"),
         ("url", fp, [7, b"\x00\xff"]), ("query", fp, [4, 1023, 55]), ("load", fp, 0)],
        [("m" * 40, fp, b"\x00" * 300)],
        [("crash", fp, i % 2) for i in range(20)],
        [("ü-métrique", fp, [2 ** 31, 2 ** 32 + 5])],
        [("x", fp, 127), ("x", fp, 128), ("x", fp, 255), ("x", fp, 256), ("x", fp, 65_535), ("x", fp, 65_536)],
    ]
    cases = []
    for reports in lists:
        _, body = pack_batch(reports, batch_id)
        cases.append({"batch_id": batch_id.hex(),
                      "reports": [{"m": m, "f": f, "p": wire_json(p)} for m, f, p in reports],
                      "body": body.hex()})
    return {"description": "pack_batch: the msgpack body of a batch of (metric, fingerprint, payload) reports "
                           "with a given batch id ({\"bin\": hex} payloads are msgpack bin).",
            "cases": cases}


# --- the offline outbox's dates (client_sdk/queue.py) -----------------------------------------------------
OUTBOX_T = 1_800_000_000     # 2027-01-15T08:00:00Z: a right clock's present in these cases
OUTBOX_MAX_AGE = 7 * 86_400


def outbox_vectors() -> dict[str, Any]:
    """One batch stored with ``created`` and claimed (then released) at each wall-clock reading:
    the ``created`` the claim hands out (a future date re-dated to the reading, never later), or
    null once it is older than max_age (expired, its reports counted)."""
    from client_sdk.queue import MemoryOutbox, OutboxLimits, StoredBatch

    day, t = 86_400, OUTBOX_T
    cases = {
        "built under a clock 30 days ahead, then repaired": (t + 30 * day, [t, t + day, t + 7 * day, t + 7 * day + 1]),
        "a clock that keeps jumping: re-dated only ever back": (
            t + 30 * day, [t + 10 * day, t + 14 * day, t + 5 * day, t + 12 * day, t + 12 * day + 1]),
        "one second ahead": (t + 1, [t, t + 7 * day, t + 7 * day + 1]),
        "a right clock": (t, [t + 3600, t + 7 * day, t + 7 * day + 1]),
        "built under a clock 8 days behind: expires at once": (t - 8 * day, [t]),
    }
    out = []
    for name, (created, readings) in cases.items():
        outbox = MemoryOutbox(OutboxLimits(max_age=OUTBOX_MAX_AGE))
        outbox.add(StoredBatch(bytes(16), b"\x80", 3, created))
        steps = []
        for now in readings:
            batch = outbox.claim(now)
            steps.append({"now": now, "created": None if batch is None else int(batch.created)})
            if batch is not None:
                outbox.release(batch)
        out.append({"name": name, "created": created, "reports": 3, "steps": steps,
                    "expired_reports": outbox.expired_reports})
    return {"description": "The offline outbox's dates (client_sdk/queue.py; docs/privacy.md, \"Clock errors\"): one "
                           "batch of `reports` added with `created` (wall-clock seconds), then at each step claimed "
                           "with the wall clock reading `now` and released: the claim hands out the batch with "
                           "`created` (a date after `now` is re-dated to `now`, stored, and never moved later) or "
                           "nothing (null: older than max_age seconds, so dropped and its reports counted expired).",
            "max_age": OUTBOX_MAX_AGE, "cases": out}


# --- request headers (client_sdk/transport.py) -------------------------------------------------------------
def header_vectors() -> dict[str, Any]:
    """Every request an SDK sends with its exact header lines, as ``wire_headers`` writes them."""
    from client_sdk import ohttp
    from client_sdk import transport as tr

    requests = [("report", "POST", tr.REPORTS_PATH, tr.REPORT_HEADERS),
                ("sealed report", "POST", ohttp.GATEWAY_PATH, ohttp.SEALED_HEADERS),
                ("registry", "GET", tr.REGISTRY_PATH, tr.REGISTRY_HEADERS),
                ("key configurations", "GET", ohttp.GATEWAY_PATH, ohttp.KEYS_HEADERS),
                ("domain", "GET", tr.DOMAINS_PATH + "{metric}", tr.DOMAIN_HEADERS)]
    return {"description": "The request head of every request an SDK sends (docs/wire-format.md, \"Request "
                           "headers\"): the request line, then exactly these header lines in this order, names "
                           "spelled as given; {authority} is the endpoint's host, with its port unless the scheme's "
                           "default, {length} the body's length in bytes. A sealed report goes to the gateway's "
                           "path here, or to a relay's or shuffler's URL path with the same lines.",
            "requests": [{"name": name, "method": method, "path": path,
                          "headers": [[k, v] for k, v in tr.wire_headers(
                              own, "{authority}", "{length}" if method == "POST" else None)]}
                         for name, method, path, own in requests]}


# --- sealed batches (Oblivious HTTP) --------------------------------------------------------------------
def sealed_vectors() -> dict[str, Any]:
    """Sealed batches for given keys and randomness: the gateway's X25519 key and the request's
    ephemeral key are fixed (derived from labels), and so is each response nonce."""
    from client_sdk import bhttp, ohttp

    def fixed(label: str, n: int = 32) -> bytes:
        return hashlib.sha256(b"ldpt conformance sealed " + label.encode()).digest()[:n]

    gateway = ohttp.PrivateKey.from_private(7, fixed("gateway key"))
    fp = "0123456789abcdef0123456789abcdef"
    batches = [
        [("crash", fp, 1)],
        [("theme", fp, 4), ("page", fp, 70_000), ("region", fp, [3, 1]), ("browser", fp, b"\x05\x80")],
        [("m" * 40, fp, b"\x00" * 300)] * 3,
        [("crash", fp, i % 2) for i in range(120)],
    ]
    requests = []
    for i, reports in enumerate(batches):
        _, body = pack_batch(reports, bytes([i]) * 16)
        inner = ohttp.inner_request(body)
        sealed = ohttp.seal_request(gateway.config, inner, ephemeral_key=fixed(f"ephemeral {i}"))
        requests.append({"batch": body.hex(), "ephemeral_private_key": fixed(f"ephemeral {i}").hex(),
                         "inner_request": inner.hex(), "envelope": sealed.envelope.hex(),
                         "response_secret": sealed.secret.hex()})
    answers = [
        (200, [("content-type", "application/json")], b'{"accepted": 1, "duplicate": false}'),
        (200, [("content-type", "application/json")], b'{"accepted": 4, "duplicate": true}'),
        (422, [("content-type", "application/problem+json")],
         json.dumps({"type": "https://ldp-telemetry.dev/problems/unknown-metric", "title": "x", "status": 422,
                     "detail": "report 0: unknown metric 'crash'", "metric": "crash", "report_index": 0}).encode()),
        (503, [("content-type", "application/problem+json"), ("retry-after", "5")],
         b'{"type": "https://ldp-telemetry.dev/problems/overloaded", "status": 503, "retry_after": 5}'),
    ]
    responses = []
    for i, (status, headers, content) in enumerate(answers):
        request = requests[i % len(requests)]
        sealed = ohttp.SealedRequest(bytes.fromhex(request["envelope"]),
                                     bytes.fromhex(request["envelope"])[ohttp.HEADER_BYTES:ohttp.HEADER_BYTES + ohttp.NENC],
                                     bytes.fromhex(request["response_secret"]), gateway.config.key_id)
        message = ohttp.inner_response(status, headers, content)
        enc_response = ohttp.seal_response(sealed, message, response_nonce=fixed(f"response nonce {i}", 16))
        back = bhttp.decode_response(ohttp.open_response(sealed, enc_response))
        responses.append({"request": i % len(requests), "encapsulated_response": enc_response.hex(),
                          "status": back.status, "headers": [[k, v.decode("latin-1")] for k, v in back.headers],
                          "body": back.content.decode()})
    sizes = [1, 960, 961, 1024, 1025, 4096, 4097, 100_000, 1_048_576, 1_048_577, 3_000_000]
    return {
        "description": "Sealed batches (docs/wire-format.md, \"Sealed batches\"): the gateway's key configuration, "
                       "each batch's padded Binary HTTP request and its envelope for the given ephemeral X25519 "
                       "private key, the request's response secret (Export(\"message/bhttp response\", 16)), and "
                       "encapsulated responses (given response nonces) with what they decapsulate to.",
        "suite": {"kem": ohttp.KEM_X25519_HKDF_SHA256, "kdf": ohttp.KDF_HKDF_SHA256, "aead": ohttp.AEAD_AES_128_GCM},
        "gateway_private_key": gateway.private.hex(),
        "key_config": gateway.config.encode().hex(),
        "ohttp_keys": ohttp.encode_key_configs([gateway.config]).hex(),
        "pad_classes": list(ohttp.PAD_CLASSES),
        "response_pad": ohttp.RESPONSE_PAD,
        "padded_lengths": [[n, ohttp.padded_length(n)] for n in sizes],
        "requests": requests,
        "responses": responses,
    }

# --- large domains declared compactly (client_sdk/domains.py) --------------------------------------------
DOMAIN_VALUES = ("alpha", "beta", "gamma", "δέλτα", "日本", "e\u0301", "é", "a b", "0", "07", "-1", "last")
DOMAINS_TOML = """
[metrics.app_id]
kind = "categorical"
categories = { ids = 1000 }
protocol = "hr"
epsilon = 2.0

[metrics.app]
kind = "categorical"
categories = { file = "app.txt" }
protocol = "olh"
epsilon = 2.0
"""
DOMAINS_INLINE_TOML = """
[metrics.app]
kind = "categorical"
categories = [%s]
protocol = "olh"
epsilon = 2.0
"""


def domain_vectors() -> dict[str, Any]:
    """A numbered and a file domain as published, the file's text, and value -> index lookups."""
    import tempfile

    from client_sdk.domains import domain_text

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "app.txt").write_text(domain_text(DOMAIN_VALUES), encoding="utf-8")
        registry = parse_registry(DOMAINS_TOML, "conformance/domains", base_dir=Path(tmp))
    inline = parse_registry(DOMAINS_INLINE_TOML % ", ".join(json.dumps(v) for v in DOMAIN_VALUES), "inline")
    if inline.get("app").fingerprint != registry.get("app").fingerprint:
        raise AssertionError("a file domain must keep the fingerprint of its values inline")
    doc = json.loads(json.dumps(registry.to_json()))
    ids, app = registry.get("app_id"), registry.get("app")
    lookups = []
    for value in [0, 1, 999, 1000, -1, "0", "17", "999", "1000", "007", "-0", " 5", "5 ", "1e3", "x"]:
        idx = ids.domain_index.get(canonical_value(ids.kind, value))
        lookups.append({"metric": "app_id", "value": value, "index": idx})
    for value in [*DOMAIN_VALUES, "ALPHA", "", "alpha ", 7]:
        idx = app.domain_index.get(canonical_value(app.kind, value))
        lookups.append({"metric": "app", "value": value, "index": idx})
    return {"description": "Large categorical domains (docs/wire-format.md, \"Large domains\"): a numbered "
                           "domain published as {ids} and a file domain published as {file, size, sha256} "
                           "whose values (`domain_text`) an SDK fetches apart and checks against sha256; "
                           "`lookups` give the domain index of a value (null: not in the domain; a "
                           "non-integer number is never an id). `app`'s fingerprint is the one it has "
                           "with its values inline.",
            "registry": doc, "domain_texts": {"app": domain_text(DOMAIN_VALUES)},
            "fingerprints": {s.name: s.fingerprint for s in registry}, "lookups": lookups}


# --- blocks an SDK must refuse --------------------------------------------------------------------
def _mutated(blocks: dict[str, dict[str, Any]], metric: str, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    block = json.loads(json.dumps(blocks[metric]))
    change(block)
    return block


def invalid_block_vectors(registry: Any) -> dict[str, Any]:
    """Blocks of registry.json made inconsistent one member at a time, each with the member an SDK's
    error names and whether the schema already refuses it (docs/conformance.md, "Checks an SDK
    applies to a block"): every SDK refuses all of them when it builds an encoder, never encodes."""
    doc = json.loads(json.dumps(registry.to_json()))
    blocks = {m["name"]: m["encoder"] for m in doc["metrics"]}
    cases = [
        ("version 2 (a newer layout)", "theme", lambda b: b.update(version=2), "version"),
        ("olh linear without t", "city", lambda b: b.pop("t"), "t"),
        ("olh random with t", "region", lambda b: b.update(t=2), "t"),
        ("grr keep_threshold 0", "theme", lambda b: b.update(keep_threshold=0), "keep_threshold"),
        ("grr keep_threshold 2^32/d: p' = q'", "theme", lambda b: b.update(keep_threshold=(1 << 32) // 5),
         "keep_threshold"),
        ("olh keep_threshold × g = 2^32", "region", lambda b: b.update(keep_threshold=(1 << 32) // b["g"]),
         "keep_threshold"),
        ("hr g = 6 is not a prime", "page", lambda b: b.update(g=6), "g"),
        ("hr m ≠ (g^t − 1)/(g − 1)", "page", lambda b: b.update(m=b["m"] + 1), "m"),
        ("hr d > g^t", "page", lambda b: b.update(d=b["g"] ** b["t"] + 1), "t"),
        ("hr t above ⌈log_g d⌉", "page", lambda b: b.update(t=b["t"] + 1), "t"),
        ("olh linear d > g^t", "city", lambda b: b.update(d=b["g"] ** b["t"] + 1), "t"),
        ("olh linear m ≠ (g^t − 1)/(g − 1)", "city", lambda b: b.update(m=b["m"] - 1), "m"),
        ("rappor h > k", "url", lambda b: b.update(h=b["k"] + 5), "h"),
        ("ss s = d", "country", lambda b: b.update(s=b["d"]), "s"),
        ("dbitflip sampled > d", "latency_memo", lambda b: b.update(sampled=b["d"] + 3), "sampled"),
        ("discover groups ≠ max_length + 1", "query", lambda b: b.update(groups=b["max_length"]), "groups"),
        ("losue p1_threshold ≠ 2^31", "tags", lambda b: b.update(p1_threshold=(1 << 31) + 1), "p1_threshold"),
        ("piecewise window > grid", "load_pw", lambda b: b.update(window=b["grid"] + 1), "window"),
        ("piecewise window × a + grid × b > 2^32", "load_pw", lambda b: b.update(b=1 << 31), "a"),
        ("hybrid's piecewise on another grid", "load", lambda b: b["piecewise"].update(grid=b["grid"] // 2),
         "piecewise.grid"),
        ("duchi low + grid × step > 2^64", "load_low", lambda b: b.update(step=str(1 << 60)), "step"),
        ("duchi low above 2^64", "load_low", lambda b: b.update(low=str((1 << 64) + 1)), "low"),
        ("memobitmean step with a leading zero", "load_memo", lambda b: b.update(step="0" + b["step"]), "step"),
        ("laplace bounds decreasing", "load_laplace",
         lambda b: b.update(bounds=[b["bounds"][1], b["bounds"][0], *b["bounds"][2:]]), "bounds"),
        ("laplace bounds: one word short", "load_laplace", lambda b: b["bounds"].pop(), "bounds"),
        ("laplace bound above 2^64", "load_laplace", lambda b: b.update(bounds=[*b["bounds"][:-1], str(1 << 65)]),
         "bounds"),
        ("histogram with d edges, not d + 1", "latency", lambda b: b["edges"].pop(), "edges"),
        ("histogram edges not increasing", "latency",
         lambda b: b.update(edges=[b["edges"][0], b["edges"][2], b["edges"][1], *b["edges"][3:]]), "edges"),
        ("histogram edge repeated", "latency",
         lambda b: b.update(edges=[b["edges"][0], b["edges"][1], b["edges"][1], *b["edges"][3:]]), "edges"),
        ("rr histogram with 4 edges", "crash", lambda b: b.update(edges=[0.0, 1.0, 2.0, 3.0]), "edges"),
        ("dbitflip histogram with d + 2 edges", "latency_memo", lambda b: b["edges"].append(b["edges"][-1] + 1),
         "edges"),
        ("mean range reversed", "load_low", lambda b: b.update(range=[b["range"][1], b["range"][0]]), "range"),
        ("mean range empty (lo = hi)", "load_bitmean", lambda b: b.update(range=[b["range"][0], b["range"][0]]),
         "range"),
    ]
    schema = _validator()
    out = []
    for reason, metric, change, field in cases:
        block = _mutated(blocks, metric, change)
        out.append({"reason": reason, "metric": metric, "field": field, "schema_refuses": not schema.is_valid(block),
                    "block": block})
    return {"description": "Encoder blocks every SDK must refuse when it builds an encoder (RegistryError naming "
                           "the metric and `field`), one inconsistency each, made from registry.json's blocks; "
                           "`schema_refuses`: conformance/encoder-block.schema.json already refuses it, else only "
                           "the SDK-side checks do (docs/conformance.md, \"Checks an SDK applies to a block\").",
            "cases": out}


def _validator() -> Any:
    import jsonschema

    from .block_types import load_schema

    return jsonschema.Draft202012Validator(load_schema())


# --- driver ---------------------------------------------------------------------------------------------
def build() -> dict[str, dict[str, Any]]:
    registry = parse_registry(registry_text(), "conformance/registry")
    files = {
        "registry.json": registry_vectors(registry),
        "reports.json": report_vectors(registry),
        "derivations.json": derivation_vectors(),
        "roundings.json": rounding_vectors(registry),
        "memo.json": memo_vectors(registry),
        "tables.json": table_vectors(),
        "ledger.json": ledger_vectors(),
        "batches.json": batch_vectors(),
        "outbox.json": outbox_vectors(),
        "headers.json": header_vectors(),
        "sealed.json": sealed_vectors(),
        "domains.json": domain_vectors(),
        "delivery.json": delivery_vectors(),
        "invalid_blocks.json": invalid_block_vectors(registry),
    }
    for doc in files.values():
        doc["suite_version"] = SUITE_VERSION
    return files


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a vector file would change")
    parser.add_argument("--out", type=Path, default=VECTORS, help="directory of the vector files")
    args = parser.parse_args(argv)
    files = build()
    changed = []
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        path = args.out / name
        text = render(doc)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            changed.append(name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and changed:
        print(f"conformance vectors out of date: {', '.join(changed)}; run python -m conformance.generate",
              file=sys.stderr)
        return 1
    print("unchanged" if not changed else f"{'would change' if args.check else 'wrote'}: {', '.join(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
