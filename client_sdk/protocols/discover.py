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
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from ..errors import DomainError
from ..hashing import derive_cohort, encode_text
from ..randomness import OS_WORDS, SCALE, WordSource
from ._epsilon import log_up
from .blocks import BlockEncoder, BlockProtocol, BlockReader, check_keep
from .device import Context, DeviceHalf, numpy_types
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
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
SALT = 0x6C6470742D646973  # b"ldpt-dis"


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


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * MIX2) & _MASK64
    return z ^ (z >> 31)


def bucket_one(seed: int, fp: int, g: int) -> int:
    """H_s(k) for one (seed, fingerprint) in Python integers (the SDK path)."""
    base = _mix_int(fp ^ SALT)
    return (_mix_int((base + (seed + 1) * GAMMA) & _MASK64) * g) >> 64


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



class Discover(DeviceHalf):
    """PEM over local hashing with a public seed set (see the module docstring): the device half;
    the server half, which the search of estimators.discovery reads, is sketches.discover."""

    name = "discover"
    uses_cohorts = True

    def __init__(self, params: DiscoverParams) -> None:
        super().__init__(params)
        self.p, self.q = params.p, params.q
        self.keep_threshold = params.keep_threshold

    @property
    def domain_size(self) -> int:
        """Open set of strings; the sketch covers (group, seed, bucket) cells."""
        return self.params.groups * self.params.seeds * self.params.g

    @property
    def cohorts(self) -> int:
        return self.params.groups * self.params.seeds

    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self.p) / Fraction(self.q))

    @property
    def payload_bits(self) -> int:
        par = self.params
        return sum(max(1, math.ceil(math.log2(x))) for x in (par.groups, par.seeds, par.g))

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"max_length": par.max_length, "groups": par.groups, "seeds": par.seeds, "g": par.g,
                "keep_threshold": par.keep_threshold}

    def variance(self, n: int, true_count: float) -> float:
        """Var[ĉ(v)] of one group's local-hashing estimate with n reports (Wang et al. 2017):
        [n·(1/g)(1−1/g) + c·(p'(1−p') − (1/g)(1−1/g))] / (p' − 1/g)²."""
        g, p = self.params.g, self.p
        base = (1 / g) * (1 - 1 / g)
        return (n * base + float(true_count) * (p * (1 - p) - base)) / (p - 1 / g) ** 2

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
        """The device's group: HMAC of its secret and the metric (uniform, stable; the block encoder's)."""
        return self.block_encoder.group_of(secret, metric)

    def encode_secret_one(self, value: str, secret: bytes, metric: str,
                          source: WordSource | None = None) -> list[int]:
        """One device's report [group, seed, y] from the OS CSPRNG (the SDK path; tests may
        inject ``source``): the block encoder's."""
        return self.block_encoder.encode_one(-1, value, Context(secret, metric, 0, source or OS_WORDS))

    def encode_one(self, index: int, key: str, ctx: Context) -> list[int]:
        """The report of the string ``key`` (``index`` unused: the values are an open set)."""
        return self.block_encoder.encode_one(index, key, ctx)


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


class DiscoverBlock(BlockEncoder):
    """discover's one-report encoder from the block: the device's group (HMAC of the secret and
    metric), seed = BELOW(seeds), then GRR on [g] of the hashed key of the group's prefix; the
    report is [group, seed, y]."""

    __slots__ = ("max_length", "groups", "seeds", "g", "keep")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.max_length: int = block["max_length"]
        self.groups: int = block["groups"]
        self.seeds: int = block["seeds"]
        self.g: int = block["g"]
        self.keep: int = block["keep_threshold"]

    def group_of(self, secret: bytes, metric: str) -> int:
        """The device's group: HMAC of its secret and the metric (uniform, stable)."""
        return derive_cohort(secret, f"discover\x00{metric}", self.groups)

    def encode_one(self, index: int, key: str, ctx: Context) -> list[int]:
        """One report of the string ``key`` (truncated to ``max_length`` UTF-8 bytes)."""
        if not isinstance(key, str):
            raise DomainError(f"discover values are strings, got {type(key).__name__}")
        group = self.group_of(ctx.secret, ctx.metric)
        fp = fingerprint(key_bytes(truncate(key, self.max_length), min(group + 1, self.max_length)))
        src, g = ctx.words, self.g
        seed = src.below(self.seeds)
        h = bucket_one(seed, fp, g)
        if src.word() < self.keep:
            return [group, seed, h]
        other = src.below(g - 1)
        return [group, seed, other + (other >= h)]


def check_block(reader: BlockReader) -> None:
    """(3) the keep threshold on [g], (8) one group per prefix level."""
    check_keep(reader.block.get("g"), reader)
    if reader.int("groups") != reader.int("max_length") + 1:
        reader.fail("groups", "groups must be max_length + 1")


BLOCK = BlockProtocol(DiscoverBlock, check_block, members=("max_length", "groups", "seeds", "g", "keep_threshold"))
