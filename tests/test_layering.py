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
    offenders = [
        f"{path.relative_to(ROOT)} imports {sorted(imported_packages(path) & FORBIDDEN[package])}"
        for path in sorted((ROOT / package).rglob("*.py"))
        if imported_packages(path) & FORBIDDEN[package]
    ]
    assert not offenders, offenders


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
        offenders |= {(n, rel) for n in imported_packages(path) - lazy if n not in sys.stdlib_module_names}
    assert not offenders, offenders
