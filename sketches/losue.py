"""L-OSUE's server half (Arcolezi et al. 2022; client_sdk/protocols/losue.py says the chain):
OUE at ε∞ memoised, then SUE fresh, both rounds vectorised; the exact table of the memoised
round; the permanent variance of a pure chain. Validate, accumulate and the wire are the unary
encoding's (sketches.unary), the estimate the pure one with the chain's P and Q."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.protocols.losue import LOSUE
from client_sdk.protocols.unary import MAX_ENUMERATED_D
from client_sdk.randomness import SCALE

from .base import Payloads
from .longitudinal import MemoisedServer, pure_chain_lumps, pure_chain_permanent_variance
from .randomness import RandomLike, as_random_source
from .registry import register
from .unary import UnaryServer


@register(LOSUE)
class LOSUEServer(MemoisedServer, UnaryServer):
    """L-OSUE on the server."""

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        d = self.params.d
        if d > MAX_ENUMERATED_D:
            raise ValueError(f"refusing to enumerate 2^{d} unary responses (d <= {MAX_ENUMERATED_D})")
        bits = (np.arange(1 << d, dtype=np.int64)[:, None] >> np.arange(d)) & 1
        one = np.full(d, self.params.q1)
        one[index] = self.params.p1
        return np.where(bits == 1, one, 1.0 - one).prod(axis=1)

    def permanent_variance(self, sketch: Any, estimate: Any) -> np.ndarray:
        """Exact for a pure chain (``longitudinal.pure_chain_permanent_variance``)."""
        return pure_chain_permanent_variance(self.params, estimate.n, estimate.counts)

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        """OUE bits, bool (n, d): x's bit 1 w.p. p₁, every other bit w.p. q₁."""
        n, d = memo_inputs.shape[0], self.params.d
        u = source.words((n, d))
        rows = np.arange(n)
        bits = u < np.uint32(self.params.q_threshold)
        bits[rows, memo_inputs] = u[rows, memo_inputs] < np.uint32(self.params.p_threshold)
        return bits

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        """SUE on every bit: 1 w.p. p₂ if the round-1 bit is 1, w.p. 1−p₂ if it is 0."""
        u = source.words(first.shape).astype(np.uint64)
        t1, t0 = np.uint64(self.params.p2_threshold), np.uint64(SCALE - self.params.p2_threshold)
        return u < np.where(first, t1, t0)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new client), in blocks bounding memory."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        out = np.empty((x.shape[0], self.device.width), dtype=np.uint8)
        block = max(1, (1 << 17) // self.params.d)
        for start in range(0, x.shape[0], block):
            bits = self.second_round(self.first_round(x[start:start + block], source), source)
            out[start:start + block] = np.packbits(bits, axis=1, bitorder="little")
        return {"bits": out}

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> Payloads:
        return {"bits": np.packbits(second, axis=1, bitorder="little")}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The memoised OUE bits (x's 1 w.p. p₁, others q₁), each report's SUE on them (p₂, q₂)."""
        pr = self.params
        return "bit", np.where(np.arange(pr.d) == x, pr.p1, pr.q1), pr.p2, pr.q2

    def memo_lumps(self, sketch: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One class of reports: a = 1/(P − Q), ν = n·q₂, μ = n·q₁ (``pure_chain_lumps``)."""
        return pure_chain_lumps(self.params, sketch)


__all__ = ["LOSUEServer"]
