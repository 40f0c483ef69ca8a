"""The TypeScript SDK's own test suite (client_sdk/js: `npm test` = build + node --test), run
from pytest: the conformance vectors in Node, the statistical checks of every protocol against
its exact table, and the runtime tests. Skips, saying why, where Node or npm is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent.parent / "client_sdk" / "js"

pytestmark = pytest.mark.e2e


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=JS, capture_output=True, text=True, timeout=timeout)


def test_npm_test_passes() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the JavaScript SDK's tests (Node >= 18)")
    major = int(_run([node, "--version"], 30).stdout.strip().lstrip("v").split(".")[0])
    if major < 18:
        pytest.skip(f"the JavaScript SDK needs Node >= 18, found {major}")
    if not (JS / "node_modules").is_dir():
        ci = _run([npm, "ci", "--no-audit", "--no-fund"], 600)
        if ci.returncode != 0:
            pytest.skip(f"npm ci failed (no registry access?): {ci.stderr.strip()[-500:]}")
    result = _run([npm, "test"], 900)
    assert result.returncode == 0, f"npm test failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
