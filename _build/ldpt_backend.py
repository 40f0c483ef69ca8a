"""In-tree PEP 517 backend of the ldp-telemetry distribution (docs/design.md, "Two distributions").

setuptools' backend, with one switch (``LDPT_BUILD_MODE``, read by setup.py):

- a wheel (``pip install .``, ``python -m build``) is the **release** layout: collector,
  estimators and CLI only, depending on ``ldp-telemetry-sdk==<version>`` for ``client_sdk``
  (build that wheel from client_sdk/, and install both);
- an editable install (``pip install -e .``, the README's commands) is the **development**
  layout: ``client_sdk`` is served from the checkout with the rest, and the SDK's own
  dependencies are listed directly, so nothing needs a published SDK.

An sdist holds the whole tree (this file included), so a wheel built from it is a release wheel.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - re-exported hooks
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

MODE_VARIABLE = "LDPT_BUILD_MODE"


@contextlib.contextmanager
def _mode(mode: str) -> Iterator[None]:
    old = os.environ.get(MODE_VARIABLE)
    os.environ[MODE_VARIABLE] = mode
    try:
        yield
    finally:
        if old is None:
            del os.environ[MODE_VARIABLE]
        else:
            os.environ[MODE_VARIABLE] = old


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    with _mode("release"):
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with _mode("release"):
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    with _mode("develop"):
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    with _mode("develop"):
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
