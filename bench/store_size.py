"""Store size per window of a large-domain metric (docs/operations.md, "Sizing").

For hr and olh at d = 10^6, commits windows of n reports in group commits of 50 batches of
1,000 reports (summed per window, as the collector's group commit does; sparse deltas where
they are smaller), closes them with the housekeeping compaction, and prints the
bytes each window then takes in SQLite (file growth per window, after VACUUM) and PostgreSQL
(pg_total_relation_size growth), beside the dense sketch's size. Thin windows stay sparse
(~12 bytes per distinct cell); full ones are one dense sketch.

    python bench/store_size.py
    python bench/store_size.py --postgres postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.storage.base import PendingBatch, SketchKey  # noqa: E402
from collector.storage.sqlite import SQLiteStore  # noqa: E402
from sketches import build_server  # noqa: E402

D = 1_000_000
BATCH = 1_000


GROUP = 50 * BATCH


def batches(proto, n: int, window: str, rng) -> list[PendingBatch]:
    """One summed delta per group commit of 50 batches of 1,000 reports (a busy collector)."""
    out = []
    for start in range(0, n, GROUP):
        size = min(GROUP, n - start)
        sketch = proto.new_sketch()
        proto.accumulate(sketch, proto.encode(rng.integers(0, D, size), rng))
        out.append(PendingBatch(rng.bytes(16), b"d", {SketchKey("m", "fp", window): sketch}, size))
    return out


def sqlite_bytes(proto, n: int, windows: int, rng) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.sqlite"
        with SQLiteStore(path) as store:
            store._conn.execute("VACUUM")
            store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            base = path.stat().st_size
            for w in range(windows):
                for batch in batches(proto, n, f"2026-01-{w + 1:02d}", rng):
                    store.commit([batch])
            store.compact(before="2027-01-01")
            store._conn.execute("DELETE FROM batches")  # batch ids are accounted separately
            store._conn.execute("VACUUM")
            store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return (path.stat().st_size - base) / windows


async def postgres_bytes(dsn: str, proto, n: int, windows: int, rng) -> float:
    import asyncpg

    from collector.storage.postgres import PostgresStore

    schema = f"ldpt_size_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in dsn else "?"
    store = await PostgresStore.open(f"{dsn}{sep}search_path={schema}")
    size_sql = "SELECT pg_total_relation_size('ldpt_deltas')"
    try:
        for w in range(windows):
            for batch in batches(proto, n, f"2026-01-{w + 1:02d}", rng):
                await store.acommit([batch])
        await store.amaintain(today="2027-01-01")
        await store.acompact(min_rows=1)
        await store._pool.execute("VACUUM FULL ldpt_deltas")
        return await store._fetchval(size_sql) / windows
    finally:
        await store.aclose()
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--postgres", default=os.environ.get("LDPT_TEST_POSTGRES_DSN"))
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--reports", type=int, nargs="+", default=[10_000, 100_000, 2_000_000])
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"Bytes per closed window, d = {D:,}, batches of {BATCH:,}, mean of {args.windows} windows\n")
    print(f"{'protocol':8s} {'reports':>10s} {'dense MB':>9s} {'SQLite MB':>10s} {'PostgreSQL MB':>14s} "
          f"{'year of daily windows, SQLite':>30s}")
    for name in ("hr", "olh"):
        proto = build_server(name, D, 2.0, {})
        dense = 8 * (proto.new_sketch().counts.size + proto.cohorts) / 1e6
        for n in args.reports:
            lite = sqlite_bytes(proto, n, args.windows, rng) / 1e6
            pg = asyncio.run(postgres_bytes(args.postgres, proto, n, args.windows, rng)) / 1e6 \
                if args.postgres else float("nan")
            print(f"{name:8s} {n:10,d} {dense:9.1f} {lite:10.2f} {pg:14.2f} {365 * lite / 1e3:27.2f} GB",
                  flush=True)


if __name__ == "__main__":
    main()
