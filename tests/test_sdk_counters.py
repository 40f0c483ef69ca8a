"""The JavaScript SDK's `stats()` counts what the Python SDK's counts, under the same names, and
the app-teams guide's counter table names every one of them (issue 31: the guide said "the same
counters" while the JS client lacked disabled_state, reports_dropped_opted_out and queue_evicted)."""

from __future__ import annotations

import re
from pathlib import Path

from client_sdk import TelemetryClient
from client_sdk.testing import MemoryTransport
from collector.testing import FakeCollector

from .sdk_support import make_registry

ROOT = Path(__file__).resolve().parent.parent
#: stats() entries that are sizes or state, not counters (both SDKs have them)
GAUGES = {"queued", "awaiting_registry", "outbox_pending", "outbox_dropped_reports", "outbox_expired_reports"}


def python_counters(tmp_path) -> set[str]:
    registry = make_registry()
    client = TelemetryClient(registry=registry, transport=MemoryTransport(FakeCollector(registry)),
                             state_dir=tmp_path / "state")
    try:
        return set(client.stats()) - GAUGES
    finally:
        client.close(1)


def js_counters() -> list[str]:
    text = (ROOT / "client_sdk" / "js" / "src" / "client.ts").read_text(encoding="utf-8")
    body = re.search(r"export const COUNTERS = \[(.*?)\] as const;", text, re.S)
    assert body, "COUNTERS not found in client_sdk/js/src/client.ts"
    return re.findall(r'"([a-z_]+)"', body.group(1))


def test_the_js_client_counts_every_python_counter_by_its_name(tmp_path):
    js = js_counters()
    assert len(js) == len(set(js))
    assert set(js) == python_counters(tmp_path)


def test_the_guide_names_every_counter(tmp_path):
    guide = (ROOT / "docs" / "guide-app-teams.md").read_text(encoding="utf-8")
    table = guide.split("`client.stats()` returns counters:", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", table))
    assert python_counters(tmp_path) | GAUGES <= named, sorted((python_counters(tmp_path) | GAUGES) - named)
