"""The shuffler's durable pool: envelopes stored before they are acknowledged, formed into
batches, deleted only once the collector acknowledged their commit (SQLite, WAL).

Schema (v1):

  meta(key PRIMARY KEY, value)                          application id, schema version, the last
                                                        key configurations fetched
  envelopes(digest PRIMARY KEY, body, epoch, batch)     pooled envelopes (WITHOUT ROWID: rows are
                                                        kept in digest order, no arrival order)
  epochs(id PRIMARY KEY, opened)                        coarse arrival: when each epoch opened
  batches(id PRIMARY KEY, envelopes, bytes)             formed batches not yet acknowledged
  forwarded(digest PRIMARY KEY, day)                    digests of forwarded envelopes (dedupe of
                                                        late SDK retries), for ``seen_days``

What is stored of an envelope is its bytes and its epoch — no address, no header, no arrival
time: an epoch is the interval between two formed batches (or a quarter of ``max_delay``),
which is all ``max_delay`` needs, and it is forgotten with the envelope. The SHA-256 of the
bytes deduplicates an SDK's retries (it resends the same bytes until acknowledged).

Exactly-once: an envelope is committed (``store``) before the 202; a batch is formed in one
transaction (its id and members written together) and sent as often as needed with the same
id and envelopes; its envelopes are deleted — and their digests kept in ``forwarded`` — in the
transaction that follows the collector's acknowledgement of its commit. A SIGKILL anywhere
leaves either an envelope pooled, or assigned to a batch that is sent again (the collector
deduplicates its id, and each envelope's inner batch id), or forwarded and acknowledged.

Every method runs on one thread (the shuffler's writer executor): the pool has one connection.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from client_sdk.errors import StoreError

APPLICATION_ID = "ldp-telemetry-shuffler"
SCHEMA_VERSION = 1
BATCH_ID_BYTES = 16
#: Bytes msgpack adds around each envelope (bin 32 header) and around the batch (map, keys, id).
ENVELOPE_FRAMING, BATCH_FRAMING = 5, 64

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    """CREATE TABLE IF NOT EXISTS envelopes (digest BLOB PRIMARY KEY, body BLOB NOT NULL,
       epoch INTEGER NOT NULL, batch BLOB) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS envelopes_pool ON envelopes (batch, epoch)",
    "CREATE TABLE IF NOT EXISTS epochs (id INTEGER PRIMARY KEY, opened REAL NOT NULL)",
    """CREATE TABLE IF NOT EXISTS batches (id BLOB PRIMARY KEY, envelopes INTEGER NOT NULL,
       bytes INTEGER NOT NULL) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS forwarded (digest BLOB PRIMARY KEY, day TEXT NOT NULL) WITHOUT ROWID",
)


def fisher_yates(items: list, randbelow: Callable[[int], int] = secrets.randbelow) -> list:
    """Shuffle ``items`` in place, uniformly over all orders (Fisher and Yates; Knuth's
    Algorithm P): for i from n−1 down to 1, swap item i with item j drawn uniformly from
    [0, i] by the OS CSPRNG. Returns ``items``."""
    for i in range(len(items) - 1, 0, -1):
        j = randbelow(i + 1)
        items[i], items[j] = items[j], items[i]
    return items


@dataclasses.dataclass(frozen=True)
class PoolCounts:
    """What the pool holds: envelopes waiting (not in a batch), their bytes, envelopes in formed
    batches not yet acknowledged (and those batches), and when the oldest waiting epoch opened."""

    pooled: int
    pooled_bytes: int
    assigned: int
    assigned_bytes: int
    batches: int
    oldest: float | None

    @property
    def envelopes(self) -> int:
        return self.pooled + self.assigned

    @property
    def bytes(self) -> int:
        return self.pooled_bytes + self.assigned_bytes


class Pool:
    """The pool in one SQLite file (module docstring); ``clock`` gives wall-clock seconds."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL",
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None,
                                         check_same_thread=False)
            self._init(synchronous)
            #: the counts as of the last committed transaction, kept by the pool's one thread (the
            #: event loop reads this reference; it never adjusts a copy, which would race the thread)
            self.live: PoolCounts = self.counts()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a readable shuffler pool ({exc})") from None

    def _init(self, synchronous: str) -> None:
        conn = self._conn
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path}: a SQLite database, but not a shuffler pool "
                             f"(tables: {', '.join(sorted(tables))})")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('application', ?)", (APPLICATION_ID,))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('application', 'schema_version')"))
        if meta.get("application") != APPLICATION_ID:
            raise StoreError(f"{self.path}: not a shuffler pool (it may be a collector's store: give "
                             "`ldpt shuffle` a file of its own)")
        if int(meta["schema_version"]) != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: pool schema v{meta['schema_version']} is not v{SCHEMA_VERSION}")
        if conn.execute("SELECT count(*) FROM epochs").fetchone()[0] == 0:
            conn.execute("INSERT INTO epochs (opened) VALUES (?)", (self.clock(),))

    # --- transactions -----------------------------------------------------------------------------
    def _transaction(self, work: Callable[[sqlite3.Connection], object]) -> object:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            out = work(conn)
            conn.execute("COMMIT")
            return out
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: {exc}") from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # --- ingest -----------------------------------------------------------------------------------
    def store(self, envelopes: Sequence[bytes]) -> list[bool]:
        """Store envelopes durably in one transaction; per envelope whether it was a duplicate
        (the same bytes pooled, or forwarded within ``seen_days``)."""
        added = [0, 0]

        def work(conn: sqlite3.Connection) -> list[bool]:
            epoch = conn.execute("SELECT max(id) FROM epochs").fetchone()[0]
            out = []
            for body in envelopes:
                digest = hashlib.sha256(body).digest()
                if conn.execute("SELECT 1 FROM forwarded WHERE digest=?", (digest,)).fetchone():
                    out.append(True)
                    continue
                cur = conn.execute("INSERT OR IGNORE INTO envelopes (digest, body, epoch) VALUES (?, ?, ?)",
                                   (digest, body, epoch))
                out.append(cur.rowcount == 0)
                if cur.rowcount:
                    added[0] += 1
                    added[1] += len(body)
            return out
        out = self._transaction(work)
        if added[0]:
            live = self.live
            oldest = live.oldest if live.oldest is not None else self.current_epoch_opened()
            self.live = dataclasses.replace(live, pooled=live.pooled + added[0],
                                            pooled_bytes=live.pooled_bytes + added[1], oldest=oldest)
        return out  # type: ignore[return-value]

    def counts(self) -> PoolCounts:
        c = self._conn
        pooled, pooled_bytes = c.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM envelopes "
                                         "WHERE batch IS NULL").fetchone()
        assigned, assigned_bytes, batches = c.execute(
            "SELECT coalesce(sum(envelopes), 0), coalesce(sum(bytes), 0), count(*) FROM batches").fetchone()
        oldest = c.execute("SELECT min(e.opened) FROM epochs e WHERE e.id = (SELECT min(epoch) FROM envelopes "
                           "WHERE batch IS NULL)").fetchone()[0]
        return PoolCounts(int(pooled), int(pooled_bytes), int(assigned), int(assigned_bytes), int(batches),
                          None if oldest is None else float(oldest))

    # --- batches ----------------------------------------------------------------------------------
    def form_batch(self, max_batch: int, max_bytes: int, *, min_batch: int = 1,
                   randbelow: Callable[[int], int] = secrets.randbelow) -> tuple[bytes, int] | None:
        """Assign up to ``max_batch`` waiting envelopes (within ``max_bytes`` forwarded) to a new
        batch — whole epochs oldest first, a uniformly random subset of the epoch that does not fit
        — and open a new epoch, in one transaction; (batch id, envelopes), or None when fewer than
        ``min_batch`` would go."""
        def work(conn: sqlite3.Connection) -> tuple[bytes, int] | None:
            budget = max_bytes - BATCH_FRAMING
            chosen: list[tuple[bytes, int]] = []
            size = 0
            epochs = [r[0] for r in conn.execute("SELECT DISTINCT epoch FROM envelopes WHERE batch IS NULL "
                                                 "ORDER BY epoch")]
            for epoch in epochs:
                rows = conn.execute("SELECT digest, length(body) FROM envelopes WHERE batch IS NULL AND epoch=?",
                                    (epoch,)).fetchall()
                fisher_yates(rows, randbelow)   # which of the epoch go, when not all fit: a uniform subset
                for digest, length in rows:
                    if len(chosen) >= max_batch:
                        break
                    if size + length + ENVELOPE_FRAMING > budget:
                        continue
                    chosen.append((digest, length))
                    size += length + ENVELOPE_FRAMING
                if len(chosen) >= max_batch or size + ENVELOPE_FRAMING >= budget:
                    break
            if len(chosen) < min_batch or not chosen:
                return None
            batch_id = secrets.token_bytes(BATCH_ID_BYTES)
            conn.execute("INSERT INTO batches VALUES (?, ?, ?)", (batch_id, len(chosen), size))
            conn.executemany("UPDATE envelopes SET batch=? WHERE digest=?", [(batch_id, d) for d, _ in chosen])
            conn.execute("INSERT INTO epochs (opened) VALUES (?)", (self.clock(),))
            conn.execute("DELETE FROM epochs WHERE id NOT IN (SELECT DISTINCT epoch FROM envelopes) "
                         "AND id < (SELECT max(id) FROM epochs)")
            return batch_id, len(chosen)
        out = self._transaction(work)
        self.live = self.counts()
        return out  # type: ignore[return-value]

    def open_epoch(self) -> None:
        """Start a new epoch (the current one has been open long enough): arrivals from now on are
        told apart, coarsely, from earlier ones."""
        self._transaction(lambda c: c.execute("INSERT INTO epochs (opened) VALUES (?)", (self.clock(),)))

    def current_epoch_opened(self) -> float:
        return float(self._conn.execute("SELECT opened FROM epochs ORDER BY id DESC LIMIT 1").fetchone()[0])

    def open_batches(self) -> list[bytes]:
        """Formed batches the collector has not acknowledged (sent again after a restart)."""
        return [bytes(r[0]) for r in self._conn.execute("SELECT id FROM batches")]

    def batch_envelopes(self, batch_id: bytes) -> list[bytes]:
        """The envelopes of a formed batch, in digest order (the caller shuffles them)."""
        return [bytes(r[0]) for r in self._conn.execute("SELECT body FROM envelopes WHERE batch=?",
                                                        (batch_id,))]

    def acknowledged(self, batch_id: bytes) -> int:
        """The collector committed ``batch_id``: delete its envelopes, keep their digests (dedupe of
        late retries), drop the batch; one transaction. Returns the envelopes deleted."""
        day = dt.datetime.fromtimestamp(self.clock(), dt.timezone.utc).date().isoformat()

        def work(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT OR IGNORE INTO forwarded SELECT digest, ? FROM envelopes WHERE batch=?",
                         (day, batch_id))
            n = conn.execute("DELETE FROM envelopes WHERE batch=?", (batch_id,)).rowcount
            conn.execute("DELETE FROM batches WHERE id=?", (batch_id,))
            return n
        out = self._transaction(work)
        self.live = self.counts()
        return out  # type: ignore[return-value]

    def renumber(self, batch_id: bytes) -> bytes:
        """Give a formed batch a new id (the collector knows its id with other envelopes: never
        expected with 128 random bits, but a shuffler restored from a backup could reuse one)."""
        new = secrets.token_bytes(BATCH_ID_BYTES)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE batches SET id=? WHERE id=?", (new, batch_id))
            conn.execute("UPDATE envelopes SET batch=? WHERE batch=?", (new, batch_id))
        self._transaction(work)
        return new

    def prune_forwarded(self, keep_days: int) -> int:
        """Forget the digests of envelopes forwarded more than ``keep_days`` days ago."""
        today = dt.datetime.fromtimestamp(self.clock(), dt.timezone.utc).date()
        cutoff = (today - dt.timedelta(days=keep_days)).isoformat()
        return self._transaction(lambda c: c.execute("DELETE FROM forwarded WHERE day < ?", (cutoff,)).rowcount)  # type: ignore[return-value]

    # --- key configurations -------------------------------------------------------------------------
    def save_key_configs(self, document: bytes) -> None:
        self._transaction(lambda c: c.execute("INSERT OR REPLACE INTO meta VALUES ('key_configs', ?)",
                                              (document,)))

    def key_configs(self) -> bytes | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key='key_configs'").fetchone()
        return None if row is None else bytes(row[0])

    def check(self) -> None:
        """Raise StoreError unless the pool answers (readyz)."""
        try:
            self._conn.execute("SELECT 1 FROM meta LIMIT 1").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: unreachable ({exc})") from None

    def close(self) -> None:
        self._conn.close()
