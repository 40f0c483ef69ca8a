"""Test isolation: no LDPT_* variables leak in, every test gets its own data directory."""

from __future__ import annotations

import os
import sys
import weakref

# Small dense factorisations (OLH and RAPPOR decoders) run 10-30x slower with multi-threaded
# BLAS on this 2-core machine; one thread per process keeps tests fast and deterministic.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Hypothesis draws its examples from a fresh random seed each run unless told otherwise, so a
# property test is a different test on every CI run: a counterexample it happens on once goes red
# on an unrelated commit and passes on the re-run. The "ci" profile (the default) derives each
# test's examples from the test itself (derandomize), keeps no example database between runs, and
# takes time out of the verdict (no deadline, no too_slow health check: this 2-core machine is
# shared). Run `HYPOTHESIS_PROFILE=explore pytest ...` to search with fresh seeds, and pin what it
# finds with @example.
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    keep = {"LDPT_TEST_POSTGRES_DSN"}
    for key in list(os.environ):
        if key.startswith("LDPT_") and key not in keep:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LDPT_DATA_DIR", str(tmp_path / "ldpt-data"))


@pytest.fixture(autouse=True)
def _clients_closed_by_their_test():
    """A TelemetryClient a test leaves open is closed in that test's teardown, where what it
    logs (e.g. "closed with reports that were not delivered") is the test's captured output —
    not by the SDK's interpreter-exit hook, which printed it after pytest's summary (issue 31)."""
    sdk = sys.modules.get("client_sdk.client")
    before = weakref.WeakSet(sdk._LIVE_CLIENTS) if sdk else weakref.WeakSet()
    yield
    sdk = sys.modules.get("client_sdk.client")
    if sdk is None:
        return
    for client in list(sdk._LIVE_CLIENTS):
        if (client not in before and isinstance(client, sdk.TelemetryClient)
                and client._owns_uploader and not client._closed):
            client.close(0.2)


@pytest.fixture
def registry_file(tmp_path):
    """A small registry with one metric per kind."""
    path = tmp_path / "metrics.toml"
    path.write_text(
        '[metrics.theme]\nkind = "categorical"\ncategories = ["light", "dark", "system"]\n'
        'protocol = "auto"\nepsilon = 1.0\n\n'
        '[metrics.crash]\nkind = "boolean"\nprotocol = "rr"\nepsilon = 2.0\n\n'
        '[metrics.country]\nkind = "categorical"\nprotocol = "oue"\nepsilon = 2.0\n'
        f'categories = [{", ".join(repr(f"c{i:02d}").replace(chr(39), chr(34)) for i in range(40))}]\n',
        encoding="utf-8")
    return path


# --- what was skipped, and why -----------------------------------------------------------------
# A module that skips at collection (no Chromium, no npm, no JDK, no DSN) counts as one "skipped"
# in pytest's line, however many tests it holds: "34 skipped" hid about 22 tests. The summary
# below groups the skips by reason and counts a skipped module's test functions.

def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


def _test_functions(path: str) -> int:
    """Test functions defined in a test module (each parametrisation would add more)."""
    import ast

    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return 0
    count = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            count += 1
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            count += sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
                         for n in node.body)
    return count


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    """One line per reason a test was skipped: how many tests, and which modules skipped whole."""
    from collections import defaultdict

    import _pytest.reports

    groups: dict[str, dict] = defaultdict(lambda: {"tests": 0, "modules": []})
    for report in terminalreporter.stats.get("skipped", []):
        group = groups[_skip_reason(report)]
        if isinstance(report, _pytest.reports.CollectReport):  # the whole module, at collection
            path = report.nodeid.split("::")[0]
            functions = _test_functions(str(config.rootpath / path))
            group["tests"] += max(functions, 1)
            group["modules"].append(f"{path} ({functions} test{'' if functions == 1 else 's'})")
        else:
            group["tests"] += 1
    if not groups:
        return
    total = sum(g["tests"] for g in groups.values())
    terminalreporter.section(f"skipped: {total} test{'' if total == 1 else 's'}, by reason", sep="-")
    for reason, group in sorted(groups.items(), key=lambda kv: -kv[1]["tests"]):
        where = f" — whole modules: {', '.join(group['modules'])}" if group["modules"] else ""
        terminalreporter.write_line(f"{group['tests']:>4}  {reason}{where}")
