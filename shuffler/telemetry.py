"""The shuffler's operational metrics, exported at ``GET /metrics`` (Prometheus text format 0.0.4).

One process, so plain counters. Families (prefixed ``ldpt_shuffler_``): envelopes received by
outcome (stored, duplicate), requests refused by problem type, what the pool holds (waiting
envelopes and bytes, envelopes in formed batches not yet acknowledged, the age of the oldest
waiting epoch), batches and envelopes forwarded and acknowledged, forwarding failures by
reason, what the collector reported of forwarded envelopes (refused, undecryptable, already
committed), the store-to-acknowledgement latency of an envelope, and process CPU and memory.
No series carries a client address or anything of an envelope.
"""

from __future__ import annotations

import bisect
import os
import resource

from collector.problems import PROBLEM_TYPES

#: Seconds from an envelope's arrival (headers read) to its 202 (stored durably).
ACK_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
FORWARD_FAILURES = ("network", "timeout", "retry-later", "unauthorized", "refused", "conflict", "unexpected")
COLLECTOR_ENVELOPES = ("accepted", "duplicates", "refused", "undecryptable")


class ShufflerTelemetry:
    """Counters, gauges and one histogram of one shuffler process; ``render`` is the scrape."""

    def __init__(self) -> None:
        self.envelopes = {"stored": 0, "duplicate": 0}
        self.refused = dict.fromkeys(PROBLEM_TYPES, 0)
        self.forwarded_batches = 0
        self.forwarded_envelopes = 0
        self.duplicate_batches = 0     # acknowledged as committed before (a resend)
        self.failures = dict.fromkeys(FORWARD_FAILURES, 0)
        self.collector = dict.fromkeys(COLLECTOR_ENVELOPES, 0)
        self.gauges = {"pooled_envelopes": 0, "pooled_bytes": 0, "assigned_envelopes": 0,
                       "pending_batches": 0, "oldest_seconds": 0.0}
        self.ack_buckets = [0] * (len(ACK_SECONDS_BUCKETS) + 1)
        self.ack_sum = 0.0
        self.ack_count = 0
        self.key_fetch_failures = 0
        self.up = 1

    def ack(self, seconds: float) -> None:
        self.ack_buckets[bisect.bisect_left(ACK_SECONDS_BUCKETS, seconds)] += 1
        self.ack_sum += seconds
        self.ack_count += 1

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_: str, series: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP ldpt_shuffler_{name} {help_}")
            lines.append(f"# TYPE ldpt_shuffler_{name} {kind}")
            for labels, value in series:
                lines.append(f"ldpt_shuffler_{name}{labels} {_num(value)}")

        family("envelopes_total", "counter", "Envelopes received and stored durably, by outcome (stored: new; "
               "duplicate: the same bytes were stored or forwarded before).",
               [(f'{{outcome="{k}"}}', v) for k, v in self.envelopes.items()])
        family("requests_refused_total", "counter", "Envelope requests answered with an error, by problem type.",
               [(f'{{reason="{k}"}}', v) for k, v in self.refused.items()])
        family("pooled_envelopes", "gauge", "Envelopes waiting in the pool (not yet in a batch).",
               [("", self.gauges["pooled_envelopes"])])
        family("pooled_bytes", "gauge", "Bytes of the envelopes waiting in the pool.", [("", self.gauges["pooled_bytes"])])
        family("assigned_envelopes", "gauge", "Envelopes in formed batches the collector has not acknowledged.",
               [("", self.gauges["assigned_envelopes"])])
        family("pending_batches", "gauge", "Formed batches the collector has not acknowledged.",
               [("", self.gauges["pending_batches"])])
        family("oldest_seconds", "gauge", "Age of the oldest waiting envelope's epoch (max_delay applies to it; "
               "it grows past max_delay while fewer than min_batch wait).", [("", self.gauges["oldest_seconds"])])
        family("forwarded_batches_total", "counter", "Shuffled batches the collector acknowledged (committed).",
               [("", self.forwarded_batches)])
        family("forwarded_envelopes_total", "counter", "Envelopes in acknowledged batches (deleted from the pool).",
               [("", self.forwarded_envelopes)])
        family("duplicate_batches_total", "counter", "Batches the collector had committed before (a resend after "
               "a lost acknowledgement).", [("", self.duplicate_batches)])
        family("forward_failures_total", "counter", "Forwarding attempts that failed, by reason (the batch is kept "
               "and sent again).", [(f'{{reason="{k}"}}', v) for k, v in self.failures.items()])
        family("collector_envelopes_total", "counter", "What the collector reported of forwarded envelopes.",
               [(f'{{outcome="{k}"}}', v) for k, v in self.collector.items()])
        family("key_fetch_failures_total", "counter", "Failed fetches of the collector's key configurations.",
               [("", self.key_fetch_failures)])
        lines.append("# HELP ldpt_shuffler_ack_seconds Seconds from an envelope's arrival to its 202 (stored).")
        lines.append("# TYPE ldpt_shuffler_ack_seconds histogram")
        cumulative = 0
        for bound, count in zip((*map(repr, ACK_SECONDS_BUCKETS), "+Inf"), self.ack_buckets):
            cumulative += count
            lines.append(f'ldpt_shuffler_ack_seconds_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f"ldpt_shuffler_ack_seconds_sum {_num(self.ack_sum)}")
        lines.append(f"ldpt_shuffler_ack_seconds_count {self.ack_count}")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        family("up", "gauge", "1 while the shuffler serves.", [("", self.up)])
        family("process_cpu_seconds_total", "counter", "CPU time (user + system) of the shuffler process.",
               [("", usage.ru_utime + usage.ru_stime)])
        family("process_resident_memory_bytes", "gauge", "Resident memory of the shuffler process.",
               [("", _rss())])
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def _rss() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return float(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
