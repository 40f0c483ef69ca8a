"""The two distributions, end to end (docs/design.md, "Two distributions").

Both wheels are built with ``python -m build`` from a copy of the repository; the SDK wheel is
installed alone into a bare virtual environment (msgpack comes from the package index); from
there, simulated app installs report every metric kind of docs/examples to a real
``ldpt serve`` started from this environment on 127.0.0.1; the estimates then cover the truth.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from cli.estimate_cmd import load_sketch
from client_sdk import __version__
from client_sdk.registry import Kind, load_registry
from estimators.frequency import estimate_frame
from estimators.simulation import NumericPopulation, numeric_truth

from .collector_support import serving

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
#: Simulated app installs; each reports every metric once.
CLIENTS = 5000
#: Interval level of the coverage check. The SDK draws from the OS CSPRNG (no seed), so this
#: test is random: its 63 intervals at 1 - 1e-8 make a spurious miss 6.3e-7 per run (was 1 - 1e-5
#: over 3,000 installs: 6.3e-4). 5,000 installs keep the power: the interval's half-width as a
#: share of each count is that of 3,000 at 1 - 1e-5 (5.73 σ over 5,000 = 4.42 σ over 3,000).
CONFIDENCE = 1 - 1e-8
#: Top-level packages an SDK-only environment may hold (pip and setuptools come with venv).
SDK_ENV_PACKAGES = {"ldp-telemetry-sdk", "msgpack", "pip", "setuptools"}
STRINGS = ["news.example", "mail.example", "search.example", "video.example", "shop.example"]

DRIVER = r"""
import json, sys
from client_sdk import TelemetryClient
from client_sdk.state import MemoryState
from client_sdk.queue import MemoryOutbox
from client_sdk.transport import HTTPTransport
from client_sdk.uploader import RetryPolicy, Uploader

registry_path, plan_path, url = sys.argv[1:4]
plan = json.loads(open(plan_path).read())
reports = sum(len(v) for v in plan.values())
uploader = Uploader(HTTPTransport(url, timeout=30.0), MemoryOutbox(), batch_size=500, max_batch_age=0.2,
                    queue_size=reports + 1, retry=RetryPolicy(initial=0.2, maximum=2.0))
from client_sdk.registry import load_registry
registry = load_registry(registry_path)
clients = len(next(iter(plan.values())))
sent = 0
for i in range(clients):
    client = TelemetryClient(registry=registry, state=MemoryState(), uploader=uploader)
    for name, values in plan.items():
        sent += bool(client.report(name, values[i]))
ok = uploader.flush(120.0)
banned = [m for m in ("numpy", "scipy", "pandas", "aiohttp", "click") if m in sys.modules]
print(json.dumps({"sent": sent, "flushed": ok, "acked": uploader.batcher.counters["reports_acked"],
                  "banned": banned}))
"""


def merged_examples(path: Path) -> Path:
    """docs/examples' metrics in one registry, each kind once: metrics.toml (boolean,
    categorical, numeric mean and histogram), longitudinal.toml's memoised theme and RAPPOR
    string, discovery.toml's discover string. The [device] budget is left out: every install
    reports all of them on one day."""
    def metrics(name: str) -> dict:
        return tomllib.loads((EXAMPLES / name).read_text())["metrics"]

    merged = dict(metrics("metrics.toml"))
    longitudinal = metrics("longitudinal.toml")
    merged["theme_daily"] = longitudinal["theme"]
    merged["home_page_rappor"] = longitudinal["home_page"]
    merged["home_page_discover"] = metrics("discovery.toml")["home_page"]
    path.write_text(tomli_w.dumps({"metrics": merged}))
    return path


def checkout_copy(src: Path) -> Path:
    """A copy of the checkout's tracked and new files (what a fresh clone holds, and your edits)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    return src


def build_wheels(tmp_path: Path) -> tuple[Path, Path]:
    """(SDK wheel, ldp-telemetry wheel), built from a copy of the tracked and new files."""
    src = checkout_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    for project in (src / "client_sdk", src):
        subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(project)], check=True,
                       capture_output=True)
    return (dist / f"ldp_telemetry_sdk-{__version__}-py3-none-any.whl",
            dist / f"ldp_telemetry-{__version__}-py3-none-any.whl")


def wheel_metadata(wheel: Path) -> tuple[set[str], list[str]]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    return tops, [line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist: ")]


def wheel_entry_points(wheel: Path) -> str:
    """The wheel's entry_points.txt ("" when it declares none)."""
    with zipfile.ZipFile(wheel) as z:
        found = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        return z.read(found[0]).decode() if found else ""


def plan_values(registry_path: Path, rng: np.random.Generator) -> dict[str, list]:
    """Each metric's true value per install: skewed categories, Zipf strings, uniform numbers."""
    plan: dict[str, list] = {}
    for name, spec in load_registry(registry_path).metrics.items():
        if spec.kind is Kind.NUMERIC:
            lo, hi = spec.bounds
            plan[name] = (lo + (hi - lo) * rng.beta(2.0, 5.0, CLIENTS)).tolist()
            continue
        values = list(spec.domain) if spec.domain is not None else STRINGS
        weights = 1.0 / np.arange(1, len(values) + 1)
        plan[name] = [values[i] for i in rng.choice(len(values), CLIENTS, p=weights / weights.sum())]
    return plan


def uncovered(spec, sketch, values: list) -> list[str]:
    """Rows of the estimate whose interval misses the truth (numeric: mean, sum, buckets, quantiles)."""
    if spec.kind is Kind.NUMERIC:
        df = estimate_frame(spec, sketch, confidence=CONFIDENCE)
        truth = dict(numeric_truth(spec, NumericPopulation(np.asarray(values, dtype=np.float64))))
        keys = [v if st == "count" else st for st, v in zip(df["statistic"], df["value"])] \
            if spec.is_histogram else list(df["statistic"])
    else:
        candidates = STRINGS + ["decoy.example"] if spec.kind is Kind.STRING else None
        df = estimate_frame(spec, sketch, confidence=CONFIDENCE, candidates=candidates)
        counts: dict[str, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        keys, truth = list(df["value"]), {k: counts.get(k, 0) for k in df["value"]}
    assert len(df), spec.name
    return [f"{spec.name} {k}: truth {truth[k]} not in [{lo}, {hi}]"
            for k, lo, hi in zip(keys, df["ci_low"], df["ci_high"]) if not lo <= truth[k] <= hi]


def test_the_sdk_wheel_alone_reports_every_metric_kind_to_a_real_collector(tmp_path):
    sdk_wheel, main_wheel = build_wheels(tmp_path)

    sdk_tops, sdk_requires = wheel_metadata(sdk_wheel)
    assert sdk_tops == {"client_sdk"}
    by_extra: dict[str, set[str]] = {}
    for requirement in sdk_requires:
        name = requirement.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        extra = requirement.split('extra == "')[1].rstrip('"') if 'extra == "' in requirement else ""
        by_extra.setdefault(extra, set()).add(name)
    # The SDK itself needs msgpack only (tomli on Python 3.10); HTTP for asyncio and sealing are extras.
    assert by_extra == {"": {"msgpack", "tomli"}, "async": {"aiohttp"}, "sealed": {"pyhpke", "cryptography"}}
    main_tops, main_requires = wheel_metadata(main_wheel)
    # the server halves of the protocols (sketches) and ldpt shuffle ship with the server, never the SDK
    assert main_tops == {"cli", "collector", "estimators", "shuffler", "sketches"}
    assert f"ldp-telemetry-sdk=={__version__}" in main_requires
    # client_sdk.testing.FakeCollector's hook: the server wheel names its double, the SDK wheel nothing
    assert "[ldp_telemetry.testing]\nFakeCollector = collector.testing:FakeCollector" in wheel_entry_points(main_wheel)
    assert "ldp_telemetry.testing" not in wheel_entry_points(sdk_wheel)

    env_dir = tmp_path / "sdk-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(sdk_wheel)], check=True, capture_output=True)
    listed = json.loads(subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], check=True,
                                       capture_output=True, text=True).stdout)
    assert {p["name"].lower() for p in listed} <= SDK_ENV_PACKAGES, listed

    registry_path = merged_examples(tmp_path / "metrics.toml")
    plan = plan_values(registry_path, np.random.default_rng(19))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    db = tmp_path / "ldpt.sqlite"
    with serving(["--metrics", str(registry_path), "--db", str(db), "--host", "127.0.0.1", "--port", "0"],
                 cwd=tmp_path) as server:
        run = subprocess.run([str(python), "-c", DRIVER, str(registry_path), str(plan_path), server.url],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        assert server.terminate() == 0, server.text()
    result = json.loads(run.stdout.strip().splitlines()[-1])
    reports = CLIENTS * len(plan)
    assert result == {"sent": reports, "flushed": True, "acked": reports, "banned": []}, result

    registry = load_registry(registry_path)
    misses = []
    for name, values in plan.items():
        spec = registry.get(name)
        sketch = load_sketch(spec, str(db), None, None, None)
        assert sketch.total_reports == CLIENTS, name
        misses += uncovered(spec, sketch, values)
    assert not misses, misses


def test_installing_the_sdk_from_a_checkout_leaves_the_test_command_green(tmp_path):
    """docs/guide-app-teams.md's `pip install ./client_sdk`, run in a copy of the checkout, writes
    nothing into it (it once left client_sdk/build/lib/client_sdk/*.py, which
    tests/test_layering.py then scanned and failed on: issue 31); that test still passes there."""
    src = checkout_copy(tmp_path / "src")
    before = {p.relative_to(src).as_posix() for p in src.rglob("*")}
    env_dir = tmp_path / "app-env"
    venv.create(env_dir, with_pip=True)
    run = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "./client_sdk"],
                         cwd=src, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    left = sorted({p.relative_to(src).as_posix() for p in src.rglob("*")} - before)
    assert left == [], f"pip install ./client_sdk left {left[:10]} in the checkout"
    # a build tree planted by an older setuptools backend is not scanned either
    planted = src / "client_sdk" / "build" / "lib" / "client_sdk" / "testing.py"
    planted.parent.mkdir(parents=True)
    shutil.copy2(src / "client_sdk" / "testing.py", planted)
    layering = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_layering.py"], cwd=src, capture_output=True, text=True, timeout=600)
    assert layering.returncode == 0, layering.stdout[-3000:]
