"""Freeze what the protocols do today, for every protocol and every docs/examples registry.

    .venv/bin/python -m conformance.golden            # rewrite conformance/golden.json
    .venv/bin/python -m conformance.golden --check    # exit 1 (naming what moved) if it would change

A refactoring that moves code between packages (issue 29) must not change behaviour; this file
is the proof. Per metric of the conformance registry (which uses every protocol: conformance/
generate.py) and of each registry under docs/examples/, it records:

- ``published``: what ``GET /v1/registry`` serves for the metric (fingerprint, ε per report,
  ε∞, the encoder block), in full;
- ``simulate``: a seeded population randomised by the protocol's vectorised encoder
  (estimators.simulation, as ``ldpt simulate`` does): the SHA-256 of its wire payloads and of
  the sketch they accumulate to;
- ``estimate``: the estimate frame of that sketch (``estimate_frame``; joint metrics
  ``joint_frame``), every cell rounded to 9 significant digits, as a SHA-256 digest, with the
  first rows' estimates beside it to read when it moves;
- ``verdicts``: fixed one-report batch bodies — honest payloads from the simulation and
  hostile ones (wrong types, out-of-range integers, wrong lengths) — through the collector's
  ``BatchDecoder``: accepted (with a digest of the sketch delta they add) or the problem type,
  status and detail the collector answers.

Digests, not values, keep the file small; ``--check`` names every entry that changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _pin_blas_kernel() -> None:
    """Pin OpenBLAS's kernel family before numpy loads, so the freeze is the same on any x86-64.

    OpenBLAS picks its kernels by CPU. Discovery's search solves its joint systems through an
    eigendecomposition (LAPACK over BLAS) whose last bits differ between the AVX-512 kernels
    (SkylakeX) and the AVX2 ones (Haswell, Zen); near-tied candidates then rank differently and
    the kept set, hence ``forged_report_max_down``, moves (35.19 against 35.42 for the conformance
    registry's discover metric). golden.json is written with the AVX2 family; a CPU without AVX2
    keeps OpenBLAS's own choice."""
    if "numpy" in sys.modules or "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            has_avx2 = " avx2" in f.read()
    except OSError:
        return
    if has_avx2:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_pin_blas_kernel()

import msgpack  # noqa: E402 - after the kernel is pinned
import numpy as np  # noqa: E402

from client_sdk.registry import Kind, MetricSpec, Registry, parse_registry  # noqa: E402
from client_sdk.uploader import pack_batch  # noqa: E402
from sketches import server_half  # noqa: E402

from .generate import registry_text, wire_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden.json"
EXAMPLES = ROOT / "docs" / "examples"
GOLDEN_VERSION = 1
WINDOW = "2024-10-04"
SEED = 29
#: Devices simulated per metric (string metrics: enough for discovery to find its top strings).
CLIENTS = 4_000
STRING_CLIENTS = 20_000
#: Honest payloads of the simulation also sent one per body through the collector.
HONEST_BODIES = 3
#: Wire objects no honest SDK sends for most protocols (each is checked for every metric).
HOSTILE: tuple[Any, ...] = (None, -1, 2 ** 40, 1.5, "x", True, b"", b"\xff" * 3, b"\x00" * 40,
                            [], [0], [0, 0], [0, 0, 0], [-1, 0], [2 ** 33, 0], [0, b"\x00"],
                            {"p": 1})
DIGITS = 9


def registries() -> dict[str, Registry]:
    """The conformance registry (every protocol) and each docs/examples registry, by name."""
    out = {"conformance": parse_registry(registry_text(), "conformance/registry")}
    for path in sorted(EXAMPLES.glob("*.toml")):
        out[f"docs/examples/{path.name}"] = parse_registry(path.read_text(encoding="utf-8"), str(path),
                                                           base_dir=path.parent)
    return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def rounded(value: Any) -> Any:
    """A JSON-able, platform-stable form of a frame cell or attribute: floats to 9 digits."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return repr(x) if not math.isfinite(x) else float(f"{x:.{DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [rounded(v) for v in value]
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def sketch_digest(sketch: Any) -> str:
    counts = np.ascontiguousarray(sketch.counts, dtype=np.int64)
    reports = np.ascontiguousarray(sketch.reports, dtype=np.int64)
    return sha(repr(counts.shape).encode() + counts.tobytes() + reports.tobytes())


def frame_digest(df: Any) -> dict[str, Any]:
    """The frame's columns, rows (rounded) and attrs as one digest, plus a readable head."""
    rows = [[rounded(v) for v in row] for row in df.itertuples(index=False, name=None)]
    attrs = rounded(dict(df.attrs))
    text = json.dumps({"columns": [str(c) for c in df.columns], "rows": rows, "attrs": attrs},
                      sort_keys=True, ensure_ascii=True)
    head = [rounded(float(v)) for v in df["estimate"].head(4)] if "estimate" in df.columns else []
    return {"rows": len(rows), "digest": sha(text.encode()), "head": head}


def _population(spec: MetricSpec, rng: np.random.Generator) -> Any:
    from estimators.simulation import draw_population

    if spec.kind is Kind.JOINT:
        from estimators.joint_population import joint_population

        return joint_population(spec, CLIENTS, None, rng)
    if spec.kind is Kind.STRING:
        law = "hosts:1.3,60" if spec.protocol == "discover" else "zipf:1.1"
        return draw_population(spec, STRING_CLIENTS, law, rng)
    return draw_population(spec, CLIENTS, "uniform" if spec.kind is Kind.NUMERIC else "zipf:1.1", rng)


def _estimate(spec: MetricSpec, sketch: Any, population: Any) -> dict[str, Any]:
    from estimators.frequency import estimate_frame

    try:
        if spec.kind is Kind.JOINT:
            from estimators.joint import joint_frame

            df = joint_frame(spec, sketch)
        elif spec.protocol == "rappor":
            df = estimate_frame(spec, sketch, candidates=list(population.values))
        else:
            df = estimate_frame(spec, sketch)
    except Exception as exc:  # an estimator's refusal is behaviour too
        return {"error": f"{type(exc).__name__}: {exc}"}
    return frame_digest(df)


def simulate(spec: MetricSpec, seed: int) -> tuple[dict[str, Any], list[Any]]:
    """Seeded population -> payloads -> sketch -> estimate; and a few honest wire payloads."""
    from estimators.simulation import encode_population

    rng = np.random.default_rng(seed)
    population = _population(spec, rng)
    proto = server_half(spec)
    sketch = proto.new_sketch()
    wire = hashlib.sha256()
    honest: list[Any] = []
    seen: set[bytes] = set()
    for _, payloads in encode_population(spec, population, rng):
        objects = proto.to_wire(payloads)
        for obj in objects[:500]:       # the first few distinct payloads
            packed = msgpack.packb(obj, use_bin_type=True)
            if len(honest) < HONEST_BODIES and packed not in seen:
                seen.add(packed)
                honest.append(obj)
        wire.update(msgpack.packb(wire_json(objects), use_bin_type=True))
        proto.accumulate(sketch, payloads)
    out = {"clients": int(population.size), "payloads": wire.hexdigest()[:32],
           "sketch": sketch_digest(sketch), "estimate": _estimate(spec, sketch, population)}
    return out, honest


def _dimensions(registry: Registry) -> dict[str, str] | None:
    table = registry.dimension_table
    if table is None:
        return None
    return {name: list(dim.values)[0] for name, dim in sorted(table.dimensions.items())}


def verdict(decoder: Any, body: bytes) -> str:
    """What the collector makes of one body: 'accepted N: <delta digests>' or the problem."""
    from collector.problems import Problem
    from sketches.deltas import sum_deltas

    try:
        batch = decoder.decode(body, WINDOW)
    except Problem as problem:
        extra = json.dumps(rounded(problem.extra), sort_keys=True)
        return f"{problem.status} {problem.slug}: {problem.detail} {extra}"
    deltas = sum_deltas([batch.deltas])
    parts = ", ".join(f"{key.metric}={sketch_digest(sketch)}" for key, sketch in sorted(
        deltas.items(), key=lambda kv: kv[0].metric))
    return f"accepted {batch.reports}: {parts}"


def verdicts(registry: Registry, spec: MetricSpec, honest: list[Any]) -> list[list[Any]]:
    from collector.ingest import BatchDecoder

    decoder = BatchDecoder(registry)
    dims = _dimensions(registry)
    out = []
    for payload in [*honest, *HOSTILE]:
        _, body = pack_batch([(spec.name, spec.fingerprint, payload)], bytes(16), dims)
        out.append([wire_json(payload), verdict(decoder, body)])
    _, stale = pack_batch([(spec.name, "0" * 32, honest[0])], bytes(16), dims)
    out.append(["stale fingerprint", verdict(decoder, stale)])
    return out


def metric_entry(registry: Registry, spec: MetricSpec, seed: int) -> dict[str, Any]:
    published = json.loads(json.dumps(spec.to_json()))
    proto = server_half(spec)
    sim, honest = simulate(spec, seed)
    return {"fingerprint": spec.fingerprint, "protocol": spec.protocol,
            "epsilon": repr(float(proto.epsilon)),
            "epsilon_inf": None if proto.epsilon_longitudinal is None else repr(float(proto.epsilon_longitudinal)),
            "payload_bits": int(proto.payload_bits), "encoder": published["encoder"],
            "published": sha(json.dumps(published, sort_keys=True).encode()),
            "simulate": sim, "verdicts": verdicts(registry, spec, honest)}


def build(keep: Callable[[MetricSpec], bool] | None = None) -> dict[str, Any]:
    """The golden document; ``keep``: only the metrics it accepts (the fast test's subset)."""
    doc: dict[str, Any] = {"description": __doc__.splitlines()[0], "golden_version": GOLDEN_VERSION,
                           "registries": {}}
    for name, registry in registries().items():
        entries = {}
        for i, spec in enumerate(registry):
            if keep is None or keep(spec):
                entries[spec.name] = metric_entry(registry, spec, SEED * 1000 + i)
        doc["registries"][name] = {"document": sha(json.dumps(registry.to_json(), sort_keys=True).encode()),
                                   "metrics": entries}
    return doc


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The JSON paths where two golden documents differ (for --check's message)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                out.append(f"{path}/{key}: {'added' if key not in old else 'removed'}")
            else:
                out.extend(differences(old[key], new[key], f"{path}/{key}"))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {json.dumps(old)[:160]} -> {json.dumps(new)[:160]}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the golden file would change")
    parser.add_argument("--out", type=Path, default=GOLDEN, help="the golden file")
    args = parser.parse_args(argv)
    text = render(build())
    old = args.out.read_text(encoding="utf-8") if args.out.exists() else None
    if old == text:
        print("unchanged")
        return 0
    if args.check:
        moved = differences(json.loads(old), json.loads(text)) if old else ["(no golden file)"]
        print(f"behaviour changed ({len(moved)} entries of {args.out.name}); if intended, rerun "
              "python -m conformance.golden and say why in the commit:", file=sys.stderr)
        for line in moved[:40]:
            print("  " + line, file=sys.stderr)
        return 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
