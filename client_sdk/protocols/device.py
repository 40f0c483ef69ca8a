"""The device half of a protocol: what a phone needs to send one report (no numpy, ever).

A protocol is two halves over one frozen params dataclass (docs/design.md, "Two halves"):

- the **device half** (this module's ``DeviceHalf``, one subclass per protocol in
  ``client_sdk/protocols/<name>.py``): the params and their integer thresholds, ε and ε∞, the
  payload size, the published ``encoder_block()`` and one uniform one-report encoder
  ``encode_one(index, key, ctx)`` — the same shape as the TypeScript ``Encoder``
  (client_sdk/js/src/protocols/types.ts). Plain Python integers and floats only.
- the **server half** (``sketches.<name>``, in the server distribution): vectorised simulate,
  wire decoding, validate, accumulate, estimate, the exact output table. It is built from the
  device half (``sketches.server_half``) and reads every constant through it, so the two cannot
  drift.
"""

from __future__ import annotations

import abc
import functools
import math
import operator
import sys
from typing import Any, ClassVar, NamedTuple

from ..errors import DomainError
from ..randomness import OS_WORDS, WordSource
from ._epsilon import log_up


def check_domain_and_epsilon(d: int, epsilon: float, protocol: str) -> None:
    """The checks every params class starts with: a real domain and a finite positive budget."""
    if d < 2:
        raise ValueError(f"{protocol} needs a domain of at least 2 values")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")


def numpy_types(*names: str) -> tuple[type, ...]:
    """numpy's scalar types ``names`` (e.g. "integer", "bool_") if numpy is loaded, else ().

    For the value checks that accept numpy scalars (a params field, a reported number, a
    boolean's 0/1): a numpy value cannot exist before numpy is imported, so the check never
    needs to import it, and the SDK names no numpy.
    """
    numpy = sys.modules.get("numpy")
    return () if numpy is None else tuple(getattr(numpy, n) for n in names)


class Context(NamedTuple):
    """Everything a report may depend on besides the value (the TypeScript ``Context``): the
    device secret, the metric's name, the UTC day number, and the word source (the OS CSPRNG
    unless a test injects one)."""

    secret: bytes
    metric: str
    day: int
    words: WordSource = OS_WORDS


class DeviceHalf(abc.ABC):
    """Base class of device halves; subclasses set ``name`` and take a params dataclass."""

    name: ClassVar[str]
    #: True when the per-client cohort is part of the report (derived from the client secret).
    uses_cohorts: ClassVar[bool] = False
    #: True for the two-round protocols (docs/protocols.md, "L-protocols"): a report is a fresh
    #: second round of a first round memoised per device and value (``longitudinal.MemoisedDevice``).
    two_round: ClassVar[bool] = False

    def __init__(self, params: Any) -> None:
        self.params = params
        #: The server half built from this device half, cached here by ``sketches.server_half``
        #: (always None on a device: the SDK never builds one).
        self.server_half_cache: Any = None

    @property
    def domain_size(self) -> int:
        """d: number of domain values (0-based indices); ``params.d`` unless a protocol says otherwise."""
        return self.params.d

    @property
    def cohorts(self) -> int:
        """m: number of cohorts in the sketch (1 when the protocol has none)."""
        return 1

    @property
    @abc.abstractmethod
    def epsilon(self) -> float:
        """Per-report epsilon, from the realised (quantised) probabilities."""

    @property
    def epsilon_longitudinal(self) -> float | None:
        """Bound for any number of reports of one value (memoised protocols), else None."""
        return None

    @property
    @abc.abstractmethod
    def payload_bits(self) -> int:
        """Size of one report's protocol payload on the wire, in bits (information content)."""

    @abc.abstractmethod
    def encoder_block(self) -> dict[str, Any]:
        """This protocol's resolved integers in the published ``encoder`` object
        (docs/conformance.md, "The encoder block"; client_sdk.encoder_block adds the rest)."""

    @functools.cached_property
    def block_encoder(self) -> Any:
        """The one-report encoder built from this half's own ``encoder_block()``
        (client_sdk/protocols/blocks.py), built once: the one home of the protocol's draw, which
        every report of this half goes through, as the client's do."""
        from .blocks import block_protocol  # the protocols' registry imports this module

        return block_protocol(self.name).encoder(self.encoder_block())  # type: ignore[union-attr]

    def encode_one(self, index: int, key: str, ctx: Context) -> Any:
        """The randomised wire payload of domain index ``index`` (string metrics: of ``key``):
        the block encoder's, after the device-side check of the index."""
        return self.block_encoder.encode_one(self.check_index(index), key, ctx)

    def randomise(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> Any:
        """One report of ``index`` from ``source`` (the OS CSPRNG by default), for the protocols
        whose report depends on the index alone (``blocks.IndexEncoder``); others override it."""
        return self.block_encoder.randomise(self.check_index(index), source or OS_WORDS)

    @abc.abstractmethod
    def variance(self, n: int, true_count: float) -> float:
        """Var[ĉ(v)] for n reports when v's true count is ``true_count`` (the figure `auto` scores)."""

    def check_index(self, index: int) -> int:
        """Device-side check of one true index (DomainError when outside the domain)."""
        try:   # int and numpy integers; never a bool, a float or an array
            index = index if type(index) is int else operator.index(index if type(index) is not bool else ())
        except TypeError:
            raise DomainError(f"domain indices must be integers, got {type(index).__name__}") from None
        if not 0 <= index < self.domain_size:
            raise DomainError(f"index {index} at position 0 is outside the domain [0, {self.domain_size})")
        return index


class DirectDevice(DeviceHalf):
    """A pure protocol whose report is one domain value (binary RR, GRR; docs/math.md §3).

    The report is the true value with probability p and each other value with probability q,
    so ε = ln(p/q). ``params`` gives the realised ``p`` and ``q`` and the integer
    ``keep_threshold`` of p; subclasses implement ``randomise``.
    """

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.p, self.q = params.p, params.q
        self.keep_threshold = params.keep_threshold

    @property
    def epsilon(self) -> float:
        from fractions import Fraction  # here: not on the SDK's import

        return log_up(Fraction(self.p) / Fraction(self.q))   # an upper bound (protocols/_epsilon.py)

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.domain_size)))

    def encoder_block(self) -> dict[str, Any]:
        return {"d": self.params.d, "keep_threshold": self.keep_threshold}

    def variance(self, n: int, true_count: float) -> float:
        return pure_variance_one(n, true_count, self.p, self.q)


def pure_variance_one(n: int, true_count: float, p_star: float, q_star: float) -> float:
    """Var[ĉ(v)] of a pure protocol at one true count (docs/math.md §2), in plain floats:
    n q*(1−q*)/(p*−q*)² + c(1−p*−q*)/(p*−q*), the same IEEE operations as the array form."""
    delta = p_star - q_star
    return n * q_star * (1 - q_star) / delta**2 + float(true_count) * (1 - p_star - q_star) / delta


__all__ = ["Context", "DeviceHalf", "DirectDevice", "check_domain_and_epsilon", "pure_variance_one"]
