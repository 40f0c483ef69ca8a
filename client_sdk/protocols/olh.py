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
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any

from .._lazy import np, numpy_types
from ..errors import EstimationError, InvalidPayload
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    bernoulli,
)
from . import projective as proj
from ._epsilon import log_up
from .base import (
    CountEstimate,
    Payloads,
    Protocol,
    Sketch,
    add_cells,
    check_domain_and_epsilon,
    first_bad,
    int_rows_from_wire,
    pure_variance,
    require_1d,
)
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

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SALT = 0x6C6470742D6F6C68  # b"ldpt-olh"


# --- the hash family H_s (module docstring) -------------------------------------------------------
def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wraps mod 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def _reduce_array(h: np.ndarray, g: int) -> np.ndarray:
    """⌊h·g/2^64⌋ (Lemire) from 32-bit halves: hi·g + ⌊lo·g/2^32⌋ < 2^64 for g < 2^32."""
    g64 = np.uint64(g)
    hi, lo = h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)
    return ((hi * g64 + ((lo * g64) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


def cohort_seeds(m: int) -> np.ndarray:
    """seed_s = mix(SALT + (s+1)·γ) for s ∈ [m], as uint64."""
    s = np.arange(1, m + 1, dtype=np.uint64)
    return _mix_array(np.uint64(_SALT) + s * np.uint64(_GAMMA))


def hash_values(seeds: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """H_s(v) = ⌊mix(seed_s + (v+1)·γ)·g/2^64⌋, broadcasting seeds (uint64) against values."""
    v = np.asarray(values).astype(np.uint64) + np.uint64(1)
    return _reduce_array(_mix_array(np.asarray(seeds, dtype=np.uint64) + v * np.uint64(_GAMMA)), g)


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def hash_one(s: int, v: int, g: int) -> int:
    """H_s(v) for one (cohort, value) in Python integers (the single-report fast path)."""
    seed = _mix_int((_SALT + (s + 1) * _GAMMA) & _MASK64)
    return (_mix_int((seed + (v + 1) * _GAMMA) & _MASK64) * g) >> 64


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


@dataclasses.dataclass(frozen=True)
class _Decoder:
    """Per cohort-weighting decoding matrices: B = Φ⁻¹Xᵀ (d × occupied cells) and Φ."""

    B: np.ndarray
    phi: np.ndarray


class OLH(Protocol):
    name = "olh"
    uses_cohorts = True
    _DECODER_CACHE_SIZE = 2  # B is d × (occupied cells) floats: up to ~67 MB at d = MAX_DOMAIN

    def __init__(self, params: OLHParams) -> None:
        super().__init__(params)
        self.linear = getattr(params, "family", "random") == "linear"  # LOLOHA: random only
        self.p, self.q = params.p, params.q
        self._threshold = params.keep_threshold
        self._decoders: dict[bytes, _Decoder] = {}

    @property
    def cohorts(self) -> int:
        return self.params.m

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.g,)

    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self.p) / Fraction(self.q))

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.params.m)) + math.ceil(math.log2(self.params.g)))

    # --- hashing ----------------------------------------------------------------------------------
    @functools.cached_property
    def seeds(self) -> np.ndarray:
        """seed_s for every cohort (uint64, shape (m,))."""
        return cohort_seeds(self.params.m)

    @functools.cached_property
    def hash_table(self) -> np.ndarray:
        """H_s(v) for all cohorts and values: int64, shape (m, d). Built on first use."""
        return hash_values(self.seeds[:, None], np.arange(self.params.d), self.params.g)

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x=index, cohort s), shape (m, g): q' everywhere except p' at y = H_s(index).

        The cohort does not depend on x, so the audit bounds the ratio within each row.
        """
        m, g = self.params.m, self.params.g
        probs = np.full((m, g), self.q)
        probs[np.arange(m), self._hash(np.arange(m), np.full(m, index))] = self.p
        return probs

    def _hash(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """H_s(x) for arrays of cohorts and values, in either family."""
        g = self.params.g
        if self.linear:
            t = self.params.t
            return proj.inner(proj.direction_codes(s, g, t), x, g, t)
        return hash_values(self.seeds[s], x, g)

    def _hash_one(self, s: int, x: int) -> int:
        g = self.params.g
        if self.linear:
            return proj.inner_one(proj.direction_code_one(s, g, self.params.t), x, g)
        return hash_one(s, x, g)

    # --- the four verbs -----------------------------------------------------------------------------
    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise: y = H_s(x) w.p. p', else a uniform other bucket; cohorts drawn if not given."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, m, g = x.shape[0], self.params.m, self.params.g
        if cohorts is None:
            s = source.below(m, n)
        else:
            s = self._check_cohorts(cohorts, x.shape)
        if n == 1:  # device path: one report, Python-integer hash (no table, no array overhead)
            h = np.array([self._hash_one(int(s[0]), int(x[0]))], dtype=np.int64)
        else:
            h = self._hash(s, x)
        keep = bernoulli(source, self._threshold, n)
        other = source.below(g - 1, n)
        other += other >= h  # uniform over the g−1 buckets != H_s(x)
        return {"cohort": s, "y": np.where(keep, h, other)}

    def encode_one(self, index: int, cohort: int | None = None,
                   source: WordSource | None = None) -> list[int]:
        """OLH for one value in Python integers: GRR on [g] of H_s(x); wire form [cohort, y]."""
        x = self._check_index(index)
        m, g = self.params.m, self.params.g
        src = source or OS_WORDS
        s = src.below(m) if cohort is None else int(cohort)
        if not 0 <= s < m:
            raise ValueError(f"cohorts must be integers in [0, {m}), one per value")
        h = self._hash_one(s, x)
        if src.word() < self._threshold:
            return [s, h]
        other = src.below(g - 1)
        return [s, other + (other >= h)]

    def _check_cohorts(self, cohorts: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Device-side cohort array (from the client secret): integers in [0, m), one per value."""
        s = np.asarray(cohorts)
        if s.shape != shape:
            s = np.broadcast_to(s, shape)
        m = self.params.m
        if s.size and s.dtype.kind not in "iu":
            raise ValueError(f"cohorts must be integers in [0, {m}), got dtype {s.dtype}")
        if s.size == 1:  # the device path: avoid two array reductions
            bad = not 0 <= int(s.flat[0]) < m
        else:
            bad = bool(s.size) and (s.min() < 0 or s.max() >= m)
        if bad:
            raise ValueError(f"cohorts must be integers in [0, {m}), one per value")
        return s.astype(np.int64, copy=False)

    def validate(self, payloads: Payloads) -> None:
        s = require_1d(payloads, "cohort")
        y = require_1d(payloads, "y", s.shape[0] if s.ndim else None)
        for arr, field, high in ((s, "cohort", self.params.m), (y, "y", self.params.g)):
            if arr.ndim != 1:
                raise InvalidPayload(f"expected a 1-d array, got shape {arr.shape}", field=field)
            if arr.size and arr.dtype.kind not in "iu":
                raise InvalidPayload(f"OLH {field} must be an integer, got dtype {arr.dtype}", field=field)
            bad = (arr < 0) | (arr >= high)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"{field} {int(arr[i])} outside [0, {high})", index=i, field=field)

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(payloads["cohort"], dtype=np.int64)
        return s * self.params.g + np.asarray(payloads["y"], dtype=np.int64), s

    def small_count_model(self, sketch: Sketch) -> tuple[np.ndarray, float, float] | None:
        """(support counts, p*, q*) when this OLH is a pure protocol, else None.

        The linear family with one cohort (t = 1: g >= d, H(v) = v) is GRR on [g]: support T[0, v],
        p* = p', q* = q', and its estimate is the pure one, so the estimators may use the exact
        small-count interval (docs/math.md §8) where support counts are tiny (high ε)."""
        if not (self.linear and self.params.m == 1):
            return None
        return np.asarray(sketch.counts, dtype=np.float64)[0, :self.params.d], self.p, self.q

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Weighted least squares ĉ = Φ⁻¹ Σ_s A_sᵀ Z_s with sandwich per-item variances."""
        m, g, d = self.params.m, self.params.g, self.params.d
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        if np.shape(sketch.counts) != (m, g) or n_s.shape != (m,):
            raise EstimationError(f"OLH sketch must have counts of shape {(m, g)} and reports of shape "
                                  f"{(m,)}, got {np.shape(sketch.counts)} and {n_s.shape}")
        n = sketch.total_reports
        if n == 0:
            return CountEstimate(np.zeros(d), np.zeros(d), 0, {"method": "wls"})
        if self.linear:
            return self._estimate_linear(sketch.counts, n_s, sketch)
        T = np.asarray(sketch.counts, dtype=np.float64)
        dec = self._decoder(n_s)
        rows = self._design[0]
        Z = (T - n_s[:, None] * self.q) / (self.p - self.q)  # E[Z_s] = (n_s/n) A_s c
        counts = dec.B @ Z.ravel()[rows]
        variances = self._model_variance(dec.B, counts, n_s)
        # The plain OLH support estimator (S_T(v) − n/g)/(p'−1/g), S_T(v) = Σ_s T[s, H_s(v)], has mean
        # (g(Φc)_v − n)/(g−1) on this sketch: report its frozen-collision bias at c = ĉ (docs/math.md §5).
        naive_bias = (g * (dec.phi @ counts) - n) / (g - 1) - counts
        extra = {"method": "wls", "cohort_reports": sketch.reports.copy(), "naive_collision_bias": naive_bias}
        return CountEstimate(counts, variances, n, extra)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Theoretical Var[ĉ(v)] with equal cohorts n_s = n/m.

        ``true_counts`` of shape (d,): the exact sandwich for this design and population (O(m·g·d²)
        on first use, cached). A scalar c: the design-averaged figure for an item of count c whose
        population is otherwise spread out, N/(N−d−1) × the plain-OLH formula (docs/math.md §5).
        """
        c = float(true_counts) if isinstance(true_counts, (int, float)) else np.asarray(true_counts, dtype=np.float64)
        p, q_star, d = self.p, 1.0 / self.params.g, self.params.d
        if isinstance(c, float) or c.ndim == 0:
            c = float(c)  # a scalar count: plain floats (``auto`` scores protocols on devices too)
        if isinstance(c, float) and self.linear:
            # pure with q* = (λp' + (m−λ)q')/m (docs/protocols.md), times E[n/(m·n_s)] ≈ 1 + m/n
            m, lam = self.params.m, proj.hyperplane(self.params.g, self.params.t)
            qs = (lam * p + (m - lam) * self.q) / m
            return (1 + m / max(n, 1)) * pure_variance(n, c, p, qs)
        if isinstance(c, float):
            delta = p - q_star  # plain OLH: p* = p', q* = 1/g (docs/math.md §2, §5)
            pure = n * q_star * (1 - q_star) / delta**2 + c * (1 - p - q_star) / delta
            return self.params.approx_inflation * pure
        if c.shape != (d,):
            raise ValueError(f"true_counts must be a scalar or have shape ({d},), got {c.shape}")
        if n <= 0:
            return np.zeros(d)
        m = self.params.m
        if self.linear:
            return self._linear_variance(c, np.full(m, n / m))
        return self._model_variance(self._equal_decoder.B, c, np.full(m, n / m))

    # --- wire ---------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.stack([np.asarray(payloads["cohort"], dtype=np.int64),
                         np.asarray(payloads["y"], dtype=np.int64)], axis=1).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        arr = int_rows_from_wire(objects, 2)  # fast path; the loop below names what is wrong
        if arr is not None:
            return {"cohort": arr[:, 0].copy(), "y": arr[:, 1].copy()}
        for i, obj in enumerate(objects):
            if type(obj) not in (list, tuple) or len(obj) != 2:
                raise InvalidPayload("expected [cohort, y], a list of two integers", index=i, field="payload")
            if type(obj[0]) is not int or type(obj[1]) is not int:
                raise InvalidPayload(f"expected [cohort, y] integers, got [{type(obj[0]).__name__}, "
                                     f"{type(obj[1]).__name__}]", index=i, field="payload")
        try:
            arr = np.asarray(objects, dtype=np.int64).reshape(-1, 2)
        except OverflowError:
            i = next(i for i, obj in enumerate(objects) if not all(-2**63 <= v < 2**63 for v in obj))
            raise InvalidPayload("integer out of range", index=i, field="payload") from None
        return {"cohort": arr[:, 0].copy(), "y": arr[:, 1].copy()}

    # --- linear family (module docstring) ----------------------------------------------------------
    def _estimate_linear(self, T: np.ndarray, n_s: np.ndarray, sketch: Sketch) -> CountEstimate:
        """ĉ(v) = g^(1−t) Σ_s (n/n_s) Z_s[H_s(v)] − n(m−1)/g^t by one DFT, with its sandwich variance.

        Empty cohorts (too few reports for m cohorts): a line s without reports says nothing of
        its bucket masses M_s, the g−1 characters on it are not identified, and no estimator is
        unbiased for every population. The estimate then takes the uniform mass n/g in their
        place, so its bias is b(v) = −g^(1−t) Σ_{s empty} (M_s(H_s(v)) − n/g), which 0 <= M_s <= n
        bounds to [−g^(1−t)·E·n(1−1/g), g^(1−t)·E·n/g] for E empty cohorts, whatever the
        population: ``extra["bias_bounds"]`` (estimators.frequency widens the intervals and the
        test of "c(v) = 0" by it), and the variance keeps the cohort-sampling term (conservative).
        """
        m, g, t, d = self.params.m, self.params.g, self.params.t, self.params.d
        present = n_s > 0
        empty = int(m - present.sum())
        n = float(n_s.sum())
        masses = T - n_s[:, None] * self.q    # Z_s·(n/n_s), in place: at d = 10^6 each copy is 16 MB
        masses /= self.p - self.q
        masses *= np.divide(n, n_s, out=np.zeros(m), where=present)[:, None]
        if empty:
            masses[~present] = n / g    # E[bucket mass] of a uniform population: the unidentified part
        counts = proj.line_sums(masses, g, t, d) * float(g) ** (1 - t) - n * (m - 1) / float(g) ** t
        extra = {"method": "wls-linear", "cohort_reports": sketch.reports.copy()}
        if empty:
            share = float(g) ** (1 - t) * empty * n
            extra.update(empty_cohorts=empty, bias_bounds=(-share * (1 - 1 / g), share / g))
        return CountEstimate(counts, self._linear_variance(counts, n_s, sampling=not empty), int(n), extra)

    def _linear_variance(self, c: np.ndarray, n_s: np.ndarray, sampling: bool = True) -> np.ndarray:
        """g^(2−2t) n² Σ_s π(1−π)/(n_s(p'−q')²) at π_s,H_s(v), minus c(1 − c/n) (module docstring),
        over the cohorts with reports; ``sampling=False`` keeps the cohort-sampling term (the
        variance of a population's estimate, larger: what empty cohorts use)."""
        g, t = self.params.g, self.params.t
        n = float(n_s.sum())
        pi = proj.line_masses(c, g, t)   # then q + (p − q)·M/n, clipped, and π(1 − π)/n_s, in place
        pi *= self.p - self.q
        pi /= n
        pi += self.q
        np.clip(pi, 0.0, 1.0, out=pi)
        cells = 1 - pi
        cells *= pi
        del pi
        cells *= np.divide(1.0, n_s, out=np.zeros(n_s.shape), where=n_s > 0)[:, None]
        first = proj.line_sums(cells, g, t, c.shape[0]) * (n * float(g) ** (1 - t) / (self.p - self.q)) ** 2
        if not sampling:
            return np.maximum(first, 0.0)
        c = np.clip(c, 0.0, n)
        return np.maximum(first - c * (1 - c / n), 0.0)

    # --- design ------------------------------------------------------------------------------------
    def check_design(self) -> None:
        """Raise ValueError unless Φ (equal cohorts) has full rank, i.e. every c(v) is identifiable
        (the linear family always has full rank)."""
        if not self.linear and not self._full_rank_mod2():
            self._equal_factor  # noqa: B018 - builds and checks

    def _full_rank_mod2(self) -> bool:
        """True when the design X (rows: cells (s, y); columns: values) has rank d over GF(2).

        A certificate of full rank over the reals (a d×d minor that is odd is non-zero), found
        in plain Python on Python-int bit rows, so building the protocol on a device needs no
        numpy; False only means "not certified" (then ``_equal_factor`` decides, with numpy).
        """
        d, g = self.params.d, self.params.g
        basis: dict[int, int] = {}  # leading bit -> row
        for s in range(self.params.m):
            rows = [0] * g
            for v in range(d):
                rows[hash_one(s, v, g)] |= 1 << v
            for row in rows:
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

    @functools.cached_property
    def _design(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Occupied cells: (rows, row_of, row_cohort, cohort_start).

        Only cells some value hashes to enter the model (an empty bucket's row of X is zero), so
        X has rows = sorted flat cell ids s·g + y that occur; row_of[s, v] is the row of (s, H_s(v)),
        row_cohort the cohort of each row, cohort_start the first row of each cohort (rows are
        grouped by cohort, and every cohort has at least one occupied cell).
        """
        m, g = self.params.m, self.params.g
        flat = np.arange(m)[:, None] * g + self.hash_table
        rows, row_of = np.unique(flat.ravel(), return_inverse=True)
        row_cohort = rows // g
        return rows, row_of.reshape(flat.shape), row_cohort, np.searchsorted(row_cohort, np.arange(m))

    def _onehot(self) -> np.ndarray:
        """X = stacked A_s over occupied cells, dense 0/1 (rebuilt on demand: large and cheap)."""
        rows, row_of, _, _ = self._design
        X = np.zeros((rows.shape[0], self.params.d))
        X[row_of.ravel(), np.tile(np.arange(self.params.d), self.params.m)] = 1.0
        return X

    def _factor(self, X: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Φ = Σ_s w_s A_sᵀA_s = Xᵀ diag(w) X and its lower Cholesky factor; LinAlgError if singular.

        numpy only, so that the rank check in ``from_options`` (also run by `auto` on devices)
        does not pull in scipy.
        """
        phi = (X * weights[self._design[2]][:, None]).T @ X
        lower = np.linalg.cholesky(phi)
        # Collinear columns can leave a pivot of rounding size instead of failing: demand a sane one.
        # (Healthy designs have pivots of order (1 − 1/g)(1 − √(d/N))², far above this.)
        if np.min(np.diag(lower)) ** 2 < 1e-9 * np.max(np.diag(phi)):
            raise np.linalg.LinAlgError("singular collision matrix")
        return phi, lower

    @staticmethod
    def _solve(lower: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """Φ⁻¹·rhs from the Cholesky factor (server side: scipy imported on first decode)."""
        from scipy import linalg

        return linalg.cho_solve((lower, True), rhs, check_finite=False)

    @functools.cached_property
    def _equal_factor(self) -> tuple[np.ndarray, np.ndarray]:
        """Φ̄ (equal cohorts, w_s = 1/m) and its factor; ValueError if the design is rank deficient."""
        m = self.params.m
        try:
            return self._factor(self._onehot(), np.full(m, 1.0 / m))
        except np.linalg.LinAlgError:
            raise ValueError(f"the olh design cohorts={m}, hash_range={self.params.g} for d={self.params.d} "
                             "is rank deficient (some values collide in every cohort and cannot be told "
                             f"apart); raise cohorts (default {default_cohorts(self.params.d, self.params.g)})"
                             ) from None

    @functools.cached_property
    def _equal_decoder(self) -> _Decoder:
        """Decoder at equal cohorts n_s = n/m: what ``variance`` evaluates (cached per params)."""
        phi, lower = self._equal_factor
        return _Decoder(self._solve(lower, self._onehot().T), phi)

    def _decoder(self, n_s: np.ndarray) -> _Decoder:
        """Decoder for cohort sizes n_s (cached: the same sketch is usually queried repeatedly)."""
        key = n_s.tobytes()
        dec = self._decoders.get(key)
        if dec is None:
            self.check_design()
            X = self._onehot()
            try:
                phi, lower = self._factor(X, n_s / n_s.sum())
            except np.linalg.LinAlgError:
                empty = int((n_s == 0).sum())
                raise EstimationError(f"too few reports to decode: {empty} of {self.params.m} cohorts are "
                                      "empty and the others do not identify every value; collect more "
                                      "reports") from None
            dec = _Decoder(self._solve(lower, X.T), phi)
            if len(self._decoders) >= self._DECODER_CACHE_SIZE:
                self._decoders.pop(next(iter(self._decoders)))
            self._decoders[key] = dec
        return dec

    def _model_variance(self, B: np.ndarray, c: np.ndarray, n_s: np.ndarray) -> np.ndarray:
        """Var[ĉ(v)] = [B Σ_Z Bᵀ]_vv − c(v)(1 − c(v)/n) at counts c (module docstring).

        Σ_Z is blockwise multinomial, Σ_Zs = n_s(D_π − ππᵀ)/(p'−q')², at the model's cell
        probabilities π_s,y = q' + (p'−q')·Σ_{v: H_s(v)=y} c(v)/n (rows of B: occupied cells only;
        empty cells have zero columns in B and drop out).
        """
        _, row_of, row_cohort, cohort_start = self._design
        m, d = self.params.m, self.params.d
        n = float(n_s.sum())
        mass = np.bincount(row_of.ravel(), weights=np.broadcast_to(c / n, (m, d)).ravel(),
                           minlength=B.shape[1])  # Σ_{v: H_s(v)=y} f(v) per occupied cell
        # Linear in c, so unbiased at c = ĉ (clipping ĉ first would inflate every cell).
        pi = np.clip(self.q + (self.p - self.q) * mass, 0.0, 1.0)
        c = np.clip(c, 0.0, n)
        # diag(B D_T Bᵀ) − Σ_s (B_s T_s)²/n_s with T = n_s π (E[T] under the model)
        cells = n_s[row_cohort] * pi
        first = (B * B) @ cells
        u = np.add.reduceat(B * cells, cohort_start, axis=1)  # (B_s T_s)_v, shape (d, m)
        second = (u * u) @ np.divide(1.0, n_s, out=np.zeros(m), where=n_s > 0)
        return np.maximum((first - second) / (self.p - self.q) ** 2 - c * (1 - c / n), 0.0)


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
