"""The collector's own operational metrics, exported at ``GET /metrics`` (Prometheus text).

Counters live in one float64 array of shape (workers, slots) in anonymous shared memory
created before the worker processes fork: each worker writes only its own row (no locks), and
whichever worker answers a scrape sums all rows, so ``/metrics`` shows the whole collector
however many ``--workers`` share the port.

Families (all names prefixed ``ldpt_``): build info; reports accepted by metric, and those in no
segment (the segment cap) by metric; ingest
requests and reports rejected by problem type, and other requests' errors apart; request
latency by endpoint and commit latency (histograms); batches by outcome (applied, duplicate,
conflict); sealed envelopes by outcome; shufflers' forwarded batches by outcome; commits, commit failures, batches per commit; queue depth in batches and reports;
in-flight request bytes; open connections and those the collector closed, by reason; workers
up and restarted; process CPU, RSS and open file descriptors.
"""

from __future__ import annotations

import bisect
import dataclasses
import importlib.metadata
import mmap
import os
import platform
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from collector.storage.base import BatchOutcome, PendingBatch

from .problems import PROBLEM_TYPES

try:
    VERSION = importlib.metadata.version("ldp-telemetry")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    VERSION = "unknown"

COMMIT_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Request latency is recorded per endpoint (route groups, not raw paths: bounded cardinality).
ENDPOINTS = ("ingest", "query", "registry", "health", "metrics", "other")
#: What became of a sealed envelope (collector/gateway.py, ``EnvelopeResult.outcome``).
ENVELOPE_OUTCOMES = ("accepted", "duplicate", "refused", "undecryptable")
#: What became of a shuffler's forwarded batch (collector/shuffled.py).
SHUFFLED_OUTCOMES = ("applied", "duplicate", "conflict", "refused")
#: Why the connection guard (connections.py) closed a connection.
CONNECTION_CLOSE_REASONS = ("header-timeout", "idle-timeout", "connection-limit")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclasses.dataclass(frozen=True)
class Family:
    """One exported metric family; ``labels`` lists its label values (one slot each, or one
    histogram each when ``buckets`` is set)."""

    name: str
    kind: str          # counter | gauge | histogram
    help: str
    label: str | None = None
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    def series(self) -> Iterator[tuple[str | None, str | None]]:
        """(label value, histogram part) of every slot: part is a bucket bound, sum or count."""
        for value in self.labels or (None,):
            if self.kind == "histogram":
                for part in (*map(repr, self.buckets), "+Inf", "sum", "count"):
                    yield value, part
            else:
                yield value, None


class Layout:
    """Slot numbers of every exported series, fixed at startup (registry metrics, reasons)."""

    def __init__(self, metric_names: Iterable[str]) -> None:
        metrics = tuple(metric_names)
        self.families = (
            Family("ldpt_reports_accepted_total", "counter",
                   "Reports in newly committed batches, by metric.", "metric", metrics),
            Family("ldpt_reports_unsegmented_total", "counter",
                   "Reports in newly committed batches counted in their metric's total but in no "
                   "segment (the segment cap, max_segments, was reached in their window), by metric.",
                   "metric", metrics),
            Family("ldpt_requests_rejected_total", "counter",
                   "Ingest requests (POST /v1/reports) answered with an error, by problem type.",
                   "reason", tuple(PROBLEM_TYPES)),
            Family("ldpt_reports_rejected_total", "counter",
                   "Reports in decoded batches that were rejected, by problem type.", "reason",
                   tuple(PROBLEM_TYPES)),
            Family("ldpt_request_errors_total", "counter",
                   "Other requests (query, registry, unknown routes, malformed HTTP) answered with "
                   "an error, by problem type.", "reason", tuple(PROBLEM_TYPES)),
            Family("ldpt_request_seconds", "histogram",
                   "Time from a request's handler start to its response, by endpoint.", "endpoint",
                   ENDPOINTS, REQUEST_SECONDS_BUCKETS),
            Family("ldpt_batches_total", "counter", "Batches committed, by outcome.", "outcome",
                   tuple(o.value for o in BatchOutcome)),
            Family("ldpt_sealed_envelopes_total", "counter",
                   "Sealed (OHTTP) envelopes by outcome: accepted, duplicate, refused (the inner "
                   "batch was rejected; its reason is in ldpt_requests_rejected_total), undecryptable.",
                   "outcome", ENVELOPE_OUTCOMES),
            Family("ldpt_shuffled_batches_total", "counter",
                   "Shuffled batches forwarded by authenticated shufflers (POST /v1/shuffled-batches), "
                   "by outcome: applied (committed now), duplicate (delivered again), conflict, refused "
                   "(not committed: retriable, or unauthenticated/undecodable).", "outcome",
                   SHUFFLED_OUTCOMES),
            Family("ldpt_commits_total", "counter", "Store transactions committed (group commits)."),
            Family("ldpt_commit_failures_total", "counter", "Store transactions that failed and rolled back."),
            Family("ldpt_commit_batches_total", "counter",
                   "Batches in committed transactions (divide by ldpt_commits_total for the group size)."),
            Family("ldpt_commit_seconds", "histogram", "Duration of one group commit (store transaction).",
                   buckets=COMMIT_SECONDS_BUCKETS),
            Family("ldpt_queue_batches", "gauge", "Validated batches waiting for the committer."),
            Family("ldpt_queue_reports", "gauge", "Reports in the batches waiting for the committer."),
            Family("ldpt_inflight_bytes", "gauge", "Request bodies being read or decoded."),
            Family("ldpt_connections_open", "gauge", "Open client connections."),
            Family("ldpt_connections_closed_total", "counter",
                   "Connections the collector closed itself, by reason.", "reason",
                   CONNECTION_CLOSE_REASONS),
            Family("ldpt_workers_up", "gauge", "Worker processes serving."),
            Family("ldpt_worker_restarts_total", "counter",
                   "Workers restarted after exiting unexpectedly."),
            Family("ldpt_process_cpu_seconds_total", "counter",
                   "CPU time (user + system) of the worker processes."),
            Family("ldpt_process_resident_memory_bytes", "gauge",
                   "Resident memory of the worker processes (pages shared after the fork count "
                   "once per worker)."),
            Family("ldpt_process_open_fds", "gauge", "Open file descriptors of the worker processes."),
        )
        self.slot: dict[tuple[str, str | None], int] = {}
        self.hist: dict[tuple[str, str | None], list[int]] = {}  # buckets, +Inf, sum, count
        n = 0
        for fam in self.families:
            for value, part in fam.series():
                if part is None:
                    self.slot[(fam.name, value)] = n
                else:
                    self.hist.setdefault((fam.name, value), []).append(n)
                n += 1
        self.size = n


class Telemetry:
    """One worker's writer (its row) plus the renderer over all rows."""

    def __init__(self, layout: Layout, table: np.ndarray, row: int) -> None:
        self.layout, self.table, self.row = layout, table, row
        self._values = table[row]
        s = layout.slot

        def by_label(family: str) -> dict[str | None, int]:
            return {k[1]: v for k, v in s.items() if k[0] == family}

        self._accepted = by_label("ldpt_reports_accepted_total")
        self._unsegmented = by_label("ldpt_reports_unsegmented_total")
        self._req_rejected = by_label("ldpt_requests_rejected_total")
        self._rep_rejected = by_label("ldpt_reports_rejected_total")
        self._req_errors = by_label("ldpt_request_errors_total")
        self._outcome = by_label("ldpt_batches_total")
        self._conn_closed = by_label("ldpt_connections_closed_total")
        self._envelopes = by_label("ldpt_sealed_envelopes_total")
        self._shuffled = by_label("ldpt_shuffled_batches_total")
        self._commit_hist = layout.hist[("ldpt_commit_seconds", None)]
        self._request_hist = {e: layout.hist[("ldpt_request_seconds", e)] for e in ENDPOINTS}
        self._commits = s[("ldpt_commits_total", None)]
        self._commit_failures = s[("ldpt_commit_failures_total", None)]
        self._commit_batches = s[("ldpt_commit_batches_total", None)]
        self._queue_batches = s[("ldpt_queue_batches", None)]
        self._queue_reports = s[("ldpt_queue_reports", None)]
        self._inflight = s[("ldpt_inflight_bytes", None)]
        self._conn_open = s[("ldpt_connections_open", None)]
        self._up = s[("ldpt_workers_up", None)]
        self._restarts = s[("ldpt_worker_restarts_total", None)]
        self._process = [s[("ldpt_process_cpu_seconds_total", None)],
                         s[("ldpt_process_resident_memory_bytes", None)],
                         s[("ldpt_process_open_fds", None)]]

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
            self._values[[self._queue_batches, self._queue_reports, self._inflight,
                          self._conn_open, *self._process[1:]]] = 0.0
        self._values[self._up] = 1.0 if up else 0.0

    def rejected(self, slug: str, reports: int = 0) -> None:
        """An ingest request refused (and the reports of its batch, when it was decoded)."""
        self._values[self._req_rejected[slug]] += 1
        if reports:
            self._values[self._rep_rejected[slug]] += reports

    def request_error(self, slug: str) -> None:
        """A request other than ingest answered with an error."""
        self._values[self._req_errors[slug]] += 1

    def envelope(self, outcome: str) -> None:
        """A sealed envelope handled by the gateway (ENVELOPE_OUTCOMES)."""
        self._values[self._envelopes[outcome]] += 1

    def shuffled_batch(self, outcome: str) -> None:
        """A shuffler's forwarded batch (SHUFFLED_OUTCOMES)."""
        self._values[self._shuffled[outcome]] += 1

    def request_seconds(self, endpoint: str, seconds: float) -> None:
        self._observe(self._request_hist[endpoint], REQUEST_SECONDS_BUCKETS, seconds)

    def set_connections(self, count: int) -> None:
        """Open connections now; called after each connection sweep (about once a second),
        which also refreshes this process's CPU, RSS and fd figures."""
        self._values[self._conn_open] = count
        self.sample_process()

    def connection_closed(self, reason: str) -> None:
        self._values[self._conn_closed[reason]] += 1

    def worker_restarted(self) -> None:
        """Called by the supervisor, in the row of the worker it restarts."""
        self._values[self._restarts] += 1

    def sample_process(self) -> None:
        """CPU seconds, RSS and open fds of this process into its row (Linux /proc; elsewhere
        CPU only)."""
        times = os.times()
        self._values[self._process[0]] = times.user + times.system
        try:
            with open("/proc/self/statm", "rb") as f:
                self._values[self._process[1]] = int(f.read().split()[1]) * PAGE_SIZE
            self._values[self._process[2]] = len(os.listdir("/proc/self/fd"))
        except OSError:
            pass

    def set_queue(self, batches: int, reports: int) -> None:
        self._values[self._queue_batches] = batches
        self._values[self._queue_reports] = reports

    def add_inflight(self, nbytes: int) -> None:
        self._values[self._inflight] += nbytes

    def commit_failed(self) -> None:
        self._values[self._commit_failures] += 1

    def _observe(self, slots: list[int], buckets: tuple[float, ...], seconds: float) -> None:
        v = self._values
        v[slots[bisect.bisect_left(buckets, seconds)]] += 1
        v[slots[-2]] += seconds
        v[slots[-1]] += 1

    def committed(self, batches: Sequence[PendingBatch], outcomes: Sequence[BatchOutcome],
                  seconds: float) -> None:
        v = self._values
        v[self._commits] += 1
        v[self._commit_batches] += len(batches)
        self._observe(self._commit_hist, COMMIT_SECONDS_BUCKETS, seconds)
        for batch, outcome in zip(batches, outcomes):
            v[self._outcome[outcome.value]] += 1
            if outcome is BatchOutcome.APPLIED:
                per_metric = getattr(batch.deltas, "per_metric", None)
                if per_metric:
                    for metric, n in per_metric.items():
                        slot = self._accepted.get(metric)
                        if slot is not None:
                            v[slot] += n
                for metric, n in (getattr(batch.deltas, "unsegmented", None) or {}).items():
                    slot = self._unsegmented.get(metric)
                    if slot is not None:
                        v[slot] += n

    # --- reading -----------------------------------------------------------------------------------
    def totals(self) -> np.ndarray:
        return self.table.sum(axis=0)

    def value(self, family: str, label: str | None = None) -> float:
        """Sum over workers of one series (tests and logs); a histogram's value is its count."""
        slot = self.layout.slot.get((family, label))
        if slot is None:
            slot = self.layout.hist[(family, label)][-1]
        return float(self.table[:, slot].sum())

    def render(self) -> str:
        """Prometheus text exposition format 0.0.4, summed over workers."""
        self.sample_process()
        total = self.totals()
        lines: list[str] = [
            "# HELP ldpt_build_info The collector's version and Python (value 1).",
            "# TYPE ldpt_build_info gauge",
            f'ldpt_build_info{{version="{VERSION}",python="{platform.python_version()}"}} 1']
        for fam in self.layout.families:
            lines.append(f"# HELP {fam.name} {fam.help}")
            lines.append(f"# TYPE {fam.name} {fam.kind}")
            for value in fam.labels or (None,):
                label = f'{fam.label}="{value}"' if value is not None else ""
                if fam.kind != "histogram":
                    lines.append(f"{fam.name}{{{label}}} {_num(total[self.layout.slot[(fam.name, value)]])}"
                                 if label else f"{fam.name} {_num(total[self.layout.slot[(fam.name, None)]])}")
                    continue
                slots = self.layout.hist[(fam.name, value)]
                cumulative = 0.0
                sep = "," if label else ""
                for le, slot in zip((*map(repr, fam.buckets), "+Inf"), slots):
                    cumulative += total[slot]
                    lines.append(f'{fam.name}_bucket{{{label}{sep}le="{le}"}} {_num(cumulative)}')
                braces = f"{{{label}}}" if label else ""
                lines.append(f"{fam.name}_sum{braces} {_num(total[slots[-2]])}")
                lines.append(f"{fam.name}_count{braces} {_num(total[slots[-1]])}")
        return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
