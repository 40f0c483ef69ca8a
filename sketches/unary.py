"""Unary encoding's server half (docs/math.md §4), the one implementation behind OUE and SUE
(and L-OSUE's report): the vectorised mechanism in blocks, the exact table of 2^d reports, wire
decoding, validate and accumulate (d bit counters); the estimate is the pure one
(sketches.base.PureServer). The device half, params and thresholds: client_sdk.protocols.unary."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.unary import MAX_ENUMERATED_D

from .base import Payloads, PureServer, Sketch, first_bad, require_1d
from .randomness import RandomLike, as_random_source, below_threshold

#: Words per encode/accumulate block: ~512 KiB of uint32 stays cache-resident (measured
#: ~6M reports/s at d=128 with a seeded generator, vs ~1M/s unblocked).
BLOCK_CELLS = 1 << 17


class UnaryServer(PureServer):
    """Unary encoding on the server (payload ``bits``: uint8 rows of ⌈d/8⌉ bytes)."""

    #: Every bit is drawn independently given x.
    count_structure = "independent"

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x) for every report y, enumerated as the integer Σᵢ yᵢ·2^i (bit i = item i)."""
        d = self.params.d
        if d > MAX_ENUMERATED_D:
            raise ValueError(f"refusing to enumerate 2^{d} unary reports (d <= {MAX_ENUMERATED_D})")
        bits = (np.arange(1 << d, dtype=np.int64)[:, None] >> np.arange(d)) & 1
        one = np.full(d, self.q)
        one[index] = self.p
        return np.where(bits == 1, one, 1.0 - one).prod(axis=1)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, d = x.shape[0], self.params.d
        out = np.empty((n, self.device.width), dtype=np.uint8)
        block = max(1, BLOCK_CELLS // d)
        for start in range(0, n, block):  # loop over blocks of reports, vectorised inside
            xs = x[start:start + block]
            rows = np.arange(xs.shape[0])
            u = source.words((xs.shape[0], d))
            bits = below_threshold(u, self.device.q_threshold)        # every bit: 1 w.p. q'
            bits[rows, xs] = below_threshold(u[rows, xs], self.device.p_threshold)  # bit x: 1 w.p. p'
            out[start:start + block] = np.packbits(bits, axis=1, bitorder="little")
        return {"bits": out}

    def validate(self, payloads: Payloads) -> None:
        bits = require_1d(payloads, "bits")
        width = self.device.width
        if bits.dtype != np.uint8 or bits.ndim != 2 or bits.shape[1] != width:
            raise InvalidPayload(f"unary reports must be uint8 rows of {width} bytes, got "
                                 f"{bits.dtype} of shape {bits.shape}", field="bits")
        spare = 8 * width - self.params.d
        if spare:
            # Bits d..8⌈d/8⌉−1 of the last byte do not encode an item; an honest client sends 0.
            bad = (bits[:, -1] & np.uint8((0xFF << (8 - spare)) & 0xFF)) != 0
            if bad.any():
                raise InvalidPayload(f"padding bits beyond item {self.params.d - 1} are set",
                                     index=first_bad(bad), field="bits")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        bits = np.asarray(payloads["bits"], dtype=np.uint8)
        d = self.params.d
        block = max(1, BLOCK_CELLS // d)
        for start in range(0, bits.shape[0], block):  # blocks bound the unpacked memory
            unpacked = np.unpackbits(bits[start:start + block], axis=1, count=d, bitorder="little")
            sketch.counts[0] += unpacked.sum(axis=0, dtype=np.int64)
        sketch.reports[0] += bits.shape[0]

    def to_wire(self, payloads: Payloads) -> list[Any]:
        raw, w = np.ascontiguousarray(payloads["bits"], dtype=np.uint8).tobytes(), self.device.width
        return [raw[i:i + w] for i in range(0, len(raw), w)]

    def from_wire(self, objects: list[Any]) -> Payloads:
        w = self.device.width
        for i, obj in enumerate(objects):
            if type(obj) is not bytes:
                raise InvalidPayload(f"expected {w} bytes, got {type(obj).__name__}", index=i, field="payload")
            if len(obj) != w:
                raise InvalidPayload(f"expected {w} bytes, got {len(obj)}", index=i, field="payload")
        return {"bits": np.frombuffer(b"".join(objects), dtype=np.uint8).reshape(len(objects), w).copy()}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """Independent bits: bit i is 1 w.p. p if i = x, q otherwise (a = x's one-hot row)."""
        return "bit", np.eye(self.params.d)[x], self.p, self.q

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        return np.unpackbits(payloads["bits"], axis=1, count=self.params.d, bitorder="little").astype(np.int64)

    def pair_probabilities(self) -> tuple[float, float, float, float] | None:
        """r₁ = p*q*, r₂ = q*²: independent bits, uncorrelated counts."""
        p, q = float(self.p), float(self.q)
        return p, q, p * q, q * q

    def marginal_model(self, cells: int, n: int) -> tuple[float, float, int] | None:
        """Independent bits: the sum is over N = n·k of them, (p*, q*, n·k)."""
        return float(self.p), float(self.q), n * cells

    def draw_support(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """Bits independent given x: S(v) ~ Bin(c_v, p*) + Bin(n − c_v, q*)."""
        n = int(counts.sum())
        return rng.binomial(counts, self.p) + rng.binomial(n - counts, self.q)

    def values_supported(self) -> int:
        """All d: one all-ones report supports every value."""
        return int(self.domain_size)


__all__ = ["BLOCK_CELLS", "UnaryServer"]
