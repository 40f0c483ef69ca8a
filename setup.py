"""What the ldp-telemetry distribution holds and needs, by build mode (see _build/ldpt_backend.py).

Release (a wheel): collector, estimators and CLI; ``client_sdk`` comes from the
ldp-telemetry-sdk distribution (client_sdk/pyproject.toml) at the same version.
Develop (an editable install): everything from this checkout, with the SDK's dependencies.
"""

import os
import re
import sys
from pathlib import Path

from setuptools import find_packages, setup

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'^__version__ = "([^"]+)"', (ROOT / "client_sdk" / "__init__.py").read_text(), re.M)[1]
SDK = tomllib.loads((ROOT / "client_sdk" / "pyproject.toml").read_text())["project"]

#: The analysis stack: what the collector, the estimators and the CLI need beyond the SDK.
ANALYSIS_REQUIRES = [
    "numpy>=1.26",
    "scipy>=1.11",
    "pandas>=2.1",
    "aiohttp>=3.9",
    "click>=8.1",
    "tomli-w>=1.0",
    # the Oblivious HTTP gateway of sealed batches (collector/gateway.py): the SDK's "sealed" extra
    *SDK["optional-dependencies"]["sealed"],
]

SERVER_PACKAGES = ["sketches", "sketches.*", "collector", "collector.*", "shuffler", "shuffler.*", "estimators", "estimators.*", "cli", "cli.*"]  # ("cli*" would match client_sdk)

if os.environ.get("LDPT_BUILD_MODE", "develop") == "release":
    packages = find_packages(include=SERVER_PACKAGES)
    requires = [f"{SDK['name']}=={VERSION}", *ANALYSIS_REQUIRES]
else:
    packages = find_packages(include=["client_sdk", "client_sdk.*", *SERVER_PACKAGES])
    requires = [*SDK["dependencies"], *ANALYSIS_REQUIRES]

setup(packages=packages, install_requires=requires)
