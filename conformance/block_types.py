"""Generate the TypeScript SDK's encoder-block types from the JSON Schema (one contract).

    .venv/bin/python -m conformance.block_types            # rewrite client_sdk/js/src/protocols/block.ts
    .venv/bin/python -m conformance.block_types --check    # exit 1 if it would change

``conformance/encoder-block.schema.json`` is the contract of the ``encoder`` object of ``GET
/v1/registry``; ``block.ts`` is its TypeScript reading — one interface per protocol, the
``Block`` union discriminated by ``protocol`` — so the SDK's encoders are type-checked against
the schema by ``tsc`` (a member the schema does not define, or a string read as a number, does
not compile). Types only: the browser bundle gains no byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA = HERE / "encoder-block.schema.json"
TS_OUT = HERE.parent / "client_sdk" / "js" / "src" / "protocols" / "block.ts"


def load_schema(path: Path = SCHEMA) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def type_name(defn: str) -> str:
    """``rr`` -> ``RrBlock``; ``duchi_params`` -> ``DuchiParams`` (nested objects)."""
    if defn.endswith("_params"):
        return "".join(part.capitalize() for part in defn.split("_"))
    return defn.capitalize() + "Block"


def ts_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """The TypeScript type of one schema member."""
    if "$ref" in prop:
        target = prop["$ref"].rsplit("/", 1)[1]
        ref = defs[target]
        if ref.get("type") == "object":
            return type_name(target)
        return ts_type(ref, defs)
    if "const" in prop:
        return json.dumps(prop["const"])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    kind = prop.get("type")
    if kind in ("integer", "number"):
        return "number"
    if kind == "string":
        return "string"
    if kind == "array":
        item = ts_type(prop["items"], defs)
        if prop.get("minItems") is not None and prop.get("minItems") == prop.get("maxItems"):
            return "readonly [" + ", ".join([item] * prop["minItems"]) + "]"
        return f"readonly {item}[]"
    raise ValueError(f"no TypeScript type for schema member {prop}")


def _doc(prop: dict[str, Any], defs: dict[str, Any]) -> str | None:
    text = prop.get("description")
    if text is None and "$ref" in prop:
        text = defs[prop["$ref"].rsplit("/", 1)[1]].get("description")
    return text


def interface(defn: str, obj: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    lines = [f"/** {obj['description']} */", f"export interface {type_name(defn)} {{"]
    required = set(obj.get("required", ()))
    for name, prop in obj["properties"].items():
        doc = _doc(prop, defs)
        if doc:
            lines.append(f"  /** {doc} */")
        lines.append(f"  readonly {name}{'' if name in required else '?'}: {ts_type(prop, defs)};")
    lines.append("}")
    return lines


def render(schema: dict[str, Any]) -> str:
    defs = schema["$defs"]
    blocks = [ref["$ref"].rsplit("/", 1)[1] for ref in schema["oneOf"]]
    nested = [name for name, d in defs.items() if d.get("type") == "object" and name not in blocks]
    out = ["// Generated from conformance/encoder-block.schema.json by `python -m conformance.block_types`;",
           "// do not edit (docs/conformance.md, \"The encoder object\").", "",
           "/** The `$id` of the schema these types are read from. */",
           f"export type BlockSchemaId = {json.dumps(schema['$id'])};", ""]
    for name in [*nested, *blocks]:
        out.extend(interface(name, defs[name], defs))
        out.append("")
    out.append(f"/** {schema['description']} */")
    out.append("export type Block =")
    out.extend(f"  | {type_name(name)}" for name in blocks)
    out[-1] += ";"
    out.append("")
    out.append("/** The block of one protocol, by name. */")
    out.append('export type BlockOf<P extends Block["protocol"]> = Extract<Block, { protocol: P }>;')
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if block.ts would change")
    parser.add_argument("--out", type=Path, default=TS_OUT)
    args = parser.parse_args(argv)
    text = render(load_schema())
    if args.out.exists() and args.out.read_text(encoding="utf-8") == text:
        print("unchanged")
        return 0
    if args.check:
        print(f"{args.out} is out of date with {SCHEMA.name}; run python -m conformance.block_types",
              file=sys.stderr)
        return 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
