"""The browser bundle's minifier renames the private members listed in client_sdk/js/build.mjs
(MANGLED; esbuild's mangleProps renames every property of that name in the bundle at once).
That is only safe for names that are private members of one class and never a property anywhere
else in src/ — not an option, platform, store, counter or stored-JSON key, not a built-in's
method — so this checks the list against the source (no Node needed)."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parent.parent / "client_sdk" / "js"
#: Properties of built-ins and of the platform that code might reach with `.name`.
BUILTIN = {"log", "warn", "error", "then", "catch", "finally", "length", "push", "get", "set", "has",
           "delete", "keys", "values", "entries", "start", "close", "abort", "reject", "resolve", "now"}


def mangled() -> list[str]:
    text = (JS / "build.mjs").read_text(encoding="utf-8")
    block = re.search(r"MANGLED = \[(.*?)\];", text, re.S)
    assert block, "build.mjs has no MANGLED list"
    return re.findall(r'"([A-Za-z_$][\w$]*)"', block.group(1))


def sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in (JS / "src").rglob("*.ts")}


def test_every_mangled_name_is_one_private_member_and_no_property_elsewhere():
    names = mangled()
    assert names and len(names) == len(set(names))
    files = sources()
    counters = re.search(r"COUNTERS = \[(.*?)\] as const", files[JS / "src" / "client.ts"], re.S).group(1)
    for name in names:
        assert name not in BUILTIN, name
        assert f'"{name}"' not in counters, f"{name} is a counter name"
        owners = [p for p, t in files.items()
                  if re.search(rf"\bprivate\s+(?:readonly\s+)?(?:async\s+)?{re.escape(name)}\b", t)]
        assert len(owners) == 1, (name, owners)
        # a property reached from outside the bundle (JSON, app-given options, a platform object) is
        # read with `.name` or named in a string; keys written inside the bundle are renamed with it
        code = re.compile(rf"\.{re.escape(name)}\b|[\"'`]{re.escape(name)}[\"'`]")
        for path, text in files.items():
            if path == owners[0]:
                continue
            stripped = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)   # comments may name anything
            assert not code.search(stripped), f"{name} is used as a property in {path.relative_to(JS)}"
