"""Optimised local hashing over a fixed seed set ("cohorts"), decoded by least squares (docs/math.md §5).

Client. Each client belongs to one cohort s ∈ [m] (the SDK derives it from the client secret;
simulation draws it uniformly). Cohort s fixes a hash H_s: [d] → [g]. The client reports
(s, y), where y is GRR on [g] applied to H_s(x): y = H_s(x) with p = e^ε/(e^ε+g−1), quantised
down to the 2^-32 grid (p'), otherwise one of the g−1 other buckets, each with
q' = (1−p')/(g−1). The quoted epsilon is ln(p'/q') <= ε.

Hash. H_s is fixed, documented and platform independent (pure uint64 wrap-around arithmetic):

    mix(z)   = SplitMix64 finaliser: z ^= z>>30; z *= 0xBF58476D1CE4E5B9;
               z ^= z>>27; z *= 0x94D049BB133111EB; z ^= z>>31          (a bijection of uint64)
    seed_s   = mix(SALT + (s+1)·γ)          γ = 0x9E3779B97F4A7C15, SALT = 0x6C6470742D6F6C68
    H_s(v)   = ⌊ mix(seed_s + (v+1)·γ) · g / 2^64 ⌋                       (all mod 2^64)

i.e. H_s(v) is the (v+1)-th output of a SplitMix64 stream seeded with seed_s, mapped to [g] by
Lemire's multiply-high reduction (computed exactly in 32-bit halves). A uniform 64-bit word maps
to each bucket with probability within g/2^64 of 1/g, so there is no modulo bias.

Sketch. T[s, y] = number of reports (s, y), plus n_s = reports of cohort s: m×g additive cells.

Decoder. Hash collisions are frozen by the fixed seeds, so the naive support Σ_s T[s, H_s(v)]
is biased by Σ_{v'≠v} c(v')(φ_vv' − 1/g)/(p'−1/g), which never averages out (docs/math.md §5).
With Z_s = (T_s − n_s q')/(p'−q') and A_s the g×d 0/1 matrix A_s[y, v] = 1[H_s(v) = y],

    E[Z_s | n_s] = (n_s/n) A_s c                       (cohorts are independent of values)

and the weighted least-squares solution (weights n_s per cohort after rescaling Z_s/n_s, the
inverse of the cells' variance when no item dominates) is

    ĉ = Φ⁻¹ Σ_s A_sᵀ Z_s,       Φ = Σ_s (n_s/n) A_sᵀ A_s,   Φ[v, v'] = φ_vv'

i.e. the naive support vector de-convolved by the collision matrix. B = Φ⁻¹Xᵀ satisfies
B·E[Z] = c exactly, so ĉ is unbiased whatever the collisions, as long as Φ has full rank.

Variance. Up to O(1/n) terms, Cov(ĉ) = B Σ_Z Bᵀ − n(D_f − ffᵀ). The first term is the sandwich
with multinomial cells, Σ_Zs = n_s(D_π − ππᵀ)/(p'−q')² with π_s = E[T_s]/n_s: it treats each
cohort as an i.i.d. sample of the population. The second removes the variance of that sampling,
because the target is the realised counts c (splitting the clients into cohorts only permutes
them; conditional on n_s the split is hypergeometric). On the diagonal:

    Var[ĉ(v)] = [B Σ_Z Bᵀ]_vv − c(v)(1 − c(v)/n)

``variance(n, true_counts)`` evaluates it at the true counts with equal cohorts n_s = n/m; the
estimate plugs in the observed n_s and the model's fitted cells π̂_s = q' + (p'−q') A_s ĉ/n (linear
in ĉ, hence unbiased, and pooled over all cohorts, so far less noisy than the raw T_s).

Sizing. With N = m(g−1) degrees of freedom, Φ behaves like a Wishart matrix and the variance
of a light item is inflated over plain OLH by about N/(N−d−1) (Marchenko–Pastur). The default
m = max(8, ⌈11(d+1)/(g−1)⌉) keeps it at ≲ 1.1 where the dense decoder's design fits
(m·min(g, d) <= MAX_DESIGN_ROWS), else m = max(8, ⌈4(d+1)/(g−1)⌉) keeps it at ≲ 4/3 (measured
figures in docs/protocols-olh.md). Full rank needs m(g−1)+1 >= d; the dense decoder is
O(m·g·d²) and limits this ("random") family to d <= MAX_DOMAIN.

Linear family (``hash_family = "linear"``, the default above MAX_DOMAIN). With g prime and
t = ⌈log_g d⌉, cohort s hashes by H_s(v) = ⟨a_s, v⟩ mod g, a_s the s-th projective point of
F_g^t (client_sdk.protocols.projective), so m = (g^t−1)/(g−1) is fixed by (d, g) and the
sketch has about g^t cells. Then Φ is a convolution over the group Z_g^t whose eigenvalues are
g^(t−1)·(n_s/n) (one per cohort, each for the g−1 characters on its line) and g^(t−1) for the
trivial one, and the same weighted least squares solves in closed form (docs/protocols-olh.md):

    ĉ(v) = g^(1−t) Σ_s (n/n_s) Z_s[H_s(v)] − n(m−1)/g^t

for all v by one DFT over Z_g^t; unbiased when every cohort has reports (no design inflation:
the light-item variance is plain OLH's times (n/m)·mean(1/n_s) ≈ 1 + m/n). Its exact variance
is the same sandwich, [B Σ_Z Bᵀ]_vv = g^(2−2t) n² Σ_s π_s,H_s(v)(1−π_s,H_s(v))/(n_s(p'−q')²),
with the fitted cells π from the line masses of ĉ (another DFT).

This module is OLH's device half (params, the hash of one value, ε, the encoder block, one report
in plain Python, the scalar variance and the design's rank check); its server half — the
vectorised hash, simulate, validate, accumulate, the decoders and the exact tables — is
sketches.olh.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..hashing import derive_cohort
from ..randomness import OS_WORDS, SCALE, WordSource
from . import projective as proj
from ._epsilon import log_up
from .blocks import BlockEncoder, BlockProtocol, BlockReader, check_keep
from .device import Context, DeviceHalf, check_domain_and_epsilon, numpy_types, pure_variance_one
from .grr import GRROnRange

#: Largest supported domain: the dense least-squares decoder costs O(m·g·d²) time and memory.
MAX_DOMAIN = 1024
#: Largest sketch (m·g cells); beyond it GRR (d < 3e^ε+2) is the better protocol anyway.
MAX_CELLS = 1 << 20
#: Largest least-squares design: at most m·min(g, d) occupied cells (rows of X, d columns each).
MAX_DESIGN_ROWS = 9 * MAX_DOMAIN
#: Fewest cohorts the default sizing uses.
MIN_COHORTS = 8
#: Default sizing: N = m(g−1) >= DOF_FACTOR·(d+1) degrees of freedom, which bounds the light-item
#: variance over plain OLH, N/(N−d−1), by TARGET_INFLATION = 4/3 (see above); TIGHT_DOF_FACTOR
#: (inflation 1.1) wherever that design fits the decoder (MAX_DESIGN_ROWS).
DOF_FACTOR = 4
TARGET_INFLATION = DOF_FACTOR / (DOF_FACTOR - 1)
TIGHT_DOF_FACTOR = 11
TIGHT_INFLATION = TIGHT_DOF_FACTOR / (TIGHT_DOF_FACTOR - 1)
#: Hash families: the SplitMix64 one (dense decoder, d <= MAX_DOMAIN) and the linear one.
FAMILIES = ("random", "linear")
#: Largest linear-family sketch (m·g cells, 32 MiB of int64).
MAX_LINEAR_CELLS = 1 << 22
#: Defaults with d up to this are rank-checked at construction (< 1 ms); larger ones on first decode,
#: where N = m(g−1) >= 4(d+1) and m >= 8 make a rank-deficient random design astronomically unlikely.
EAGER_CHECK_MAX_DOMAIN = 64

#: The primes of the device's exact rank check (``OLH.check_design``): a design of full rank modulo
#: a prime has full rank over the rationals. Below 2^20, so that the d <= MAX_DOMAIN row operations
#: of one elimination add less than 2^50 to a 64-bit lane (``_full_rank_mod_prime``).
RANK_PRIMES = (1048573, 1048571)
#: Bits per entry of a packed row in that elimination.
LANE = 64

#: The hash's constants (module docstring): part of the wire contract, with sketches.olh's arrays.
MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
SALT = 0x6C6470742D6F6C68  # b"ldpt-olh"


# --- the hash family H_s (module docstring) -------------------------------------------------------
def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def hash_one(s: int, v: int, g: int) -> int:
    """H_s(v) for one (cohort, value) in Python integers (the single-report fast path)."""
    seed = _mix_int((SALT + (s + 1) * GAMMA) & MASK64)
    return (_mix_int((seed + (v + 1) * GAMMA) & MASK64) * g) >> 64


# --- parameters -------------------------------------------------------------------------------------
def default_hash_range(epsilon: float) -> int:
    """g = round(e^ε) + 1, the OLH optimum (docs/math.md §5), at least 2."""
    return max(2, round(math.exp(epsilon)) + 1)


def default_cohorts(d: int, g: int) -> int:
    """Smallest m with N/(N−d−1) <= TARGET_INFLATION for N = m(g−1), at least MIN_COHORTS
    (LOLOHA's default; OLH uses ``tight_cohorts`` where it fits)."""
    return max(MIN_COHORTS, -(-DOF_FACTOR * (d + 1) // (g - 1)))  # ⌈4(d+1)/(g−1)⌉ in integers


def tight_cohorts(d: int, g: int) -> int | None:
    """Smallest m with N/(N−d−1) <= TIGHT_INFLATION for N = m(g−1), at least MIN_COHORTS, or
    None when that design does not fit the dense decoder (m·min(g, d) <= MAX_DESIGN_ROWS,
    m·g <= MAX_CELLS)."""
    m = max(MIN_COHORTS, -(-TIGHT_DOF_FACTOR * (d + 1) // (g - 1)))  # ⌈11(d+1)/(g−1)⌉
    return m if m * min(g, d) <= MAX_DESIGN_ROWS and m * g <= MAX_CELLS else None


def _too_large(d: int) -> ValueError:
    return ValueError(f"olh's random hash family decodes by dense least squares and supports at most "
                      f"{MAX_DOMAIN} domain values (got {d}); use hash_family = \"linear\" (the default "
                      "there) or hr")


@dataclasses.dataclass(frozen=True)
class OLHParams(GRROnRange):
    d: int           # domain size
    epsilon: float   # target per-report budget
    m: int           # cohorts (fixed seed set)
    g: int           # hash range
    family: str = "random"  # hash family (module docstring)

    def __post_init__(self) -> None:
        for field in ("d", "m", "g"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, *numpy_types("integer"))):
                raise ValueError(f"{field} must be an integer, got {value!r}")
        check_domain_and_epsilon(self.d, self.epsilon, "OLH")
        if self.family not in FAMILIES:
            raise ValueError(f"hash_family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.family == "linear":
            self._check_linear()
            return
        if self.d > MAX_DOMAIN:
            raise _too_large(self.d)
        if self.g < 2:
            raise ValueError(f"hash_range must be at least 2, got {self.g}")
        if self.m < 1:
            raise ValueError(f"cohorts must be at least 1, got {self.m}")
        if self.m * self.g > MAX_CELLS:
            raise ValueError(f"cohorts × hash_range = {self.m * self.g} cells exceeds {MAX_CELLS}; "
                             "lower them (at this epsilon grr is likely better)")
        if self.m * min(self.g, self.d) > MAX_DESIGN_ROWS:
            raise ValueError(f"cohorts × min(hash_range, d) = {self.m * min(self.g, self.d)} exceeds the "
                             f"decoder's limit of {MAX_DESIGN_ROWS} design rows; lower cohorts")
        if self.keep_threshold * self.g <= SCALE:  # realised p' <= q' (GRR on [g], see grr.py)
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at hash_range = {self.g}")
        if self.m * (self.g - 1) + 1 < self.d:
            raise ValueError(f"cohorts × (hash_range − 1) + 1 = {self.m * (self.g - 1) + 1} is below the "
                             f"domain size {self.d}, so the least-squares design cannot have full rank; "
                             f"use cohorts >= {default_cohorts(self.d, self.g)} (the default)")

    def _check_linear(self) -> None:
        if not proj.is_prime(self.g):
            raise ValueError(f"the linear hash family needs a prime hash_range, got {self.g}")
        m = proj.directions(self.g, self.t)
        if self.m != m:
            raise ValueError(f"the linear family with hash_range {self.g} has exactly {m} cohorts for "
                             f"d = {self.d}, got {self.m}; leave cohorts unset")
        if self.m * self.g > MAX_LINEAR_CELLS:
            raise ValueError(f"hash_range {self.g} needs {self.m * self.g} cells for d = {self.d}, above "
                             f"{MAX_LINEAR_CELLS}; leave hash_range unset")
        if self.keep_threshold * self.g <= SCALE:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at hash_range = {self.g}")

    @property
    def t(self) -> int:
        """Linear family: digits per value, ⌈log_g d⌉."""
        return proj.dimension(self.d, self.g)

    @property
    def approx_inflation(self) -> float:
        """Light-item variance over plain OLH from the design: Marchenko–Pastur N/(N−d−1),
        N = m(g−1), for the random family (design average); 1 for the linear family, whose
        only excess is the cohort-size term ≈ 1 + m/n (``OLH.variance``)."""
        if self.family == "linear":
            return 1.0
        n_dof = self.m * (self.g - 1)
        return n_dof / (n_dof - self.d - 1) if n_dof > self.d + 1 else math.inf


class OLH(DeviceHalf):
    """OLH's device half (its server half: sketches.olh)."""

    name = "olh"
    uses_cohorts = True

    def __init__(self, params: OLHParams) -> None:
        super().__init__(params)
        self.linear = getattr(params, "family", "random") == "linear"  # LOLOHA: random only
        self.p, self.q = params.p, params.q
        self.keep_threshold = params.keep_threshold
        #: set by ``check_design`` when it leaves the decision to the server half (numpy)
        self.design_unverified = False

    @property
    def cohorts(self) -> int:
        return self.params.m

    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self.p) / Fraction(self.q))

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.params.m)) + math.ceil(math.log2(self.params.g)))

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        out = {"d": par.d, "m": par.m, "g": par.g, "family": par.family, "keep_threshold": par.keep_threshold}
        if par.family == "linear":
            out["t"] = par.t
        return out

    def cohort_hash(self, s: int, x: int) -> int:
        """H_s(x) for one cohort and value, in either family (the block encoder's)."""
        return self.block_encoder.cohort_hash(s, x)

    def randomise(self, index: int, cohort: int | None = None,
                  source: WordSource | None = None) -> list[int]:
        """One report [s, y] in cohort ``cohort`` (uniform from ``source`` when None): the block
        encoder's draw in a given cohort, not the device's cohort of the day."""
        x = self.check_index(index)
        m = self.params.m
        src = source or OS_WORDS
        s = src.below(m) if cohort is None else int(cohort)
        if not 0 <= s < m:
            raise ValueError(f"cohorts must be integers in [0, {m}), one per value")
        return self.block_encoder.report_in_cohort(x, s, src)

    def variance(self, n: int, true_count: float) -> float:
        """Var[ĉ(v)] with equal cohorts n_s = n/m for an item of count c whose population is otherwise
        spread out: the design-averaged N/(N−d−1) × the plain-OLH formula (docs/math.md §5); the
        linear family's pure figure times E[n/(m·n_s)] ≈ 1 + m/n. The exact sandwich for a whole
        population is the server half's (sketches.olh)."""
        c = float(true_count)
        p, q_star = self.p, 1.0 / self.params.g
        if self.linear:
            # pure with q* = (λp' + (m−λ)q')/m (docs/protocols.md), times E[n/(m·n_s)] ≈ 1 + m/n
            m, lam = self.params.m, proj.hyperplane(self.params.g, self.params.t)
            qs = (lam * p + (m - lam) * self.q) / m
            return (1 + m / max(n, 1)) * pure_variance_one(n, c, p, qs)
        delta = p - q_star  # plain OLH: p* = p', q* = 1/g (docs/math.md §2, §5)
        pure = n * q_star * (1 - q_star) / delta**2 + c * (1 - p - q_star) / delta
        return self.params.approx_inflation * pure

    # --- design ------------------------------------------------------------------------------------
    def check_design(self) -> None:
        """Raise ValueError unless Φ (equal cohorts) has full rank, i.e. every c(v) is identifiable
        (the linear family always has full rank): the GF(2) certificate, else, up to
        EAGER_CHECK_MAX_DOMAIN values, the exact rank modulo RANK_PRIMES, both in plain Python.
        A larger design the certificate leaves open is marked ``design_unverified`` and decided by
        the server half when it is built (numpy: milliseconds, where the plain-Python elimination
        took 1.7 s at d = 500 and 15 s at d = 1,024 — on every registry load). The device encodes
        the same under any design: the rank decides only whether the server can decode."""
        if self.linear or self.full_rank_mod2():
            return
        if self.params.d > EAGER_CHECK_MAX_DOMAIN:
            self.design_unverified = True
        elif not self._full_rank_mod_prime():
            raise self.rank_deficient()

    def rank_deficient(self) -> ValueError:
        """The error of a design whose values cannot all be told apart."""
        m = self.params.m
        return ValueError(f"the olh design cohorts={m}, hash_range={self.params.g} for d={self.params.d} "
                          "is rank deficient (some values collide in every cohort and cannot be told "
                          f"apart); raise cohorts (default {default_cohorts(self.params.d, self.params.g)})")

    def _design_rows(self, s: int) -> list[int]:
        """Cohort s's rows of the design X as Python-int bit rows (bit v of row y: H_s(v) = y)."""
        d, g = self.params.d, self.params.g
        rows = [0] * g
        for v in range(d):
            rows[hash_one(s, v, g)] |= 1 << v
        return rows

    def full_rank_mod2(self) -> bool:
        """True when the design X (rows: cells (s, y); columns: values) has rank d over GF(2).

        A certificate of full rank over the reals (a d×d minor that is odd is non-zero), found
        in plain Python on Python-int bit rows, so building the protocol on a device needs no
        numpy; False only means "not certified" (then ``_full_rank_mod_prime`` decides).
        """
        d = self.params.d
        basis: dict[int, int] = {}  # leading bit -> row
        for s in range(self.params.m):
            for row in self._design_rows(s):
                while row:
                    lead = row.bit_length() - 1
                    pivot = basis.get(lead)
                    if pivot is None:
                        basis[lead] = row
                        if len(basis) == d:
                            return True
                        break
                    row ^= pivot
        return False

    def _full_rank_mod_prime(self) -> bool:
        """True when X has rank d modulo one of RANK_PRIMES: then it has full rank over the
        rationals; False means a d×d minor vanishes modulo both, i.e. (but for a minor that is a
        multiple of both primes) the design is rank deficient."""
        return any(self._rank_is_full_mod(prime) for prime in RANK_PRIMES)

    def _rank_is_full_mod(self, prime: int) -> bool:
        """Gaussian elimination of X modulo ``prime`` on rows packed in Python integers (entry v in
        bits [LANE·v, LANE·(v+1))): a row operation is one big-integer multiply-add, and entries
        are reduced only where the elimination reads them."""
        d, g = self.params.d, self.params.g
        mask = (1 << LANE) - 1
        pivots: dict[int, int] = {}   # lead column -> packed row, 1 at the lead, 0 before it
        for s in range(self.params.m):
            rows = [0] * g
            for v in range(d):
                rows[hash_one(s, v, g)] |= 1 << (LANE * v)
            for row in rows:
                while row:
                    col = ((row & -row).bit_length() - 1) // LANE
                    entry = (row >> (LANE * col)) & mask
                    a = entry % prime
                    if not a:                       # a multiple of the prime: zero it exactly
                        row -= entry << (LANE * col)
                        continue
                    pivot = pivots.get(col)
                    if pivot is None:
                        inv = pow(a, prime - 2, prime)
                        lanes = [0] * col + [((row >> (LANE * j)) & mask) * inv % prime for j in range(col, d)]
                        pivots[col] = int.from_bytes(struct.pack(f"<{d}Q", *lanes), "little")
                        if len(pivots) == d:
                            return True
                        break
                    row += (prime - a) * pivot      # entry col becomes a multiple of the prime
        return False


OPTION_KEYS: frozenset[str] = frozenset({"cohorts", "hash_range", "hash_family"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> OLH:
    """Build from registry fields: optional ``hash_family`` ("random" up to MAX_DOMAIN values,
    "linear" above), ``cohorts`` (m; random family only) and ``hash_range`` (g).

    The default family is random where its inflation-1.1 design fits the dense decoder, else linear.
    Random family: g = max(2, round(e^ε)+1), m = ``tight_cohorts`` (or ``default_cohorts`` with an
    explicit hash_range whose tight design does not fit); explicit options, and
    defaults for small domains, are rank-checked here (ValueError), the rest on first decode.
    Linear family: g the prime of ``hr.default_params`` (same light-item variance), m fixed by it.
    """
    if domain_size is None:
        raise ValueError("olh needs a fixed domain (a boolean or categorical metric)")
    if epsilon is None:
        raise ValueError("olh needs epsilon")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown olh option(s) {sorted(unknown)}; olh takes cohorts, hash_range, hash_family")
    for key in ("cohorts", "hash_range"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{key} must be an integer, got {value!r}")
    family = options.get("hash_family")
    if family is None:
        family = "random" if _tight_random_fits(domain_size, options.get("hash_range"), options.get("cohorts"),
                                           float(epsilon)) \
            else "linear"
    if family not in FAMILIES:
        raise ValueError(f"hash_family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if family == "linear":
        return _linear_from_options(domain_size, float(epsilon), options)
    if domain_size > MAX_DOMAIN:
        raise _too_large(domain_size)
    g = options["hash_range"] if options.get("hash_range") is not None else default_hash_range(epsilon)
    if g < 2:
        raise ValueError(f"hash_range must be at least 2, got {g}")
    m = options.get("cohorts")
    if m is None:
        m = tight_cohorts(domain_size, g) or default_cohorts(domain_size, g)
    proto = OLH(OLHParams(d=domain_size, epsilon=float(epsilon), m=m, g=g))
    if any(v is not None for v in options.values()) or domain_size <= EAGER_CHECK_MAX_DOMAIN:
        proto.check_design()
    return proto


def _tight_random_fits(d: int, g: int | None, cohorts: int | None, epsilon: float) -> bool:
    """Whether the random family's inflation-1.1 design fits the dense decoder (explicit cohorts or
    hash_range keep the random family whenever d <= MAX_DOMAIN)."""
    if d > MAX_DOMAIN:
        return False
    if cohorts is not None:
        return True
    g = default_hash_range(epsilon) if g is None else g
    return g < 2 or tight_cohorts(d, g) is not None


def _linear_from_options(d: int, epsilon: float, options: dict[str, Any]) -> OLH:
    from .hr import default_params

    g = options.get("hash_range")
    if g is None:
        g = default_params(d, epsilon, MAX_LINEAR_CELLS).g
    elif not proj.is_prime(g):
        raise ValueError(f"the linear hash family needs a prime hash_range, got {g}")
    m = proj.directions(g, proj.dimension(d, g))
    if options.get("cohorts") is not None and options["cohorts"] != m:
        raise ValueError(f"the linear family with hash_range {g} has exactly {m} cohorts for d = {d}; "
                         "leave cohorts unset")
    return OLH(OLHParams(d=d, epsilon=epsilon, m=m, g=g, family="linear"))


class OLHBlock(BlockEncoder):
    """OLH's one-report encoder from the block: the device's cohort s of the UTC day (HMAC of the
    secret, metric and day), then GRR on [g] of H_s(x); the report is [s, y]."""

    __slots__ = ("m", "g", "t", "linear", "keep", "cohorts")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.m: int = block["m"]
        self.g: int = block["g"]
        self.linear = block["family"] == "linear"
        self.t: int = block.get("t", 0)
        self.keep: int = block["keep_threshold"]
        self.cohorts: dict[tuple[bytes, str, int], int] = {}   # in memory only, bounded

    def cohort_of_day(self, secret: bytes, metric: str, day: int) -> int:
        """The cohort for ``metric`` on UTC day ``day`` (re-derived daily: no stable identifier)."""
        key = (secret, metric, day)
        cohort = self.cohorts.get(key)
        if cohort is None:
            if len(self.cohorts) > 256:
                self.cohorts.clear()
            cohort = self.cohorts[key] = derive_cohort(secret, f"olh\x00{metric}\x00{day}", self.m)
        return cohort

    def cohort_hash(self, s: int, x: int) -> int:
        """H_s(x) in either family: ⟨a_s, x⟩ mod g (linear) or the keyed hash of (s, x) (random)."""
        g = self.g
        return proj.inner_one(proj.direction_code_one(s, g, self.t), x, g) if self.linear else hash_one(s, x, g)

    def report_in_cohort(self, index: int, s: int, src: WordSource) -> list[int]:
        """GRR on [g] of H_s(x) in cohort s: keep iff W32 < keep, else a uniform other residue."""
        g = self.g   # H_s(x) as ``cohort_hash``, inline: one call less per report
        h = proj.inner_one(proj.direction_code_one(s, g, self.t), index, g) if self.linear else hash_one(s, index, g)
        if src.word() < self.keep:
            return [s, h]
        other = src.below(g - 1)
        return [s, other + (other >= h)]

    def encode_one(self, index: int, key: str, ctx: Context) -> list[int]:
        """One report of the looked-up index in the context's cohort of the day."""
        cohort = self.cohorts.get((ctx.secret, ctx.metric, ctx.day))   # cached: no call on the hot path
        if cohort is None:
            cohort = self.cohort_of_day(ctx.secret, ctx.metric, ctx.day)
        return self.report_in_cohort(index, cohort, ctx.words)


def check_block(reader: BlockReader) -> None:
    """(2) ``t`` with the linear family only, (3) the keep threshold on [g], (4) the linear family's field."""
    linear = reader.block.get("family") == "linear"
    if linear and "t" not in reader.block:
        reader.fail("t", "the linear family needs t (base-g digits of a value)")
    if not linear and "t" in reader.block:
        reader.fail("t", "t belongs to the linear family only")
    check_keep(reader.block.get("g"), reader)
    if linear:
        proj.check_field(reader)


BLOCK = BlockProtocol(OLHBlock, check_block, members=("d", "m", "g", "family", "keep_threshold"))
