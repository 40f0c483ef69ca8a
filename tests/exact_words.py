"""Exact output laws of the one-report encoders: every path through their random draws.

``ExactWords`` is a ``WordSource`` whose words are symbolic: a word is an interval of
possible values, and each comparison ``u < T`` an encoder makes splits it, with probability
proportional to the two lengths (a uniform word conditioned on earlier comparisons is uniform
on its interval). Bounded draws (``below``) branch over their outcomes. ``exact_law`` replays
the encoder over every branch and returns P(output) as exact Fractions: the law the integer
thresholds of the plain-Python encoder implement, with no sampling.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from fractions import Fraction

from client_sdk.randomness import SCALE, WordSource

#: Bounds above this are kept symbolic (only compared, e.g. SS's inclusion word).
MAX_BRANCHES = 4096


class _Word:
    """A uniform integer known to lie in [lo, hi): comparisons branch the enumeration."""

    __slots__ = ("lo", "hi", "_src")

    def __init__(self, src: ExactWords, lo: int, hi: int) -> None:
        self._src, self.lo, self.hi = src, lo, hi

    def __lt__(self, t: int) -> bool:
        return self._src._below(self, int(t))

    def __ge__(self, t: int) -> bool:
        return not self._src._below(self, int(t))

    def __le__(self, t: int) -> bool:
        return self._src._below(self, int(t) + 1)

    def __gt__(self, t: int) -> bool:
        return not self._src._below(self, int(t) + 1)

    def __sub__(self, c: int) -> _Word:
        """The shifted interval (a new variable: the encoder must not use this one again)."""
        return _Word(self._src, self.lo - c, self.hi - c)

    def __floordiv__(self, a: int) -> int:
        """⌊u/a⌋: branches over the quotients, each weighted by its share of the interval."""
        first, last = self.lo // a, (self.hi - 1) // a
        weights = [min(self.hi, (q + 1) * a) - max(self.lo, q * a) for q in range(first, last + 1)]
        q = first + self._src._branch(weights)
        self.lo, self.hi = max(self.lo, q * a), min(self.hi, (q + 1) * a)
        return q


class ExactWords(WordSource):
    """Replays a script of branch choices; new branch points take choice 0 (see exact_law)."""

    def __init__(self, script: list[int]) -> None:
        self.script, self.sizes, self.pos, self.prob = script, [], 0, Fraction(1)

    def _branch(self, weights: list[int]) -> int:
        if self.pos == len(self.script):
            self.script.append(0)
        choice = self.script[self.pos]
        self.sizes.append(len(weights))
        self.pos += 1
        self.prob *= Fraction(weights[choice], sum(weights))
        return choice

    def _below(self, w: _Word, t: int) -> bool:
        if t <= w.lo:
            return False
        if t >= w.hi:
            return True
        if self._branch([t - w.lo, w.hi - t]) == 0:
            w.hi = t
            return True
        w.lo = t
        return False

    def word(self) -> _Word:  # type: ignore[override]
        return _Word(self, 0, SCALE)

    def word64(self) -> _Word:  # type: ignore[override]
        return _Word(self, 0, 1 << 64)

    def words(self, count: int) -> list[_Word]:  # type: ignore[override]
        return [self.word() for _ in range(count)]

    def below(self, high: int) -> int | _Word:  # type: ignore[override]
        if high > MAX_BRANCHES:
            return _Word(self, 0, high)
        return self._branch([1] * high)

    def below32(self, high: int) -> int | _Word:  # type: ignore[override]
        return self.below(high)

    def belows(self, highs: list[int]) -> list[int | _Word]:  # type: ignore[override]
        return [self.below(h) for h in highs]


def exact_law(encode: Callable[[WordSource], Hashable]) -> dict[Hashable, Fraction]:
    """P(output) of ``encode(source)`` over all paths, as exact fractions (summing to one)."""
    law: dict[Hashable, Fraction] = {}
    script: list[int] = []
    while True:
        src = ExactWords(script)
        out = encode(src)
        law[out] = law.get(out, Fraction(0)) + src.prob
        # odometer: advance the deepest branch that has another choice, drop what follows
        sizes = src.sizes
        i = len(sizes) - 1
        while i >= 0 and script[i] + 1 >= sizes[i]:
            i -= 1
        if i < 0:
            assert sum(law.values()) == 1
            return law
        del script[i + 1:]
        script[i] += 1
