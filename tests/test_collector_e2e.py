"""`ldpt serve` as a real process on 127.0.0.1: end to end, SIGKILL durability, SIGTERM, workers."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from collector.storage.sqlite import SQLiteStore
from sketches import server_half

from .collector_support import (
    Http,
    Server,
    expected_sketch,
    make_body,
    serving,
    wait_until,
    wire_reports,
    write_registry,
    write_token,
)

pytestmark = pytest.mark.e2e


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def store_state(db: Path, spec):
    """(sketch of spec, set of batch ids) of a store (the server may be dead or running)."""
    store = SQLiteStore(db, create=False)
    try:
        sketch = store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch())
        ids = {bytes(r[0]) for r in store._conn.execute("SELECT batch_id FROM batches")}
        return sketch, ids
    finally:
        store.close()


def assert_consistent(db: Path, spec, bodies_by_id: dict[bytes, bytes]) -> set[bytes]:
    """The stored sketch is exactly the sum of the batches whose ids are stored: all or nothing."""
    sketch, ids = store_state(db, spec)
    want = expected_sketch(spec, [bodies_by_id[i] for i in ids])
    np.testing.assert_array_equal(sketch.counts, want.counts)
    np.testing.assert_array_equal(sketch.reports, want.reports)
    return ids


def test_posted_batches_estimate_exactly_like_the_in_process_simulation(tmp_path):
    write_registry(tmp_path / "metrics.toml")
    token = write_token(tmp_path / "token")
    reg = str(tmp_path / "metrics.toml")
    served_db = tmp_path / "served.sqlite"
    with serving(["--metrics", reg, "--db", str(served_db), "--port", "0",
                  "--query-token-file", str(token)], tmp_path) as server:
        for metric, clients, seed in (("page", 30_000, 11), ("theme", 20_000, 12)):
            run_cli("simulate", "--metrics", reg, "--metric", metric, "--clients", str(clients),
                    "--seed", str(seed), "--url", server.url, "--batch-size", "700", "--silent")
            run_cli("simulate", "--metrics", reg, "--metric", metric, "--clients", str(clients),
                    "--seed", str(seed), "--db", str(tmp_path / "local.sqlite"), "--silent")
            for fmt in ("json", "table", "csv"):
                remote = run_cli("estimate", "--metric", metric, "--url", server.url, "--token-file",
                                 str(token), "--format", fmt, "--metrics", reg)
                local = run_cli("estimate", "--metrics", reg, "--metric", metric, "--db",
                                str(tmp_path / "local.sqlite"), "--format", fmt)
                assert remote == local
        stale = tmp_path / "stale.toml"  # the client's registry has another epsilon
        stale.write_text((tmp_path / "metrics.toml").read_text().replace("epsilon = 1.0", "epsilon = 1.5"))
        result = CliRunner().invoke(main, ["simulate", "--metrics", str(stale), "--metric", "theme",
                                           "--clients", "10", "--url", server.url, "--silent"])
        assert result.exit_code == 1 and "fingerprint-mismatch" in result.output
        assert "Traceback" not in result.output
        assert server.terminate() == 0
    from client_sdk.registry import load_registry

    registry = load_registry(reg)
    for metric in ("page", "theme"):
        spec = registry.get(metric)
        served, ids = store_state(served_db, spec)
        local, _ = store_state(tmp_path / "local.sqlite", spec)
        np.testing.assert_array_equal(served.counts, local.counts)  # the very same sketch
        np.testing.assert_array_equal(served.reports, local.reports)
    assert len(ids) == 30_000 // 700 + 1 + 20_000 // 700 + 1


class RetryingClients:
    """Threads posting their batches in order; each retries a batch until a 200 (any error)."""

    def __init__(self, url_of, bodies: list[bytes], threads: int = 4, stop_on_error: bool = False) -> None:
        self.url_of, self.bodies, self.stop_on_error = url_of, bodies, stop_on_error
        self.acked: dict[bytes, dict] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        shares = [bodies[i::threads] for i in range(threads)]
        self.threads = [threading.Thread(target=self.run, args=(s,), daemon=True) for s in shares]

    def start(self) -> RetryingClients:
        for t in self.threads:
            t.start()
        return self

    def run(self, share: list[bytes]) -> None:
        http = None
        for body in share:
            bid = msgpack.unpackb(body)["batch_id"]
            while not self.stopped.is_set():
                try:
                    http = http or Http(self.url_of(), timeout=10)
                    status, _, data = http.post_batch(body)
                    if status == 200:
                        with self.lock:
                            self.acked[bid] = json.loads(data)
                        break
                    assert status in (503,), (status, data)
                except OSError:
                    http = None
                    if self.stop_on_error:
                        return
                    time.sleep(0.02 + random.random() * 0.05)
            else:
                return

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "clients did not finish"


def theme_bodies(registry, n: int, size: int, seed: int, metric: str = "theme") -> dict[bytes, bytes]:
    rng = np.random.default_rng(seed)
    spec = registry.get(metric)
    out = {}
    for _ in range(n):
        bid = os.urandom(16)
        out[bid] = make_body(wire_reports(spec, rng.integers(0, spec.domain_size, size), rng), bid)
    return out


#: A large-domain metric whose small dense size (22 KB) makes every few commits merge flat rows
#: and every ~40 fold them into its dense row: SIGKILLs land in the middle of merges.
LARGE_METRIC = """
[metrics.large]
kind = "categorical"
categories = [{cats}]
protocol = "hr"
epsilon = 2.0
"""


@pytest.mark.parametrize("metric", ["theme", "large"])
def test_sigkill_while_clients_post_and_retry_loses_and_doubles_nothing(tmp_path, metric):
    registry = write_registry(tmp_path / "metrics.toml")
    if metric == "large":
        with open(tmp_path / "metrics.toml", "a", encoding="utf-8") as f:
            f.write(LARGE_METRIC.format(cats=", ".join(f'"v{i}"' for i in range(2_000))))
        from client_sdk.registry import load_registry
        registry = load_registry(tmp_path / "metrics.toml")
    spec = registry.get(metric)
    db = tmp_path / "collector.sqlite"
    first = Server(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(db), "--port", "0"], tmp_path)
    # restarts reuse the port the first server was given, so the clients' URL stays valid
    args = ["--metrics", str(tmp_path / "metrics.toml"), "--db", str(db), "--port", str(first.port)]
    bodies = theme_bodies(registry, 400, 25, seed=21, metric=metric)
    url = f"http://127.0.0.1:{first.port}"
    clients = RetryingClients(lambda: url, list(bodies.values()), threads=6)
    servers = [first]
    try:
        clients.start()
        for kill in (1, 2):
            assert wait_until(lambda k=kill: len(clients.acked) >= 80 * k, 60)
            servers[-1].kill()  # SIGKILL mid-stream: commits in flight, responses unsent
            time.sleep(0.2)
            with clients.lock:
                acked_before = set(clients.acked)
            stored_ids = assert_consistent(db, spec, bodies)  # nothing half-applied
            assert acked_before <= stored_ids  # every acknowledged batch survived
            servers.append(Server(args, tmp_path))  # restart on the same port
        clients.join(120)
        assert servers[-1].terminate() == 0
    finally:
        clients.stopped.set()
        for server in servers:
            server.kill()
    assert set(clients.acked) == set(bodies)
    assert assert_consistent(db, spec, bodies) == set(bodies)  # each counted exactly once
    sketch, _ = store_state(db, spec)
    assert sketch.total_reports == 400 * 25
    if metric == "large":   # the collectors did merge flat rows into the window's one dense row
        store = SQLiteStore(db, create=False)
        try:
            dense, rows = store._conn.execute(
                "SELECT sum(length(cells) = 0), count(*) FROM sketch_deltas").fetchone()
        finally:
            store.close()
        assert dense == 1 and rows < 40


def test_sigterm_commits_what_was_accepted_and_exits_0(tmp_path):
    registry = write_registry(tmp_path / "metrics.toml")
    spec = registry.get("theme")
    db = tmp_path / "collector.sqlite"
    bodies = theme_bodies(registry, 3000, 20, seed=22)
    with serving(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(db), "--port", "0"],
                 tmp_path) as server:
        clients = RetryingClients(lambda: server.url, list(bodies.values()), threads=8,
                                  stop_on_error=True).start()
        assert wait_until(lambda: len(clients.acked) >= 100, 60)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0
        clients.join(30)
        assert "stopped cleanly" in server.text()
    stored_ids = assert_consistent(db, spec, bodies)
    assert set(clients.acked) <= stored_ids
    assert len(clients.acked) < len(bodies)  # it stopped accepting


def test_workers_share_the_port_the_store_and_the_metrics(tmp_path):
    registry = write_registry(tmp_path / "metrics.toml")
    spec = registry.get("theme")
    db = tmp_path / "collector.sqlite"
    bodies = theme_bodies(registry, 200, 10, seed=23)
    with serving(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(db), "--port", "0",
                  "--workers", "2"], tmp_path) as server:
        pids = set()
        for _ in range(60):  # a new connection each time: the kernel spreads them over workers
            http = Http(server.url)
            pids.add(http.get_json("/healthz")[1]["pid"])
            http.close()
            if len(pids) == 2:
                break
        assert len(pids) == 2 and server.pid not in pids
        clients = RetryingClients(lambda: server.url, list(bodies.values()), threads=8).start()
        clients.join(120)
        http = Http(server.url)
        text = http.request("GET", "/metrics")[2].decode()
        assert 'ldpt_batches_total{outcome="applied"} 200' in text  # summed over both workers
        assert "ldpt_workers_up 2" in text
        http.close()
        assert server.terminate() == 0
    assert assert_consistent(db, spec, bodies) == set(bodies)


def test_workers_exit_when_the_supervisor_is_killed(tmp_path):
    """SIGKILL of the supervisor leaves no orphan worker serving the port (PR_SET_PDEATHSIG)."""
    import psutil

    write_registry(tmp_path / "metrics.toml")
    with serving(["--metrics", str(tmp_path / "metrics.toml"), "--db", str(tmp_path / "c.sqlite"),
                  "--port", "0", "--workers", "2"], tmp_path) as server:
        workers = psutil.Process(server.pid).children()
        assert len(workers) == 2
        server.kill()
        gone, alive = psutil.wait_procs(workers, timeout=20)
        for proc in alive:
            proc.kill()
        assert not alive


def test_bad_arguments_fail_with_one_line(tmp_path):
    write_registry(tmp_path / "metrics.toml")
    result = CliRunner().invoke(main, ["serve", "--metrics", str(tmp_path / "nope.toml"), "--port", "0",
                                       "--db", str(tmp_path / "x.sqlite")])
    assert result.exit_code != 0 and "file not found" in result.output
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    result = CliRunner().invoke(main, ["serve", "--metrics", str(tmp_path / "metrics.toml"), "--port", "0",
                                       "--query-token-file", str(tmp_path / "empty"),
                                       "--db", str(tmp_path / "x.sqlite")])
    assert result.exit_code != 0 and "token file is empty" in result.output
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for workers in ("1", "2"):
            result = CliRunner().invoke(main, ["serve", "--metrics", str(tmp_path / "metrics.toml"),
                                               "--port", port, "--workers", workers,
                                               "--db", str(tmp_path / "x.sqlite")])
            assert result.exit_code == 1 and "cannot listen on 127.0.0.1:" in result.output, result.output
