"""Joint metrics: two or three private attributes randomised as one value (docs/guide-analysts.md,
"Breakdowns by private attributes").

```toml
[metrics.crash_by_os]
kind = "joint"
epsilon = 2.0                      # one ε for the whole tuple
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios", "windows"] },
  { name = "crashed_today", kind = "boolean" },
]

[metrics.startup_by_os]
kind = "joint"
epsilon = 2.0
of = [
  { name = "os", kind = "categorical", categories = ["android", "ios"] },
  { name = "startup_ms", kind = "numeric", range = [0, 5000], buckets = [0, 500, 1000, 5000] },
]
```

The domain of a joint metric is the product of its parts' domains, in row-major order (the
last part varies fastest); a cell's label joins the parts' labels with ``|`` ("ios|true").
On the wire it is a categorical metric over that product: the device reports the tuple's
cell index through one frequency oracle, so the whole tuple costs one ε, and the collector
needs nothing new. Pure Python (no numpy): the device path imports this module.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

#: Parts of one joint metric (2 or 3: the cells, and the noise, multiply).
MIN_PARTS, MAX_PARTS = 2, 3
#: Largest product domain: every cell is a counter and an estimate.
MAX_JOINT_CELLS = 65_536
#: Joins the parts' labels into a cell's label; no categorical part value may hold it.
SEPARATOR = "|"
PART_KINDS = ("categorical", "boolean", "numeric")
PART_KEYS = {"categorical": ("name", "kind", "categories"),
             "boolean": ("name", "kind"),
             "numeric": ("name", "kind", "range", "buckets", "unit")}
PART_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def _edge_text(x: float) -> str:
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(float(x))


def put_domain_fields(table: dict[str, Any], categories: Any, value_range: Any, buckets: Any) -> None:
    """The TOML fields of a domain (categories, range, buckets) that are set, as the registry
    writes them for a metric and for a joint metric's part alike."""
    if categories is not None:
        table["categories"] = list(categories)
    if value_range is not None:
        table["range"] = list(value_range)
    if buckets is not None:
        table["buckets"] = buckets if isinstance(buckets, int) else list(buckets)


@dataclasses.dataclass(frozen=True)
class JointPart:
    """One attribute of a joint metric, as declared (``range``/``buckets`` as written)."""

    name: str
    kind: str
    categories: tuple[str, ...] | None = None
    range: tuple[float, float] | None = None
    buckets: int | tuple[float, ...] | None = None
    unit: str = ""

    @property
    def edges(self) -> tuple[float, ...]:
        """Bucket edges of a numeric part (equal width when ``buckets`` is an int)."""
        if self.range is None or self.buckets is None:
            raise TypeError(f"part {self.name!r} is not numeric")
        lo, hi = float(self.range[0]), float(self.range[1])
        if isinstance(self.buckets, int):
            b = self.buckets
            return (lo, *(lo + (hi - lo) * i / b for i in range(1, b)), hi)
        return tuple(float(e) for e in self.buckets)

    @property
    def labels(self) -> tuple[str, ...]:
        """The part's values in index order: categories, false/true, or "[lo, hi)" buckets."""
        if self.kind == "boolean":
            return ("false", "true")
        if self.kind == "categorical":
            return self.categories or ()
        text = [_edge_text(e) for e in self.edges]
        last = len(text) - 2
        return tuple(f"[{text[i]}, {text[i + 1]}{']' if i == last else ')'}" for i in range(last + 1))

    @property
    def midpoints(self) -> tuple[float, ...]:
        """Centre of each bucket of a numeric part (the value a mean per category uses)."""
        e = self.edges
        return tuple((e[i] + e[i + 1]) / 2 for i in range(len(e) - 1))

    def index(self, value: Any) -> int | None:
        """Index of a true value in this part, None when it is not in the domain (a numeric
        part takes a number, clipped to its range, or a bucket label)."""
        if self.kind == "boolean":
            if isinstance(value, bool) or type(value).__name__ == "bool_":
                return int(bool(value))
            if isinstance(value, int) and value in (0, 1):
                return int(value)
            if isinstance(value, str) and value.strip().lower() in ("false", "true"):
                return int(value.strip().lower() == "true")
            return None
        if self.kind == "categorical":
            try:
                return (self.categories or ()).index(value) if isinstance(value, str) else None
            except ValueError:
                return None
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            return None
        if isinstance(value, str) and value in self.labels:   # a bucket label ("[0, 500)")
            return self.labels.index(value)
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if not math.isfinite(x):
            return None
        edges = self.edges
        lo, hi = edges[0], edges[-1]
        x = lo if x < lo else hi if x > hi else x          # clipped, as numeric metrics are
        return min(bisect.bisect_right(edges, x) - 1, len(edges) - 2)

    def to_toml(self) -> dict[str, Any]:
        table: dict[str, Any] = {"name": self.name, "kind": self.kind}
        put_domain_fields(table, self.categories, self.range, self.buckets)
        if self.unit:
            table["unit"] = self.unit
        return table


@dataclasses.dataclass(frozen=True)
class JointDomain:
    """The product of a joint metric's parts: shape, labels and the tuple -> cell index map."""

    parts: tuple[JointPart, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(p.labels) for p in self.parts)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts)

    def labels(self) -> tuple[str, ...]:
        """Cell labels in row-major order (the last part varies fastest)."""
        out = [""]
        for part in self.parts:
            out = [f"{a}{SEPARATOR}{b}" if a else b for a in out for b in part.labels]
        return tuple(out)

    def cell(self, value: Any) -> int | None:
        """Row-major cell index of a tuple/list (in the parts' order) or a dict by part name;
        None when it does not name one value of every part."""
        if isinstance(value, Mapping):
            if set(value) != set(self.names):
                return None
            value = [value[n] for n in self.names]
        elif isinstance(value, str) and SEPARATOR in value:
            value = value.split(SEPARATOR)   # a cell label, as the CLI and CSV files write it
        if not isinstance(value, (tuple, list)) or len(value) != len(self.parts):
            return None
        idx = 0
        for part, v in zip(self.parts, value):
            i = part.index(v)
            if i is None:
                return None
            idx = idx * len(part.labels) + i
        return idx


def parse_parts(raw: Any, fail: Callable[[str, str | None], Exception]) -> tuple[JointPart, ...]:
    """Validate the ``of`` field of a joint metric; every error names the field (``of[1].buckets``)."""
    if not isinstance(raw, list) or not MIN_PARTS <= len(raw) <= MAX_PARTS:
        raise fail(f"a joint metric needs of = [ ... ] listing {MIN_PARTS} or {MAX_PARTS} parts, each a table "
                   "such as { name = \"os\", kind = \"categorical\", categories = [...] }", "of")
    parts = tuple(_parse_part(i, table, fail) for i, table in enumerate(raw))
    names = [p.name for p in parts]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise fail(f"part name {dup!r} appears more than once", "of")
    cells = math.prod(len(p.labels) for p in parts)
    if cells > MAX_JOINT_CELLS:
        raise fail(f"the parts make {cells:,} cells, above the {MAX_JOINT_CELLS:,} a joint metric may have; "
                   "use fewer categories or buckets", "of")
    return parts


def parts_from_tables(tables: Any) -> tuple[JointPart, ...]:
    """Parts from their TOML tables as ``to_toml`` writes them (a frame's ``joint_parts``);
    ValueError naming the field when they are not valid."""
    def fail(message: str, field: str | None = None) -> Exception:
        return ValueError(f"{field}: {message}")
    return parse_parts(tables, fail)


def _parse_part(pos: int, table: Any, fail: Callable[[str, str | None], Exception]) -> JointPart:
    where = f"of[{pos}]"
    if not isinstance(table, Mapping):
        raise fail("must be a table such as { name = \"os\", kind = \"categorical\", categories = [...] }", where)
    name = table.get("name")
    if not isinstance(name, str) or not PART_NAME.fullmatch(name):
        raise fail(f"{name!r} is not allowed; a part name starts with a letter and uses letters, digits "
                   "and '_' (at most 64)", f"{where}.name")
    kind = table.get("kind")
    if kind not in PART_KINDS:
        raise fail(f"{kind!r} is not allowed; use one of {', '.join(PART_KINDS)}", f"{where}.kind")
    unknown = sorted(set(table) - set(PART_KEYS[kind]))
    if unknown:
        raise fail(f"a {kind} part takes {', '.join(PART_KEYS[kind])}", f"{where}.{unknown[0]}")
    if kind == "boolean":
        return JointPart(name, kind)
    if kind == "categorical":
        cats = table.get("categories")
        field = f"{where}.categories"
        if not isinstance(cats, list) or len(cats) < 2 or not all(isinstance(c, str) and c for c in cats):
            raise fail("a categorical part needs a list of at least 2 non-empty strings", field)
        if len(set(cats)) != len(cats):
            raise fail(f"category {next(c for i, c in enumerate(cats) if c in cats[:i])!r} appears more "
                       "than once", field)
        bad = next((c for c in cats if SEPARATOR in c), None)
        if bad is not None:
            raise fail(f"category {bad!r} holds {SEPARATOR!r}, which joins the parts' labels", field)
        return JointPart(name, kind, categories=tuple(cats))
    return _parse_numeric_part(where, name, table, fail)


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _parse_numeric_part(where: str, name: str, table: Mapping[str, Any],
                        fail: Callable[[str, str | None], Exception]) -> JointPart:
    rng = table.get("range")
    if not isinstance(rng, list) or len(rng) != 2 or not all(_number(v) for v in rng) \
            or not float(rng[0]) < float(rng[1]) or max(abs(float(v)) for v in rng) > 1e100:
        raise fail(f"{rng!r} is not allowed; use range = [lo, hi] with lo < hi, finite (within ±1e100)",
                   f"{where}.range")
    lo, hi = float(rng[0]), float(rng[1])
    buckets = table.get("buckets")
    field = f"{where}.buckets"
    if isinstance(buckets, int) and not isinstance(buckets, bool):
        if not 2 <= buckets <= 1000:
            raise fail(f"{buckets} is not allowed; a numeric part needs 2 to 1000 buckets (an integer, "
                       "or a list of edges)", field)
        out: int | tuple[float, ...] = buckets
    elif isinstance(buckets, list) and all(_number(v) for v in buckets) and 3 <= len(buckets) <= 1001:
        if float(buckets[0]) != lo or float(buckets[-1]) != hi:
            raise fail("edges must span the range: the first is lo and the last hi", field)
        bad = next((i for i in range(1, len(buckets)) if not float(buckets[i - 1]) < float(buckets[i])), None)
        if bad is not None:
            raise fail(f"edges must increase: {buckets[bad - 1]} then {buckets[bad]} (position {bad})", field)
        out = tuple(buckets)
    else:
        raise fail(f"{buckets!r} is not allowed; a numeric part is bucketed: buckets = B (equal width) "
                   "or a list of increasing edges", field)
    unit = table.get("unit", "")
    if not isinstance(unit, str) or len(unit) > 32 or not unit.isprintable():
        raise fail("must be a short label such as \"ms\" (at most 32 printable characters)", f"{where}.unit")
    part = JointPart(name, "numeric", range=(rng[0], rng[1]), buckets=out, unit=unit)
    if len(set(part.edges)) != len(part.edges):
        raise fail(f"{buckets} equal-width buckets are too narrow for the range", field)
    return part
