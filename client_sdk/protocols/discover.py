"""Discovery of frequent strings without a candidate list: the Prefix Extending Method (PEM)
over local hashing (Wang, Li, Jha 2021; docs/discovery.md).

Value. The device truncates the UTF-8 bytes of its string to ``max_length`` = L bytes: b.
The *key* of b at level ℓ ∈ {1..L} is

    key_ℓ(b) = ("open", b[:ℓ])  if len(b) >= ℓ,       ("end", b)  otherwise

so the keys of level ℓ partition the strings, and the children of an open key of length ℓ−1 at
level ℓ are its 256 one-byte extensions plus its "end" key (the string stopped there).

Groups. Devices are split into L+1 groups: group t < L reports its key at level t+1, and the
last group (the *held-out* group) reports its full key, key_L. The group is derived from the
client secret with HMAC (client_sdk.hashing.derive_cohort), like RAPPOR's cohorts; simulation
draws it uniformly. The server discovers strings level by level on groups 0..L−1 and estimates
the final candidates on the held-out group only, so their intervals are not biased by the
selection (docs/discovery.md, "Honest intervals").

Report. A fresh seed s, uniform on [m] from the CSPRNG for every report (a public seed set: no
per-device hash, so nothing stable identifies a device across windows), and GRR on the hash
range [g] of H_s(key): y = H_s(key) with probability p' (the GRR keep threshold of
client_sdk.protocols.grr on [g], realised on the 2^-32 grid), otherwise one of the other g−1
buckets uniformly. The group and the seed do not depend on the value, so ε = ln(p'/q') with
q' = (1−p')/(g−1). Wire: [group, seed, y].

Hash (frozen; a change is a new protocol version)::

    fp(key)  = BLAKE2b-64(b"ldpt/discover/key/v1" ‖ flag ‖ bytes) as little-endian uint64,
               flag = 0x01 for an open key, 0x02 for an end key
    mix(z)   = SplitMix64 finaliser (Steele, Lea, Flood 2014)
    H_s(k)   = ⌊ mix(mix(fp(k) ^ SALT) + (s+1)·γ) · g / 2^64 ⌋      (all mod 2^64)

Sketch. ``counts[t·m + s, y]``: reports of group t with seed s and bucket y; ``reports[t·m+s]``.
Additive: shards, collectors and windows sum. Size (L+1)·m·g counters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .._lazy import np, numpy_types
from ..errors import DomainError, InvalidPayload
from ..hashing import derive_cohort, encode_text
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    bernoulli,
)
from ._epsilon import log_up
from .base import (
    CountEstimate,
    Payloads,
    Protocol,
    Sketch,
    add_cells,
    first_bad,
    int_rows_from_wire,
    require_1d,
)
from .grr import GRROnRange

TAG_KEY = b"ldpt/discover/key/v1"
FLAG_OPEN = b"\x01"
FLAG_END = b"\x02"

#: Defaults (docs/discovery.md): 16-byte strings; seeds·g near SEED_CELLS, m in [16, 1024].
DEFAULT_MAX_LENGTH = 16
SEED_CELLS = 1 << 16
MIN_DEFAULT_SEEDS, MAX_DEFAULT_SEEDS = 16, 1024
MAX_LENGTH_LIMIT = 64
MAX_SEEDS = 1 << 14
MAX_CELLS = 1 << 24

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SALT = 0x6C6470742D646973  # b"ldpt-dis"


# --- keys and hashes ------------------------------------------------------------------------------
def truncate(value: str, max_length: int) -> bytes:
    """The device's bytes: UTF-8 of ``value`` cut to ``max_length`` bytes (may split a character)."""
    return encode_text(value)[:max_length]


def key_bytes(b: bytes, level: int) -> bytes:
    """The hashed form of key_level(b): flag ‖ bytes (module docstring)."""
    if len(b) >= level:
        return FLAG_OPEN + b[:level]
    return FLAG_END + b


def fingerprint(key: bytes) -> int:
    """fp(key): 64-bit BLAKE2b of the tagged key, as an unsigned integer."""
    return int.from_bytes(hashlib.blake2b(TAG_KEY + key, digest_size=8).digest(), "little")


def fingerprints(keys: Sequence[bytes]) -> np.ndarray:
    """fp of many keys as a uint64 array."""
    blob = b"".join(hashlib.blake2b(TAG_KEY + k, digest_size=8).digest() for k in keys)
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def bucket(seeds: np.ndarray, fps: np.ndarray, g: int) -> np.ndarray:
    """H_s(k) for broadcast seeds s (int) and fingerprints fp(k) (uint64): int64 in [0, g)."""
    with np.errstate(over="ignore"):
        base = _mix(np.asarray(fps, dtype=np.uint64) ^ np.uint64(_SALT))
        s = np.asarray(seeds).astype(np.uint64) + np.uint64(1)
        h = _mix(base + s * np.uint64(_GAMMA))
    g64 = np.uint64(g)
    hi, lo = h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)
    return ((hi * g64 + ((lo * g64) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def bucket_one(seed: int, fp: int, g: int) -> int:
    """H_s(k) for one (seed, fingerprint) in Python integers (the SDK path)."""
    base = _mix_int(fp ^ _SALT)
    return (_mix_int((base + (seed + 1) * _GAMMA) & _MASK64) * g) >> 64


# --- parameters ---------------------------------------------------------------------------------------
def default_hash_range(epsilon: float, rows: int = 1) -> int:
    """g = round(e^ε) + 1, the OLH optimum (Wang et al. 2017; docs/math.md §5), capped so that a
    sketch of ``rows`` = groups × seeds rows stays within MAX_CELLS (from ε ≈ 11 at the defaults;
    ε stays exact for any g, only the variance departs from the optimum)."""
    optimum = round(math.exp(min(epsilon, 40.0))) + 1
    return max(2, min(optimum, MAX_CELLS // max(1, rows)))


def default_seeds(g: int) -> int:
    """m: the largest power of two with m·g <= SEED_CELLS, clamped to [16, 1024].

    Frozen collisions with strings outside a candidate set leave a bias of RMS
    √(Σ c²/(g·m)) (docs/discovery.md), so what matters is the product m·g; it also sets the
    sketch size and the decoder's work (both ∝ m), hence a fixed budget of about 65,536."""
    m = 1 << max(0, (SEED_CELLS // g).bit_length() - 1)
    return min(MAX_DEFAULT_SEEDS, max(MIN_DEFAULT_SEEDS, m))


@dataclasses.dataclass(frozen=True)
class DiscoverParams(GRROnRange):
    epsilon: float      # target per-report budget
    max_length: int     # L: bytes kept on the device; L+1 groups
    seeds: int          # m: public seed set size
    g: int              # hash range

    def __post_init__(self) -> None:
        for field in ("max_length", "seeds", "g"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, *numpy_types("integer"))):
                raise ValueError(f"{field} must be an integer, got {value!r}")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        if not 1 <= self.max_length <= MAX_LENGTH_LIMIT:
            raise ValueError(f"max_length must be in [1, {MAX_LENGTH_LIMIT}] bytes, got {self.max_length}")
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise ValueError(f"seeds must be in [1, {MAX_SEEDS}], got {self.seeds}")
        if self.g < 2:
            raise ValueError(f"hash_range must be at least 2, got {self.g}")
        if self.groups * self.seeds * self.g > MAX_CELLS:
            raise ValueError(f"(max_length+1) × seeds × hash_range = {self.groups * self.seeds * self.g} "
                             f"counters exceeds {MAX_CELLS}; lower seeds or hash_range")
        if self.keep_threshold * self.g <= SCALE:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at hash_range = {self.g}")

    @property
    def groups(self) -> int:
        """L levels plus the held-out group."""
        return self.max_length + 1



class Discover(Protocol):
    """PEM over local hashing with a public seed set; see the module docstring."""

    name = "discover"
    uses_cohorts = True

    def __init__(self, params: DiscoverParams) -> None:
        super().__init__(params)
        self.p, self.q = params.p, params.q
        self._threshold = params.keep_threshold

    # --- shape -------------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        """Open set of strings; the sketch covers (group, seed, bucket) cells."""
        return self.params.groups * self.params.seeds * self.params.g

    @property
    def cohorts(self) -> int:
        return self.params.groups * self.params.seeds

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.g,)

    # --- privacy -------------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self.p) / Fraction(self.q))

    @property
    def payload_bits(self) -> int:
        par = self.params
        return sum(max(1, math.ceil(math.log2(x))) for x in (par.groups, par.seeds, par.g))

    def output_distribution(self, value: str) -> np.ndarray:
        """P(seed, y | value, group) for every group: shape (groups, seeds·g), rows sum to one.

        Exact enumeration for the audit: the seed is uniform, y is GRR on H_s(key_t(value)).
        """
        par = self.params
        b = truncate(value, par.max_length)
        out = np.empty((par.groups, par.seeds, par.g))
        for t in range(par.groups):
            fp = fingerprint(key_bytes(b, min(t + 1, par.max_length)))
            h = bucket(np.arange(par.seeds), np.uint64(fp), par.g)
            out[t] = self.q
            out[t, np.arange(par.seeds), h] = self.p
        return out.reshape(par.groups, -1) / par.seeds

    def output_probabilities(self, index: int) -> np.ndarray:
        """``output_distribution`` of the string ``str(index)`` (the audit enumerates indices)."""
        return self.output_distribution(str(index))

    # --- device ---------------------------------------------------------------------------------------
    def check_values(self, values: Sequence[str]) -> list[str]:
        if isinstance(values, str):
            raise DomainError("discover encodes a sequence of strings; wrap a single value in a list")
        vals = list(values)
        for pos, v in enumerate(vals):
            if not isinstance(v, str):
                raise DomainError(f"discover values are strings; value {v!r} at position {pos} is "
                                  f"{type(v).__name__}")
        return vals

    def group_of(self, secret: bytes, metric: str) -> int:
        """The device's group: HMAC of its secret and the metric (uniform, stable)."""
        return derive_cohort(secret, f"discover\x00{metric}", self.params.groups)

    def encode(self, values: Sequence[str], rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise a batch of strings; ``cohorts`` are the groups (uniform draws if None)."""
        par = self.params
        vals = self.check_values(values)
        source = as_random_source(rng)
        n = len(vals)
        if cohorts is None:
            groups = source.below(par.groups, n).astype(np.int64)
        else:
            groups = np.broadcast_to(np.asarray(cohorts, dtype=np.int64), (n,)).copy()
            if n and (groups.min() < 0 or groups.max() >= par.groups):
                raise ValueError(f"groups must be integers in [0, {par.groups})")
        # fingerprints per distinct value and level (one BLAKE2b per pair), then per report
        index: dict[str, int] = {}
        inverse = np.fromiter((index.setdefault(v, len(index)) for v in vals), dtype=np.int64, count=n)
        distinct = [truncate(v, par.max_length) for v in index]
        levels = [min(t + 1, par.max_length) for t in range(par.groups)]
        table = fingerprints([key_bytes(b, lev) for b in distinct for lev in levels])
        fps = table.reshape(len(distinct), par.groups)[inverse, groups] if n else np.zeros(0, np.uint64)
        seeds = source.below(par.seeds, n).astype(np.int64)
        h = bucket(seeds, fps, par.g)
        keep = bernoulli(source, self._threshold, n)
        other = source.below(par.g - 1, n).astype(np.int64)
        other += other >= h
        return {"group": groups, "seed": seeds, "y": np.where(keep, h, other)}

    def encode_secret_one(self, value: str, secret: bytes, metric: str,
                          source: WordSource | None = None) -> list[int]:
        """One device's report [group, seed, y] from the OS CSPRNG (the SDK path; tests may
        inject ``source``)."""
        par = self.params
        if not isinstance(value, str):
            raise DomainError(f"discover values are strings, got {type(value).__name__}")
        group = self.group_of(secret, metric)
        fp = fingerprint(key_bytes(truncate(value, par.max_length), min(group + 1, par.max_length)))
        src = source or OS_WORDS
        seed = src.below(par.seeds)
        h = bucket_one(seed, fp, par.g)
        if src.word() < self._threshold:
            return [group, seed, h]
        other = src.below(par.g - 1)
        return [group, seed, other + (other >= h)]

    # --- collector --------------------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        par = self.params
        n = None
        for field, high in (("group", par.groups), ("seed", par.seeds), ("y", par.g)):
            arr = require_1d(payloads, field, n)
            n = arr.shape[0]
            if arr.ndim != 1 or (n and arr.dtype.kind not in "iu"):
                raise InvalidPayload(f"{field} must be a 1-d array of integers", field=field)
            bad = (arr < 0) | (arr >= high)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"{field} {int(arr[i])} outside [0, {high})", index=i, field=field)

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        par = self.params
        row = np.asarray(payloads["group"], np.int64) * par.seeds + np.asarray(payloads["seed"], np.int64)
        return row * par.g + np.asarray(payloads["y"], np.int64), row

    # --- estimators ---------------------------------------------------------------------------------------
    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Discovery needs the server's search (estimators.discovery); cells are not estimates."""
        raise NotImplementedError("discover metrics are estimated by estimators.discovery.discover")

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var[ĉ(v)] of one group's local-hashing estimate with n reports (Wang et al. 2017):
        [n·(1/g)(1−1/g) + c·(p'(1−p') − (1/g)(1−1/g))] / (p' − 1/g)²."""
        g, p = self.params.g, self.p
        c = np.asarray(true_counts, dtype=np.float64)
        base = (1 / g) * (1 - 1 / g)
        return (n * base + c * (p * (1 - p) - base)) / (p - 1 / g) ** 2

    # --- wire -----------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [[int(t), int(s), int(y)] for t, s, y in
                zip(payloads["group"], payloads["seed"], payloads["y"])]

    def from_wire(self, objects: list[Any]) -> Payloads:
        par = self.params
        highs = (par.groups, par.seeds, par.g)
        # Fast path: exact types, one conversion and a vectorised range check; anything wrong is
        # named by the report-by-report pass below.
        out = int_rows_from_wire(objects, 3)
        if out is not None and not ((out < 0) | (out >= np.asarray(highs))).any():
            return {"group": out[:, 0], "seed": out[:, 1], "y": out[:, 2]}
        for i, obj in enumerate(objects):  # msgpack hands over Python objects: types checked one by one
            if not isinstance(obj, (list, tuple)) or len(obj) != 3:
                raise InvalidPayload("expected [group, seed, y]", index=i, field="payload")
            for j, (x, high) in enumerate(zip(obj, highs)):
                if type(x) is not int or not 0 <= x < high:
                    raise InvalidPayload(f"expected an integer in [0, {high}), got {x!r}", index=i,
                                         field=("group", "seed", "y")[j])
        out = np.asarray(objects, dtype=np.int64).reshape(-1, 3)  # one conversion, not one per report
        return {"group": out[:, 0], "seed": out[:, 1], "y": out[:, 2]}


OPTION_KEYS: frozenset[str] = frozenset({"max_length", "seeds", "hash_range"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> Discover:
    """Build from registry fields: ``max_length`` (bytes, default 16), ``hash_range`` (default
    round(e^ε)+1, capped to fit MAX_CELLS), ``seeds`` (default ``default_seeds(hash_range)``). ``domain_size`` is ignored
    (an open set of strings)."""
    if epsilon is None:
        raise ValueError("discover needs epsilon")
    for key in OPTION_KEYS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{key} must be an integer, got {value!r}")
    max_length = int(options.get("max_length", DEFAULT_MAX_LENGTH))
    seeds = options.get("seeds")
    g = options.get("hash_range")
    if g is None:  # fits with the fewest default seeds, or the seeds given
        rows = (max_length + 1) * (MIN_DEFAULT_SEEDS if seeds is None else int(seeds))
        g = default_hash_range(float(epsilon), rows)
    g = int(g)
    return Discover(DiscoverParams(
        epsilon=float(epsilon), max_length=max_length,
        seeds=int(default_seeds(g) if seeds is None else seeds), g=g))
