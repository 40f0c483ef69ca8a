"""What a store keeps of the batches a shuffler forwards: the batch ids that deduplicate them,
and per (metric, fingerprint, window) what the central claim needs (issue 28 §2, §3).

A shuffler (`ldpt shuffle`) forwards envelopes in uniformly shuffled batches; the collector
opens each envelope, and commits the whole forwarded batch — its envelopes' inner batches, its
forwarded-batch id and its ``ShuffleRecord`` rows — in ONE transaction (``ShuffledBatch`` in
``SketchStore.commit``). So a forwarded batch that is delivered again (the shuffler was killed
before it saw the acknowledgement) is a duplicate as a whole, and a batch interrupted before its
commit left nothing behind: the records describe exactly the reports the sketches hold.

The records (docs/privacy.md, "The central claim of shuffled reports") count what the collector
saw *in clear* — everything in an envelope's batch that is not a randomised payload: which
metrics under which fingerprints, how many reports of each, the public dimensions ``d`` and the
cohort numbers. Two envelopes differing in any of these are told apart by the collector, so a
device hides only among envelopes alike in them:

- ``smallest_batch``: the fewest envelopes carrying the key that were alike in their metrics,
  fingerprints and report counts (the ``signature``), in any forwarded batch of the window;
- ``smallest_segment``: the same, also alike in the public dimensions (equal to
  ``smallest_batch`` when no envelope carried dimensions);
- ``smallest_cohort``: the same, also alike in the key's cohort numbers (equal to
  ``smallest_segment`` for protocols without a cohort in clear).

Only envelopes whose inner batch was applied by this commit are counted: a duplicate (a batch
the sketches already held, sent again) is not a new member of the crowd, and a refused or
unopened envelope left nothing in the sketches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from .base import BatchOutcome, PendingBatch, SketchKey

__all__ = ["EnvelopeView", "ShuffleRecord", "ShuffledBatch", "ShuffledOutcome", "batch_records", "merge_records"]


@dataclasses.dataclass(frozen=True)
class EnvelopeView:
    """What the collector sees in clear of one opened envelope (module docstring).

    ``signature``: ((metric, fingerprint, reports), ...) of the batch's metrics, sorted;
    ``segment``: its public dimension values ((name, value), ...), sorted; ``keys``: per sketch key
    the batch writes to (its metrics and their segment keys), the reports of it and their cohort
    numbers in clear (sorted; () for a protocol without one); ``epsilon``: the local ε the envelope
    carries (all its reports, docs/privacy.md); ``reports``: reports in the envelope."""

    signature: tuple[tuple[str, str, int], ...]
    segment: tuple[tuple[str, str], ...]
    keys: Mapping[SketchKey, tuple[int, tuple[int, ...]]]
    epsilon: float
    reports: int


@dataclasses.dataclass
class ShuffledBatch:
    """A forwarded batch to commit whole and once: its id (from the shuffler), the digest of
    its envelopes (the same set sent again is the same batch, in any order), how many
    envelopes it had (opened or not), and the inner batches that opened and validated with the
    ``EnvelopeView`` of each (same order)."""

    batch_id: bytes
    digest: bytes
    envelopes: int
    members: list[PendingBatch]
    views: list[EnvelopeView]

    @property
    def reports(self) -> int:
        return sum(m.reports for m in self.members)


@dataclasses.dataclass(frozen=True)
class ShuffledOutcome:
    """What a commit did with a ``ShuffledBatch``: ``outcome`` APPLIED (its id is new: each member
    was deduplicated by its own batch id, ``members``), DUPLICATE (the id and digest were committed
    before: nothing was done) or CONFLICT (the id was committed with other envelopes)."""

    outcome: BatchOutcome
    members: tuple[BatchOutcome, ...] = ()

    @property
    def value(self) -> str:
        return self.outcome.value


@dataclasses.dataclass(frozen=True)
class ShuffleRecord:
    """Per (metric or segment key, fingerprint, window): what came through authenticated
    shufflers (module docstring). ``reports``/``envelopes``/``batches``: totals over the window's
    forwarded batches; ``smallest_*``/``largest_batch``: over them; ``envelope_epsilon``: the
    largest local ε one envelope carrying the key held; ``min_reports``/``max_reports``: the
    fewest and most reports of the key in one envelope; ``max_envelope_reports``: the most
    reports (of any metric) in one envelope carrying it."""

    metric: str
    fingerprint: str
    window: str
    reports: int
    envelopes: int
    batches: int
    smallest_batch: int
    largest_batch: int
    smallest_segment: int
    smallest_cohort: int
    envelope_epsilon: float
    min_reports: int
    max_reports: int
    max_envelope_reports: int

    @property
    def key(self) -> SketchKey:
        return SketchKey(self.metric, self.fingerprint, self.window)

    def merge(self, other: ShuffleRecord) -> ShuffleRecord:
        """Both records' batches as one record (``COMBINE``: sums, minima, maxima)."""
        return dataclasses.replace(self, **{name: _PYTHON[how](getattr(self, name), getattr(other, name))
                                            for name, how in COMBINE.items()})


#: How two records of one key combine, per counted field: the one definition that
#: ``ShuffleRecord.merge`` and both stores' upserts (``upsert_assignments``) follow.
COMBINE: dict[str, str] = {
    "reports": "sum", "envelopes": "sum", "batches": "sum",
    "smallest_batch": "min", "largest_batch": "max", "smallest_segment": "min",
    "smallest_cohort": "min", "envelope_epsilon": "max", "min_reports": "min",
    "max_reports": "max", "max_envelope_reports": "max",
}
_PYTHON = {"sum": lambda a, b: a + b, "min": min, "max": max}


def upsert_assignments(stored: str, new: str, least: str, greatest: str) -> str:
    """The ``SET`` list of an ``ON CONFLICT ... DO UPDATE`` that merges a new record row into the
    stored one as ``COMBINE`` says: ``stored``/``new`` qualify the two rows' columns (``""`` and
    ``excluded.`` in SQLite), ``least``/``greatest`` name the SQL dialect's two-argument minimum
    and maximum (``min``/``max`` in SQLite, ``LEAST``/``GREATEST`` in PostgreSQL)."""
    template = {"sum": "{s}{c} + {n}{c}", "min": least + "({s}{c}, {n}{c})", "max": greatest + "({s}{c}, {n}{c})"}
    return ",\n    ".join(f"{c} = " + template[how].format(s=stored, n=new, c=c) for c, how in COMBINE.items())


def batch_records(batch: ShuffledBatch, applied: Sequence[bool]) -> dict[SketchKey, ShuffleRecord]:
    """The records of one forwarded batch, counting the members ``applied`` by this commit."""
    per_key: dict[SketchKey, list[tuple[EnvelopeView, int, tuple[int, ...]]]] = {}
    for view, ok in zip(batch.views, applied):
        if ok:
            for key, (reports, cohorts) in view.keys.items():
                per_key.setdefault(key, []).append((view, reports, cohorts))
    out = {}
    for key, members in per_key.items():
        crowds: dict[tuple, int] = {}
        segments: dict[tuple, int] = {}
        cohorts: dict[tuple, int] = {}
        for view, _, cohort in members:
            crowds[view.signature] = crowds.get(view.signature, 0) + 1
            seg = (view.signature, view.segment)
            segments[seg] = segments.get(seg, 0) + 1
            coh = (seg, cohort)
            cohorts[coh] = cohorts.get(coh, 0) + 1
        out[key] = ShuffleRecord(
            key.metric, key.fingerprint, key.window, reports=sum(r for _, r, _ in members),
            envelopes=len(members), batches=1, smallest_batch=min(crowds.values()),
            largest_batch=len(members), smallest_segment=min(segments.values()),
            smallest_cohort=min(cohorts.values()),
            envelope_epsilon=max(view.epsilon for view, _, _ in members),
            min_reports=min(r for _, r, _ in members), max_reports=max(r for _, r, _ in members),
            max_envelope_reports=max(view.reports for view, _, _ in members))
    return out


def merge_records(into: dict[SketchKey, ShuffleRecord], more: Mapping[SketchKey, ShuffleRecord]) -> None:
    """Add ``more`` into ``into`` (one transaction's records per key)."""
    for key, record in more.items():
        into[key] = into[key].merge(record) if key in into else record


def finite_epsilon(value: float) -> float:
    """An envelope's ε as stored: finite and non-negative (a REAL column; ∞ would not round-trip
    through every driver), rounded up to the next float so that a stored sum never understates."""
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"an envelope's epsilon must be finite and >= 0, not {value!r}")
    return math.nextafter(value, math.inf) if value else 0.0
