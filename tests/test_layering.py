"""Dependency direction (docs/design.md): cli -> collector, estimators -> sketches -> client_sdk."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "client_sdk": {"sketches", "collector", "estimators", "cli", "shuffler", "conformance"},
    "sketches": {"collector", "estimators", "cli", "shuffler", "conformance"},
    "estimators": {"collector", "cli"},
    "collector": {"cli"},
}


def package_modules(package: str, root: Path = ROOT) -> list[Path]:
    """The package's own modules: ``*.py`` files in it and in its subpackages (directories with an
    ``__init__.py``, reached through packages). A build tree (``pip install ./client_sdk`` once left
    ``client_sdk/build/lib/client_sdk/*.py``), the in-tree build backend and node_modules are not
    modules of the package, so a documented install never turns this test red."""
    out, todo = [], [root / package]
    while todo:
        directory = todo.pop()
        for path in sorted(directory.iterdir()):
            if path.is_dir() and (path / "__init__.py").is_file():
                todo.append(path)
            elif path.suffix == ".py" and path.is_file():
                out.append(path)
    return sorted(out)


def test_a_build_tree_is_not_a_module_of_the_package(tmp_path):
    """What `pip install ./client_sdk` used to leave (build/lib/client_sdk/*.py), a JavaScript
    dependency's stray .py and the build backend are not scanned; subpackages are."""
    for rel in ("sdk/__init__.py", "sdk/a.py", "sdk/protocols/__init__.py", "sdk/protocols/b.py",
                "sdk/build/lib/sdk/__init__.py", "sdk/build/lib/sdk/a.py", "sdk/_build/backend.py",
                "sdk/js/node_modules/x/y.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("import collector\n")
    found = [p.relative_to(tmp_path).as_posix() for p in package_modules("sdk", tmp_path)]
    assert found == ["sdk/__init__.py", "sdk/a.py", "sdk/protocols/__init__.py", "sdk/protocols/b.py"]


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
    for path in package_modules(package):
        rel = path.relative_to(ROOT).as_posix()
        upward = imported_packages(path) & FORBIDDEN[package]
        if upward:
            offenders.append(f"{rel} imports {sorted(upward)}")
    assert not offenders, offenders


def design_layers(text: str) -> list[list[str]]:
    """The layers of docs/design.md's "Imports go one way only" arrow, top first: "`cli` →
    `collector`, `estimators` → ..." is [["cli"], ["collector", "estimators"], ...]."""
    line = re.search(r"Imports go one way only: (.+?)\n\(", text, re.S)
    assert line, "docs/design.md no longer states the import direction"
    return [re.findall(r"`(\w+)`", layer) for layer in line.group(1).split("→")]


def test_forbidden_holds_every_direction_design_md_states():
    """Every package is forbidden every package of the layers above it in docs/design.md (so the
    table cannot lose a direction the docs promise: sketches never imports collector, estimators
    or cli, the SDK none of them)."""
    layers = design_layers((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    assert [len(layer) for layer in layers] == [1, 2, 1, 1], layers
    missing = {(low, high) for i, layer in enumerate(layers) for low in layer
               for high in {p for above in layers[:i] for p in above} if high not in FORBIDDEN.get(low, set())}
    assert not missing, missing


def module_level_packages(path: Path) -> set[str]:
    """Packages imported at import time (top-level statements), not inside functions."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_sdk_needs_only_msgpack_beyond_the_standard_library():
    """The SDK's modules import msgpack and the TOML reader only; the async twin (aiohttp),
    TOML writing (tomli_w, the CLI's) and HPKE for sealed batches (pyhpke and cryptography, the
    "sealed" extra: client_sdk/ohttp.py) inside functions. numpy, scipy and pandas at no level
    (test_no_module_of_the_sdk_wheel_imports_numpy_or_a_server_package)."""
    import sys

    eager = {"msgpack", "tomli", "client_sdk"}
    lazy = eager | {"aiohttp", "tomli_w", "pyhpke", "cryptography"}
    offenders = set()
    for path in package_modules("client_sdk"):
        rel = str(path.relative_to(ROOT))
        offenders |= {(n, rel) for n in module_level_packages(path) - eager if n not in sys.stdlib_module_names}
        offenders |= {(n, rel) for n in imported_packages(path) - lazy if n not in sys.stdlib_module_names}
    assert not offenders, offenders


#: What an app's process must never load on the device path (the SDK-only distribution has none).
SERVER_ONLY = ("numpy", "scipy", "pandas", "aiohttp", "click")

#: A registry naming every protocol a device can run (plus `auto` in the docs/examples files).
EVERY_PROTOCOL = """
[metrics.rr]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
""" + "".join(f"""
[metrics.{p}]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f"]
protocol = "{p}"
epsilon = 1.0
""" for p in ("grr", "oue", "sue", "olh", "hr", "ss")) + "".join(f"""
[metrics.{p}]
kind = "categorical"
categories = ["a", "b", "c", "d"]
protocol = "{p}"
epsilon = 1.0
epsilon_inf = 3.0
""" for p in ("lgrr", "losue", "loloha", "dbitflip")) + "".join(f"""
[metrics.{p}]
kind = "numeric"
range = [0, 10]
protocol = "{p}"
epsilon = 1.0
""" for p in ("laplace", "duchi", "bitmean", "piecewise", "hybrid")) + """
[metrics.memobitmean]
kind = "numeric"
range = [0, 10]
protocol = "memobitmean"
epsilon = 1.0
epsilon_inf = 3.0

[metrics.histogram]
kind = "numeric"
range = [0, 10]
buckets = 5
protocol = "auto"
epsilon = 1.0

[metrics.rappor]
kind = "string"
protocol = "rappor"

[metrics.discover]
kind = "string"
protocol = "discover"
epsilon = 4.0
"""

#: Run in a fresh interpreter: the server-only packages cannot even be imported, and one client
#: per metric (its own budget) reports one value of every metric through an in-memory transport.
DEVICE_SCRIPT = """
import importlib.abc, sys, tempfile
BANNED = set(sys.argv[1].split(","))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BANNED:
            raise ImportError(f"the device path imported {name}")

sys.meta_path.insert(0, Refuse())
from client_sdk import ClientOptions, MemoryState, TelemetryClient
from client_sdk.registry import load_registry
from client_sdk.testing import MemoryTransport, RecordingCollector

sent = 0
for path in sys.argv[2:]:
    registry = load_registry(path)
    for name, spec in registry.metrics.items():
        value = ((spec.bounds[0] + 2 * spec.bounds[1]) / 3 if spec.kind.value == "numeric"
                 else spec.domain[-1] if spec.domain else "www.example")
        collector = RecordingCollector()
        client = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(collector),
                                 options=ClientOptions(strict=True))
        assert client.report(name, value), (path, name)
        assert client.flush(timeout=30.0), (path, name)
        client.close()
        assert [r["m"] for r in collector.reports()] == [name], (path, name)
        sent += 1
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BANNED)
assert not loaded, loaded
print(sent)
"""


@pytest.mark.e2e
def test_a_device_reports_every_metric_kind_without_numpy(tmp_path):
    """docs/examples' registries (auto included) and every protocol by name: building the client
    and reporting never imports numpy, scipy, pandas, aiohttp or click (docs/design.md)."""
    import subprocess
    import sys

    every = tmp_path / "every.toml"
    every.write_text(EVERY_PROTOCOL)
    files = [ROOT / "docs" / "examples" / n for n in ("metrics.toml", "longitudinal.toml", "discovery.toml")]
    run = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, ",".join(SERVER_ONLY), *map(str, files), str(every)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    expected = sum(len(load_registry_metrics(f)) for f in [*files, every])
    assert int(run.stdout.strip()) == expected


def load_registry_metrics(path: Path) -> list[str]:
    from client_sdk.registry import load_registry

    return list(load_registry(path).metrics)


def test_importing_the_sdk_loads_no_server_package():
    """``from client_sdk import TelemetryClient`` in a fresh interpreter (the import-time bar)."""
    import subprocess
    import sys

    code = ("import sys; from client_sdk import TelemetryClient; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_ONLY!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


#: Standard-library and msgpack modules the SDK loads where it first needs them, not on import
#: (docs/benchmarks.md, the start-up bars): each costs 1-5 ms of every app's start-up.
LOADED_ON_FIRST_USE = ("json", "logging", "msgpack", "tomllib", "shutil", "datetime")


@pytest.mark.e2e
def test_importing_the_sdk_defers_what_it_needs_later():
    """``from client_sdk import TelemetryClient`` in a fresh interpreter loads none of
    LOADED_ON_FIRST_USE; a client's messages still reach the 'client_sdk' logger."""
    import subprocess
    import sys

    code = ("import sys; from client_sdk import TelemetryClient; "
            f"print(sorted(m for m in {LOADED_ON_FIRST_USE!r} if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"

    code = ("import logging, sys; from client_sdk.uploader import log; "
            "logging.basicConfig(stream=sys.stdout, format='%(name)s %(levelname)s %(message)s'); "
            "log.warning('hello'); print(log.name, log.getEffectiveLevel() == logging.WARNING)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["client_sdk WARNING hello", "client_sdk True"]


#: The packages of the repository: none reaches into another's private modules or names.
PACKAGES = ("cli", "client_sdk", "collector", "conformance", "estimators", "shuffler", "sketches")


def private_imports(path: Path, own: str, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``import``s in ``path`` of another package's underscore module (``pkg._mod``, ``from pkg
    import _mod``) or underscore name (``from pkg.mod import _name``); dunders are public."""
    def private(part: str) -> bool:
        return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in packages and parts[0] != own and any(map(private, parts[1:])):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] in packages and parts[0] != own:
                names = [a.name for a in node.names if private(a.name)]
                if any(map(private, parts[1:])) or names:
                    found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
    return found


def test_the_private_import_check_sees_every_form(tmp_path):
    """Each way of naming another package's private module or name is found; one's own, dunders
    and public names are not."""
    (tmp_path / "m.py").write_text(
        "import pkg._mod\nimport pkg.mod\nfrom pkg._mod import x\nfrom pkg import _mod\n"
        "from pkg.mod import _name, y\nfrom pkg import __version__\nfrom own._mod import z\n"
        "from .x import _y\ndef f():\n    from pkg.a._b import c\n", encoding="utf-8")
    found = private_imports(tmp_path / "m.py", "own", ("pkg", "own"))
    assert [f.split(":")[0] for f in found] == ["1", "3", "4", "5", "10"], found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_another_packages_private_names(package):
    """A module's underscore names are its package's own (issue 29: estimators imported
    client_sdk.protocols._longitudinal.Memoised); what another package needs has a public home."""
    offenders = [f"{path.relative_to(ROOT).as_posix()}:{hit}" for path in package_modules(package)
                 for hit in private_imports(path, package)]
    assert not offenders, offenders


def numeric_names(path: Path) -> list[str]:
    """Where a module reaches the numeric stack: an import of numpy, scipy or pandas."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in ("numpy", "scipy", "pandas")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] in ("numpy", "scipy", "pandas"):
                found.append(module)
    return found


def test_numeric_names_sees_every_form(tmp_path):
    """The check above finds numpy however it is imported (so the next test can fail)."""
    path = tmp_path / "m.py"
    for source, expected in (("import numpy as np\n", ["numpy"]), ("from scipy import stats\n", ["scipy"]),
                             ("def f():\n    import pandas\n", ["pandas"]),
                             ("from .device import numpy_types\nimport math\n", [])):
        path.write_text(source)
        assert numeric_names(path) == expected, source


def test_a_split_protocol_s_device_half_names_no_numpy():
    """Every protocol with a server half in sketches/ (docs/design.md, "Two halves") keeps its
    device module, client_sdk/protocols/<name>.py, free of numpy at any level, and the device
    base modules too (the numeric family's mixin and the field
    arithmetic, projective.py, included)."""
    split = sorted(p.stem for p in (ROOT / "sketches").glob("*.py")
                   if re.search(r"^@register\(", p.read_text(encoding="utf-8"), re.M))
    assert {"rr", "hr", "ss", "discover", "rappor", "duchi", "bitmean", "piecewise", "hybrid", "laplace",
            "memobitmean", "olh", "loloha"} <= set(split), split
    offenders = {name: numeric_names(ROOT / "client_sdk" / "protocols" / f"{name}.py")
                 for name in [*split, "device", "numeric", "projective"]}
    assert not {k: v for k, v in offenders.items() if v}, offenders


#: What no module of the SDK wheel may import, at any level (issue 29): the numeric stack and the
#: server packages, with no exemption (FakeCollector, which needs the collector, is collector.testing's).
NUMERIC_STACK = frozenset({"numpy", "scipy", "pandas"})
SERVER_PACKAGES = frozenset({"sketches", "collector", "estimators", "cli"})


def banned_imports(source: str, banned: frozenset[str]) -> list[str]:
    """``"line: package"`` for each import of a ``banned`` top-level package anywhere in ``source``:
    ``import``/``from`` statements at any depth (module, function, class, ``try``/``if`` bodies)
    and ``importlib.import_module(...)``/``__import__(...)`` calls with a literal name. Relative
    imports are the package's own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__"):
                names = [node.args[0].value]
        found += [f"{node.lineno}: {n.split('.')[0]}" for n in names if n.split(".")[0] in banned]
    return found


def sdk_wheel_modules(root: Path = ROOT) -> list[Path]:
    """The ``.py`` files the ldp-telemetry-sdk wheel ships: for each package client_sdk/pyproject.toml
    lists (``[tool.setuptools] packages``, placed by ``package-dir``), the modules in its directory
    (setuptools ships those; js/, jvm/ and _build/ are no listed package)."""
    try:
        import tomllib
    except ImportError:   # Python 3.10
        import tomli as tomllib

    sdk = root / "client_sdk"
    config = tomllib.loads((sdk / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    places = config.get("package-dir", {})
    out = []
    for package in config["packages"]:
        parts = package.split(".")
        top = next(i for i in range(len(parts), -1, -1) if ".".join(parts[:i]) in places or i == 0)
        base = sdk / places.get(".".join(parts[:top]), ".")   # "" (the root) or the longest mapped prefix
        out += sorted(p for p in base.joinpath(*parts[top:]).glob("*.py") if p.is_file())
    return sorted(out)


def sdk_wheel_offenders(root: Path = ROOT) -> dict[str, list[str]]:
    """Each SDK wheel module's imports of the numeric stack or a server package, by path."""
    offenders = {}
    for path in sdk_wheel_modules(root):
        rel = path.relative_to(root).as_posix()
        hits = banned_imports(path.read_text(encoding="utf-8"), NUMERIC_STACK | SERVER_PACKAGES)
        if hits:
            offenders[rel] = hits
    return offenders


def test_banned_imports_sees_every_level():
    """A planted ``import numpy`` inside a function fails the scan, and so does every other form;
    relative imports, look-alike names and modules that merely mention numpy do not."""
    for source, expected in (
            ("def f():\n    import numpy\n    return numpy.zeros(3)\n", ["2: numpy"]),
            ("import numpy as np\n", ["1: numpy"]),
            ("class C:\n    def m(self):\n        from scipy.special import logsumexp\n", ["3: scipy"]),
            ("try:\n    import pandas\nexcept ImportError:\n    pass\n", ["2: pandas"]),
            ("import importlib\nnp = importlib.import_module('numpy')\n", ["2: numpy"]),
            ("def f():\n    return __import__('numpy.linalg')\n", ["2: numpy"]),
            ("def f():\n    from sketches.base import Sketch\n", ["2: sketches"]),
            ("import collector.ingest, estimators\n", ["1: collector", "1: estimators"]),
            ("from cli.main import main\n", ["1: cli"]),
            ("from . import sketches\nfrom .protocols import numpy_types\nimport numpyish\n"
             "x = 'import numpy'\n", [])):
        assert banned_imports(source, NUMERIC_STACK | SERVER_PACKAGES) == expected, source


def test_the_wheel_scan_fails_on_a_planted_function_level_numpy(tmp_path):
    """The scan of the SDK wheel, over a tree laid out by the real client_sdk/pyproject.toml, names
    a subpackage module whose function imports numpy."""
    (tmp_path / "client_sdk" / "protocols").mkdir(parents=True)
    (tmp_path / "client_sdk" / "pyproject.toml").write_text(
        (ROOT / "client_sdk" / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    for rel, source in (("__init__.py", ""), ("protocols/__init__.py", ""), ("protocols/x.py",
                        "import math\n\ndef f(v):\n    import numpy\n    return numpy.asarray(v)\n")):
        (tmp_path / "client_sdk" / rel).write_text(source, encoding="utf-8")
    assert sdk_wheel_offenders(tmp_path) == {"client_sdk/protocols/x.py": ["4: numpy"]}


def test_the_wheel_scan_covers_the_package_tree():
    """pyproject's packages ship every module of the client_sdk tree (a subpackage it does not
    list would ship nothing; then this scan and test_no_upward_imports would disagree)."""
    assert sdk_wheel_modules() == package_modules("client_sdk")


def test_no_module_of_the_sdk_wheel_imports_numpy_or_a_server_package():
    """Issue 29's bar: no module the ldp-telemetry-sdk wheel ships imports numpy, scipy or pandas
    at any level, nor a module of sketches, collector, estimators or cli. No module is exempt:
    FakeCollector moved to collector/testing.py (the SDK resolves it by an entry point), and the
    last vectorised paths left with
    sketches/randomness.py, sketches/memo.py and sketches/hashing.py, and the lazy numpy proxy
    with them."""
    assert sdk_wheel_offenders() == {}


def protocol_names() -> frozenset[str]:
    """Every protocol name a registry may write (client_sdk.protocols and its numeric module)."""
    from client_sdk.protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
    from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES

    return frozenset(PROTOCOL_NAMES + LONGITUDINAL_PROTOCOL_NAMES + LONGITUDINAL_NUMERIC_NAMES
                     + NUMERIC_PROTOCOL_NAMES)


def name_branches(source: str, names: frozenset[str]) -> list[str]:
    """Lines of ``source`` that branch on a protocol's name (issue 29 §2): a comparison (==, !=,
    in, not in) with a protocol-name literal or a collection holding one, and any tuple, list or
    set literal of two or more protocol names (a list of protocols kept outside the registry)."""
    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    def names_in(node: ast.AST) -> int:
        return sum(map(named, node.elts)) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else 0

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(named(x) or names_in(x) for x in (node.left, *node.comparators)):
            found.add(node.lineno)
        elif names_in(node) >= 2:
            found.add(node.lineno)
    return [f"{line}: {source.splitlines()[line - 1].strip()}" for line in sorted(found)]


#: Where a protocol's name may be branched on: the protocols themselves and their registries —
#: the device halves and client_sdk/protocols/factory.py, the server halves and sketches/registry.py.
NAME_HOMES = ("client_sdk/protocols/", "sketches/")
#: Modules still branching on names, each a known remainder (issue 29 §2); none is left (the last,
#: client_sdk/window_charge.py, named its memo law "grr"). cli/ has none either: what it asks of a
#: protocol is a verb of its half (test_the_cli_branches_on_no_protocol_name).
NAME_BRANCHES_NOT_YET_MOVED: frozenset[str] = frozenset()


def name_branch_offenders(root: Path = ROOT) -> dict[str, list[str]]:
    names = protocol_names()
    out = {}
    for package in PACKAGES:
        for path in package_modules(package, root):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(NAME_HOMES) or package == "conformance":
                continue
            hits = name_branches(path.read_text(encoding="utf-8"), names)
            if hits:
                out[rel] = hits
    return out


def test_name_branches_sees_every_form():
    """A comparison with a name or a collection of names, and a tuple of names, are found; one name
    assigned, a message naming protocols and an unrelated comparison are not."""
    source = ('if name == "olh":\n    pass\nok = proto.name in ("rr", "grr")\nX = ("oue", "sue")\n'
              'y = "rr"\nmsg = f"use olh or hr"\nif kind != "csv":\n    pass\nz = "hr" != p\n'
              'w = [p for p in ps if p not in {"ss"}]\n')
    found = [hit.split(":")[0] for hit in name_branches(source, protocol_names())]
    assert found == ["1", "3", "4", "9", "10"], found


def test_the_cli_branches_on_no_protocol_name():
    """The CLI parses, calls the library and formats (docs/design.md): no module of cli/ is
    exempt from the scan, and none branches on a protocol's name."""
    assert not {p for p in NAME_BRANCHES_NOT_YET_MOVED if p.startswith("cli/")}
    assert not {p: hits for p, hits in name_branch_offenders().items() if p.startswith("cli/")}


def test_no_protocol_name_branches_outside_the_protocol_registry():
    """One dispatch per verb (issue 29 §2): what a caller needs to know of a protocol, its half
    declares once (docs/design.md, "Two halves"); no module outside the protocols branches on a name."""
    offenders = name_branch_offenders()
    unexpected = {path: hits for path, hits in offenders.items() if path not in NAME_BRANCHES_NOT_YET_MOVED}
    assert not unexpected, unexpected


def protocol_classes() -> frozenset[str]:
    """The names of the protocols' halves: every class defined in client_sdk/protocols/ or sketches/
    that is a device half, a server half or one of their mixins (MemoisedDevice, MemoisedServer)."""
    import importlib
    import inspect

    from client_sdk.protocols.blocks import BlockEncoder
    from client_sdk.protocols.device import DeviceHalf
    from client_sdk.protocols.longitudinal import MemoisedDevice
    from sketches.base import ServerHalf
    from sketches.longitudinal import MemoisedServer

    halves = (DeviceHalf, MemoisedDevice, ServerHalf, MemoisedServer, BlockEncoder)
    names = set()
    for package in ("client_sdk.protocols", "sketches"):
        for path in package_modules(package.replace(".", "/")):
            module = importlib.import_module(f"{package}.{path.stem}" if path.stem != "__init__" else package)
            names |= {name for name, obj in vars(module).items()
                      if inspect.isclass(obj) and obj.__module__ == module.__name__ and issubclass(obj, halves)}
    return frozenset(names)


def type_dispatch(source: str, classes: frozenset[str]) -> list[str]:
    """Lines of ``source`` that branch on a protocol's type (issue 29 §2): ``isinstance`` or
    ``issubclass`` against one of ``classes`` (or a tuple holding one), and ``type(x)`` compared
    (is, is not, ==, !=) with one. Attribute forms (``base.PureServer``) count too."""
    def named(node: ast.AST) -> bool:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return name in classes

    def holds(node: ast.AST) -> bool:
        return named(node) or (isinstance(node, ast.Tuple) and any(map(named, node.elts)))

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 and holds(node.args[1]):
            found.add(node.lineno)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                and isinstance(node.left.func, ast.Name) and node.left.func.id == "type" \
                and all(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops) \
                and any(map(named, node.comparators)):
            found.add(node.lineno)
    return [f"{line}: {source.splitlines()[line - 1].strip()}" for line in sorted(found)]


def test_the_protocol_classes_are_the_halves():
    """The scan below knows every half and mixin, and no utility class (a sketch, a params class)."""
    classes = protocol_classes()
    assert {"DeviceHalf", "DirectDevice", "MemoisedDevice", "OLH", "LOLOHA", "MemoBitMean", "ServerHalf",
            "PureServer", "MemoisedServer", "OLHServer", "MemoBitMeanServer", "RapporServer", "HRServer",
            "BlockEncoder", "MemoEncoder", "IndexEncoder", "MeanEncoder", "OLHBlock", "GRRChainBlock"} <= classes
    assert not {"Sketch", "CountEstimate", "Context", "OLHParams", "MemoRandom"} & classes


def test_type_dispatch_sees_every_form():
    """isinstance, issubclass (a class, a tuple, a module attribute) and type() comparisons with a
    half are found; other classes, a type() call compared with a method and an annotation are not."""
    source = ("if isinstance(p, OLHServer):\n    pass\nok = isinstance(p, (int, base.PureServer))\n"
              "if type(p) is not OLHServer:\n    pass\nx = issubclass(k, MemoisedDevice)\n"
              "y = isinstance(p, NumericPopulation)\nz = type(p).audit_chain is not ServerHalf.audit_chain\n"
              "def f(p: OLHServer) -> None:\n    pass\nw = type(p) == GRR\n")
    found = [hit.split(":")[0] for hit in type_dispatch(source, protocol_classes())]
    assert found == ["1", "3", "4", "6", "11"], found


def test_no_protocol_type_dispatch_outside_the_protocols():
    """One dispatch per verb (issue 29 §2): outside client_sdk/protocols/ and sketches/ (and the
    conformance generator, which enumerates every protocol on purpose) nothing tests a value's
    protocol class; it asks the half a verb (estimators/compare.py once tested PureServer and
    OLHServer, the audit OLHServer and MemoBitMeanServer, client.py MemoisedDevice and then MemoEncoder;
    the block encoders count as protocol classes)."""
    classes = protocol_classes()
    offenders = {}
    for package in PACKAGES:
        if package == "conformance":
            continue
        for path in package_modules(package):
            rel = path.relative_to(ROOT).as_posix()
            hits = [] if rel.startswith(NAME_HOMES) else type_dispatch(path.read_text(encoding="utf-8"), classes)
            if hits:
                offenders[rel] = hits
    assert not offenders, offenders
