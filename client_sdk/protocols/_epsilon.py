"""A quoted ε is an upper bound: ln of an exact ratio, rounded up to the next float.

``math.log(p / q)`` rounds twice (the division, the logarithm), so the quoted ε could fall a
few ulps below the mechanism's true ln(max P(y|x)/P(y|x')): a table whose exact ratio exceeds
e^ε by ~10⁻¹⁶. ``log_up`` takes the ratio as an exact rational — from the sampler's integer
thresholds where the protocol has them, else from the realised float probabilities, which
Fraction represents exactly — and returns the smallest float ε with e^ε >= ratio, checked in
60-digit decimal arithmetic (correctly rounded exp; the ratio is rational, e^ε for float ε > 0
is not, so the two never tie). fractions and decimal load with the first ε a registry computes,
not on the SDK's import.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from decimal import Decimal
    from fractions import Fraction

#: Decimal digits of the exp(ε) >= ratio check (float ε has 17; ties are impossible).
DIGITS = 60

__all__ = ["exp_at_least", "log_up"]


def exp_at_least(epsilon: float, ratio: Fraction | int | float) -> bool:
    """Whether e^ε >= ratio exactly (to DIGITS digits; both sides rational/float inputs)."""
    from decimal import Decimal, localcontext
    from fractions import Fraction

    r = Fraction(ratio)
    with localcontext() as ctx:
        ctx.prec = DIGITS
        return _exp(epsilon) >= Decimal(r.numerator) / Decimal(r.denominator)


@functools.lru_cache(maxsize=256)
def _exp(epsilon: float) -> Decimal:
    """e^ε to DIGITS digits (Decimal.exp is correctly rounded, half-even, whatever the context's
    rounding). Cached: the window and threshold searches test many ratios against one ε."""
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = DIGITS
        return Decimal(epsilon).exp()


def log_up(ratio: Fraction | int | float) -> float:
    """The smallest float ε >= 0 with e^ε >= ``ratio`` (0 for a ratio <= 1, inf for inf)."""
    if isinstance(ratio, float) and math.isinf(ratio):
        return math.inf
    from fractions import Fraction

    r = Fraction(ratio)
    if r <= 1:
        return 0.0
    # log1p of the exact excess keeps a ratio near 1 (ε ~ 1e-9) to full relative precision
    eps = math.log(r.numerator) - math.log(r.denominator) if r > 1e300 else math.log1p(float(r - 1))
    # the float estimate is within a few ulps: step down while still an upper bound, then up
    while eps > 0 and exp_at_least(math.nextafter(eps, 0.0), r):
        eps = math.nextafter(eps, 0.0)
    while not exp_at_least(eps, r):
        eps = math.nextafter(eps, math.inf)
    return eps
