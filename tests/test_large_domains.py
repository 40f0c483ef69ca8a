"""Large categorical domains declared compactly (client_sdk/domains.py) and served small
(collector/registry_http.py): numbered domains, domain files, and GET /v1/registry with gzip,
ETag/304, Cache-Control and a per-source rate limit."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from client_sdk.domains import NumberedDomain, domain_digest, domain_text
from client_sdk.errors import RegistryError
from client_sdk.registry import load_registry, parse_registry
from client_sdk.remote import cached_domains, registry_from_json
from client_sdk.testing import MemoryTransport
from collector.app import create_app
from collector.config import make_config
from collector.registry_http import accepts_gzip, not_modified, registry_representation
from collector.testing import FakeCollector

from .collector_support import CollectorTestServer

VALUES = ["alpha", "beta", "gamma", "δέλτα", "日本", "last"]


def write(tmp_path, toml: str, files: dict[str, str] | None = None):
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "metrics.toml").write_text(toml, encoding="utf-8")
    return tmp_path / "metrics.toml"


def metric(categories: str, name: str = "m", protocol: str = "olh") -> str:
    return f'[metrics.{name}]\nkind = "categorical"\ncategories = {categories}\nprotocol = "{protocol}"\nepsilon = 2.0\n'


# --- numbered domains ---------------------------------------------------------------------------------
def test_a_numbered_domain_maps_ids_without_listing_them(tmp_path):
    reg = load_registry(write(tmp_path, metric("{ ids = 1000000 }", protocol="hr")))
    spec = reg.get("m")
    assert isinstance(spec.categories, NumberedDomain) and spec.domain_size == 1_000_000
    assert spec.indices([0, 17, "999999", np.int64(5)]) == [0, 17, 999_999, 5]
    for bad in ("007", "-1", "1000000", " 5", "5.0", "x", True, 2.5):
        with pytest.raises(Exception, match="not in the domain"):
            spec.indices([bad])
    assert spec.domain[3] == "3" and spec.domain[-1] == "999999" and spec.domain[:3] == ["0", "1", "2"]
    assert spec.to_toml_table()["categories"] == {"ids": 1_000_000}          # dumps as written
    assert parse_registry(reg.to_toml()).get("m").fingerprint == spec.fingerprint
    published = spec.to_json()
    assert published["categories"] == {"ids": 1_000_000}
    assert len(json.dumps(reg.to_json())) < 2_000
    back = registry_from_json(json.dumps(reg.to_json()))   # the SDK's path: the same fingerprint
    assert back.get("m").fingerprint == spec.fingerprint


def test_a_numbered_domain_is_a_metric_of_its_own():
    """{ids = d} hashes {"ids": d}: a new declaration, not the same as listing "0".."d-1"."""
    numbered = parse_registry(metric("{ ids = 4 }")).get("m")
    listed = parse_registry(metric('["0", "1", "2", "3"]')).get("m")
    assert numbered.fingerprint != listed.fingerprint
    assert numbered.indices(["3"]) == listed.indices(["3"]) == [3]
    assert numbered.canonical()["categories"] == {"ids": 4}


@pytest.mark.parametrize("bad", ["{ ids = 1 }", "{ ids = 20000000 }", "{ ids = true }", "{ ids = 2.5 }",
                                 "{ idz = 4 }", "{ ids = 4, file = \"x\" }"])
def test_bad_numbered_domains_are_refused(bad):
    with pytest.raises(RegistryError, match="categories"):
        parse_registry(metric(bad))


# --- domain files -------------------------------------------------------------------------------------
ASCII_VALUES = ["a", "b c", "x/y", "~", "0", "{}", "it's"]


@pytest.mark.parametrize("values", [VALUES, ASCII_VALUES], ids=["escaped", "plain"])
def test_a_file_domain_is_the_same_metric_as_its_values_inline(tmp_path, values):
    """Same fingerprint as the list inline, whether the values' JSON needs escapes (json.dumps)
    or not (the fast join of registry.json_string_list)."""
    inline = parse_registry(metric(json.dumps(values, ensure_ascii=False))).get("m")
    path = write(tmp_path, metric('{ file = "values.txt" }'), {"values.txt": domain_text(values)})
    reg = load_registry(path)
    spec = reg.get("m")
    assert spec.fingerprint == inline.fingerprint                  # the stored data stays valid
    assert tuple(spec.domain) == tuple(values) and spec.indices([values[4]]) == [4]
    assert spec.to_toml_table()["categories"] == {"file": "values.txt"}
    assert load_registry(write(tmp_path, reg.to_toml())).get("m").fingerprint == spec.fingerprint
    published = spec.to_json()["categories"]
    assert published == {"file": "values.txt", "size": len(values),
                         "sha256": hashlib.sha256(domain_text(values).encode()).hexdigest()}
    assert published["sha256"] == domain_digest(values)
    # a file without the final newline is the same domain
    write(tmp_path, metric('{ file = "values.txt" }'), {"values.txt": domain_text(values)[:-1]})
    assert load_registry(path).get("m").fingerprint == spec.fingerprint


def test_a_pinned_domain_file_that_changed_is_refused(tmp_path):
    digest = domain_digest(VALUES)
    path = write(tmp_path, metric(f'{{ file = "v.txt", sha256 = "{digest}" }}'), {"v.txt": domain_text(VALUES)})
    spec = load_registry(path).get("m")
    assert spec.to_toml_table()["categories"] == {"file": "v.txt", "sha256": digest}
    (tmp_path / "v.txt").write_text(domain_text(VALUES + ["new"]), encoding="utf-8")
    with pytest.raises(RegistryError, match="the file changed"):
        load_registry(path)


@pytest.mark.parametrize("text,message", [
    ("a\nb\r\nc\n", "line 2 has a carriage return"),
    ("a\n\nb\n", "line 2 is empty"),
    ("a\nb\na\n", "line 3 repeats the value 'a'"),
    ("a\n", "at least 2 categories"),
])
def test_bad_domain_files_are_refused_naming_the_line(tmp_path, text, message):
    path = write(tmp_path, metric('{ file = "v.txt" }'), {"v.txt": text})
    with pytest.raises(RegistryError, match=message):
        load_registry(path)


def test_a_missing_or_undecodable_domain_file_is_refused(tmp_path):
    path = write(tmp_path, metric('{ file = "nope.txt" }'))
    with pytest.raises(RegistryError, match="no such file"):
        load_registry(path)
    (tmp_path / "bin.txt").write_bytes(b"a\nb\xff\n")
    write(tmp_path, metric('{ file = "bin.txt" }'))
    with pytest.raises(RegistryError, match="line 2 is not UTF-8"):
        load_registry(path)
    with pytest.raises(RegistryError, match="registry read from a file"):
        parse_registry(metric('{ file = "v.txt" }'))


def test_the_sdk_fetches_a_file_domain_and_checks_it(tmp_path):
    path = write(tmp_path, metric('{ file = "v.txt" }') + "\n" + metric("{ ids = 50 }", "n"),
                 {"v.txt": domain_text(VALUES)})
    reg = load_registry(path)
    doc = json.dumps(reg.to_json())
    assert "δέλτα" not in doc
    with pytest.raises(RegistryError, match="published apart"):
        registry_from_json(doc)
    collector = FakeCollector(reg)
    cache = tmp_path / "cache"
    cache.mkdir()
    resolve = cached_domains(cache, _Direct(collector))
    back = registry_from_json(doc, domains=resolve)
    assert back.get("m").fingerprint == reg.get("m").fingerprint and back.get("n").fingerprint == reg.get("n").fingerprint
    assert (cache / f"domain-{domain_digest(VALUES)}.txt").exists()   # cached by digest
    assert registry_from_json(doc, domains=cached_domains(cache)).get("m").domain == tuple(VALUES)  # offline
    (cache / f"domain-{domain_digest(VALUES)}.txt").write_text(domain_text(VALUES[::-1]), encoding="utf-8")
    with pytest.raises(RegistryError, match="does not match"):
        registry_from_json(doc, domains=cached_domains(cache))


class _Direct:
    """A transport answering from a FakeCollector (GET only)."""

    def __init__(self, collector: FakeCollector) -> None:
        self.collector = collector

    def get_domain(self, metric: str):
        from client_sdk.transport import DOMAINS_PATH
        return self.collector.handle("GET", DOMAINS_PATH + metric, {}, b"")


def test_a_client_reports_into_large_domains(tmp_path):
    from client_sdk import TelemetryClient

    path = write(tmp_path, metric('{ file = "v.txt" }') + "\n" + metric("{ ids = 1000000 }", "n", "hr"),
                 {"v.txt": domain_text(VALUES)})
    reg = load_registry(path)
    collector = FakeCollector(reg)
    with TelemetryClient(transport=MemoryTransport(collector), state_dir=tmp_path / "state") as client:
        assert client.wait_for_registry(10)
        assert client.report("m", "日本") and client.report("n", 999_999)
        assert not client.report("n", 1_000_000)
        assert client.flush(10)
    assert collector.sketch("m").total_reports == 1 and collector.sketch("n").total_reports == 1
    assert any(p.startswith("/v1/registry/domains/m") for _, p, _, _ in collector.requests)


# --- serving the registry -----------------------------------------------------------------------------
def big_registry(tmp_path):
    """Two 10^6-value metrics: a numbered domain (hr) and a domain file (olh)."""
    values = [f"app-{i}.example" for i in range(1_000_000)]
    return load_registry(write(tmp_path, metric("{ ids = 1000000 }", "ids", "hr") + "\n" +
                               metric('{ file = "apps.txt" }', "apps", "olh"),
                               {"apps.txt": domain_text(values)})), values


def test_the_registry_of_two_million_value_metrics_is_small_on_the_wire(tmp_path):
    reg, _ = big_registry(tmp_path)
    rep = registry_representation(reg)
    assert len(rep.body) < 20_000 and len(rep.gzipped) < 10_000   # bar: <= 1 MB
    assert json.loads(gzip.decompress(rep.gzipped)) == json.loads(rep.body)


def test_accept_encoding_and_if_none_match():
    assert accepts_gzip("gzip, deflate, br") and accepts_gzip("*") and accepts_gzip("br;q=1, gzip;q=0.5")
    assert not accepts_gzip(None) and not accepts_gzip("gzip;q=0") and not accepts_gzip("br")
    assert not accepts_gzip("*, gzip;q=0")

    class Rep:
        etag, gzip_etag = '"abc"', '"abc-gzip"'
    assert not_modified('"abc"', Rep) and not_modified('W/"abc-gzip"', Rep) and not_modified("*", Rep)
    assert not_modified('"x", "abc"', Rep) and not not_modified('"abcd"', Rep) and not not_modified(None, Rep)


def run_app(tmp_path, registry, fn, **settings):
    config = make_config(tmp_path / "metrics.toml", environ={}, db=str(tmp_path / "s.sqlite"), **settings)

    async def go():
        app = create_app(config, registry)
        async with TestClient(CollectorTestServer(app)) as client:
            return await fn(client)
    return asyncio.run(go())


def test_get_registry_is_compressed_cached_and_revalidated(tmp_path):
    reg, values = big_registry(tmp_path)

    async def fn(client):
        plain = await client.get("/v1/registry", headers={"Accept-Encoding": "identity"})
        assert plain.status == 200 and "Content-Encoding" not in plain.headers
        body = await plain.read()
        etag = plain.headers["ETag"]
        assert plain.headers["Cache-Control"] == "public, max-age=300" and plain.headers["Vary"] == "Accept-Encoding"
        zipped = await client.get("/v1/registry", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        raw = await zipped.read()
        assert zipped.headers["Content-Encoding"] == "gzip" and gzip.decompress(raw) == body
        assert zipped.headers["ETag"] != etag and len(raw) < 10_000
        for tag in (etag, zipped.headers["ETag"], f'W/{etag}', f'"other", {etag}'):
            again = await client.get("/v1/registry", headers={"If-None-Match": tag})
            assert again.status == 304 and await again.read() == b""
        assert (await client.get("/v1/registry", headers={"If-None-Match": '"stale"'})).status == 200
        doc = json.loads(body)
        apps = next(m for m in doc["metrics"] if m["name"] == "apps")
        lst = await client.get("/v1/registry/domains/apps", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        text = gzip.decompress(await lst.read())
        assert hashlib.sha256(text).hexdigest() == apps["categories"]["sha256"] == lst.headers["ETag"].strip('"').removesuffix("-gzip")
        assert text.decode().split("\n")[:-1] == values
        assert lst.headers["Cache-Control"] == "public, max-age=86400"
        assert (await client.get("/v1/registry/domains/apps", headers={"If-None-Match": lst.headers["ETag"]})).status == 304
        missing = await client.get("/v1/registry/domains/ids")
        assert missing.status == 404 and (await missing.json())["type"].endswith("/no-domain-file")
    run_app(tmp_path, reg, fn)


def test_registry_requests_are_rate_limited_per_source_apart_from_ingest(tmp_path):
    reg = parse_registry(metric('["a", "b"]'))

    async def fn(client):
        statuses = [(await client.get("/v1/registry")).status for _ in range(8)]
        assert statuses[:5] == [200] * 5 and statuses[5:] == [429] * 3
        limited = await client.get("/v1/registry")
        assert limited.headers.get("Retry-After") and (await limited.json())["type"].endswith("/rate-limited")
        from collector.app import STATE
        state = client.server.app[STATE]
        assert state.policy.buckets.take(None) == 0   # the ingest bucket is untouched
    # loopback is a relay by default (exempt): make it an ordinary source
    run_app(tmp_path, reg, fn, rate_limit=0.001, rate_limit_burst=5, relay_sources="")
