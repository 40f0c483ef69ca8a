"""Sketch-delta algebra: the forms a sketch delta takes on disk and their exact sums.

A delta is written as dense per-cohort rows (``counts_to_blob``), as the non-zero cells of its
*flat space* (``SparseDelta``: counters then per-cohort report counts) or as one dense flat row;
``merge_flat``/``add_flat``/``add_sparse`` add stored forms exactly (integer arithmetic), and
``sum_deltas`` sums a transaction's batches, accumulating their payloads once per key. Every
store backend (collector/storage) writes and reads these forms; what a store must do — keys,
idempotent batches, windows, pruning — is its contract (collector/storage/base.py), not here.
See docs/design.md, "Sparse deltas" and "Compaction".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .base import Sketch

#: A store's key of one sketch (the collector's is a (metric, fingerprint, window, cohort,
#: segment) record): any hashable key.
K = TypeVar("K", bound=Hashable)

#: A commit writes a sketch delta sparsely (its non-zero cells) when those cells take at most
#: this share of the bytes its dense rows would (docs/design.md, "Sparse deltas").
SPARSE_MAX_SHARE = 0.5
#: Bytes per sparse cell on disk: a uint32 flat index and an int64 count.
SPARSE_CELL_BYTES = 12

def counts_to_blob(counts: np.ndarray) -> bytes:
    """Canonical on-disk form of one cohort's counters: little-endian int64."""
    return np.ascontiguousarray(counts, dtype="<i8").tobytes()


def blob_to_counts(blob: bytes, cell_shape: tuple[int, ...]) -> np.ndarray:
    """One cohort's counters from their on-disk form, as int64 of ``cell_shape``: read-only, a view
    of ``blob`` on a little-endian machine (a load adds it into its sum: no 16 MB copy at d = 10⁶)."""
    return np.frombuffer(blob, dtype="<i8").reshape(cell_shape).astype(np.int64, copy=False)


# A NamedTuple rather than a frozen dataclass: alike for its users, without the methods a dataclass
# compiles as its module loads (every store, and so a fresh `ldpt estimate`, imports it: issue 32).
class SparseDelta(NamedTuple):
    """The non-zero cells of one sketch delta, in the sketch's *flat space*.

    The flat space of a sketch with m cohorts of ``width`` cells each is its counters
    ``counts.reshape(-1)`` (m·width cells) followed by its m per-cohort report counts, so one
    (cells, values) pair carries a whole delta. Cells are sorted and distinct.
    """

    m: int
    width: int
    cells: np.ndarray    # uint32 flat indices
    values: np.ndarray   # int64, non-zero
    reports: int

    @property
    def nbytes(self) -> int:
        return SPARSE_CELL_BYTES * int(self.cells.size)

    def cells_blob(self) -> bytes:
        return np.ascontiguousarray(self.cells, dtype="<u4").tobytes()

    def values_blob(self) -> bytes:
        return np.ascontiguousarray(self.values, dtype="<i8").tobytes()

    def to_sketch(self) -> Sketch:
        """The dense sketch of this delta (shape (m, width))."""
        out = Sketch(np.zeros((self.m, self.width), dtype=np.int64), np.zeros(self.m, dtype=np.int64))
        add_sparse(out, self.m, self.width, self.cells_blob(), self.values_blob(), "delta")
        return out


def dense_row_bytes(sketch: Sketch) -> int:
    """Bytes the dense rows of ``sketch``'s touched cohorts take (what a dense write costs)."""
    m = len(sketch.reports)
    width = sketch.counts[0].size if m else 0
    touched = int(((sketch.reports != 0) | sketch.counts.reshape(m, -1).any(axis=1)).sum())
    return 8 * width * touched


def sparse_delta(sketch: Sketch) -> SparseDelta:
    """The non-zero cells of ``sketch`` in its flat space (``SparseDelta``)."""
    m = len(sketch.reports)
    flat = sketch.counts.reshape(-1)
    if flat.size + m >= 1 << 32:
        raise ValueError(f"a sketch of {flat.size + m} cells does not fit uint32 flat indices")
    nz = np.flatnonzero(flat)
    rz = np.flatnonzero(sketch.reports)
    cells = np.concatenate([nz, rz + flat.size]).astype(np.uint32)
    values = np.concatenate([flat[nz], sketch.reports[rz]]).astype(np.int64)
    return SparseDelta(m, flat.size // m if m else 0, cells, values, int(sketch.reports.sum()))


def worth_sparse(sketch: Sketch) -> SparseDelta | None:
    """``sparse_delta(sketch)`` when writing it sparsely saves bytes (``SPARSE_MAX_SHARE``)."""
    dense = dense_row_bytes(sketch)
    if dense == 0:
        return None
    delta = sparse_delta(sketch)
    return delta if delta.nbytes <= SPARSE_MAX_SHARE * dense else None


def dense_flat_blob(sketch: Sketch) -> bytes:
    """A sketch's dense flat row: its counters, then its per-cohort report counts, as int64."""
    return np.concatenate([sketch.counts.reshape(-1), sketch.reports]).astype("<i8").tobytes()


def flat_size(m: int, width: int) -> int:
    """Cells of a sketch's flat space: m·width counters and m report counts."""
    return m * width + m


def dense_flat_bytes(m: int, width: int) -> int:
    """Bytes of a key's dense flat row (every cell of its flat space as int64)."""
    return 8 * flat_size(m, width)


def is_dense_flat(cells_len: int, counts_len: int) -> bool:
    """Whether a stored flat row (by its blobs' lengths) is the dense form: no cell indices, and
    a value for every cell (an empty sparse delta has neither)."""
    return cells_len == 0 and counts_len > 0


def merge_flat(parts: Sequence[tuple[int, int, bytes, bytes]], where: str,
               dense_above: float | None = None) -> tuple[int, int, bytes, bytes]:
    """The sum of stored flat rows ``(m, width, cells, values)`` as one row: sparse (sorted
    distinct cells) while 12 bytes per non-zero cell are at most ``dense_above`` (default: the
    dense row's bytes; ``math.inf``: always sparse) and no part is dense, else dense (empty
    ``cells``, every value). Integer arithmetic throughout: the sum is exact. ValueError
    (naming ``where``) if the rows disagree in shape or one is corrupt."""
    m, width = parts[0][0], parts[0][1]
    size = flat_size(m, width)
    dense_bytes = 8 * size
    sparse_cells, sparse_values, dense_parts = [], [], []
    for pm, pw, cells_blob, values_blob in parts:
        if (pm, pw) != (m, width):
            raise ValueError(f"{where}: flat rows of {m} x {width} and {pm} x {pw} cells; the store "
                             "was written under other parameters")
        if is_dense_flat(len(cells_blob), len(values_blob)):
            if len(values_blob) != dense_bytes:
                raise ValueError(f"{where}: corrupt dense row ({len(values_blob)} bytes, expected {dense_bytes})")
            dense_parts.append(np.frombuffer(values_blob, dtype="<i8"))
            continue
        cells = np.frombuffer(cells_blob, dtype="<u4")
        values = np.frombuffer(values_blob, dtype="<i8")
        if cells.size != values.size or (cells.size and (int(cells[-1]) >= size
                                                           or not bool(np.all(cells[1:] > cells[:-1])))):
            raise ValueError(f"{where}: corrupt sparse delta ({cells.size} cells, {values.size} values)")
        sparse_cells.append(cells)
        sparse_values.append(values)
    if not dense_parts and sparse_cells:
        cells = np.concatenate(sparse_cells).astype(np.int64)
        values = np.concatenate(sparse_values)
        order = np.argsort(cells, kind="stable")
        cells, values = cells[order], values[order]
        starts = np.flatnonzero(np.concatenate(([True], cells[1:] != cells[:-1])))
        cells, values = cells[starts], np.add.reduceat(values, starts)
        keep = values != 0
        cells, values = cells[keep], values[keep]
        if SPARSE_CELL_BYTES * cells.size <= (dense_bytes if dense_above is None else dense_above):
            return m, width, cells.astype("<u4").tobytes(), values.astype("<i8").tobytes()
        flat = np.zeros(size, dtype=np.int64)
        flat[cells] = values
        return m, width, b"", flat.astype("<i8").tobytes()
    flat = np.zeros(size, dtype=np.int64)
    for part in dense_parts:
        flat += part
    for cells, values in zip(sparse_cells, sparse_values):
        flat[cells] += values          # distinct cells within a row: plain fancy-index add
    return m, width, b"", flat.astype("<i8").tobytes()


def folded_form(sketch: Sketch) -> SparseDelta | None:
    """How a key's whole sum is written when it goes to flat rows: one sparse row when that
    takes fewer bytes than its dense flat row, else None (one dense flat row)."""
    m = len(sketch.reports)
    if m == 0:
        return None
    delta = sparse_delta(sketch)
    return delta if delta.nbytes <= dense_flat_bytes(m, sketch.counts[0].size) else None


def add_flat(out: Sketch, m: int, width: int, cells_blob: bytes, values_blob: bytes, where: str) -> None:
    """Add one stored flat row (sparse delta or dense flat row) into ``out`` (in place)."""
    if not is_dense_flat(len(cells_blob), len(values_blob)):
        add_sparse(out, m, width, cells_blob, values_blob, where)
        return
    out_m = len(out.reports)
    out_width = out.counts[0].size if out_m else 0
    if (m, width) != (out_m, out_width):
        raise ValueError(f"{where}: dense row of {m} x {width} cells, the registry's sketch is "
                         f"{out_m} x {out_width}; the store was written under other parameters")
    if len(values_blob) != dense_flat_bytes(m, width):
        raise ValueError(f"{where}: corrupt dense row ({len(values_blob)} bytes)")
    values = np.frombuffer(values_blob, dtype="<i8")
    flat = out.counts.reshape(-1)
    flat += values[:flat.size]
    out.reports += values[flat.size:]


def add_sparse(out: Sketch, m: int, width: int, cells_blob: bytes, values_blob: bytes,
               where: str) -> None:
    """Add one stored sparse delta into ``out`` (in place), checking it fits ``out``'s shape."""
    out_m = len(out.reports)
    out_width = out.counts[0].size if out_m else 0
    if (m, width) != (out_m, out_width):
        raise ValueError(f"{where}: sparse delta of {m} x {width} cells, the registry's sketch is "
                         f"{out_m} x {out_width}; the store was written under other parameters")
    cells = np.frombuffer(cells_blob, dtype="<u4")
    values = np.frombuffer(values_blob, dtype="<i8")
    if cells.size != values.size or (cells.size and (int(cells[-1]) >= m * width + m
                                                       or not bool(np.all(cells[1:] > cells[:-1])))):
        raise ValueError(f"{where}: corrupt sparse delta ({cells.size} cells, {values.size} values)")
    flat = out.counts.reshape(-1)
    split = int(np.searchsorted(cells, flat.size))  # cells are sorted: counters, then reports
    flat[cells[:split]] += values[:split]            # distinct cells: plain fancy-index add
    out.reports[cells[split:].astype(np.int64) - flat.size] += values[split:]


def merge_deltas(target: dict[K, Sketch], deltas: Mapping[K, Sketch]) -> None:
    """Add ``deltas`` into ``target`` (copying on first insert)."""
    for key, sk in deltas.items():
        if key in target:
            target[key] = target[key].merge(sk)
        else:
            target[key] = sk.copy()


def sum_deltas(deltas_seq: Iterable[Mapping[K, Sketch]],
               sparse: bool = False) -> dict[K, Sketch | SparseDelta]:
    """Sum of many batches' deltas (one transaction's worth).

    Deltas that carry ``payload_groups`` — ``[(key, protocol, payloads), ...]``, the collector's
    validated but not yet accumulated batches — are concatenated per key and accumulated in
    one vectorised ``protocol.accumulate`` call per key: no per-batch dense sketch, and the
    per-call overhead is paid once per transaction instead of once per batch. With ``sparse``,
    a key whose reports touch few of its sketch's cells (``sparse_from_payloads``) comes back
    as a ``SparseDelta``, built without a sketch-sized temporary.
    """
    total: dict[K, Sketch | SparseDelta] = {}
    pending: dict[K, tuple[Any, list[dict[str, np.ndarray]]]] = {}
    for deltas in deltas_seq:
        groups = getattr(deltas, "payload_groups", None)
        if groups is None:
            merge_deltas(total, deltas)  # type: ignore[arg-type]
            continue
        for key, proto, payloads in groups:
            pending.setdefault(key, (proto, []))[1].append(payloads)
    for key, (proto, parts) in pending.items():
        payloads = parts[0] if len(parts) == 1 else \
            {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        sketch = total.get(key)
        if sketch is None and sparse:
            delta = sparse_from_payloads(proto, payloads)
            if delta is not None:
                total[key] = delta
                continue
        if sketch is None:  # sketches in ``total`` are copies we own: safe to add in place
            sketch = total[key] = proto.new_sketch()
        proto.accumulate(sketch, payloads)
    return total


def sparse_from_payloads(proto: Any, payloads: Mapping[str, np.ndarray]) -> SparseDelta | None:
    """The ``SparseDelta`` of a batch of reports from the protocol's ``flat_cells`` — O(b log b)
    for b reports, whatever the sketch's size — or None when the protocol has no flat cells or
    the batch would touch too much of the sketch for sparse rows to pay."""
    cells = proto.flat_cells(payloads)
    if cells is None:
        return None
    counter_cells, cohorts = cells
    m = proto.cohorts
    width = math.prod(proto.cell_shape)
    size = m * width
    if SPARSE_CELL_BYTES * (counter_cells.size + cohorts.size) > SPARSE_MAX_SHARE * 8 * (size + m) \
            or size + m >= 1 << 32:
        return None
    flat, values = np.unique(np.concatenate([counter_cells, cohorts + size]), return_counts=True)
    return SparseDelta(m, width, flat.astype(np.uint32), values.astype(np.int64), int(cohorts.size))
