"""Test isolation: no LDPT_* variables leak in, every test gets its own data directory."""

from __future__ import annotations

import os

# Small dense factorisations (OLH and RAPPOR decoders) run 10-30x slower with multi-threaded
# BLAS on this 2-core machine; one thread per process keeps tests fast and deterministic.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    keep = {"LDPT_TEST_POSTGRES_DSN"}
    for key in list(os.environ):
        if key.startswith("LDPT_") and key not in keep:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LDPT_DATA_DIR", str(tmp_path / "ldpt-data"))


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
