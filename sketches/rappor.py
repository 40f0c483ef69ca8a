"""RAPPOR's server half (Erlingsson, Pihur, Korolova, CCS 2014; docs/math.md §7): the batched
mechanism (simulation, and one client's batch with its secret), validate, accumulate into
counts[m, k], the per-(cohort, bit) estimates, the exact output tables and the wire. The
parameters, thresholds and the one-report path are the device half's (client_sdk.protocols.rappor,
whose module docstring has the mechanism); estimators.rappor decodes the estimates."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from client_sdk.errors import DomainError, InvalidPayload
from client_sdk.hashing import check_secret
from client_sdk.protocols.rappor import BLOOM_CACHE_SIZE, Rappor, RapporParams
from client_sdk.randomness import SCALE

from .base import CountEstimate, Payloads, ServerHalf, Sketch, first_bad, require_1d
from .hashing import bloom_positions, bloom_positions_one, prr_words_checked
from .randomness import RandomLike, as_random_source, below_threshold
from .registry import register

#: output_probabilities enumerates 2^k reports; refuse beyond this k.
MAX_ENUMERATED_K = 16
#: Words per encode/accumulate block (bounds temporary memory; stays cache friendly).
BLOCK_CELLS = 1 << 17


def bit_count_estimates(counts: np.ndarray, reports: np.ndarray,
                        params: RapporParams) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased true-bit counts t̂[j, i] and their plug-in variances (docs/math.md §7).

    t̂ᵢⱼ = (cᵢⱼ − p*·Nⱼ)/(q* − p*); Var = [t·q*(1−q*) + (Nⱼ−t)·p*(1−p*)]/(q*−p*)² evaluated
    at t = clip(t̂, 0, Nⱼ).
    """
    c = np.asarray(counts, dtype=np.float64)
    n = np.asarray(reports, dtype=np.float64)[:, None]
    ps, qs = params.p_star, params.q_star
    delta = qs - ps
    t_hat = (c - ps * n) / delta
    t = np.clip(t_hat, 0.0, n)
    var = (t * qs * (1 - qs) + (n - t) * ps * (1 - ps)) / delta**2
    return t_hat, var


@register(Rappor)
class RapporServer(ServerHalf):
    """RAPPOR on the server: m cohorts of k Bloom-bit counters."""

    device: Rappor

    #: The PRR is memoised, and its decoder has no range bound yet (docs/rappor.md).
    memo_without_range_bound = True
    #: Its sketch is google/rappor's, as that project's tools read it (estimators/rappor_io.py).
    exports_google_rappor = True

    def __init__(self, device: Rappor) -> None:
        super().__init__(device)
        self._bloom_cache: dict[tuple[int, str], np.ndarray] = {}

    @functools.cached_property
    def _u32_p(self) -> Any:
        return np.uint32(min(self.device.p_threshold, SCALE - 1))

    @functools.cached_property
    def _u32_q(self) -> Any:
        return np.uint32(min(self.device.q_threshold, SCALE - 1))

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.k,)

    def bit_probabilities(self) -> dict[str, tuple[float, float]]:
        """The device half's realised per-bit rates (the exact tables are built from them)."""
        return self.device.bit_probabilities()

    def _pattern_distribution(self, pattern: int, zero_rate: float, one_rate: float) -> np.ndarray:
        k = self.params.k
        if k > MAX_ENUMERATED_K:
            raise ValueError(f"refusing to enumerate 2^{k} reports (k <= {MAX_ENUMERATED_K})")
        if not 0 <= pattern < (1 << k):
            raise ValueError(f"Bloom pattern {pattern} is not a {k}-bit mask")
        truth = (pattern >> np.arange(k)) & 1
        one = np.where(truth == 1, one_rate, zero_rate)
        outputs = (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k)) & 1
        return np.where(outputs == 1, one, 1.0 - one).prod(axis=1)

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(S = y | B = ``index``) for one report, y enumerated as Σᵢ yᵢ·2^i (small k only).

        ``index`` is a Bloom pattern (bit i = Bloom bit i), not a domain value: the value only
        enters through its Bloom filter, and the cohort does not depend on the value.
        """
        zero_rate, one_rate = self.bit_probabilities()["report"]
        return self._pattern_distribution(index, zero_rate, one_rate)

    def prr_output_probabilities(self, index: int) -> np.ndarray:
        """P(B' = y | B = ``index``): what unlimited reports of one value can reveal (for ε∞)."""
        zero_rate, one_rate = self.bit_probabilities()["prr"]
        return self._pattern_distribution(index, zero_rate, one_rate)

    def check_values(self, values: Sequence[str]) -> list[str] | np.ndarray:
        """Values must be strings (DomainError naming the first that is not)."""
        if isinstance(values, str):
            raise DomainError("RAPPOR encodes a sequence of strings; wrap a single value in a list")
        if isinstance(values, np.ndarray) and values.dtype.kind == "U":
            return values.reshape(-1)
        vals = values if isinstance(values, (list, np.ndarray)) else list(values)
        if set(map(type, vals)) - {str}:
            pos = next(i for i, v in enumerate(vals) if not isinstance(v, str))
            raise DomainError(f"RAPPOR values are strings; value {vals[pos]!r} at position {pos} is "
                              f"a {type(vals[pos]).__name__}")
        return vals

    def bloom_row(self, cohort: int, value: str) -> np.ndarray:
        """The true Bloom filter B of ``value`` in ``cohort``, bool (k,): the public hash of a value (the
        privacy audit uses it); on a device it never leaves the encoder."""
        key = (cohort, value)
        row = self._bloom_cache.get(key)
        if row is None:
            if len(self._bloom_cache) >= BLOOM_CACHE_SIZE:
                self._bloom_cache.clear()
            row = np.zeros(self.params.k, dtype=bool)
            row[bloom_positions_one(value, cohort, self.params.k, self.params.h)] = True
            self._bloom_cache[key] = row
        return row

    def _prr_from_words(self, bloom: np.ndarray, words: np.ndarray) -> np.ndarray:
        """B'ᵢ = 1 if uᵢ < T, 0 if T <= uᵢ < 2T, else Bᵢ (T/2^32 = f/2, realised)."""
        return np.where(words < self.device.fake_threshold, words < self.device.half_f_threshold, bloom)

    def _irr(self, prr: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Sᵢ = 1 w.p. q if B'ᵢ = 1 and w.p. p if B'ᵢ = 0 (fresh words every report)."""
        if self.device.q_threshold < SCALE:  # both thresholds fit in uint32: one select, one compare
            return words < np.where(prr, self._u32_q, self._u32_p)
        return np.where(prr, below_threshold(words, self.device.q_threshold), below_threshold(words, self.device.p_threshold))

    def permanent_response(self, secret: bytes, metric: str, value: str, cohort: int) -> np.ndarray:
        """The permanent randomised response of ``value`` (deterministic in secret, metric, value)."""
        words = prr_words_checked(secret, metric, value, self.params.k)
        return self._prr_from_words(self.bloom_row(cohort, value), words)

    def encode(self, values: Sequence[str], rng: RandomLike = None, cohorts: np.ndarray | None = None,
               secret: bytes | None = None, metric: str = "") -> Payloads:
        """Randomise a batch of strings. ``secret``: one client's reports (the SDK path)."""
        vals = self.check_values(values)
        source = as_random_source(rng)
        if secret is not None:
            return self._encode_client(vals, source, cohorts, check_secret(secret), metric)
        n = len(vals)
        m, k = self.params.m, self.params.k
        if cohorts is None:
            c = source.below(m, n) if n else np.zeros(0, dtype=np.int64)
        else:
            c = np.broadcast_to(np.asarray(cohorts), (n,))
            if c.size and (c.dtype.kind not in "iu" or c.min() < 0 or c.max() >= m):
                raise ValueError(f"cohorts must be integers in [0, {m})")
            c = c.astype(np.int64)
        out = np.empty((n, self.device.width), dtype=np.uint8)
        if n == 0:
            return {"cohort": c, "irr": out}
        # Bloom bits per distinct value (one hash per value, all cohorts), then per report.
        # Factorising with a dict is exact (numpy's fixed-width strings drop trailing NULs)
        # and the fastest way here (~50 ns a value).
        index: dict[str, int] = {}
        inverse = np.fromiter((index.setdefault(v, len(index)) for v in vals), dtype=np.int64, count=n)
        positions = bloom_positions(list(index), k, self.params.h, m)       # (U, m, h)
        block = max(1, BLOCK_CELLS // k)
        for start in range(0, n, block):  # blocks of reports, vectorised inside
            stop = min(n, start + block)
            rows = np.arange(stop - start)[:, None]
            bloom = np.zeros((stop - start, k), dtype=bool)
            bloom[rows, positions[inverse[start:stop], c[start:stop]]] = True  # B: never leaves
            prr = self._prr_from_words(bloom, source.words((stop - start, k)))  # fresh: one report per client
            out[start:stop] = np.packbits(self._irr(prr, source.words((stop - start, k))), axis=1,
                                          bitorder="little")
        return {"cohort": c, "irr": out}

    def _encode_client(self, vals: Sequence[str], source: Any, cohorts: np.ndarray | None,
                       secret: bytes, metric: str) -> Payloads:
        """One client: HMAC-derived cohort and PRR, IRR words from ``source``."""
        cohort = self.cohort_of(secret, metric)
        n = len(vals)
        if cohorts is not None and np.any(np.asarray(cohorts) != cohort):
            raise ValueError("with a client secret the cohort is derived from it; do not pass other cohorts")
        k = self.params.k
        if n == 1:  # the SDK's batch of one
            prr = self.permanent_response(secret, metric, str(vals[0]), cohort)
            irr = self._irr(prr, source.words(k))
            return {"cohort": np.array([cohort], dtype=np.int64),
                    "irr": np.packbits(irr, bitorder="little").reshape(1, self.device.width)}
        prr = np.stack([self.permanent_response(secret, metric, str(v), cohort) for v in vals]) if n else \
            np.zeros((0, k), dtype=bool)
        irr = self._irr(prr, source.words((n, k))) if n else prr
        return {"cohort": np.full(n, cohort, dtype=np.int64),
                "irr": np.packbits(irr, axis=1, bitorder="little").reshape(n, self.device.width)}

    # --- collector side ----------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        c = require_1d(payloads, "cohort")
        if c.ndim != 1:
            raise InvalidPayload(f"expected a 1-d array of cohorts, got shape {c.shape}", field="cohort")
        irr = require_1d(payloads, "irr", c.shape[0])
        if c.size and c.dtype.kind not in "iu":
            raise InvalidPayload(f"cohort must be an integer, got dtype {c.dtype}", field="cohort")
        bad = (c < 0) | (c >= self.params.m)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"cohort {int(c[i])} outside [0, {self.params.m})", index=i, field="cohort")
        if irr.dtype != np.uint8 or irr.ndim != 2 or irr.shape[1] != self.device.width:
            raise InvalidPayload(f"RAPPOR reports must be uint8 rows of {self.device.width} bytes, got "
                                 f"{irr.dtype} of shape {irr.shape}", field="irr")
        spare = 8 * self.device.width - self.params.k
        if spare and irr.shape[0]:
            # bits k..8⌈k/8⌉−1 of the last byte are not Bloom bits; an honest client sends 0
            bad = (irr[:, -1] & np.uint8((0xFF << (8 - spare)) & 0xFF)) != 0
            if bad.any():
                raise InvalidPayload(f"padding bits beyond Bloom bit {self.params.k - 1} are set",
                                     index=first_bad(bad), field="irr")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        c = np.asarray(payloads["cohort"], dtype=np.int64)
        irr = np.asarray(payloads["irr"], dtype=np.uint8)
        m, k = self.params.m, self.params.k
        block = max(1, BLOCK_CELLS // k)
        for start in range(0, c.shape[0], block):  # blocks bound the unpacked memory
            cs = c[start:start + block]
            order = np.argsort(cs, kind="stable")
            bits = np.unpackbits(irr[start:start + block][order], axis=1, count=k, bitorder="little")
            present, first = np.unique(cs[order], return_index=True)
            sketch.counts[present] += np.add.reduceat(bits, first, axis=0, dtype=np.int64)
        sketch.reports += np.bincount(c, minlength=m).astype(np.int64)

    # --- estimators side ------------------------------------------------------------------------------
    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Unbiased counts of true Bloom bits per (cohort, bit), flattened cohort-major (m·k)."""
        t_hat, var = bit_count_estimates(sketch.counts, sketch.reports, self.params)
        return CountEstimate(t_hat.reshape(-1), var.reshape(-1), sketch.total_reports,
                             {"cells": "bloom-bits", "shape": (self.params.m, self.params.k),
                              "reports_per_cohort": sketch.reports.copy()})

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var[t̂] of one cell whose cohort has n reports, t of them with the Bloom bit set."""
        ps, qs = self.params.p_star, self.params.q_star
        t = np.asarray(true_counts, dtype=np.float64)
        return (t * qs * (1 - qs) + (n - t) * ps * (1 - ps)) / (qs - ps) ** 2

    # --- wire ------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        raw, w = np.ascontiguousarray(payloads["irr"], dtype=np.uint8).tobytes(), self.device.width
        return [[c, raw[i * w:(i + 1) * w]] for i, c in enumerate(np.asarray(payloads["cohort"]).tolist())]

    def from_wire(self, objects: list[Any]) -> Payloads:
        w = self.device.width
        for i, obj in enumerate(objects):
            if type(obj) not in (list, tuple) or len(obj) != 2:
                raise InvalidPayload("expected [cohort, bytes]", index=i, field="payload")
            if type(obj[0]) is not int:
                raise InvalidPayload(f"cohort must be an integer, got {type(obj[0]).__name__}",
                                     index=i, field="cohort")
            if type(obj[1]) is not bytes:
                raise InvalidPayload(f"expected {w} bytes of IRR bits, got {type(obj[1]).__name__}",
                                     index=i, field="irr")
            if len(obj[1]) != w:
                raise InvalidPayload(f"expected {w} bytes of IRR bits, got {len(obj[1])}", index=i, field="irr")
        n = len(objects)
        try:
            cohorts = np.array([obj[0] for obj in objects], dtype=np.int64)
        except OverflowError:
            i = next(i for i, obj in enumerate(objects) if not -(1 << 63) <= obj[0] < (1 << 63))
            raise InvalidPayload(f"cohort {objects[i][0]} outside [0, {self.params.m})", index=i,
                                 field="cohort") from None
        irr = np.frombuffer(b"".join(obj[1] for obj in objects), dtype=np.uint8).reshape(n, w).copy()
        return {"cohort": cohorts.reshape(n), "irr": irr}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The PRR of the candidate string x's Bloom row in the cohort (bit 1 w.p. 1 − f/2 where
        set, f/2 elsewhere), each report's IRR of it (q, p)."""
        pr = self.params
        bloom = self.bloom_row(int(cohort or 0), x)
        half = pr.f_realised / 2
        return "bit", np.where(bloom, 1 - half, half), pr.q_realised, pr.p_realised

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        return np.unpackbits(payloads["irr"], axis=1, count=self.params.k, bitorder="little").astype(np.int64)

    def support_probabilities(self) -> tuple[float, float] | None:
        """Per Bloom bit of one report (Erlingsson et al. 2014). RAPPOR names its rates the other way
        round: its q* = P(bit reported 1 | Bloom bit 1) is the support p* here, and its
        p* = P(1 | 0) is q* (read the other way, the gain came out negative)."""
        return float(self.params.q_star), float(self.params.p_star)

    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """The cohort in [0, m): one per device, shared by all its RAPPOR metrics (as in Chrome)."""
        return "RAPPOR cohort", int(self.params.m), True, True


__all__ = ["MAX_ENUMERATED_K", "RapporServer", "bit_count_estimates"]
