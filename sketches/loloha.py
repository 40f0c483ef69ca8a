"""LOLOHA's server half (Arcolezi, Pinzón, Palamidessi, Gambs 2023; docs/protocols.md,
"L-protocols"): both GRR rounds on the hash range over a batch (fresh coins: each row a new
client reporting once), the exact table of the memoised round and the permanent part of a
window's variance, over OLH's sketch, decoder, validate and wire (sketches.olh). The device
half is client_sdk.protocols.loloha."""

from __future__ import annotations

from typing import Any

import numpy as np

from client_sdk.protocols.loloha import LOLOHA
from client_sdk.protocols.olh import hash_one

from .base import Payloads, Sketch
from .lgrr import GRRChainServer
from .olh import OLHServer, hash_values
from .randomness import RandomLike, as_random_source
from .registry import register

#: A value's devices join the events of the values sharing its cell when its window estimate is
#: above this many standard errors (``LOLOHAServer.memo_lumps``).
HELD_Z = 3.0

#: The cells are rare counts when a uniform draw hits one with at most this probability, 1/g
#: (``LOLOHAServer.memo_lumps``): g = 2 gives every value half of its cohort's draws.
RARE_SHARE = 0.05


@register(LOLOHA)
class LOLOHAServer(GRRChainServer, OLHServer):
    """LOLOHA on the server: OLH's m×g counters and decoder, two rounds in simulation."""

    @property
    def hashed_memo_keys(self) -> int | None:
        """g: one memoised response per hash cell of the device's permanent cohort."""
        return int(self.params.g)

    def support_counts(self, sketch: Sketch) -> np.ndarray | None:
        """None: the exact test of two windows' support counts is derived for one round of local
        hashing (OLH's), not for LOLOHA's memoised first round (compare keeps its normal test)."""
        return None

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        """P(round-1 response | x = index, cohort s), shape (m, g)."""
        m, g = self.params.m, self.params.g
        probs = np.full((m, g), self.params.q1)
        probs[np.arange(m), hash_values(self.seeds, np.full(m, index), g)] = self.params.p1
        return probs

    def permanent_variance(self, sketch: Any, estimate: Any) -> np.ndarray:
        """The cohort part plus the memoised part of the window's variance (at the plug-in ĉ).

        Two things repeat in every report of a device: its cohort s (which values share its
        hashed cell) and its memoised response r. A device of value u in cohort s adds
        B[v, (s, H_s(u))] to E[ĉ(v) | cohorts] (B the decoder, Z's scaling), and each device draws
        its cohort independently with P(s) = ρ_s = n_s/n, so the cohort part is exactly

            Var(E[ĉ(v) | cohorts]) = Σ_u c(u)·(Σ_s ρ_s B[v, (s, H_s(u))]² − 1[u = v])

        (Σ_s ρ_s B[v, (s, H_s(u))] = 1[u = v]: the decoder is unbiased); conditioning on the
        realised n_s only lowers it. (The former V − V_r, the sandwich less its randomisation
        part, folded in the sandwich's correction −n·f̂(1 − f̂) at a noisy plug-in, which for a value
        nobody holds is positive on average: its cohort part came out negative, and a LOLOHA
        7-day range flagged values nobody holds in 0.45 of runs.) The memoised part is
        V_m = λ²·E_s[Var(E[ĉ | r] | cohorts)] (round 2 keeps r w.p. λ = p₂ − q₂, else draws
        uniformly: E[a(y) | r] = λ·a(r) + const)."""
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        B = self.decoder(n_s).B
        raw = np.nan_to_num(np.asarray(estimate.counts, dtype=np.float64))
        par, lam = self.params, self.second_round_keep
        _, row_of, _, _ = self.design
        rho = n_s / max(n_s.sum(), 1.0)
        weights = B[:, row_of]                                     # (d, m, d): B[v, (s, H_s(u))]
        # linear in c: the unbiased ĉ, not clipped, estimates it without bias (clipping would add
        # the positive part of every absent value's noise as phantom devices)
        cohort = np.einsum("s,vsu,u->v", rho, weights * weights, raw) - raw
        memo = lam * lam * self._cell_variance(B, raw, n_s, par.p1, par.q1)
        return np.maximum(cohort, 0.0) + memo

    def _cell_variance(self, B: np.ndarray, c: np.ndarray, n_s: np.ndarray, big: float, small: float
                       ) -> np.ndarray:
        """Σ_s n_s Σ_h m_s(h)·Var(a_s(y) | h) for y | h GRR on [g] (P(y = h) = ``big``, else
        ``small``): m_s(h) the share of the population whose value hashes to cell h in cohort s
        (at the clipped, normalised ĉ), a_s(y) = B[:, (s, y)]/(p' − q') the decoder's weight of
        output y. Empty cells have zero columns in B and drop out."""
        _, row_of, row_cohort, cohort_start = self.design
        m, d = self.params.m, self.params.d
        # linear in the shares, so the unbiased ĉ over the n reports, unclipped, estimates it without
        # bias; clipped and renormalised, the positive noise of the values nobody holds took ~70 % of
        # the mass at d = 300, n = 500 and held values' memoised variance came out ~0.7x (coverage 0.92)
        total = float(n_s.sum())
        shares = np.nan_to_num(c) / total if total > 0 else np.full(d, 1.0 / d)
        mass = np.bincount(row_of.ravel(), weights=np.broadcast_to(shares, (m, d)).ravel(),
                           minlength=B.shape[1])
        pi = small + (big - small) * mass                          # P(y) in the cell's cohort
        cells = n_s[row_cohort]
        second_moment = (B * B) @ (cells * pi)                     # Σ_s n_s Σ_y π_y a_y²
        a_sum = np.add.reduceat(B, cohort_start, axis=1)[:, row_cohort]   # A_s per cell's cohort
        cond_mean = small * a_sum + (big - small) * B              # E[a(y) | h] per cell h
        mean_square = (cond_mean * cond_mean) @ (cells * mass)     # Σ_s n_s Σ_h m(h) E[a|h]²
        return np.maximum(second_moment - mean_square, 0.0) / (self.p - self.q) ** 2

    def memo_indices(self, indices: np.ndarray, cohorts: np.ndarray | None = None) -> np.ndarray:
        """H_s(x) for a batch (simulation)."""
        if cohorts is None:
            raise ValueError("LOLOHA hashes under the client's cohort: pass cohorts")
        return hash_values(self.seeds[cohorts], indices, self.params.g)

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> Payloads:
        return {"cohort": np.asarray(cohorts, dtype=np.int64), "y": second}

    def sdk_cohorts(self, secret: bytes, metric: str) -> np.ndarray:
        return np.array([self.cohort_of(secret, metric)], dtype=np.int64)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new client); cohorts drawn if not given."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        s = source.below(self.params.m, x.shape[0]) if cohorts is None else self._check_cohorts(cohorts, x.shape)
        y = self.second_round(self.first_round(self.memo_indices(x, s), source), source)
        return {"cohort": s, "y": y}

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The memoised GRR round over [g] of the cohort's hash of x (p₁, q₁), then each report's
        GRR of it (p₂, q₂)."""
        pr = self.params
        first = np.full(pr.g, pr.q1)
        first[hash_one(int(cohort or 0), x, pr.g)] = pr.p1
        return "cat", first, pr.p2, pr.q2

    def memo_lumps(self, sketch: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One class per cohort s, v's own cell (s, H_s(v)); a = (B[v, (s, H_s(v))] − B̄_s(v))/(p' − q')
        (B the least-squares decoder, B̄_s(v) the mean of its weights over the g cells of s: given
        n_s only the excess is random), ν = n_s·q₂ and μ = n_s·q₁ + (p₁ − q₁)·ρ_s·C_s(v), C_s(v) the
        estimated devices of the other values hashed to that cell, counting the values clearly held
        (ĉ(u) > ``HELD_Z`` SEs: the positive noise of the values nobody holds would add phantom events);
        no lumps when 1/g > ``RARE_SHARE`` (BiLOLOHA: a uniform draw hits v's cell half the time, so
        its reports there are many, and normal with the rest) nor in empty cohorts."""
        par = self.params
        n = float(sketch.total_reports)
        q2 = float(par.q2)
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        B = self.decoder(n_s).B
        _, row_of, _, cohort_start = self.design
        d, m, g = int(par.d), int(par.m), int(par.g)
        # a report of cohort s moves ĉ(v) by its cell's weight; with n_s known only the weight's
        # excess over the cohort's mean cell weight is random (Σ_y T[s, y] = n_s): a uniform draw
        # hitting v's cell moves ĉ(v) by that excess (at g = 2 both cells carry large weights)
        level = np.add.reduceat(B, cohort_start, axis=1).T / g        # (m, d): mean weight of s's g cells
        own = (B[np.arange(d)[None, :], row_of] - level) / (self.p - self.q)
        c = np.nan_to_num(np.asarray(estimate.counts, dtype=np.float64))
        sd = np.sqrt(np.nan_to_num(np.asarray(estimate.variances, dtype=np.float64)))
        c = np.where(c > HELD_Z * sd, c, 0.0)                         # the values clearly held
        mass = np.bincount(row_of.ravel(), weights=np.broadcast_to(c, (m, d)).ravel(), minlength=B.shape[1])
        others = mass[row_of] - c[None, :]                            # (m, d): other values in v's cell
        rho = n_s / max(n, 1.0)
        mu = n_s[:, None] * par.q1 + (par.p1 - par.q1) * rho[:, None] * others
        nu = np.broadcast_to(n_s[:, None] * q2, (m, d)).copy()
        # a uniform draw hits one of g cells: at g = 2 (BiLOLOHA) half of them, no rare count — the
        # reports there are many comparable parts, left to the normal rest; empty cohorts have none
        rare = (1.0 / g <= RARE_SHARE) & (n_s[:, None] > 0)
        return np.where(rare, own, 0.0), np.where(rare, nu, 0.0), np.where(rare, mu, 0.0)

    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """The cohort (its hash function) in [0, m), per metric, for the device's lifetime."""
        return "LOLOHA cohort", int(self.params.m), True, False


__all__ = ["HELD_Z", "LOLOHAServer", "RARE_SHARE"]
