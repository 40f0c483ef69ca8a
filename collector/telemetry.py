"""The collector's own operational metrics, exported at ``GET /metrics`` (Prometheus text).

Counters live in one float64 array of shape (workers, slots) in anonymous shared memory
created before the worker processes fork: each worker writes only its own row (no locks), and
whichever worker answers a scrape sums all rows, so ``/metrics`` shows the whole collector
however many ``--workers`` share the port.

Families (all names prefixed ``ldpt_``): reports accepted by metric; requests and reports
rejected by problem type; batches by outcome (applied, duplicate, conflict); commits, commit
failures and commit latency (histogram); batches per commit; queue depth in batches and
reports; in-flight request bytes; workers up.
"""

from __future__ import annotations

import bisect
import dataclasses
import mmap
from collections.abc import Iterable, Sequence

import numpy as np

from collector.storage.base import BatchOutcome, PendingBatch

from .problems import PROBLEM_TYPES

COMMIT_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclasses.dataclass(frozen=True)
class Family:
    """One exported metric family; ``labels`` lists its label values (one slot each)."""

    name: str
    kind: str          # counter | gauge | histogram
    help: str
    label: str | None = None
    labels: tuple[str, ...] = ()


class Layout:
    """Slot numbers of every exported series, fixed at startup (registry metrics, reasons)."""

    def __init__(self, metric_names: Iterable[str]) -> None:
        metrics = tuple(metric_names)
        self.families = (
            Family("ldpt_reports_accepted_total", "counter",
                   "Reports in newly committed batches, by metric.", "metric", metrics),
            Family("ldpt_requests_rejected_total", "counter",
                   "Requests answered with an error, by problem type.", "reason", tuple(PROBLEM_TYPES)),
            Family("ldpt_reports_rejected_total", "counter",
                   "Reports in decoded batches that were rejected, by problem type.", "reason",
                   tuple(PROBLEM_TYPES)),
            Family("ldpt_batches_total", "counter", "Batches committed, by outcome.", "outcome",
                   tuple(o.value for o in BatchOutcome)),
            Family("ldpt_commits_total", "counter", "Store transactions committed (group commits)."),
            Family("ldpt_commit_failures_total", "counter", "Store transactions that failed and rolled back."),
            Family("ldpt_commit_batches_total", "counter",
                   "Batches in committed transactions (divide by ldpt_commits_total for the group size)."),
            Family("ldpt_commit_seconds", "histogram", "Duration of one group commit (store transaction)."),
            Family("ldpt_queue_batches", "gauge", "Validated batches waiting for the committer."),
            Family("ldpt_queue_reports", "gauge", "Reports in the batches waiting for the committer."),
            Family("ldpt_inflight_bytes", "gauge", "Request bodies being read or decoded."),
            Family("ldpt_workers_up", "gauge", "Worker processes serving."),
        )
        self.slot: dict[tuple[str, str | None], int] = {}
        n = 0
        for fam in self.families:
            if fam.kind == "histogram":
                for le in (*map(repr, COMMIT_SECONDS_BUCKETS), "+Inf", "sum", "count"):
                    self.slot[(fam.name, le)] = n
                    n += 1
            elif fam.labels:
                for value in fam.labels:
                    self.slot[(fam.name, value)] = n
                    n += 1
            else:
                self.slot[(fam.name, None)] = n
                n += 1
        self.size = n


class Telemetry:
    """One worker's writer (its row) plus the renderer over all rows."""

    def __init__(self, layout: Layout, table: np.ndarray, row: int) -> None:
        self.layout, self.table, self.row = layout, table, row
        self._values = table[row]
        s = layout.slot
        self._accepted = {k[1]: v for k, v in s.items() if k[0] == "ldpt_reports_accepted_total"}
        self._req_rejected = {k[1]: v for k, v in s.items() if k[0] == "ldpt_requests_rejected_total"}
        self._rep_rejected = {k[1]: v for k, v in s.items() if k[0] == "ldpt_reports_rejected_total"}
        self._outcome = {k[1]: v for k, v in s.items() if k[0] == "ldpt_batches_total"}
        self._hist = [s[("ldpt_commit_seconds", repr(le))] for le in COMMIT_SECONDS_BUCKETS] + \
            [s[("ldpt_commit_seconds", "+Inf")]]
        self._hist_sum = s[("ldpt_commit_seconds", "sum")]
        self._hist_count = s[("ldpt_commit_seconds", "count")]
        self._commits = s[("ldpt_commits_total", None)]
        self._commit_failures = s[("ldpt_commit_failures_total", None)]
        self._commit_batches = s[("ldpt_commit_batches_total", None)]
        self._queue_batches = s[("ldpt_queue_batches", None)]
        self._queue_reports = s[("ldpt_queue_reports", None)]
        self._inflight = s[("ldpt_inflight_bytes", None)]
        self._up = s[("ldpt_workers_up", None)]

    @classmethod
    def create(cls, metric_names: Iterable[str], workers: int = 1) -> Telemetry:
        """Shared table for ``workers`` rows (row 0 returned); fork, then ``for_worker(i)``."""
        layout = Layout(metric_names)
        buf = mmap.mmap(-1, max(1, workers * layout.size * 8))  # MAP_SHARED | MAP_ANONYMOUS
        table = np.frombuffer(buf, dtype=np.float64).reshape(workers, layout.size)
        return cls(layout, table, 0)

    def for_worker(self, row: int) -> Telemetry:
        return Telemetry(self.layout, self.table, row)

    # --- writers (own row only) -------------------------------------------------------------------
    def set_up(self, up: bool) -> None:
        """Mark this worker serving (its gauges start at zero: a restarted worker's row may hold
        the queue and in-flight bytes of the process that died in it) or stopped."""
        if up:
            self._values[[self._queue_batches, self._queue_reports, self._inflight]] = 0.0
        self._values[self._up] = 1.0 if up else 0.0

    def rejected(self, slug: str, reports: int = 0) -> None:
        self._values[self._req_rejected[slug]] += 1
        if reports:
            self._values[self._rep_rejected[slug]] += reports

    def set_queue(self, batches: int, reports: int) -> None:
        self._values[self._queue_batches] = batches
        self._values[self._queue_reports] = reports

    def add_inflight(self, nbytes: int) -> None:
        self._values[self._inflight] += nbytes

    def commit_failed(self) -> None:
        self._values[self._commit_failures] += 1

    def committed(self, batches: Sequence[PendingBatch], outcomes: Sequence[BatchOutcome],
                  seconds: float) -> None:
        v = self._values
        v[self._commits] += 1
        v[self._commit_batches] += len(batches)
        v[self._hist[bisect.bisect_left(COMMIT_SECONDS_BUCKETS, seconds)]] += 1
        v[self._hist_sum] += seconds
        v[self._hist_count] += 1
        for batch, outcome in zip(batches, outcomes):
            v[self._outcome[outcome.value]] += 1
            if outcome is BatchOutcome.APPLIED:
                per_metric = getattr(batch.deltas, "per_metric", None)
                if per_metric:
                    for metric, n in per_metric.items():
                        slot = self._accepted.get(metric)
                        if slot is not None:
                            v[slot] += n

    # --- reading -----------------------------------------------------------------------------------
    def totals(self) -> np.ndarray:
        return self.table.sum(axis=0)

    def value(self, family: str, label: str | None = None) -> float:
        """Sum over workers of one series (tests and logs)."""
        return float(self.table[:, self.layout.slot[(family, label)]].sum())

    def render(self) -> str:
        """Prometheus text exposition format 0.0.4, summed over workers."""
        total = self.totals()
        s = self.layout.slot
        lines: list[str] = []
        for fam in self.layout.families:
            lines.append(f"# HELP {fam.name} {fam.help}")
            lines.append(f"# TYPE {fam.name} {fam.kind}")
            if fam.kind == "histogram":
                cumulative = 0.0
                for le in (*map(repr, COMMIT_SECONDS_BUCKETS), "+Inf"):
                    cumulative += total[s[(fam.name, le)]]
                    lines.append(f'{fam.name}_bucket{{le="{le}"}} {_num(cumulative)}')
                lines.append(f"{fam.name}_sum {_num(total[s[(fam.name, 'sum')]])}")
                lines.append(f"{fam.name}_count {_num(total[s[(fam.name, 'count')]])}")
            elif fam.labels:
                for value in fam.labels:
                    lines.append(f'{fam.name}{{{fam.label}="{value}"}} {_num(total[s[(fam.name, value)]])}')
            else:
                lines.append(f"{fam.name} {_num(total[s[(fam.name, None)]])}")
        return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
