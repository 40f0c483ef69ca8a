"""The encoder block's contract (conformance/encoder-block.schema.json): every block a collector serves
at GET /v1/registry validates, for every protocol and metric kind; what an SDK could not encode
from does not; the Python block writer and the schema agree member for member; the TypeScript
SDK's block types are generated from the schema (conformance/block_types.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient

from client_sdk.encoder_block import ENCODER_VERSION
from client_sdk.registry import load_registry
from collector.app import create_app
from collector.config import make_config
from conformance import block_types, generate, golden

from .collector_support import CollectorTestServer

SCHEMA = block_types.load_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
PROTOCOLS = [ref["$ref"].rsplit("/", 1)[1] for ref in SCHEMA["oneOf"]]

#: Histograms over every frequency protocol (rr has two buckets) and the extremes of the numeric
#: searches: a Hybrid mixture of 0 (pure Duchi at ε 0.01), a one-cell Piecewise window (ε 20); memoised
#: metrics whose window charges are published (lgrr, loloha at reports_per_window 5: window_charges).
EDGE_TOML = """
[metrics.h_rr]
kind = "numeric"
range = [0, 1]
buckets = 2
protocol = "rr"
epsilon = 1.0
""" + "".join(f"""
[metrics.h_{p}]
kind = "numeric"
range = [0, 100]
buckets = [0, 1, 10, 50, 100]
protocol = "{p}"
epsilon = 1.0
{'epsilon_inf = 2.0' if p in ('lgrr', 'losue', 'loloha', 'dbitflip') else ''}
""" for p in ("grr", "oue", "sue", "ss", "olh", "hr", "lgrr", "losue", "loloha", "dbitflip")) + """
[metrics.city_linear]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f", "g"]
protocol = "olh"
hash_family = "linear"
epsilon = 3.0

[metrics.mix_zero]
kind = "numeric"
range = [0, 1]
protocol = "hybrid"
epsilon = 0.01

[metrics.pw_narrow]
kind = "numeric"
range = [-1e100, 1e100]
protocol = "piecewise"
epsilon = 20.0

[metrics.lgrr_window]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f", "g", "h"]
protocol = "lgrr"
epsilon = 0.1
epsilon_inf = 2.0
reports_per_window = 5

[metrics.loloha_window]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t"]
protocol = "loloha"
hash_range = 8
epsilon = 0.1
epsilon_inf = 2.0
reports_per_window = 5
"""


def registry_files(tmp: Path) -> dict[str, Path]:
    """Every registry the tests serve: the conformance registry (every protocol), docs/examples,
    the large-domain registry (ids and a file domain) and the edge cases above."""
    files: dict[str, Path] = {}
    (tmp / "app.txt").write_text("".join(v + "\n" for v in generate.DOMAIN_VALUES), encoding="utf-8")
    for name, text in (("conformance", generate.registry_text()), ("domains", generate.DOMAINS_TOML),
                       ("edges", EDGE_TOML)):
        files[name] = tmp / f"{name}.toml"
        files[name].write_text(text, encoding="utf-8")
    for path in sorted(golden.EXAMPLES.glob("*.toml")):
        files[path.name] = tmp / path.name
        files[path.name].write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    for other in golden.EXAMPLES.glob("*.csv"):
        (tmp / other.name).write_bytes(other.read_bytes())
    return files


async def served(path: Path, db: Path) -> dict[str, Any]:
    """GET /v1/registry of a collector (in process, the app ldpt serve runs) over ``path``."""
    app = create_app(make_config(path, environ={}, db=db), load_registry(path))
    async with TestClient(CollectorTestServer(app, host="127.0.0.1")) as client:
        resp = await client.get("/v1/registry")
        assert resp.status == 200
        return await resp.json()


def problems(block: dict[str, Any]) -> list[str]:
    """Why a block does not validate (by its own protocol's definition where it names one)."""
    if not VALIDATOR.is_valid(block):
        name = block.get("protocol")
        one = SCHEMA["$defs"].get(name) if isinstance(name, str) else None
        if one is None:
            return [f"protocol {name!r} is not in the schema"]
        sub = jsonschema.Draft202012Validator({**one, "$defs": SCHEMA["$defs"]})
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in sub.iter_errors(block)] or ["oneOf"]
    return []


def test_schema_is_a_valid_versioned_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    # major = the blocks' `version`; minor = the revision of what it refuses (1.1: the consistency checks)
    assert SCHEMA["$id"].endswith(f"/encoder-block/{ENCODER_VERSION}.1")
    assert SCHEMA["$defs"]["version"] == {"const": ENCODER_VERSION, "description": "the block's layout version"}
    from client_sdk.protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
    from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES

    assert set(PROTOCOLS) == {*PROTOCOL_NAMES, *NUMERIC_PROTOCOL_NAMES, *LONGITUDINAL_PROTOCOL_NAMES,
                              *LONGITUDINAL_NUMERIC_NAMES}
    for name in PROTOCOLS:
        assert SCHEMA["$defs"][name]["properties"]["protocol"] == {"const": name}
        assert SCHEMA["$defs"][name]["additionalProperties"] is False


def test_every_block_a_collector_serves_validates(tmp_path: Path) -> None:
    """Every protocol and metric kind, through the collector's own GET /v1/registry."""
    seen_protocols: set[str] = set()
    seen_kinds: set[str] = set()
    members: dict[str, set[str]] = {}
    checked = 0
    for name, path in registry_files(tmp_path).items():
        doc = asyncio.run(served(path, tmp_path / f"{name}.sqlite"))
        for metric in doc["metrics"]:
            block = metric["encoder"]
            assert not problems(block), f"{name} {metric['name']}: {problems(block)}"
            checked += 1
            seen_protocols.add(block["protocol"])
            members.setdefault(block["protocol"], set()).update(block)
            kind = metric["kind"]
            if kind == "numeric":
                kind = "numeric-histogram" if "edges" in block else "numeric-mean"
            seen_kinds.add(kind)
    assert seen_protocols == set(PROTOCOLS)
    assert seen_kinds == {"boolean", "categorical", "string", "numeric-mean", "numeric-histogram", "joint"}
    # every member the schema defines is served somewhere (no dead member in the contract)
    for proto, served_members in members.items():
        assert served_members == set(SCHEMA["$defs"][proto]["properties"]), proto
    assert checked >= 55


def _conformance_block(protocol: str) -> dict[str, Any]:
    doc = json.loads((generate.VECTORS / "registry.json").read_text(encoding="utf-8"))["registry"]
    return next(m["encoder"] for m in doc["metrics"] if m["encoder"]["protocol"] == protocol)


@pytest.mark.parametrize("change, why", [
    (lambda b: b.update(version=2), "version"),
    (lambda b: b.update(protocol="hadamard"), "protocol"),
    (lambda b: b.update(extra=1), "additional"),
    (lambda b: b.pop("keep_threshold"), "required"),
    (lambda b: b.update(keep_threshold=2 ** 32 + 1), "maximum"),
    (lambda b: b.update(keep_threshold=0.5), "integer"),
    (lambda b: b.update(keep_threshold="123"), "integer"),
    (lambda b: b.update(d=1), "minimum"),
    (lambda b: b.update(edges=[0.0, 1.0]), "short"),
    (lambda b: b.update(range=[0.0, 1.0]), "additional"),
])
def test_schema_refuses_a_block_an_sdk_could_not_encode_from(change: Any, why: str) -> None:
    block = _conformance_block("grr")
    assert not problems(block)
    change(block)
    assert problems(block), why


@pytest.mark.parametrize("protocol, change", [
    ("duchi", lambda b: b.update(low=int(b["low"]))),                 # 2^64 words are strings
    ("duchi", lambda b: b.update(step="-1")),
    ("duchi", lambda b: b.update(step="1" * 21)),
    ("hybrid", lambda b: b["duchi"].update(protocol="duchi")),        # nested: no protocol
    ("hybrid", lambda b: b["piecewise"].pop("a")),
    ("laplace", lambda b: b.update(bounds=[])),
    ("olh", lambda b: b.update(family="cubic")),
    ("rr", lambda b: b.update(d=3)),
    ("duchi", lambda b: b.pop("range")),
    ("rappor", lambda b: b.update(edges=[0, 1, 2])),
])
def test_schema_refuses_malformed_members(protocol: str, change: Any) -> None:
    block = json.loads(json.dumps(_conformance_block(protocol)))
    assert not problems(block)
    change(block)
    assert problems(block)


def test_typescript_block_types_are_generated_from_the_schema() -> None:
    """client_sdk/js/src/protocols/block.ts is block_types' rendering of the committed schema;
    tsc then checks the SDK's encoders against it (tests/test_js_sdk.py builds with tsc)."""
    assert block_types.TS_OUT.read_text(encoding="utf-8") == block_types.render(SCHEMA), \
        "run python -m conformance.block_types"
    ts = block_types.TS_OUT.read_text(encoding="utf-8")
    for name in PROTOCOLS:
        assert f'readonly protocol: "{name}";' in ts
    types_ts = (block_types.TS_OUT.parent / "types.ts").read_text(encoding="utf-8")
    assert "Record<string, any>" not in types_ts and 'from "./block.js"' in types_ts
    registry_ts = (block_types.TS_OUT.parent.parent / "registry.ts").read_text(encoding="utf-8")
    assert '[P in Block["protocol"]]: (b: BlockOf<P>) => Encoder' in registry_ts


def test_block_types_check_mode(tmp_path: Path) -> None:
    out = tmp_path / "block.ts"
    assert block_types.main(["--out", str(out)]) == 0
    assert block_types.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8").replace("readonly d: number;", "readonly d: string;", 1),
                   encoding="utf-8")
    assert block_types.main(["--check", "--out", str(out)]) == 1


@pytest.mark.e2e
def test_ldpt_serve_serves_valid_blocks(tmp_path: Path) -> None:
    """The same check against a real `ldpt serve` process over the conformance registry."""
    import urllib.request

    from .sdk_support import collector

    with collector(tmp_path, generate.registry_text()) as col:
        with urllib.request.urlopen(f"{col.url}/v1/registry", timeout=30) as resp:
            doc = json.loads(resp.read())
    blocks = [m["encoder"] for m in doc["metrics"]]
    assert len(blocks) == 25 and all(not problems(b) for b in blocks)


def test_every_served_registry_loads_in_the_python_sdk(tmp_path: Path) -> None:
    """The Python SDK reads each served document (every protocol, the docs/examples registries, large
    domains, the extremes above): every block passes the checks of docs/conformance.md and equals the
    block of the metric the SDK builds from the same parameters (client_sdk.remote.check_published_block)."""
    from client_sdk.encoder_block import check_block, encoder_block
    from client_sdk.remote import registry_from_json

    loaded = 0
    for name, path in registry_files(tmp_path).items():
        doc = asyncio.run(served(path, tmp_path / f"{name}.sqlite"))
        registry = registry_from_json(doc, domains=lambda metric, published: generate.DOMAIN_VALUES)
        for metric in doc["metrics"]:
            check_block(metric["encoder"], metric["name"])
            assert json.loads(json.dumps(encoder_block(registry.get(metric["name"])))) == metric["encoder"], name
            loaded += 1
    assert loaded >= 55
