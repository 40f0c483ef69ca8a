"""Compaction under a filling window: the store alone, fed distinct honest reports in small commits.

Each commit carries ``--batch`` reports encoded with the real protocol code (values uniform
over the domain, cohorts drawn as devices draw them), passed to the store exactly as the
collector passes them (payload groups summed at commit time). The table prints, per slice of
the fill, the store's CPU per commit (the commit and the compaction it causes), the rows and
bytes the window holds, and the CPU of one load of the window — the figures that must stay
flat as the window fills (docs/design.md, "Compaction").

    python bench/compaction.py                                   # olh d = 10^6, SQLite, 2.2 M reports
    python bench/compaction.py --protocols hr olh discover --reports 2200000
    python bench/compaction.py --postgres postgresql://postgres@127.0.0.1:5432/test --no-sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.storage.base import PendingBatch, SketchKey  # noqa: E402
from sketches import build_server  # noqa: E402

PROTOCOLS = {"olh": ("olh", 1_000_000, 2.0), "hr": ("hr", 1_000_000, 2.0),
             "discover": ("discover", None, 4.0)}
WINDOW = "2026-12-01"


class Groups:
    """A batch's validated payloads, accumulated only at commit time (collector.ingest.BatchDeltas)."""

    __slots__ = ("payload_groups",)

    def __init__(self, groups):
        self.payload_groups = groups


def batches(proto, batch: int, seed: int):
    """An endless stream of distinct batches of ``batch`` honest reports."""
    rng = np.random.default_rng(seed)
    key = SketchKey("m", "fp", WINDOW)
    while True:
        if proto.name == "discover":
            values = np.asarray([f"host-{i}.example" for i in rng.integers(0, 10**7, batch)], dtype=object)
        else:
            values = rng.integers(0, proto.domain_size, batch)
        yield PendingBatch(rng.bytes(16), b"d", Groups([(key, proto, proto.encode(values, rng))]), batch)


class SyncStore:
    """The SQLite store, or the PostgreSQL one driven from its own event loop."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind = kind
        if kind == "sqlite":
            from collector.storage.sqlite import SQLiteStore
            self.store = SQLiteStore(path)
        else:
            from collector.storage.postgres import PostgresStore
            self.loop = asyncio.new_event_loop()
            self.store = self.loop.run_until_complete(PostgresStore.open(path))

    def commit(self, group):
        if self.kind == "sqlite":
            return self.store.commit(group)
        out = self.loop.run_until_complete(self.store.acommit(group))
        settle = getattr(self.store, "asettle", None)  # the background compaction, awaited
        if settle is not None:
            self.loop.run_until_complete(settle())
        elif self.store._tasks:  # schema v2 stores: their background folds
            self.loop.run_until_complete(asyncio.gather(*self.store._tasks, return_exceptions=True))
        return out

    def load(self, template):
        if self.kind == "sqlite":
            return self.store.load("m", "fp", template)
        return self.loop.run_until_complete(self.store.aload("m", "fp", template))

    def shape(self) -> tuple[int, int]:
        """(rows, bytes) the window holds."""
        if self.kind == "sqlite":
            rows, nbytes = self.store._conn.execute(
                "SELECT count(*), coalesce(sum(length(cells) + length(counts)), 0) FROM sketch_deltas").fetchone()
            dense = self.store._conn.execute(
                "SELECT count(*), coalesce(sum(length(counts)), 0) FROM sketches").fetchone()
            return rows + dense[0], nbytes + dense[1]
        row = self.loop.run_until_complete(self.store._fetch(
            "SELECT count(*), coalesce(sum(pg_column_size(counts) + coalesce(pg_column_size(cells), 0)), 0) "
            "FROM ldpt_deltas"))[0]
        return int(row[0]), int(row[1])

    def close(self) -> None:
        if self.kind == "sqlite":
            self.store.close()
        else:
            self.loop.run_until_complete(self.store.aclose())
            self.loop.close()


def cpu() -> float:
    """CPU seconds of this process and, for PostgreSQL, of the database's own processes."""
    return time.process_time()


def run(kind: str, target: str, name: str, total: int, batch: int, slices: int,
        max_seconds: float) -> list[tuple]:
    pname, d, eps = PROTOCOLS[name]
    proto = build_server(pname, d, eps, {})
    store = SyncStore(kind, target)
    rows_out = []
    try:
        stream = batches(proto, batch, seed=1)
        per_slice = max(1, total // batch // slices)
        done, start = 0, time.monotonic()
        want = proto.new_sketch()
        for _slice in range(slices):
            commit_cpu = []
            for _ in range(per_slice):
                b = next(stream)
                for _key, _proto, payloads in b.deltas.payload_groups:
                    proto.accumulate(want, payloads)
                t0 = cpu()
                store.commit([b])
                commit_cpu.append(cpu() - t0)
                done += batch
            t0 = cpu()
            got = store.load(proto.new_sketch())
            load_cpu = cpu() - t0
            exact = bool(np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports))
            nrows, nbytes = store.shape()
            rows_out.append((kind, name, done, 1e3 * float(np.median(commit_cpu)), 1e3 * float(np.mean(commit_cpu)),
                             1e3 * float(np.max(commit_cpu)), nrows, nbytes / 2**20, 1e3 * load_cpu, exact))
            print(f"  {kind} {name} {done:>10,} reports: mean commit {rows_out[-1][4]:.2f} ms CPU, "
                  f"{nrows} rows, {nbytes / 2**20:.1f} MB, load {1e3 * load_cpu:.0f} ms, exact={exact}",
                  file=sys.stderr, flush=True)
            if time.monotonic() - start > max_seconds:
                print(f"  ({kind} {name}: stopped after {max_seconds:g} s)", file=sys.stderr)
                break
    finally:
        store.close()
    return rows_out


async def drop_schema(asyncpg, dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocols", nargs="+", default=["olh"], choices=sorted(PROTOCOLS))
    ap.add_argument("--reports", type=int, default=2_200_000, help="reports committed into the window")
    ap.add_argument("--batch", type=int, default=100, help="reports per commit")
    ap.add_argument("--slices", type=int, default=11, help="rows of the table per run")
    ap.add_argument("--max-seconds", type=float, default=1800, help="stop a run after this long")
    ap.add_argument("--postgres", default=os.environ.get("LDPT_TEST_POSTGRES_DSN"))
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="ldpt-compaction-") as tmp:
        for name in args.protocols:
            if not args.no_sqlite:
                results += run("sqlite", str(Path(tmp) / f"{name}.sqlite"), name, args.reports, args.batch,
                               args.slices, args.max_seconds)
            if args.postgres:
                import asyncpg

                schema = f"ldpt_bench_{uuid.uuid4().hex[:12]}"
                sep = "&" if "?" in args.postgres else "?"
                try:
                    results += run("postgres", f"{args.postgres}{sep}search_path={schema}", name, args.reports,
                                   args.batch, args.slices, args.max_seconds)
                finally:
                    asyncio.run(drop_schema(asyncpg, args.postgres, schema))
    print(f"\nA window filled by commits of {args.batch} distinct reports (store CPU of this process; "
          "PostgreSQL's own CPU not included)\n")
    print(f"{'store':8s} {'protocol':8s} {'reports':>10s} {'commit p50 ms':>13s} {'mean ms':>8s} "
          f"{'max ms':>8s} {'rows':>6s} {'MB':>7s} {'load ms':>8s} {'exact':>5s}")
    for r in results:
        print(f"{r[0]:8s} {r[1]:8s} {r[2]:10,d} {r[3]:13.2f} {r[4]:8.2f} {r[5]:8.1f} {r[6]:6d} {r[7]:7.1f} "
              f"{r[8]:8.0f} {str(r[9]):>5s}")


if __name__ == "__main__":
    main()
