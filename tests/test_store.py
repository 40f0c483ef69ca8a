"""SQLite sketch store: additivity, dedupe, schema checks, foreign files, no corruption."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from client_sdk.errors import StoreError
from collector.storage.base import BatchOutcome, PendingBatch, SketchKey
from collector.storage.sqlite import SQLiteStore, open_store
from sketches.base import Sketch


def sketch(counts, reports):
    return Sketch(np.asarray(counts, dtype=np.int64), np.asarray(reports, dtype=np.int64))


TEMPLATE = sketch([[0, 0, 0], [0, 0, 0]], [0, 0])
KEY = SketchKey("theme", "fp1", "2026-11-01")


def test_windows_merge_by_summing(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.add_sketch(KEY, sketch([[1, 2, 3], [0, 0, 1]], [6, 1]))
        store.add_sketch(KEY, sketch([[1, 1, 1], [0, 0, 0]], [3, 0]))
        store.add_sketch(SketchKey("theme", "fp1", "2026-11-02"), sketch([[5, 0, 0], [0, 2, 0]], [5, 2]))
        one = store.load("theme", "fp1", TEMPLATE, ["2026-11-01"])
        assert one.counts.tolist() == [[2, 3, 4], [0, 0, 1]] and one.reports.tolist() == [9, 1]
        both = store.load("theme", "fp1", TEMPLATE)
        assert both.counts.tolist() == [[7, 3, 4], [0, 2, 1]] and both.total_reports == 17
        ranged = store.load("theme", "fp1", TEMPLATE, since="2026-11-02", until="2026-11-30")
        assert ranged.reports.tolist() == [5, 2]
        assert store.load("theme", "other-fp", TEMPLATE).total_reports == 0
        assert [(w.window, w.reports) for w in store.windows("theme")] == [("2026-11-01", 10), ("2026-11-02", 7)]


def test_batch_ids_dedupe_and_conflict(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        delta = {KEY: sketch([[1, 0, 0], [0, 0, 0]], [1, 0])}
        a = PendingBatch(b"A" * 16, b"digest-a", delta, 1)
        assert store.commit([a, a]) == [BatchOutcome.APPLIED, BatchOutcome.DUPLICATE]
        assert store.commit([a]) == [BatchOutcome.DUPLICATE]
        assert store.commit([PendingBatch(b"A" * 16, b"digest-b", delta, 1)]) == [BatchOutcome.CONFLICT]
        assert store.load("theme", "fp1", TEMPLATE).total_reports == 1


def test_failed_commit_changes_nothing(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.add_sketch(KEY, sketch([[1, 0, 0], [0, 0, 0]], [1, 0]))
        good = PendingBatch(b"B" * 16, b"d", {KEY: sketch([[1, 0, 0], [0, 0, 0]], [1, 0])}, 1)
        wrong_shape = PendingBatch(b"C" * 16, b"d", {KEY: sketch([[1, 0], [0, 0]], [1, 0])}, 1)
        with pytest.raises((StoreError, ValueError)):
            store.commit([good, wrong_shape])
        assert store.load("theme", "fp1", TEMPLATE).total_reports == 1
        assert store.commit([good]) == [BatchOutcome.APPLIED]  # B was rolled back, so it is new


def test_reopen_is_durable_and_wal(tmp_path):
    path = tmp_path / "s.sqlite"
    with SQLiteStore(path) as store:
        store.add_sketch(KEY, sketch([[1, 2, 3], [4, 5, 6]], [6, 15]))
    with open_store(path) as store:
        assert store.load("theme", "fp1", TEMPLATE).counts.tolist() == [[1, 2, 3], [4, 5, 6]]
        store.check()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_missing_foreign_newer_and_garbage_files(tmp_path):
    with pytest.raises(StoreError, match="no store here"):
        open_store(tmp_path / "absent.sqlite")
    assert not (tmp_path / "absent.sqlite").exists()

    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE users(id INTEGER)").connection.commit()
    with pytest.raises(StoreError, match="not an ldp-telemetry store"):
        open_store(foreign)

    newer = tmp_path / "newer.sqlite"
    SQLiteStore(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE ldpt_meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer ldp-telemetry.*v99"):
        open_store(newer)

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    before = garbage.read_bytes()
    with pytest.raises(StoreError, match="not a readable SQLite store"):
        open_store(garbage)
    assert garbage.read_bytes() == before
