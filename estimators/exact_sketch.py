"""Draw a pure protocol's sketch from its exact law, without encoding reports one by one.

For benches and statistical tests that need hundreds of runs at n = 10⁶ (bench/breakdowns.py):
the sketch is the vector of support counts S(v) = Σᵢ 1[v ∈ S(yᵢ)], and its law given the true
counts c is a sum of simple draws:

- GRR: the c_x reports of x keep x with probability p (binomial) and spread the rest uniformly
  over the d − 1 other values (multinomial);
- OUE/SUE: bits are independent given x, so S(v) ~ Bin(c_v, p*) + Bin(n − c_v, q*);
- SS: Bin(c_x, π) of x's reports include x; each then holds a uniform (s−1)- or s-subset of
  the d − 1 others. A uniform k-subset of M items, scanned item by item, includes the next
  item with probability (picks left)/(items left), so a group of reports with r picks left
  splits binomially: d·s binomial draws per sketch, exactly the law of the encoder.

tests/test_joint.py checks each sampler's mean and covariance against the real encoder.
"""

from __future__ import annotations

import numpy as np

from sketches.base import ServerHalf, Sketch

__all__ = ["draw_sketch"]


def draw_sketch(proto: ServerHalf, counts: np.ndarray, rng: np.random.Generator) -> Sketch:
    """A sketch of ``counts.sum()`` reports of the true counts ``counts`` (int, shape (d,))."""
    c = np.asarray(counts, dtype=np.int64)
    d = proto.domain_size
    if c.shape != (d,):
        raise ValueError(f"counts must have shape ({d},), got {c.shape}")
    n = int(c.sum())
    name = proto.name
    if name == "grr":
        support = _grr(c, float(proto.p), rng)  # type: ignore[attr-defined]
    elif name in ("oue", "sue"):
        support = rng.binomial(c, proto.p) + rng.binomial(n - c, proto.q)  # type: ignore[attr-defined]
    elif name == "ss":
        support = _ss(c, int(proto.s), float(proto.pi), rng)  # type: ignore[attr-defined]
    else:
        raise ValueError(f"no exact sketch sampler for protocol {name!r} (grr, oue, sue, ss)")
    return Sketch(np.asarray(support, dtype=np.int64).reshape(1, d), np.array([n], dtype=np.int64))


def _grr(c: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    d = c.size
    kept = rng.binomial(c, p)
    out = kept.astype(np.int64)
    others = np.full(d - 1, 1.0 / (d - 1))
    for x in np.flatnonzero(c - kept):
        spread = rng.multinomial(int(c[x] - kept[x]), others)
        out[:x] += spread[:x]
        out[x + 1:] += spread[x:]
    return out


def _ss(c: np.ndarray, s: int, pi: float, rng: np.random.Generator) -> np.ndarray:
    d = c.size
    inc = rng.binomial(c, pi)
    out = inc.astype(np.int64)
    # groups[x, r]: reports of value x with r picks left among the others not yet scanned
    groups = np.zeros((d, s + 1), dtype=np.int64)
    groups[:, s - 1] += inc
    groups[:, s] += c - inc
    x = np.arange(d)
    r = np.arange(s + 1)
    for j in range(d):
        left = (d - 1 - j) + (x < j)            # others of x not yet scanned, j included
        prob = np.where(x[:, None] == j, 0.0, r[None, :] / np.maximum(left, 1)[:, None])
        take = rng.binomial(groups, np.clip(prob, 0.0, 1.0))
        out[j] += take.sum()
        groups -= take
        groups[:, :-1] += take[:, 1:]
    return out
