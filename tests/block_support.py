"""Seeded reports of one-report encoders over a metric's whole domain (tests/test_block_encoders.py,
tests/test_compiled_registry.py): the same word streams, secrets and days for every encoder."""

from __future__ import annotations

import hashlib
from typing import Any

from client_sdk.protocols.device import Context
from client_sdk.randomness import SeededWords
from client_sdk.registry import Kind, MetricSpec

#: Word streams per input; each stream also has its own device secret and UTC day.
STREAMS = 12
#: Inputs per metric: the whole domain when it is this small, else this many spread over it.
INPUTS = 48
#: Strings for the open-domain metrics: empty, short, multi-byte, and longer than discover keeps.
STRINGS = ["", "a", "home", "/search?q=x", "ünïcødé ✓", "x" * 300, *(f"value-{i}" for i in range(20))]


def spread(size: int) -> list[int]:
    """Distinct indices over [0, size): all of them, or INPUTS from the first to the last."""
    if size <= INPUTS:
        return list(range(size))
    return sorted({round(i * (size - 1) / (INPUTS - 1)) for i in range(INPUTS)})


def inputs(spec: MetricSpec) -> list[tuple[int, str]]:
    """(index, key) pairs the encoders take for ``spec``: grid points of a mean metric, domain
    indices of the others, strings of a string metric."""
    if spec.kind is Kind.STRING:
        return [(-1, s) for s in STRINGS]
    return [(i, "") for i in spread(spec.protocol_impl.domain_size)]


def context(stream: int, metric: str) -> Context:
    """A context of seeded words, with a secret and a day of its own per stream."""
    secret = hashlib.sha256(b"test_block_encoders %d" % stream).digest()
    return Context(secret, metric, 20_000 + stream % 3, SeededWords(1_000 + stream))


def reports(encoder: Any, spec: MetricSpec) -> list[Any]:
    """The report of every input from every stream (the same streams for every encoder)."""
    return [encoder.encode_one(index, key, context(stream, spec.name))
            for index, key in inputs(spec) for stream in range(STREAMS)]
