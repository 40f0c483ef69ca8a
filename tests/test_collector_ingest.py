"""Unit tests of the ingest pipeline (body -> validated batch or a precise problem)."""

from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest

from collector.ingest import BatchDecoder, BatchDeltas
from collector.problems import PROBLEM_BASE, Problem
from collector.storage.base import SketchKey
from sketches.deltas import merge_deltas, sum_deltas

from .collector_support import expected_sketch, make_body, wire_reports, write_registry

WINDOW = "2024-05-01"


@pytest.fixture
def registry(tmp_path):
    return write_registry(tmp_path / "metrics.toml")


@pytest.fixture
def decoder(registry):
    return BatchDecoder(registry, max_reports=1000)


def mixed_reports(registry, rng):
    theme, page = registry.get("theme"), registry.get("page")
    a = wire_reports(theme, rng.integers(0, 3, 7), rng)
    b = wire_reports(page, rng.integers(0, 20, 5), rng)
    return a[:3] + b[:2] + a[3:] + b[2:]  # interleaved: grouping must keep indices straight


def problem(decoder, body) -> Problem:
    with pytest.raises(Problem) as info:
        decoder.decode(body, WINDOW)
    return info.value


def test_valid_batch_groups_by_metric_and_accumulates_exactly(registry, decoder):
    rng = np.random.default_rng(1)
    body = make_body(mixed_reports(registry, rng))
    batch = decoder.decode(body, WINDOW)
    assert batch.reports == 12 and len(batch.batch_id) == 16 and len(batch.digest) == 32
    assert batch.deltas.per_metric == {"theme": 7, "page": 5}
    total = {}
    merge_deltas(total, batch.deltas)
    for name in ("theme", "page"):
        spec = registry.get(name)
        got = total[SketchKey(name, spec.fingerprint, WINDOW)]
        want = expected_sketch(spec, [body])
        np.testing.assert_array_equal(got.counts, want.counts)
        np.testing.assert_array_equal(got.reports, want.reports)


def test_a_group_of_batches_accumulates_once_per_key(registry, decoder):
    rng = np.random.default_rng(2)
    bodies = [make_body(mixed_reports(registry, rng)) for _ in range(5)]
    batches = [decoder.decode(body, WINDOW).deltas for body in bodies]
    assert all(isinstance(d, BatchDeltas) for d in batches)
    total = sum_deltas(batches)  # one vectorised accumulate per key for the whole group
    spec = registry.get("page")
    np.testing.assert_array_equal(total[SketchKey("page", spec.fingerprint, WINDOW)].counts,
                                  expected_sketch(spec, bodies).counts)
    dense = dict(decoder.decode(bodies[0], WINDOW).deltas.items())  # Mapping view
    assert set(k.metric for k in dense) == {"theme", "page"}


def test_digest_is_of_the_body_bytes(decoder, registry):
    rng = np.random.default_rng(3)
    reports = wire_reports(registry.get("theme"), [0, 1, 2], rng)
    bid = os.urandom(16)
    a = decoder.decode(make_body(reports, bid), WINDOW)
    b = decoder.decode(make_body(reports, bid), WINDOW)
    c = decoder.decode(make_body(reports[:2], bid), WINDOW)
    assert a.digest == b.digest != c.digest


@pytest.mark.parametrize("body, slug, field", [
    (b"\xc1", "undecodable-body", None),
    (b"", "undecodable-body", None),
    (msgpack.packb({"v": 1}) + b"\x00", "undecodable-body", None),  # trailing data
    (msgpack.packb([1, 2, 3]), "invalid-batch", None),
    (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "reports": [], "client": "me"}), "invalid-batch", "client"),
    (msgpack.packb({"v": "1", "batch_id": b"x" * 16, "reports": [1]}), "invalid-batch", "v"),
    (msgpack.packb({"v": True, "batch_id": b"x" * 16, "reports": [1]}), "invalid-batch", "v"),
    (msgpack.packb({"v": 2, "batch_id": b"x" * 16, "reports": [1]}), "unsupported-version", "v"),
    (msgpack.packb({"v": 1, "batch_id": b"x" * 15, "reports": [1]}), "invalid-batch", "batch_id"),
    (msgpack.packb({"v": 1, "batch_id": "x" * 16, "reports": [1]}), "invalid-batch", "batch_id"),
    (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "reports": {}}), "invalid-batch", "reports"),
    (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "reports": []}), "invalid-batch", "reports"),
    (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "reports": [0] * 1001}), "invalid-batch", "reports"),
])
def test_envelope_errors(decoder, body, slug, field):
    p = problem(decoder, body)
    assert p.slug == slug
    assert p.extra.get("field") == field
    assert p.to_dict()["type"] == PROBLEM_BASE + slug


def test_report_errors_name_the_batch_index_metric_and_field(registry, decoder):
    rng = np.random.default_rng(4)
    base = mixed_reports(registry, rng)  # indices 3, 4, 10, 11 are page (oue) reports

    def with_report(i, **change):
        reports = [dict(r) for r in base]
        reports[i].update(change)
        return make_body(reports)

    p = problem(decoder, with_report(10, p=b"\x00"))  # oue payload of the wrong length
    assert (p.slug, p.extra["report_index"], p.extra["metric"]) == ("invalid-report", 10, "page")
    assert "report 10" in p.detail and "page" in p.detail
    p = problem(decoder, with_report(4, p=b"\xff\xff\xff"))  # padding bits beyond d=20 set
    assert (p.extra["report_index"], p.extra["field"]) == (4, "bits")
    p = problem(decoder, with_report(6, p=3))  # grr value outside [0, 3)
    assert (p.slug, p.extra["report_index"], p.extra["metric"]) == ("invalid-report", 6, "theme")
    p = problem(decoder, with_report(5, p=2**64 - 1))  # does not fit int64
    assert (p.slug, p.extra["report_index"]) == ("invalid-report", 5)
    p = problem(decoder, with_report(7, p=1.0))
    assert (p.slug, p.extra["report_index"]) == ("invalid-report", 7)
    p = problem(decoder, with_report(2, m="nope"))
    assert (p.slug, p.extra["report_index"], p.extra["field"]) == ("unknown-metric", 2, "m")
    p = problem(decoder, with_report(8, f="0" * 32))
    assert (p.slug, p.extra["report_index"], p.extra["metric"]) == ("fingerprint-mismatch", 8, "theme")
    p = problem(decoder, with_report(9, m=["x"]))
    assert (p.slug, p.extra["report_index"], p.extra["field"]) == ("invalid-report", 9, "m")
    p = problem(decoder, with_report(1, ts=123))
    assert (p.slug, p.extra["report_index"], p.extra["field"]) == ("invalid-report", 1, "ts")
    reports = [dict(r) for r in base]
    del reports[3]["p"]
    p = problem(decoder, make_body(reports))
    assert (p.extra["report_index"], p.extra["field"]) == (3, "p")
    reports = [dict(r) for r in base]
    reports[0] = [1, 2, 3]
    p = problem(decoder, make_body(reports))
    assert (p.slug, p.extra["report_index"]) == ("invalid-report", 0)
    assert p.reports == len(base)


def test_problem_document_shape_is_pinned():
    p = Problem("invalid-report", "report 3: bad", report_index=3, metric="theme", field="p")
    assert p.to_dict() == {
        "type": "https://ldp-telemetry.dev/problems/invalid-report",
        "title": "A report could not have been produced by an honest client",
        "status": 422, "detail": "report 3: bad", "report_index": 3, "metric": "theme", "field": "p"}
    r = Problem("overloaded", "full", retry_after=2.2).to_dict()
    assert r["status"] == 503 and r["retry_after"] == 3
    with pytest.raises(ValueError):
        Problem("no-such-type", "x")
