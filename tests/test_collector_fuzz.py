"""Hostile input against a real `ldpt serve` process: malformed, truncated, oversized and
wrong-typed bodies. Every answer is a 4xx problem document (never a 5xx, never a 200), the
process stays up, and the store is exactly as it was before the fuzzing."""

from __future__ import annotations

import json
import os

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.problems import PROBLEM_TYPES
from collector.storage.sqlite import SQLiteStore

from .collector_support import Http, Server, make_body, wire_reports, write_registry

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024
FUZZ = settings(max_examples=500, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT64_MIN, UINT64_MAX = -(2**63), 2**64 - 1


class Target:
    def __init__(self, server: Server, registry, db) -> None:
        self.server, self.registry, self.db = server, registry, db
        self.http = Http(server.url)
        theme, page = registry.get("theme"), registry.get("page")
        rng = np.random.default_rng(0)
        self.valid = wire_reports(theme, [0, 1, 2, 1], rng) + wire_reports(page, [0, 19, 7], rng)
        self.theme, self.page = theme, page

    def snapshot(self):
        store = SQLiteStore(self.db, create=False)
        try:
            rows = store._conn.execute(
                "SELECT metric, fingerprint, window, cohort, reports, counts FROM sketches ORDER BY 1, 2, 3, 4"
            ).fetchall()
            rows += store._conn.execute(  # sparse deltas (small commits of large sketches)
                "SELECT metric, fingerprint, window, id, reports, cells || counts FROM sketch_deltas "
                "ORDER BY 1, 2, 3, 4").fetchall()
            ids = store._conn.execute("SELECT batch_id, digest FROM batches ORDER BY 1").fetchall()
            return rows, ids
        finally:
            store.close()

    def post(self, body: bytes, content_type: str = "application/msgpack"):
        status, headers, data = self.http.post_batch(body, content_type)
        assert 400 <= status < 500, (status, data[:300])
        assert headers["content-type"].startswith("application/problem+json")
        doc = json.loads(data)
        slug = doc["type"].rsplit("/", 1)[-1]
        assert PROBLEM_TYPES[slug][0] == status == doc["status"] and doc["detail"]
        return status, doc


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    registry = write_registry(tmp / "metrics.toml")
    db = tmp / "collector.sqlite"
    server = Server(["--metrics", str(tmp / "metrics.toml"), "--db", str(db), "--port", "0"], tmp,
                    env={"LDPT_MAX_BODY_BYTES": str(MAX_BODY), "LDPT_MAX_REPORTS_PER_BATCH": "500"})
    t = Target(server, registry, db)
    try:
        for _ in range(3):  # some real data, so "unchanged" is not trivially "empty"
            status, _, _ = t.http.post_batch(make_body(t.valid))
            assert status == 200
        before = t.snapshot()
        yield t
        assert server.proc.poll() is None, "the collector died"
        status, _, _ = t.http.request("GET", "/healthz")
        assert status == 200
        assert t.snapshot() == before, "the store changed"
        t.http.close()
        assert server.terminate() == 0
    finally:
        server.kill()


# --- strategies -------------------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(INT64_MIN, UINT64_MAX),
                    st.floats(allow_nan=True), st.text(max_size=40), st.binary(max_size=40))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 9), st.binary(max_size=4)), inner,
                    max_size=5)), max_leaves=20)


def bad_theme_payload():
    """Anything but an int in [0, 3)."""
    return st.one_of(st.integers(INT64_MIN, UINT64_MAX).filter(lambda x: not 0 <= x < 3),
                     values.filter(lambda v: type(v) is not int))


def bad_page_payload():
    """Anything but 3 bytes whose 4 padding bits (items 20..23) are clear."""
    wrong_len = st.binary(max_size=10).filter(lambda b: len(b) != 3)
    padding = st.tuples(st.binary(min_size=2, max_size=2), st.integers(1, 15)).map(
        lambda t: t[0] + bytes([t[1] << 4]))
    return st.one_of(wrong_len, padding, values.filter(lambda v: type(v) is not bytes))


# --- tests --------------------------------------------------------------------------------------------
@FUZZ
@given(body=st.binary(max_size=3000))
def test_random_bytes(target, body):
    target.post(body)


@FUZZ
@given(data=st.data())
def test_truncated_valid_bodies(target, data):
    body = make_body(target.valid)
    cut = data.draw(st.integers(0, len(body) - 1))
    status, doc = target.post(body[:cut])
    assert status == 400


@FUZZ
@given(doc=values)
def test_wrong_typed_documents(target, doc):
    try:
        body = msgpack.packb(doc)
    except (OverflowError, ValueError, TypeError):
        return
    target.post(body)


@FUZZ
@given(v=values, batch_id=values, reports=values, extra=st.booleans())
def test_wrong_typed_envelopes(target, v, batch_id, reports, extra):
    doc = {"v": v, "batch_id": batch_id, "reports": reports}
    if extra:
        doc["device_id"] = "abc"
    if v == 1 and type(v) is int and type(batch_id) is bytes and len(batch_id) == 16 and not extra:
        doc["v"] = 2  # keep the envelope invalid by construction
    target.post(msgpack.packb(doc))


@FUZZ
@given(data=st.data())
def test_batches_with_one_poisoned_report(target, data):
    """Valid reports around one that an honest client could not produce: all rejected, 422."""
    reports = [dict(r) for r in data.draw(st.lists(st.sampled_from(target.valid), min_size=1, max_size=30))]
    i = data.draw(st.integers(0, len(reports) - 1))
    kind = data.draw(st.sampled_from(["payload", "metric", "fingerprint", "extra", "missing", "whole"]))
    r = reports[i]
    if kind == "payload":
        r["p"] = data.draw(bad_theme_payload() if r["m"] == "theme" else bad_page_payload())
    elif kind == "metric":
        r["m"] = data.draw(values.filter(lambda m: m not in ("theme", "page")))
    elif kind == "fingerprint":
        r["f"] = data.draw(values.filter(lambda f: f not in (target.theme.fingerprint,
                                                             target.page.fingerprint)))
    elif kind == "extra":
        r[data.draw(st.sampled_from(["ts", "client", "device", "x"]))] = data.draw(values)
    elif kind == "missing":
        del r[data.draw(st.sampled_from(["m", "f", "p"]))]
    else:
        reports[i] = data.draw(values.filter(lambda v: not isinstance(v, dict)))
    body = make_body(reports)
    try:
        msgpack.unpackb(body, strict_map_key=True)
    except ValueError:  # e.g. a map with integer keys inside: not a wire-format document at all
        assert target.post(body)[0] == 400
        return
    status, doc = target.post(body)
    assert status == 422
    if "report_index" in doc:
        assert doc["report_index"] == i


@settings(max_examples=60, deadline=None, derandomize=True)
@given(extra=st.integers(1, 5000), content_type=st.sampled_from(
    ["application/msgpack", "application/json", "text/plain", "application/octet-stream", ""]))
def test_oversized_and_wrong_content_types(target, extra, content_type):
    body = make_body(target.valid) if content_type != "application/msgpack" else \
        os.urandom(MAX_BODY + extra)
    status, _ = target.post(body, content_type or "application/x-www-form-urlencoded")
    assert status == (413 if content_type == "application/msgpack" else 415)


def test_too_many_reports_in_one_batch(target):
    status, doc = target.post(make_body(target.valid * 100))
    assert status == 422 and doc["field"] == "reports"


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=st.binary(max_size=2000), encoding=st.sampled_from(["deflate", "gzip"]),
       compressed=st.booleans(), cut=st.integers(1, 60))
def test_undecodable_content_encodings(target, body, encoding, compressed, cut):
    """Issue 13: these were 500s with a traceback each; now 400 (or 422 if they decode)."""
    import zlib

    if compressed:  # a real stream of a valid batch, cut short
        packer = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
        stream = packer.compress(make_body(target.valid)) + packer.flush()
        body = stream[:min(cut, len(stream) - 1)]
    status, headers, data = target.http.request(  # one connection each: a broken body ends it
        "POST", "/v1/reports", body, {"Content-Type": "application/msgpack", "Content-Encoding": encoding,
                                      "Connection": "close"})
    target.http.close()
    assert 400 <= status < 500, (status, data[:300])
    assert headers["content-type"].startswith("application/problem+json")


@FUZZ
@given(data=st.data())
def test_duplicated_keys(target, data):
    """A map that repeats a key (envelope or report) is a 400, never half-understood."""
    report = target.valid[data.draw(st.integers(0, len(target.valid) - 1))]
    pairs = list(report.items())
    pairs.insert(data.draw(st.integers(0, 3)), pairs[data.draw(st.integers(0, 2))])
    raw_report = bytes([0x80 | len(pairs)]) + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in pairs)
    body = (b"\x83" + msgpack.packb("v") + msgpack.packb(1) + msgpack.packb("batch_id")
            + msgpack.packb(os.urandom(16)) + msgpack.packb("reports") + b"\x91" + raw_report)
    status, doc = target.post(body)
    assert status == 400 and "duplicate key" in doc["detail"]
