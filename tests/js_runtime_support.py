"""Helpers of the JavaScript SDK's end-to-end tests (tests/test_js_browser.py, tests/test_js_node.py).

- ``built_sdk()``: `npm run build` in client_sdk/js once per session (skips, with the reason,
  where node/npm or the installed dependencies are missing: `npm ci` in client_sdk/js);
- ``PageServer``: the test page's own origin (a second port on 127.0.0.1), so every request the
  SDK makes to the collector is cross-origin and CORS is exercised;
- ``e2e_collector``: `ldpt serve` on 127.0.0.1 (ephemeral port) with the SDK's e2e registry
  and the page origin allowed;
- ``assert_covers_truth``: the collector's estimates against the fleet's true values.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collector_support import ROOT, TOKEN, Server, serving

JS = ROOT / "client_sdk" / "js"
E2E = JS / "e2e"
#: The browser bundle `npm run build` writes (minified ES module).
BUNDLE = JS / "dist" / "ldpt.min.js"
#: The browser bundle with sealed delivery (`Seal`), dist/ldpt-sealed.min.js.
SEALED_BUNDLE = JS / "dist" / "ldpt-sealed.min.js"
THEMES = ["light", "dark", "system"]
URLS = ["/", "/docs", "/pricing", "/blog"]


def truth(n: int) -> dict[str, object]:
    """The fleet's true population (e2e/fleet.mjs ``truth``, device j = 0 .. n-1)."""
    themes = Counter(THEMES[0 if j % 10 < 5 else 1 if j % 10 < 8 else 2] for j in range(n))
    urls = Counter(URLS[0 if j % 10 < 4 else 1 if j % 10 < 7 else 2 if j % 10 < 9 else 3] for j in range(n))
    loads = [(j * 37) % 101 for j in range(n)]
    return {"theme": themes, "url": urls, "load_mean": sum(loads) / n, "load_sum": sum(loads)}


def node_or_skip() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the JavaScript SDK (Node >= 18)")
    if not (JS / "node_modules").is_dir():   # .ci/run installs them; a fresh clone may not have
        ci = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True,
                            timeout=600)
        if ci.returncode != 0:
            pytest.skip(f"npm ci failed in client_sdk/js (no registry access?): {ci.stderr.strip()[-300:]}")
    return node


@functools.cache
def _build() -> str:
    done = subprocess.run(["npm", "run", "build", "--silent"], cwd=JS, capture_output=True, text=True,
                          timeout=600)
    return "" if done.returncode == 0 else done.stdout + done.stderr


def built_sdk() -> Path:
    """client_sdk/js with dist/ built (once per test session)."""
    node_or_skip()
    problem = _build()
    assert not problem, f"npm run build failed:\n{problem}"
    return JS


class PageServer:
    """The test pages on their own origin: /fleet.html, /fleet.mjs, /sdk.js (the bundle),
    /storage.html, the compiled modules under /dist/, and /conformance.html with the browser
    bundle of the conformance checks and the vector files under /vectors/."""

    FILES = {"/fleet.html": (E2E / "fleet.html", "text/html; charset=utf-8"),
             "/storage.html": (E2E / "storage.html", "text/html; charset=utf-8"),
             "/fleet.mjs": (E2E / "fleet.mjs", "text/javascript; charset=utf-8"),
             "/sdk.js": (BUNDLE, "text/javascript; charset=utf-8"),
             "/sdk-sealed.js": (SEALED_BUNDLE, "text/javascript; charset=utf-8"),
             "/conformance.html": (E2E / "conformance.html", "text/html; charset=utf-8"),
             "/conformance.browser.js": (JS / "build" / "conformance.browser.js", "text/javascript; charset=utf-8")}

    def __init__(self) -> None:
        files = self.FILES

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                entry = files.get(path)
                if entry is None and path.startswith("/vectors/") and path.endswith(".json") and ".." not in path:
                    entry = (ROOT / "conformance" / path.lstrip("/"), "application/json")  # the suite's files
                    entry = entry if entry[0].is_file() else None
                if entry is None and path.startswith("/dist/") and path.endswith(".js") and ".." not in path:
                    entry = (JS / path.lstrip("/"), "text/javascript; charset=utf-8")   # the compiled modules
                    entry = entry if entry[0].is_file() else None
                if entry is None and path.startswith("/node_modules/@noble/hashes/esm/") and path.endswith(".js") \
                        and ".." not in path:   # what the compiled modules import (e2e/storage.html's import map)
                    entry = (JS / path.lstrip("/"), "text/javascript; charset=utf-8")
                    entry = entry if entry[0].is_file() else None
                if entry is None:
                    self.send_error(404)
                    return
                body = entry[0].read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", entry[1])
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def e2e_collector(tmp: Path, origins: str = "", sealed: bool = False, relay: str = "") -> Iterator[Server]:
    """`ldpt serve` of the e2e registry on a free port, with a query token and ``origins`` allowed
    (a serve.toml holding ``cors_origins``); ``sealed``: also an OHTTP gateway (a fresh key), with
    the address ``relay`` in relay_sources and the access log on."""
    shutil.copy(E2E / "metrics.toml", tmp / "metrics.toml")
    (tmp / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (tmp / "token").chmod(0o600)
    args = ["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0", "--query-token-file", "token"]
    settings = f"cors_origins = {json.dumps(origins)}\n" if origins else ""
    if sealed:
        from collector import ohttp_keys

        ohttp_keys.generate(tmp / "keys")
        args += ["--ohttp-keys-dir", "keys", "--access-log"]
        if relay:
            settings += f"relay_sources = {json.dumps(relay)}\n"
    if settings:   # the operator's way: serve.toml (docs/operations.md, "Web pages (CORS)")
        (tmp / "serve.toml").write_text(settings, encoding="utf-8")
        args += ["--config", "serve.toml"]
    with serving(args, tmp) as server:
        yield server


#: The e2e fleets draw from their SDK's platform CSPRNG (no seed), so a coverage check can miss by
#: chance: at 1 - 1e-6 per metric, the six fleet checks of a CI run (three metrics each) fail by
#: chance with probability below 2e-5 — at 1 - 1e-3 a CI run was red by chance ~2 % of the time.
#: The width this costs is ~5.1 instead of ~3.6 standard errors, and a plumbing defect still
#: moves the estimates by more: with 1,000 devices (theme GRR at ε = 2, σ ≈ 16 devices), two
#: categories' indices swapped move both by ≥ 100 devices (≥ 6 σ); reports dropped or doubled
#: fail the n_reports checks exactly.
E2E_CONFIDENCE = 1 - 1e-6


def estimate(server: Server, tmp: Path, metric: str, *extra: str) -> dict:
    """The collector's estimates over HTTP (`ldpt estimate --url`), JSON, simultaneous at
    ``E2E_CONFIDENCE``."""
    done = subprocess.run([sys.executable, "-c", "from cli.main import main; main()", "estimate", "--url",
                           server.url, "--token-file", str(tmp / "token"), "--metric", metric, "--format",
                           "json", "--confidence", str(E2E_CONFIDENCE), "--simultaneous", *extra],
                          cwd=tmp, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def assert_covers_truth(server: Server, tmp: Path, n: int) -> None:
    """Categorical, string and numeric estimates cover the fleet's truth.

    Intervals are simultaneous at ``E2E_CONFIDENCE`` (Bonferroni over a metric's values): the
    SDK draws from the platform CSPRNG (no seed), so a miss has probability at most 1e-6 per metric.
    """
    want = truth(n)
    theme = estimate(server, tmp, "theme")
    assert theme["meta"]["n_reports"] == n
    for row in theme["estimates"]:
        assert row["ci_low"] <= want["theme"][row["value"]] <= row["ci_high"], row
    (tmp / "urls.txt").write_text("\n".join(URLS) + "\n", encoding="utf-8")
    url = estimate(server, tmp, "url", "--candidates", str(tmp / "urls.txt"))
    assert url["meta"]["n_reports"] == n
    rows = {row["value"]: row for row in url["estimates"]}
    for value in URLS:
        assert rows[value]["ci_low"] <= want["url"][value] <= rows[value]["ci_high"], rows[value]
    load = {row["statistic"]: row for row in estimate(server, tmp, "load")["estimates"]}
    assert load["mean"]["ci_low"] <= want["load_mean"] <= load["mean"]["ci_high"], load["mean"]
