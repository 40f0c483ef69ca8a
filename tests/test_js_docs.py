"""The web section of docs/guide-app-teams.md runs as written: its `<script type=module>` page in
Chromium (served from another origin than the collector), its Node script and its testing
snippet in Node, against a real `ldpt serve` of docs/examples/metrics.toml.

tests/test_docs.py runs `sh` and `python` blocks; the guide's `html` and `js` blocks are run
here instead, with the documented endpoint replaced by the test collector's.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from client_sdk.registry import load_registry
from tests.collector_support import ROOT, serving
from tests.doc_blocks import blocks
from tests.js_runtime_support import BUNDLE, JS, built_sdk

pytestmark = pytest.mark.e2e

GUIDE = ROOT / "docs" / "guide-app-teams.md"
DOC_ENDPOINT = "http://127.0.0.1:8080"


def web_blocks(language: str) -> list[str]:
    found = [b.text for b in blocks(GUIDE) if b.language == language]
    assert found, f"docs/guide-app-teams.md has no {language} block"
    return found


@pytest.fixture
def collector(tmp_path):
    shutil.copy(ROOT / "docs" / "examples" / "metrics.toml", tmp_path / "metrics.toml")

    def start(origins: str = ""):
        (tmp_path / "serve.toml").write_text(f"cors_origins = {json.dumps(origins)}\n", encoding="utf-8")
        return serving(["--config", "serve.toml", "--metrics", "metrics.toml", "--db", "store.sqlite",
                        "--port", "0"], tmp_path)
    return start


def node_module_dir(tmp_path: Path) -> Path:
    """A directory where `import "@ldp-telemetry/sdk"` resolves to client_sdk/js (as installed)."""
    scope = tmp_path / "app" / "node_modules" / "@ldp-telemetry"
    scope.mkdir(parents=True)
    (scope / "sdk").symlink_to(JS, target_is_directory=True)
    return tmp_path / "app"


def run_node(app: Path, name: str, source: str) -> str:
    (app / name).write_text(source, encoding="utf-8")
    done = subprocess.run(["node", name], cwd=app, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(app)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_node_examples_run(tmp_path, collector):
    built_sdk()
    app = node_module_dir(tmp_path)
    script, testing = web_blocks("js")
    with collector() as server:
        out = run_node(app, "example.mjs", script.replace(DOC_ENDPOINT, server.url))
        assert out.strip().splitlines()[0] == "true", out
        assert (app / ".local/share/myapp/ldpt/ledger.json").exists()
    registry = load_registry(ROOT / "docs" / "examples" / "metrics.toml").to_json()   # as published
    check = ("\ntelemetry.report('theme', 'dark');\nif (!(await telemetry.flush(5)) || sent.length !== 1) "
             "throw new Error('the testing snippet sent nothing');\nconsole.log('sent', sent.length);\n")
    out = run_node(app, "testing.mjs", testing.replace(
        "const sent = [];", f"const publishedRegistry = {json.dumps(registry)};\nconst sent = [];") + check)
    assert "sent 1" in out


def test_the_page_example_runs_in_chromium(tmp_path, collector):
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("Chromium or chromedriver not found (.ci/run installs them)")
    built_sdk()
    page_html = web_blocks("html")[0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            files = {"/": (page_html.replace(DOC_ENDPOINT, endpoint).encode(), "text/html; charset=utf-8"),
                     "/ldpt.min.js": (BUNDLE.read_bytes(), "text/javascript")}
            body, kind = files.get(self.path, (None, None))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        with collector(origins=origin) as server:
            endpoint = server.url
            driver.get(origin + "/")
            driver.find_element("id", "send").click()
            deadline = time.monotonic() + 60
            while not driver.find_element("id", "stats").text:
                assert time.monotonic() < deadline, "the example page never showed its stats"
                time.sleep(0.1)
            stats = json.loads(driver.find_element("id", "stats").text)
            assert stats["acknowledged"] is True and stats["reports_acked"] == 2, stats
            assert stats["disabled_reason"] is None
    finally:
        driver.quit()
        httpd.shutdown()
