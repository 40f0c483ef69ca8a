"""The SDK's one-report encoders, built from the encoder block (issue 29 §4), in instructions.

Two measurements, each as instruction counts under callgrind (``valgrind --tool=callgrind``):
wall-clock timings on a loaded 2-core machine vary by more than the differences measured here.

- **Per report**: for one metric of every protocol (the conformance registry's first metric of
  each), the instructions of one value's path to its wire payload — the metric's lookup (grid
  rounding for a mean metric, the memo key for a memoised one) and the encoder — as
  (I(N reports) − I(0)) / N over fresh processes, on this tree and on a baseline commit's tree
  (``--baseline REF``, default ``main``: the same script run with that tree first on the path).
- **Start-up**: a registry of piecewise, hybrid and Laplace metrics read from its published JSON
  and every metric made ready to encode, re-derived (the default) and compiled
  (``registry_from_json(..., rederive=False)`` with the app's pins), in instructions and in
  CPU milliseconds (median of fresh processes).

Run: `python bench/encoders.py` (``--reports N``, default 2,000; ``--startup-only``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, print_table

from conformance.generate import REPORT_VALUES, registry_text

#: One value's path to its payload, in a fresh interpreter on this tree or the baseline's: every
#: metric made ready (``_Metric``), then ``count`` reports of one metric's value.
REPORT_SCRIPT = """
import json, sys
from client_sdk.client import _Metric
from client_sdk.protocols.device import Context
from client_sdk.registry import parse_registry

registry = parse_registry(open(sys.argv[1], encoding="utf-8").read())
name, value, count = sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
metrics = {spec.name: _Metric(spec) for spec in registry}
rt = metrics[name]
encoder = getattr(rt, "encoder", None) or rt.proto   # this tree's block encoder, or the device half
secret = bytes(range(32))
for _ in range(count):
    if rt.numeric:
        key, idx, _clipped = rt.number(value, secret) if rt.two_round else rt.number(value)
    else:
        key, idx = rt.lookup(value)
    if rt.two_round:
        key = encoder.memo_key(idx, secret, name)
    encoder.encode_one(idx, key, Context(secret, name, 20000))
"""

#: Start-up from a published registry, in a fresh interpreter: parse it, then every metric ready.
STARTUP_SCRIPT = """
import json, sys, time
t0 = time.process_time()
from client_sdk.client import _MetricTable
from client_sdk.remote import registry_from_json

doc = json.loads(open(sys.argv[1], encoding="utf-8").read())
pins = {m["name"]: m["fingerprint"] for m in doc["metrics"]}
t1 = time.process_time()
if sys.argv[2] != "none":   # "none": the process without the registry (what the counts subtract)
    registry = registry_from_json(doc, pinned=pins, rederive=sys.argv[2] == "rederive")
    table = _MetricTable(registry)
    for name in registry.metrics:
        table.get(name)
print(json.dumps({"cpu_ms": (time.process_time() - t1) * 1e3}))
"""

#: The numeric metrics whose derivations search (piecewise's window, hybrid's mixture, Laplace's
#: calibration), at two budgets each.
STARTUP_TOML = "\n".join(
    f'[metrics.{p}_{str(e).replace(".", "_")}]\nkind = "numeric"\nrange = [0, 100]\nprotocol = "{p}"\nepsilon = {e}\n'
    for p in ("piecewise", "hybrid", "laplace") for e in (1.0, 3.0))


def instructions(argv: list[str], env: dict[str, str], cwd: Path) -> int:
    """Instructions a fresh process executes (callgrind's total), its output discarded; ``cwd``
    outside the repository, so that PYTHONPATH decides which tree is imported."""
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                         capture_output=True, text=True, env=env, cwd=cwd)
    if run.returncode:
        raise RuntimeError(run.stderr[-2000:])
    for line in run.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[-1].strip())
    raise RuntimeError("no callgrind total in:\n" + run.stderr[-2000:])


def one_per_protocol(registry_file: Path) -> dict[str, tuple[str, object]]:
    """protocol -> (metric, value): the conformance registry's first metric of each protocol."""
    from client_sdk.registry import parse_registry

    out: dict[str, tuple[str, object]] = {}
    for spec in parse_registry(registry_file.read_text(encoding="utf-8")):
        out.setdefault(spec.protocol, (spec.name, REPORT_VALUES[spec.name][0]))
    return out


def baseline_tree(ref: str, tmp: Path) -> Path | None:
    """The baseline commit's client_sdk (git archive), or None when the ref is unknown."""
    archive = subprocess.run(["git", "archive", ref, "client_sdk"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        return None
    out = tmp / "baseline"
    out.mkdir()
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def per_report(tmp: Path, baseline: str, count: int) -> None:
    """Instructions per report, per protocol, on this tree and the baseline's."""
    registry_file = tmp / "conformance.toml"
    registry_file.write_text(registry_text(), encoding="utf-8")
    chosen = one_per_protocol(registry_file)
    tree = baseline_tree(baseline, tmp)
    trees = {"this tree": {**os.environ, "PYTHONPATH": str(ROOT)}}
    if tree is not None:
        trees[baseline] = {**os.environ, "PYTHONPATH": str(tree)}
    any_metric, any_value = next(iter(chosen.values()))
    per: dict[str, dict[str, float]] = {}
    for label, env in trees.items():
        def run(metric: str, value: object, n: int, env: dict[str, str] = env) -> int:
            return instructions([sys.executable, "-c", REPORT_SCRIPT, str(registry_file), metric,
                                 json.dumps(value), str(n)], env, tmp)
        base = run(any_metric, any_value, 0)
        per[label] = {p: (run(m, v, count) - base) / count for p, (m, v) in chosen.items()}
    rows = []
    for protocol, (metric, _) in chosen.items():
        now = per["this tree"][protocol]
        old = per.get(baseline, {}).get(protocol)
        rows.append([protocol, metric, round(now), "-" if old is None else round(old),
                     "-" if old is None else f"{100 * (now - old) / old:+.1f} %"])
    print_table(["protocol", "metric", "instr/report", f"{baseline} instr/report", "change"], rows,
                f"One value to its payload (lookup + encode), instructions per report over {count:,} reports")


def startup(tmp: Path, runs: int = 5) -> None:
    """Start-up from a published registry of searched numeric metrics: re-derived vs compiled."""
    from client_sdk.registry import parse_registry

    doc_file = tmp / "compiled.json"
    doc_file.write_text(json.dumps(parse_registry(STARTUP_TOML).to_json()), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def argv(mode: str) -> list[str]:
        return [sys.executable, "-c", STARTUP_SCRIPT, str(doc_file), mode]

    without = instructions(argv("none"), env, tmp)
    rows = []
    for mode in ("rederive", "compiled"):
        cpu = statistics.median(json.loads(subprocess.run(argv(mode), capture_output=True, text=True, check=True,
                                                          env=env, cwd=tmp).stdout)["cpu_ms"] for _ in range(runs))
        rows.append([mode, instructions(argv(mode), env, tmp) - without, cpu])
    saved = rows[0][1] - rows[1][1]
    print_table(["registry_from_json + metrics ready", "instructions", f"CPU ms (median of {runs})"], rows,
                f"Start-up, 6 piecewise/hybrid/laplace metrics: compiled saves {saved:,} instructions "
                f"({100 * saved / rows[0][1]:.0f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=2000, help="reports per protocol and tree")
    parser.add_argument("--baseline", default="main", help="git ref whose encoders the counts compare with")
    parser.add_argument("--startup-only", action="store_true", help="only the start-up measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        startup(Path(tmp))
        if not args.startup_only:
            per_report(Path(tmp), args.baseline, args.reports)


if __name__ == "__main__":
    main()
