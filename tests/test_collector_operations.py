"""Operations features of `ldpt serve`: settings precedence and the TOML file, secret-file
permissions, TLS, the admin port, retention (`--retention-days`, `ldpt prune`) and worker
restarts."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from collector.admin import AdminServer
from collector.app import STATE, apply_retention, retention_cutoff
from collector.config import SETTINGS, ConfigError, ServeConfig, make_config
from collector.storage.base import SketchKey
from collector.storage.sqlite import SQLiteStore
from sketches import server_half
from sketches.base import Sketch

from .collector_support import Http, Server, make_body, serving, wait_until, wire_reports, write_registry
from .test_collector_app import post, running


@pytest.fixture
def setup(tmp_path):
    from .collector_support import write_token

    return (tmp_path / "metrics.toml", write_registry(tmp_path / "metrics.toml"),
            write_token(tmp_path / "token"), tmp_path / "collector.sqlite")


# --- settings ----------------------------------------------------------------------------------------
def test_settings_are_declared_once_and_serve_config_agrees():
    fields = {f.name: f for f in dataclasses.fields(ServeConfig)}
    assert set(fields) == {s.name for s in SETTINGS}
    for s in SETTINGS:
        if s.name == "metrics_file":
            continue
        default = fields[s.name].default
        assert default == (type(default)(s.default) if s.default is not None else None), s.name


def test_precedence_argument_env_toml_default(tmp_path):
    conf = tmp_path / "etc" / "serve.toml"
    conf.parent.mkdir()
    conf.write_text('metrics_file = "metrics.toml"\nport = 9000\nworkers = 3\nrate_limit = 4\n'
                    'relay_sources = ""\npostgres_dsn = "postgresql://from-toml/db"\n')
    env = {"LDPT_PORT": "9100", "LDPT_POSTGRES_DSN": "postgresql://from-env/db"}
    cfg = make_config(environ=env, toml=conf, workers=None)
    assert cfg.metrics_file == tmp_path / "etc" / "metrics.toml"  # relative to the file
    assert cfg.port == 9100 and cfg.workers == 3 and cfg.rate_limit == 4.0  # env > toml > default
    assert cfg.postgres_dsn == "postgresql://from-env/db" and cfg.db is None
    assert cfg.relay_sources == "" and cfg.max_connections == 1000
    cfg = make_config(environ=env, toml=conf, port=9200)
    assert cfg.port == 9200  # argument wins


@pytest.mark.parametrize("text,match", [
    ("prot = 1\n", "unknown setting 'prot'"),
    ("port = 'eighty'\n", "port"),
    ("rate_limit = -1\n", "rate_limit must be a positive"),
    ("tls_cert = 'c.pem'\n", "tls_cert and tls_key go together"),
    ("port = [1\n", "not a TOML file"),
])
def test_bad_config_files_name_the_file_and_key(tmp_path, text, match):
    conf = tmp_path / "serve.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        make_config(tmp_path / "m.toml", environ={}, toml=conf)
    if "TOML" in match or "unknown" in match or match == "port":
        assert str(conf) in str(info.value)


@pytest.mark.parametrize("text,match", [
    ("window = 'week'\n", "window 'week': use day or hour"),
    ("rate_limit = -1\n", "rate_limit must be a positive"),
    ("sqlite_synchronous = 'SOMETIMES'\n", "sqlite_synchronous 'SOMETIMES'"),
    ("port = 70000\n", "port must be a TCP port in 0..65535, got 70000"),
    ("admin_port = 65536\n", "admin_port must be a TCP port"),
])
def test_bad_config_values_name_the_file_or_variable(tmp_path, text, match):
    conf = tmp_path / "serve.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        make_config(tmp_path / "m.toml", environ={}, toml=conf)
    assert str(info.value).startswith(f"{conf}: ")
    name, _, value = text.strip().partition(" = ")
    with pytest.raises(ConfigError, match=match) as info:
        make_config(tmp_path / "m.toml", environ={f"LDPT_{name.upper()}": value.strip("'")})
    assert str(info.value).startswith(f"LDPT_{name.upper()}: ")


def test_a_port_out_of_range_in_the_config_file_is_a_one_line_error(tmp_path):
    registry_path = tmp_path / "metrics.toml"
    write_registry(registry_path)
    conf = tmp_path / "serve.toml"
    conf.write_text("port = 70000\n")
    result = CliRunner().invoke(main, ["serve", "--metrics", str(registry_path), "--db",
                                       str(tmp_path / "c.sqlite"), "--config", str(conf)])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {conf}: port must be a TCP port in 0..65535, got 70000"


def test_a_token_file_others_can_read_is_refused_unless_allowed(tmp_path, caplog):
    registry_path = tmp_path / "metrics.toml"
    write_registry(registry_path)
    token = tmp_path / "token"
    token.write_text("query-token-0123456789abcdef\n")
    token.chmod(0o640)
    result = CliRunner().invoke(main, ["serve", "--metrics", str(registry_path), "--db",
                                       str(tmp_path / "c.sqlite"), "--query-token-file", str(token),
                                       "--port", "0"])
    assert result.exit_code == 1
    assert "readable by group or others (mode 0640)" in result.output and "chmod 600" in result.output
    from collector.config import read_tokens

    assert read_tokens(token, allow_insecure=True) == (b"query-token-0123456789abcdef",)
    assert "readable by group or others" in caplog.text


@pytest.mark.parametrize("dsn", ["postgresql://ldpt:s3cret@db.internal/ldpt",
                                 "host=db.internal dbname=ldpt password=s3cret"])
def test_a_config_file_holding_the_dsn_password_must_be_private(tmp_path, caplog, dsn):
    """docs/operations.md moves the DSN into --config to keep its password out of `ps`: a
    serve.toml others can read would show it all the same, so it is refused like a token file."""
    conf = tmp_path / "serve.toml"
    conf.write_text(f'metrics_file = "metrics.toml"\npostgres_dsn = "{dsn}"\n')
    conf.chmod(0o644)
    with pytest.raises(ConfigError, match=r"serve.toml: the config file .*password.* readable by group "
                                          r"or others \(mode 0644\); run `chmod 600"):
        make_config(environ={}, toml=conf)
    cfg = make_config(environ={}, toml=conf, allow_insecure_token_file=True)  # a warning only
    assert cfg.postgres_dsn == dsn and "readable by group or others" in caplog.text
    conf.chmod(0o600)
    assert make_config(environ={}, toml=conf).postgres_dsn == dsn
    conf.chmod(0o644)  # the password comes from the environment instead: nothing secret in the file
    conf.write_text('metrics_file = "metrics.toml"\npostgres_dsn = "postgresql://db.internal/ldpt"\n')
    assert make_config(environ={}, toml=conf).postgres_dsn == "postgresql://db.internal/ldpt"


# --- TLS ---------------------------------------------------------------------------------------------
def self_signed(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("neither the cryptography package nor the openssl CLI is available")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    key.chmod(0o600)
    return cert, key


@pytest.mark.e2e
def test_tls_with_a_generated_certificate(tmp_path):
    cert, key = self_signed(tmp_path)
    registry = write_registry(tmp_path / "metrics.toml")
    body = make_body(wire_reports(registry.get("theme"), [0, 1, 2], np.random.default_rng(0)))
    args = ["--metrics", str(tmp_path / "metrics.toml"), "--db", str(tmp_path / "c.sqlite"),
            "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)]
    server = Server(args, tmp_path, url_pattern=r"listening on (https://[\d.]+:\d+)")
    try:
        port = int(server.url.rsplit(":", 1)[1])
        ctx = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        conn.request("POST", "/v1/reports", body, {"Content-Type": "application/msgpack"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["accepted"] == 3
        conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # no TLS: no answer
        with pytest.raises((http.client.HTTPException, OSError)):
            plain.request("GET", "/healthz")
            plain.getresponse().read()
    finally:
        assert server.terminate() == 0


# --- admin port ----------------------------------------------------------------------------------------
def test_the_admin_port_answers_while_the_workers_loop_is_blocked(setup):
    """A saturated (here: blocked) event loop cannot delay the admin port's monitoring."""
    from .collector_support import free_port

    async def scenario():
        async with running(setup) as (client, app):
            state = app[STATE]
            await post(client, make_body(wire_reports(setup[1].get("theme"), [1], np.random.default_rng(0))))
            for _ in range(100):  # the first readiness probe
                if state.readiness[0]:
                    break
                await asyncio.sleep(0.02)
            import socket

            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen(16)
            admin = AdminServer(state, sock)
            admin.start()
            answers: list[tuple[int, bytes]] = []
            loop_blocked = threading.Event()

            def scrape() -> None:
                loop_blocked.wait(10)
                port = sock.getsockname()[1]
                for path in ("/healthz", "/readyz", "/metrics"):
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    conn.request("GET", path)
                    resp = conn.getresponse()
                    answers.append((resp.status, resp.read()))
                    conn.close()

            scraper = threading.Thread(target=scrape)
            scraper.start()
            loop_blocked.set()
            deadline = time.monotonic() + 10
            while len(answers) < 3 and time.monotonic() < deadline:  # blocks this loop
                time.sleep(0.01)
            scraper.join(10)
            admin.stop()
            assert [a[0] for a in answers] == [200, 200, 200]
            text = answers[2][1].decode()
            assert 'ldpt_reports_accepted_total{metric="theme"} 1' in text
            assert "ldpt_build_info{version=" in text and "ldpt_process_open_fds" in text
            assert json.loads(answers[1][1])["status"] == "ready"
    asyncio.run(scenario())


def test_the_admin_port_closes_slow_headers_and_keeps_keepalive_clients(setup):
    """The admin port has the main port's header deadline: a socket dripping header lines is
    closed (408), while a keep-alive scraper is served again and again."""
    import socket

    from .collector_support import free_port

    async def scenario():
        async with running(setup, header_timeout=0.3, keepalive_timeout=5.0) as (client, app):
            state = app[STATE]
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen(16)
            admin = AdminServer(state, sock)
            admin.start()
            port = sock.getsockname()[1]

            def drip() -> bytes:
                slow = socket.create_connection(("127.0.0.1", port), timeout=0.2)
                slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                deadline = time.monotonic() + 10
                try:
                    while time.monotonic() < deadline:
                        try:
                            return slow.recv(200)
                        except TimeoutError:
                            slow.sendall(b"X-Slow: 1\r\n")  # one header line, never the end
                    return b"still open"
                except OSError:
                    return b""  # closed while writing
                finally:
                    slow.close()

            def scrape_thrice() -> list[int]:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    statuses = []
                    for _ in range(3):  # one keep-alive connection
                        conn.request("GET", "/healthz")
                        resp = conn.getresponse()
                        resp.read()
                        statuses.append(resp.status)
                    return statuses
                finally:
                    conn.close()

            try:
                answer = await asyncio.to_thread(drip)
                statuses = await asyncio.to_thread(scrape_thrice)
            finally:
                admin.stop()
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408 The request (headers or body)"), answer
            assert statuses == [200, 200, 200]

    asyncio.run(scenario())


# --- retention -----------------------------------------------------------------------------------------
def fill(db, registry, days: list[str]) -> None:
    spec = registry.get("theme")
    with SQLiteStore(db, create=True) as store:
        for day in days:
            sketch: Sketch = server_half(spec).new_sketch()
            sketch.counts[0] += 1
            sketch.reports[0] += 3
            store.add_sketch(SketchKey("theme", spec.fingerprint, day), sketch)
        store._conn.execute("INSERT INTO batches VALUES (?, ?, ?, ?)",
                            (b"\x01" * 16, b"d", 3, "2026-01-01T10:00:00+00:00"))
        store._conn.execute("INSERT INTO batches VALUES (?, ?, ?, ?)",
                            (b"\x02" * 16, b"d", 3, "2026-03-01T10:00:00+00:00"))


def windows(db) -> list[str]:
    with SQLiteStore(db, create=False) as store:
        return [w.window for w in store.windows()]


def test_ldpt_prune_deletes_whole_windows_before_a_date(setup):
    db = setup[3]
    fill(db, setup[1], ["2026-01-01", "2026-01-31", "2026-02-01T05", "2026-02-02"])
    result = CliRunner().invoke(main, ["prune", "--db", str(db), "--before", "2026-2-1"])
    assert result.exit_code == 0, result.output
    assert "deleted 2 windows (2 rows) and 1 batch id before 2026-02-01" in result.output
    assert windows(db) == ["2026-02-01T05", "2026-02-02"]
    bad = CliRunner().invoke(main, ["prune", "--db", str(db), "--before", "yesterday"])
    assert bad.exit_code == 2 and "not a date" in bad.output
    missing = CliRunner().invoke(main, ["prune", "--db", str(db.with_name("nope.sqlite")),
                                        "--before", "2026-01-01"])
    assert missing.exit_code == 1 and "no such store" in missing.output


def test_a_retention_longer_than_the_calendar_keeps_everything():
    """retention_days = 10**9 passes the settings check; its cutoff must not overflow the date
    type (the housekeeping would warn every run and never prune): it keeps every window."""
    now = dt.datetime(2026, 3, 10, 12, tzinfo=dt.timezone.utc).timestamp()
    assert retention_cutoff(1, now) == "2026-03-10"
    assert retention_cutoff(10**9, now) == retention_cutoff(10**6, now) == "0001-01-01"


def test_ldpt_prune_refuses_a_date_after_today(setup):
    """A future --before (a typo: 2062 for 2026) would delete the window being written and every
    batch id, so SDK retries of recent batches would be counted twice."""
    db = setup[3]
    fill(db, setup[1], ["2026-01-01"])
    tomorrow = (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=1)).isoformat()
    for day in (tomorrow, "2999-01-01"):
        result = CliRunner().invoke(main, ["prune", "--db", str(db), "--before", day])
        assert result.exit_code == 2 and f"--before {day} is after today" in result.output
    assert windows(db) == ["2026-01-01"]
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert CliRunner().invoke(main, ["prune", "--db", str(db), "--before", today]).exit_code == 0
    assert windows(db) == []


def test_retention_days_while_serving(setup):
    """The collector prunes old windows itself, between commits of concurrent batches."""
    db = setup[3]
    today = dt.datetime.now(dt.timezone.utc).date()
    old = (today - dt.timedelta(days=10)).isoformat()
    fill(db, setup[1], [old, today.isoformat()])
    assert retention_cutoff(3, now=dt.datetime(2026, 3, 10, 23, tzinfo=dt.timezone.utc).timestamp()) \
        == "2026-03-08"
    rng = np.random.default_rng(4)
    bodies = [make_body(wire_reports(setup[1].get("theme"), rng.integers(0, 3, 5), rng)) for _ in range(40)]

    async def scenario():
        async with running(setup) as (client, app):
            store = app[STATE].store
            posts = [post(client, b) for b in bodies]
            results = await asyncio.gather(*posts[:20], apply_retention(store, 3), *posts[20:])
            assert all(r[0] == 200 for r in results if isinstance(r, tuple))
    asyncio.run(scenario())
    assert windows(db) == [today.isoformat()]
    with SQLiteStore(db, create=False) as store:
        spec = setup[1].get("theme")
        sketch = store.load("theme", spec.fingerprint, server_half(spec).new_sketch())
        assert sketch.total_reports == 3 + 200  # the kept window and every new batch


@pytest.mark.skipif(not os.environ.get("LDPT_TEST_POSTGRES_DSN"), reason="needs LDPT_TEST_POSTGRES_DSN")
def test_prune_on_postgres(setup, monkeypatch):
    pytest.importorskip("asyncpg")
    from collector.storage.postgres import PostgresStore

    dsn = os.environ["LDPT_TEST_POSTGRES_DSN"]
    schema = f"ldpt_prune_{os.getpid()}"
    sep = "&" if "?" in dsn else "?"
    dsn_schema = f"{dsn}{sep}search_path={schema}"
    spec = setup[1].get("theme")

    async def scenario():
        store = await PostgresStore.open(dsn_schema)
        try:
            for day in ("2026-01-01", "2026-01-02T03", "2026-02-01"):
                sketch = server_half(spec).new_sketch()
                sketch.reports[0] += 1
                await store.add_sketch(SketchKey("theme", spec.fingerprint, day), sketch)
        finally:
            await store.aclose()
    asyncio.run(scenario())
    monkeypatch.setenv("LDPT_POSTGRES_DSN", dsn_schema)
    try:
        result = CliRunner().invoke(main, ["prune", "--before", "2026-02-01"])
        assert result.exit_code == 0, result.output
        assert "deleted 2 windows (2 rows)" in result.output
    finally:
        async def drop():
            import asyncpg

            conn = await asyncpg.connect(dsn)
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await conn.close()
        asyncio.run(drop())


# --- workers -------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_a_worker_restart_is_logged_and_counted(tmp_path):
    write_registry(tmp_path / "metrics.toml")
    with serving(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(tmp_path / "c.sqlite"),
                  "--port", "0", "--workers", "2"], tmp_path) as server:
        http_client = Http(server.url)
        status, doc = http_client.get_json("/healthz")
        assert status == 200
        os.kill(doc["pid"], signal.SIGKILL)
        assert wait_until(lambda: "restarting it" in server.text(), 30), server.text()

        def restarted() -> bool:
            try:  # the first try may reuse the killed worker's connection
                _, _, text = http_client.request("GET", "/metrics")
            except (OSError, http.client.HTTPException):
                return False
            return b"ldpt_worker_restarts_total 1" in text and b"ldpt_workers_up 2" in text
        assert wait_until(restarted, 30)
        http_client.close()
        assert server.terminate() == 0


@pytest.mark.e2e
def test_the_admin_port_binds_to_loopback_unless_admin_host_says_otherwise(tmp_path):
    """host widens the main port only (issue 18): the admin routes carry no token, so the
    admin port stays on admin_host (127.0.0.1 by default). The main port here listens on
    another loopback address, 127.0.0.2, standing in for a public one."""
    import re
    import socket

    write_registry(tmp_path / "metrics.toml")
    conf = tmp_path / "serve.toml"
    conf.write_text('metrics_file = "metrics.toml"\nhost = "127.0.0.2"\nport = 0\nadmin_port = 0\n')
    server = Server(["--config", str(conf)], tmp_path)
    try:
        assert wait_until(lambda: "admin (healthz" in server.text(), 30)
        assert server.url.startswith("http://127.0.0.2:")
        admin = re.search(r"admin \(healthz, readyz, metrics\) on http://([\d.]+):(\d+)", server.text())
        assert admin.group(1) == "127.0.0.1"
        port = int(admin.group(2))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
        with pytest.raises(OSError):  # nothing listens on the main port's address
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
    finally:
        assert server.terminate() == 0
    assert ServeConfig(metrics_file=tmp_path / "m.toml", host="0.0.0.0").admin_host == "127.0.0.1"


@pytest.mark.e2e
def test_serve_reads_its_config_file_and_names_bad_keys(tmp_path):
    write_registry(tmp_path / "metrics.toml")
    conf = tmp_path / "serve.toml"
    conf.write_text('metrics_file = "metrics.toml"\nworkerz = 2\n')
    result = CliRunner().invoke(main, ["serve", "--config", str(conf)])
    assert result.exit_code == 1 and f"{conf}: unknown setting 'workerz'" in result.output
    conf.write_text('metrics_file = "metrics.toml"\nport = 0\nadmin_port = 0\n')
    server = Server(["--config", str(conf)], tmp_path)
    try:
        assert wait_until(lambda: "admin (healthz, readyz, metrics) on http://127.0.0.1:" in server.text(), 30)
    finally:
        assert server.terminate() == 0
