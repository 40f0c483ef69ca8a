"""One-report encoders built from a published encoder block alone (docs/conformance.md, "The
encoder block"), and the one dispatch that finds a protocol's.

Every protocol module registers, once, a ``BLOCK = BlockProtocol(encoder, check, thresholds)``:
the class that encodes from the block's integers (the TypeScript ``encoderFor(block)``,
client_sdk/js/src/registry.ts), the consistency checks of that protocol's members
(docs/conformance.md, "Checks an SDK applies to a block"), and the members beyond the usual
``*_threshold`` ones that are probabilities out of 2^32 (Hybrid's ``h``). ``block_protocol``
reads that registration; ``encoder_from_block`` builds the encoder. An encoder never re-derives
an integer from ε: the block is the contract every SDK encodes from, so a block compiled ahead
of time needs none of the start-up searches of the numeric mechanisms.

An encoder draws its fresh words from ``ctx.words`` in the pinned order (docs/conformance.md,
"Consumption order, per protocol"); memoised ones also read the device's memo streams. Plain
Python integers only: no numpy at any level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

from ..errors import RegistryError
from ..hashing import check_secret, derive_cohort
from ..memo import MemoCache
from ..randomness import OS_WORDS, SCALE
from .device import Context

#: 2^64: the scale of the thresholds published as decimal strings.
U64 = 1 << 64


class BlockReader:
    """A block's members read for its checks: each refusal a RegistryError naming the metric, the
    member (``field``) and what is wrong."""

    __slots__ = ("block", "metric", "source")

    def __init__(self, block: Mapping[str, Any], metric: str, source: str) -> None:
        self.block, self.metric, self.source = block, metric, source

    def fail(self, field: str, why: str) -> None:
        """Refuse the block at member ``field``."""
        raise RegistryError(f"encoder block: {why}", source=self.source, metric=self.metric, field=field)

    def int(self, key: str, block: Mapping[str, Any] | None = None) -> int:
        """Member ``key`` of the block (or of a nested ``block``) as a JSON integer, never a bool or 4.0."""
        value = (self.block if block is None else block).get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"{key} must be a JSON integer, got {value!r}")
        return value

    def u64(self, text: Any, field: str) -> int:
        """A decimal string of an integer in [0, 2^64] (JSON numbers beyond 2^53 are not exact in JavaScript)."""
        if not isinstance(text, str) or not text.isascii() or not text.isdigit() \
                or (len(text) > 1 and text[0] == "0") or int(text) > U64:
            self.fail(field, f"{field} must be an integer in [0, 2^64] as a decimal string, got {text!r}")
        return int(text)


#: A protocol's own checks of its block's members (after the members' types, before the edges).
BlockCheck = Callable[[BlockReader], None]


class BlockProtocol(NamedTuple):
    """What a protocol module registers for its blocks (its module's ``BLOCK``)."""

    #: the one-report encoder, built from the block: ``encoder(block)``
    encoder: type
    #: the protocol's consistency checks, in docs/conformance.md's order; None: it has none
    check: BlockCheck | None = None
    #: members besides the ``*_threshold`` ones that are probabilities out of 2^32 (and may reach it)
    thresholds: tuple[str, ...] = ()
    #: whether its first round is memoised per value (the L-protocols, RAPPOR's permanent randomised
    #: response): the ledger must then charge ε∞ for each new value, so its metric publishes one
    memoised: bool = False
    #: the members its encoder reads besides ``version`` and ``protocol`` (the schema's ``required``,
    #: conformance/encoder-block.schema.json): a block without one is refused, not a KeyError
    members: tuple[str, ...] = ()


def block_protocol(name: Any) -> BlockProtocol | None:
    """The registration of protocol ``name`` (its module's ``BLOCK``), None for a name this SDK does
    not know (a newer block: the caller refuses it)."""
    from .factory import protocol_module  # the protocols' one name -> module map

    try:
        module = protocol_module(name) if isinstance(name, str) else None
    except KeyError:
        return None
    return None if module is None else module.BLOCK


def encoder_from_block(block: Mapping[str, Any]) -> Any:
    """The one-report encoder of a checked block (``client_sdk.encoder_block.check_block``):
    ``encode_one(index, key, ctx)`` like every device half, from the block's integers alone."""
    found = block_protocol(block.get("protocol"))
    if found is None:
        raise RegistryError(f"protocol {block.get('protocol')!r} is unknown: upgrade this SDK", field="protocol")
    return found.encoder(block)


def check_keep(r: Any, reader: BlockReader) -> None:
    """(3) a GRR-style keep threshold T on r outputs must realise p' > q', i.e. T·r > 2^32 (r is
    the block's member; a missing one is refused by the check that needs it)."""
    if r is not None and reader.int("keep_threshold") * r <= SCALE:
        reader.fail("keep_threshold", f"keep_threshold × {r} must exceed 2^32 (a kept value more likely "
                    "than any other)")


def u64_member(block: Mapping[str, Any], key: str) -> int:
    """A checked block's decimal-string member as an int (out of 2^64)."""
    return int(block[key])


class BlockEncoder:
    """Base of every one-report encoder built from a block: ``encode_one(index, key, ctx)``, and
    what the client asks of a protocol's reports without testing the encoder's class."""

    __slots__ = ()
    #: True for the two-round protocols (``MemoEncoder``), as ``DeviceHalf.two_round``: a report is a
    #: fresh round of a first round memoised per device and value, whose ``memo_key`` the ledger charges.
    two_round: ClassVar[bool] = False

    def encode_one(self, index: int, key: str, ctx: Context) -> Any:
        """The randomised wire payload of the looked-up ``index`` (string metrics: of ``key``)."""
        raise NotImplementedError


class IndexEncoder(BlockEncoder):
    """Base of the encoders whose report depends on the domain index alone (no secret, no day):
    ``encode_one`` is ``randomise`` with the context's words."""

    __slots__ = ()

    def randomise(self, index: int, source: Any = OS_WORDS) -> Any:
        """One report of ``index`` from ``source``."""
        raise NotImplementedError

    def encode_one(self, index: int, key: str, ctx: Context) -> Any:
        """The randomised wire payload of ``index`` (``key`` unused: the index is the value)."""
        return self.randomise(index, ctx.words)


class MeanEncoder(IndexEncoder):
    """Base of a mean mechanism's encoder: the grid K of its block and the randomised rounding of a
    normalised value to a grid index (docs/conformance.md, "From a value to a report")."""

    __slots__ = ("grid",)

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.grid: int = block["grid"]

    def discretise_one(self, t: float, source: Any = OS_WORDS) -> int:
        """Round t in [−1, 1] to a grid index, up iff R < ⌊frac·2^32⌋ (R one word): E[t_j] = t."""
        pos = (min(1.0, max(-1.0, t)) + 1.0) * (self.grid / 2)
        low = math.floor(pos)
        if source.word() < math.floor((pos - low) * SCALE):
            low += 1
        return min(low, self.grid)


class MemoEncoder(BlockEncoder):
    """Base of the memoised protocols' encoders (lgrr, losue, loloha, dbitflip, memobitmean): the
    first round memoised per (secret, metric, memo key) from the memo stream, the second round from
    fresh words (docs/protocols.md, "L-protocols"). Subclasses set ``name`` and give the rounds,
    the wire form and, where it is less than the value, the memo index."""

    __slots__ = ("memo",)
    name: str = ""
    two_round = True

    def __init__(self) -> None:
        self.memo = MemoCache()

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        """What the memoised response depends on: the value itself unless hashed or windowed."""
        return index

    def memo_key(self, index: int, secret: bytes, metric: str) -> str:
        """The ledger's and the memo stream's key of a value: one ε∞ per distinct key."""
        return f"{self.name}:{self.memo_index(index, secret, metric)}"

    def cohort(self, secret: bytes, metric: str) -> int | None:
        """The device's permanent cohort on the wire (None where the report has none)."""
        return None

    def first_round(self, memo_input: int, memo: Any) -> Any:
        """The memoised response of one memo input from its memo stream."""
        raise NotImplementedError

    def second_round(self, first: Any, source: Any) -> Any:
        """The fresh round of one memoised response."""
        raise NotImplementedError

    def wire(self, second: Any, cohort: int | None) -> Any:
        """The wire payload of one second-round response."""
        return second

    def encode_one(self, index: int, key: str, ctx: Context) -> Any:
        """One report of the looked-up index: memoised round from the secret, fresh round from the
        context's words (``key`` unused: the memo key is recomputed from the index)."""
        secret, metric = check_secret(ctx.secret), ctx.metric
        memo_in = self.memo_index(index, secret, metric)
        first = self.memo.get(secret, metric, f"{self.name}:{memo_in}", lambda src: self.first_round(memo_in, src))
        return self.wire(self.second_round(first, ctx.words), self.cohort(secret, metric))


class PermanentCohorts:
    """A device's permanent cohort per metric, HMAC of its secret under a scope (LOLOHA's seed,
    dBitFlipPM's window), cached in memory (at most 64 entries)."""

    __slots__ = ("scope", "size", "cache")

    def __init__(self, scope: str, size: int) -> None:
        self.scope, self.size = scope, size
        self.cache: dict[tuple[bytes, str], int] = {}

    def of(self, secret: bytes, metric: str) -> int:
        """The cohort in [0, size) of ``secret`` for ``metric``."""
        key = (secret, metric)
        cohort = self.cache.get(key)
        if cohort is None:
            if len(self.cache) > 64:
                self.cache.clear()
            cohort = self.cache[key] = derive_cohort(secret, self.scope + metric, self.size)
        return cohort


__all__ = ["BlockEncoder", "MemoEncoder", "PermanentCohorts", "BlockCheck", "BlockProtocol", "BlockReader", "IndexEncoder", "MeanEncoder", "block_protocol",
           "check_keep", "encoder_from_block", "u64_member"]
