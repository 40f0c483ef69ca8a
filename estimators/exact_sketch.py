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
    """A sketch of ``counts.sum()`` reports of the true counts ``counts`` (int, shape (d,)): the
    support counts of the server half's ``draw_support`` (the laws above)."""
    c = np.asarray(counts, dtype=np.int64)
    d = proto.domain_size
    if c.shape != (d,):
        raise ValueError(f"counts must have shape ({d},), got {c.shape}")
    n = int(c.sum())
    support = proto.draw_support(c, rng)
    if support is None:
        raise ValueError(f"no exact sketch sampler for protocol {proto.name!r} (grr, oue, sue, ss)")
    return Sketch(np.asarray(support, dtype=np.int64).reshape(1, d), np.array([n], dtype=np.int64))
