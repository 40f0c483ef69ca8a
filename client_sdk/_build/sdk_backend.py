"""In-tree PEP 517 backend of the ldp-telemetry-sdk distribution (client_sdk/pyproject.toml).

setuptools' backend, run in a temporary copy of this directory: `pip install ./client_sdk` from a
checkout (docs/guide-app-teams.md) would otherwise leave ``build/lib/client_sdk/*.py`` and an
``*.egg-info`` inside the checkout, a second copy of the SDK's modules beside the real ones
(tests/test_layering.py scanned it and failed). A wheel, an sdist and their metadata are built
from the copy; what the build frontend asked for is written where it asked. Editable installs
(`pip install -e ./client_sdk`) must point at this directory, so they use setuptools as it is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - re-exported hooks
    build_editable,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
)

#: Not part of the distribution, and large (the JavaScript and JVM SDKs live beside the Python one).
_SKIP_TOP = {"js", "jvm", "build", "dist", ".git"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    top = os.path.abspath(directory) == os.path.abspath(os.getcwd())
    return {n for n in names if (top and n in _SKIP_TOP) or n == "__pycache__" or n.endswith(".egg-info")}


@contextlib.contextmanager
def _in_copy() -> Iterator[None]:
    """Run the enclosed setuptools hook with a temporary copy of the project as its directory."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ldpt-sdk-build-") as tmp:
        copy = os.path.join(tmp, "client_sdk")
        shutil.copytree(here, copy, ignore=_ignore)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(here)


def _abs(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def get_requires_for_build_wheel(config_settings=None):
    with _in_copy():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    with _in_copy():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    metadata_directory = _abs(metadata_directory)
    with _in_copy():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_directory, metadata_directory = _abs(wheel_directory), _abs(metadata_directory)
    with _in_copy():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    sdist_directory = _abs(sdist_directory)
    with _in_copy():
        return _setuptools.build_sdist(sdist_directory, config_settings)
