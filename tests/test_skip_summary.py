"""The end of a pytest run names what was skipped and why, counting the tests of a module that
skipped whole at collection (tests/conftest.py; issue 31: "34 skipped" hid about 22 tests of
the browser, JavaScript, JVM and PostgreSQL modules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.e2e
def test_the_summary_groups_skips_by_reason_and_counts_skipped_modules(tmp_path):
    (tmp_path / "test_whole.py").write_text(
        "import pytest\n"
        "pytest.skip('Chromium not found (apt-get install chromium)', allow_module_level=True)\n"
        "def test_a(): pass\n"
        "def test_b(): pass\n"
        "class TestC:\n"
        "    def test_c(self): pass\n", encoding="utf-8")
    (tmp_path / "test_some.py").write_text(
        "import pytest\n"
        "def test_runs(): pass\n"
        "@pytest.mark.parametrize('x', [1, 2])\n"
        "def test_skips(x): pytest.skip('LDPT_TEST_POSTGRES_DSN is not set')\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "1 passed, 3 skipped" in out                         # pytest's own count: the module is one
    assert "skipped: 5 tests, by reason" in out                 # ours: its 3 tests and the 2 others
    assert "   3  Chromium not found (apt-get install chromium) — whole modules: test_whole.py (3 tests)" in out
    assert "   2  LDPT_TEST_POSTGRES_DSN is not set" in out
    # and nothing after pytest's own last line
    assert out.rstrip().splitlines()[-1].startswith("=") and "passed" in out.rstrip().splitlines()[-1]


@pytest.mark.e2e
def test_a_client_a_test_leaves_open_logs_nothing_after_the_summary(tmp_path):
    """The SDK's interpreter-exit hook closed such a client after pytest's last line and printed
    "closed with reports that were not delivered" there; the conftest closes it in the test's
    teardown instead (issue 31: "no output after pytest's summary")."""
    (tmp_path / "test_leak.py").write_text(
        "from client_sdk import TelemetryClient\n"
        "def test_leaves_a_client_open(tmp_path):\n"
        "    client = TelemetryClient(endpoint='http://127.0.0.1:9', state_dir=tmp_path / 's')\n"
        "    client.report('theme', 'dark')   # waits for a registry that never comes\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("=") and "1 passed" in last, done.stdout
    assert "ldpt:" not in done.stderr, done.stderr
