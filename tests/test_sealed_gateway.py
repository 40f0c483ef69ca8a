"""The collector as an Oblivious HTTP gateway: key files and rotation, `ldpt keys`, the routes,
every outer error a 4xx problem, inner answers encapsulated, the one ingest path."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import stat
import time

import msgpack
import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from click.testing import CliRunner

from cli.main import main
from client_sdk import bhttp, ohttp
from client_sdk.registry import load_registry
from collector import ohttp_keys
from collector.app import STATE, create_app
from collector.config import ConfigError, make_config
from collector.ohttp_keys import KeyRing

from .collector_support import CollectorTestServer, expected_sketch, make_body, wire_reports, write_registry
from .test_collector_app import assert_problem, post, stored

SEALED = {"Content-Type": ohttp.REQUEST_TYPE}


@pytest.fixture
def setup(tmp_path):
    registry_path = tmp_path / "metrics.toml"
    registry = write_registry(registry_path)
    keys = tmp_path / "keys"
    ohttp_keys.generate(keys)
    return registry_path, registry, keys, tmp_path / "collector.sqlite"


@contextlib.asynccontextmanager
async def gateway(setup, **config):
    registry_path, _, keys, db = setup
    config.setdefault("ohttp_keys_dir", keys)
    cfg = make_config(registry_path, environ={}, db=db, **config)
    app = create_app(cfg, load_registry(registry_path))
    async with TestClient(CollectorTestServer(app, host="127.0.0.1")) as client:
        yield client, app


def bodies_for(registry, n, seed=0, size=6):
    rng = np.random.default_rng(seed)
    theme, page = registry.get("theme"), registry.get("page")
    return [make_body(wire_reports(theme, rng.integers(0, 3, size), rng)
                      + wire_reports(page, rng.integers(0, 20, size // 2), rng)) for _ in range(n)]


async def fetch_config(client) -> ohttp.KeyConfig:
    resp = await client.get(ohttp.GATEWAY_PATH, headers={"Accept": ohttp.KEYS_TYPE})
    assert resp.status == 200 and resp.content_type == ohttp.KEYS_TYPE
    assert resp.headers["Cache-Control"] == f"max-age={ohttp_keys.KEYS_MAX_AGE}"
    return ohttp.choose(ohttp.decode_key_configs(await resp.read()))


def seal(config, body, **kw):
    return ohttp.seal_request(config, ohttp.inner_request(body), **kw)


async def post_sealed(client, sealed, headers=SEALED):
    resp = await client.post(ohttp.GATEWAY_PATH, data=sealed.envelope if hasattr(sealed, "envelope") else sealed,
                             headers=headers)
    return resp.status, resp.headers, await resp.read()


def inner(sealed, status, headers, data) -> bhttp.Response:
    assert status == 200 and headers["Content-Type"] == ohttp.RESPONSE_TYPE
    assert headers["Cache-Control"] == "private, no-store"
    return bhttp.decode_response(ohttp.open_response(sealed, data))


def test_sealed_batches_take_the_plain_ingest_path_and_resends_are_duplicates(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 4)

    async def scenario():
        async with gateway(setup) as (client, app):
            config = await fetch_config(client)
            envelopes = [seal(config, b) for b in bodies[:3]]
            for env in envelopes:
                answer = inner(env, *await post_sealed(client, env))
                assert answer.status == 200 and answer.header("content-type") == b"application/json"
                assert json.loads(answer.content) == {"accepted": 9, "duplicate": False}
            # the same envelope again (an SDK retry): the batch is counted once
            answer = inner(envelopes[0], *await post_sealed(client, envelopes[0]))
            assert json.loads(answer.content) == {"accepted": 9, "duplicate": True}
            # the same batch sealed afresh, and the same batch in plain: duplicates too
            answer = inner(e := seal(config, bodies[1]), *await post_sealed(client, e))
            assert json.loads(answer.content)["duplicate"] is True
            status, _, data = await post(client, bodies[2])
            assert status == 200 and json.loads(data)["duplicate"] is True
            status, _, _ = await post(client, bodies[3])   # plain batches still work beside
            assert status == 200
            state = app[STATE]
            assert state.telemetry.value("ldpt_sealed_envelopes_total", "accepted") == 3
            assert state.telemetry.value("ldpt_sealed_envelopes_total", "duplicate") == 2
    asyncio.run(scenario())
    for name in ("theme", "page"):
        spec = registry.get(name)
        sketch, batches = stored(setup[3], spec)
        want = expected_sketch(spec, bodies)
        np.testing.assert_array_equal(sketch.counts, want.counts)
        assert batches == 4


def test_inner_refusals_come_back_encapsulated_exactly_as_plain_answers(setup):
    registry = setup[1]
    theme = registry.get("theme")

    async def scenario():
        async with gateway(setup) as (client, _):
            config = await fetch_config(client)
            bad_report = make_body([{"m": "theme", "f": theme.fingerprint, "p": 7}])   # grr d=3
            plain_status, _, plain_data = await post(client, bad_report)
            env = seal(config, bad_report)
            answer = inner(env, *await post_sealed(client, env))
            assert answer.status == plain_status == 422
            assert answer.header("content-type") == b"application/problem+json"
            doc, plain_doc = json.loads(answer.content), json.loads(plain_data)
            assert doc == plain_doc and doc["type"].endswith("/invalid-report") and doc["report_index"] == 0
            unknown = make_body([{"m": "nope", "f": "0" * 32, "p": 1}])
            answer = inner(e := seal(config, unknown), *await post_sealed(client, e))
            assert answer.status == 422 and json.loads(answer.content)["metric"] == "nope"
            answer = inner(e := seal(config, b"\xc1not msgpack"), *await post_sealed(client, e))
            assert answer.status == 400 and json.loads(answer.content)["type"].endswith("/undecodable-body")
            # other inner requests: another path, method, content type, a compressed body
            for req, status, slug in (
                    (bhttp.Request("POST", "https", "", "/v1/registry", (("content-type", b"application/msgpack"),), b"x"),
                     404, "not-found"),
                    (bhttp.Request("GET", "https", "", "/v1/reports"), 405, "method-not-allowed"),
                    (bhttp.Request("POST", "https", "", "/v1/reports", (("content-type", b"text/plain"),), b"x"),
                     415, "unsupported-media-type"),
                    (bhttp.Request("POST", "https", "", "/v1/reports", (("content-type", b"application/msgpack"),
                                                                         ("content-encoding", b"gzip")), b"x"),
                     415, "unsupported-content-encoding")):
                env = ohttp.seal_request(config, bhttp.encode_request(req))
                answer = inner(env, *await post_sealed(client, env))
                assert answer.status == status and json.loads(answer.content)["type"].endswith(slug)
            env = ohttp.seal_request(config, b"\x07garbage")
            answer = inner(env, *await post_sealed(client, env))
            assert answer.status == 400 and "Binary HTTP" in json.loads(answer.content)["detail"]
    asyncio.run(scenario())


def test_outer_errors_are_4xx_problems_and_never_5xx(setup):
    registry = setup[1]
    body = bodies_for(registry, 1)[0]

    async def scenario():
        async with gateway(setup, max_body_bytes=4096) as (client, _):
            config = await fetch_config(client)
            env = seal(config, body)
            doc = assert_problem(*await post_sealed(client, env, {"Content-Type": "application/msgpack"}),
                                 415, "unsupported-media-type")
            assert "message/ohttp-req" in doc["detail"]
            # unknown key id: RFC 9458's problem type, so the client refetches the key configuration
            wrong = bytes([(config.key_id + 1) % 256]) + env.envelope[1:]
            status, headers, data = await post_sealed(client, wrong)
            assert status == 400 and headers["Content-Type"].startswith("application/problem+json")
            assert json.loads(data)["type"] == ohttp.KEY_PROBLEM_TYPE
            tampered = env.envelope[:-1] + bytes([env.envelope[-1] ^ 1])
            status, _, data = await post_sealed(client, tampered)
            assert status == 400 and json.loads(data)["type"] == ohttp.KEY_PROBLEM_TYPE
            assert_problem(*await post_sealed(client, b"short"), 400, "undecodable-envelope")
            too_big = b"\x00" * (ohttp.sealed_size_limit(4096) + 1)
            assert_problem(*await post_sealed(client, too_big), 413, "body-too-large")
            # an inner batch above max_body_bytes: its 413 is encapsulated
            env = seal(config, b"\x83" + b"\x00" * 5000)
            assert inner(env, *await post_sealed(client, env)).status == 413
            rng = np.random.default_rng(3)
            for _ in range(200):    # random bytes, random lengths, a valid header or not
                n = int(rng.integers(0, 300))
                junk = bytes(rng.integers(0, 256, n, dtype=np.uint8))
                if rng.random() < 0.5 and n > 7:
                    junk = env.envelope[:7] + junk[7:]
                status, _, _ = await post_sealed(client, junk)
                assert 400 <= status < 500
    asyncio.run(scenario())


def test_a_collector_without_keys_refuses_sealed_requests_with_404(setup):
    async def scenario():
        async with gateway(setup, ohttp_keys_dir=None) as (client, _):
            resp = await client.get(ohttp.GATEWAY_PATH)
            assert_problem(resp.status, resp.headers, await resp.read(), 404, "not-found")
            assert_problem(*await post_sealed(client, b"x" * 100), 404, "not-found")
    asyncio.run(scenario())


def test_cors_preflight_admits_the_gateway_for_listed_origins(setup):
    async def scenario():
        async with gateway(setup, cors_origins="https://app.example") as (client, _):
            resp = await client.options(ohttp.GATEWAY_PATH, headers={
                "Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Methods"] == "GET, POST"
            resp = await client.get(ohttp.GATEWAY_PATH, headers={"Origin": "https://app.example"})
            assert resp.headers["Access-Control-Allow-Origin"] == "https://app.example"
            resp = await client.options(ohttp.GATEWAY_PATH, headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
            assert resp.status == 403
    asyncio.run(scenario())


# --- keys on disk, rotation, reload ----------------------------------------------------------------------------
def test_rotation_publishes_the_new_key_and_accepts_the_old_until_its_overlap_ends(tmp_path):
    keys = tmp_path / "keys"
    first = ohttp_keys.generate(keys, now=1000.0)
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="already has an active key"):
        ohttp_keys.generate(keys, now=1001.0)
    clock = [1000.0]
    mono = [0.0]
    ring = KeyRing(keys, clock=lambda: clock[0], monotonic=lambda: mono[0])
    assert [c.key_id for c in ohttp.decode_key_configs(ring.published())] == [first.key_id]
    sealed_old = ohttp.seal_request(first.key.config, b"\x00" * 10)
    second = ohttp_keys.rotate(keys, overlap=100.0, now=2000.0)
    assert second.key_id != first.key_id
    clock[0], mono[0] = 2000.0, 10.0    # the running gateway notices the new files
    assert [c.key_id for c in ohttp.decode_key_configs(ring.published())] == [second.key_id]
    assert set(ring.accepted()) == {first.key_id, second.key_id}
    assert ohttp.open_request(ring.accepted(), sealed_old.envelope).message == b"\x00" * 10
    clock[0] = 2100.0                    # the overlap is over: the old key opens nothing
    assert set(ring.accepted()) == {second.key_id}
    with pytest.raises(ohttp.KeyProblem):
        ohttp.open_request(ring.accepted(), sealed_old.envelope)
    assert ohttp_keys.prune(keys, now=2100.0) == [first.key_id]
    third = ohttp_keys.rotate(keys, overlap=0.0, now=3000.0)
    assert {r.key_id for r in ohttp_keys.load_keys(keys)} == {third.key_id, second.key_id}
    # a key file others can read is refused, at startup and by the CLI
    third.path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        KeyRing(keys)
    assert KeyRing(keys, allow_insecure=True).published()


def test_key_ids_wrap_around_and_a_directory_without_keys_does_not_start(tmp_path):
    keys = tmp_path / "keys"
    with pytest.raises(ConfigError, match="ldpt keys generate"):
        KeyRing(tmp_path / "empty")
    now = 0.0
    ids = []
    for _ in range(300):
        now += 10
        ids.append(ohttp_keys.rotate(keys, overlap=5.0, now=now).key_id)
    assert ids[:3] == [0, 1, 2] and ids[255] == 255 and ids[256] == 0 and len(set(ids[-256:])) == 256
    assert len(list(keys.glob("key-*.json"))) <= 2   # expired keys are deleted as they rotate


def test_ldpt_keys_commands(tmp_path):
    keys = str(tmp_path / "keys")
    runner = CliRunner()
    result = runner.invoke(main, ["keys", "generate", "--dir", keys])
    assert result.exit_code == 0 and "key 0 generated" in result.output
    result = runner.invoke(main, ["keys", "generate", "--dir", keys])
    assert result.exit_code == 1 and "already has an active key" in result.output
    result = runner.invoke(main, ["keys", "rotate", "--dir", keys, "--overlap", "12h"])
    assert result.exit_code == 0 and "key 1 is now active" in result.output
    result = runner.invoke(main, ["keys", "list", "--dir", keys, "--format", "json"])
    rows = json.loads(result.output)
    assert [(r["key_id"], r["state"]) for r in rows] == [(0, "retired"), (1, "active")]
    result = runner.invoke(main, ["keys", "config"], env={"LDPT_OHTTP_KEYS_DIR": keys})
    configs = ohttp.decode_key_configs(base64.b64decode(result.output))
    assert [c.key_id for c in configs] == [1]
    out = tmp_path / "keys.bin"
    assert runner.invoke(main, ["keys", "config", "--dir", keys, "--binary", "-o", str(out)]).exit_code == 0
    assert ohttp.decode_key_configs(out.read_bytes()) == configs
    result = runner.invoke(main, ["keys", "rotate", "--dir", keys, "--overlap", "soon"])
    assert result.exit_code == 2 and "not a duration" in result.output
    result = runner.invoke(main, ["keys", "prune", "--dir", keys])
    assert result.exit_code == 0 and "deleted 0" in result.output


def test_the_gateway_reloads_a_rotated_directory_without_a_restart(setup, monkeypatch):
    monkeypatch.setattr(ohttp_keys, "RELOAD_INTERVAL", 0.0)
    body = bodies_for(setup[1], 1)[0]

    async def scenario():
        async with gateway(setup) as (client, _):
            old = await fetch_config(client)
            old_env = seal(old, body)
            ohttp_keys.rotate(setup[2], overlap=3600)
            new = await fetch_config(client)
            assert new.key_id != old.key_id
            assert inner(old_env, *await post_sealed(client, old_env)).status == 200   # overlap
            for path in setup[2].glob("key-*.json"):   # end the overlap now
                doc = json.loads(path.read_text())
                if doc["key_id"] == old.key_id:
                    doc["expires"] = time.time() - 1
                    path.write_text(json.dumps(doc))
                    os.chmod(path, 0o600)
            status, _, data = await post_sealed(client, seal(old, body))
            assert status == 400 and json.loads(data)["type"] == ohttp.KEY_PROBLEM_TYPE
    asyncio.run(scenario())


def test_envelope_results_for_a_batch_endpoint(setup):
    """What a shuffler's batch endpoint gets back from gateway.handle_envelope per envelope."""
    from collector.gateway import handle_envelope

    registry = setup[1]
    good = bodies_for(registry, 1)[0]
    bad = make_body([{"m": "theme", "f": registry.get("theme").fingerprint, "p": 9}])

    async def scenario():
        async with gateway(setup) as (client, app):
            state = app[STATE]
            config = await fetch_config(client)
            first = await handle_envelope(state, (env := seal(config, good)).envelope)
            assert (first.outcome, first.status, first.reports, first.key_id) == ("accepted", 200, 9, config.key_id)
            assert first.batch_id == msgpack.unpackb(good)["batch_id"]
            assert json.loads(bhttp.decode_response(ohttp.open_response(env, first.response)).content)["accepted"] == 9
            again = await handle_envelope(state, env.envelope)
            assert again.outcome == "duplicate" and again.reports == 9
            refused = await handle_envelope(state, seal(config, bad).envelope)
            assert (refused.outcome, refused.status, refused.problem.slug) == ("refused", 422, "invalid-report")
            assert refused.response is not None
            broken = await handle_envelope(state, b"\x09" * 80)
            assert (broken.outcome, broken.status, broken.response, broken.problem.slug) == \
                ("undecryptable", 400, None, "ohttp-key")
    asyncio.run(scenario())
