"""Dependency direction (docs/design.md): cli -> collector, estimators -> client_sdk."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "client_sdk": {"collector", "estimators", "cli"},
    "estimators": {"collector", "cli"},
    "collector": {"cli"},
}
#: The one exemption: client_sdk.testing builds FakeCollector on the collector's own ingest
#: code, imported when a FakeCollector is constructed (never at module level, never by the SDK).
LAZY_UPWARD = {"client_sdk/testing.py": {"collector"}}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        upward = imported_packages(path) & FORBIDDEN[package]
        allowed = LAZY_UPWARD.get(rel, set())
        if upward - allowed or module_level_packages(path) & FORBIDDEN[package]:
            offenders.append(f"{rel} imports {sorted(upward)}")
    assert not offenders, offenders


def test_the_lazy_exemption_is_still_needed_and_lazy():
    """client_sdk.testing really uses the collector (else drop the exemption), only lazily."""
    for rel, packages in LAZY_UPWARD.items():
        assert packages <= imported_packages(ROOT / rel), rel
        assert not module_level_packages(ROOT / rel) & packages, rel


def module_level_packages(path: Path) -> set[str]:
    """Packages imported at import time (top-level statements), not inside functions."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_sdk_needs_only_numpy_and_msgpack_beyond_the_standard_library():
    """Importing the SDK loads numpy, msgpack and the TOML helpers only; server-side decoding
    (scipy) and the async twin (aiohttp) are imported lazily inside functions."""
    import sys

    eager = {"numpy", "msgpack", "tomli", "tomli_w", "client_sdk"}
    lazy = eager | {"scipy", "aiohttp"}
    offenders = set()
    for path in (ROOT / "client_sdk").rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        offenders |= {(n, rel) for n in module_level_packages(path) - eager if n not in sys.stdlib_module_names}
        lazy_here = lazy | LAZY_UPWARD.get(path.relative_to(ROOT).as_posix(), set())
        offenders |= {(n, rel) for n in imported_packages(path) - lazy_here if n not in sys.stdlib_module_names}
    assert not offenders, offenders
