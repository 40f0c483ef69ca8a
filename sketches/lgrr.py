"""L-GRR's server half (Arcolezi et al.; docs/protocols.md, "L-protocols"): both GRR rounds over a
batch (fresh coins: each row a new client reporting once), the exact table of the memoised round
and the exact permanent variance; GRR's sketch, validate, wire and pure estimator
(sketches.grr). The device half is client_sdk.protocols.lgrr."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.protocols.lgrr import LGRR

from .base import Payloads
from .grr import GRRServer
from .longitudinal import MemoisedServer, grr_round, pure_chain_lumps, pure_chain_permanent_variance
from .randomness import RandomLike, as_random_source
from .registry import register


class GRRChainServer(MemoisedServer):
    """The two GRR rounds of a ``GRRChain`` protocol over a batch (L-GRR, LOLOHA)."""

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        return grr_round(memo_inputs, self.params.chain_size, self.params.p1_threshold, source)

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        return grr_round(first, self.params.chain_size, self.params.p2_threshold, source)


@register(LGRR)
class LGRRServer(GRRChainServer, GRRServer):
    """L-GRR on the server: GRR's d counters, two rounds in simulation."""

    #: Not GRR's "one": a histogram over L-GRR keeps the bound (estimators/numeric.py).
    count_structure = "any"

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        probs = np.full(self.params.d, self.params.q1)
        probs[index] = self.params.p1
        return probs

    def permanent_variance(self, sketch: Any, estimate: Any) -> np.ndarray:
        """Exact for a pure chain (``longitudinal.pure_chain_permanent_variance``)."""
        return pure_chain_permanent_variance(self.params, estimate.n, estimate.counts)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins: each row is a new client reporting once."""
        source = as_random_source(rng)
        return {"y": self.second_round(self.first_round(self.check_indices(indices), source), source)}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The memoised GRR round over [d] (p₁, q₁), then each report's GRR of it (p₂, q₂)."""
        return "cat", self.memo_output_probabilities(x), self.params.p2, self.params.q2

    def memo_lumps(self, sketch: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One class of reports: a = 1/(P − Q), ν = n·q₂, μ = n·q₁ (``pure_chain_lumps``)."""
        return pure_chain_lumps(self.params, sketch)


__all__ = ["GRRChainServer", "LGRRServer"]
