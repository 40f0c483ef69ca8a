"""Public dimensions: coarse attributes a device attaches *in clear* so estimates break down by them.

```toml
[dimensions]
min_reports = 1000              # a segment with fewer reports is suppressed (metric may override)

[dimensions.os]
values = ["android", "ios"]     # the closed set; anything else becomes "other"

[dimensions.app_version]
values = ["3", "4", "5"]
rule = "major"                  # "3.14.2" -> "3" before the lookup (or "minor": "3.14")

[metrics.crashed]
kind = "boolean"
dimensions = ["os", "app_version"]   # sketches per (window, os, app_version)
```

A dimension value is *not* randomised: the collector learns it for every batch. docs/privacy.md
("Public dimensions") says what that reveals and the limit ``ldpt metrics check`` enforces.
A device that sends no value for a dimension (an older SDK, or an app that never set it) counts
in the segment value ``unknown``; so every report of a metric lies in exactly one segment and
the total is the sum over segments.

Storage encodes a segment into the sketch key's metric column: ``crashed@os=android;app_version=3``
(``segment_key``). ``@``, ``=`` and ``;`` cannot occur in metric names or dimension values, so
the encoding is unambiguous and stores need no new column (docs/design.md, "Segments").
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import RegistryError

OTHER = "other"
UNKNOWN = "unknown"
#: Values a device may send for a dimension besides its closed set.
RESERVED_VALUES = (OTHER, UNKNOWN)
VALUE_PATTERN = re.compile(r"^[A-Za-z0-9_.+\-]{1,64}$")
DIMENSION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
RULES = ("exact", "major", "minor")
#: Registry default of ``min_reports`` (segments with fewer reports are suppressed).
DEFAULT_MIN_REPORTS = 1000
#: ``ldpt metrics check`` refuses a registry whose dimension combinations exceed this entropy.
DEFAULT_MAX_BITS = 10.0
MAX_VALUES = 256
SEGMENT_SEP = "@"


@dataclasses.dataclass(frozen=True)
class DimensionSpec:
    """One clear attribute: its closed set of values and how a raw value is bucketed into it."""

    name: str
    values: tuple[str, ...]
    rule: str = "exact"

    @property
    def domain(self) -> tuple[str, ...]:
        """Every value a segment may hold: the closed set, ``other`` and ``unknown``."""
        return self.values + RESERVED_VALUES

    def bucket(self, raw: Any) -> str:
        """The value the device sends for ``raw``: the rule applied, ``other`` outside the set."""
        text = str(raw).strip()
        if self.rule != "exact":
            parts = text.split(".")
            text = ".".join(parts[:1 if self.rule == "major" else 2])
        return text if text in self.values else OTHER

    def canonical(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values), "rule": self.rule}

    def to_toml_table(self) -> dict[str, Any]:
        table: dict[str, Any] = {"values": list(self.values)}
        if self.rule != "exact":
            table["rule"] = self.rule
        return table


@dataclasses.dataclass(frozen=True)
class DimensionTable:
    """The registry's ``[dimensions]`` table."""

    dimensions: Mapping[str, DimensionSpec]
    min_reports: int = DEFAULT_MIN_REPORTS
    max_bits: float = DEFAULT_MAX_BITS

    def to_toml_table(self) -> dict[str, Any]:
        table: dict[str, Any] = {}
        if self.min_reports != DEFAULT_MIN_REPORTS:
            table["min_reports"] = self.min_reports
        if self.max_bits != DEFAULT_MAX_BITS:
            table["max_bits"] = self.max_bits
        for name, spec in self.dimensions.items():
            table[name] = spec.to_toml_table()
        return table


def _positive_int(value: Any, fail: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(f"{value!r} is not allowed; use a positive integer", field)
    return value


def parse_dimensions(table: Any, source: str = "<registry>") -> DimensionTable:
    """Validate the ``[dimensions]`` table; errors name the file and the field."""
    def fail(message: str, field: str | None = None) -> RegistryError:
        return RegistryError(message, source=source, field=f"dimensions.{field}" if field else "dimensions")

    if not isinstance(table, Mapping):
        raise fail("must be a table")
    dims: dict[str, DimensionSpec] = {}
    min_reports, max_bits = DEFAULT_MIN_REPORTS, DEFAULT_MAX_BITS
    for name, sub in table.items():
        if name == "min_reports":
            min_reports = _positive_int(sub, fail, name)
            continue
        if name == "max_bits":
            if isinstance(sub, bool) or not isinstance(sub, (int, float)) or not math.isfinite(sub) or sub <= 0:
                raise fail(f"{sub!r} is not allowed; use a positive number of bits", name)
            max_bits = float(sub)
            continue
        if not DIMENSION_NAME.fullmatch(name):
            raise fail("dimension names are lower-case letters, digits and '_' (at most 40), "
                       "starting with a letter", name)
        dims[name] = _parse_one(name, sub, fail)
    return DimensionTable(dims, min_reports, max_bits)


def _parse_one(name: str, sub: Any, fail: Any) -> DimensionSpec:
    if not isinstance(sub, Mapping):
        raise fail("must be a table with values = [...]", name)
    unknown = set(sub) - {"values", "rule"}
    if unknown:
        raise fail(f"unknown field {sorted(unknown)[0]!r}; a dimension takes values and rule", name)
    values = sub.get("values")
    if not isinstance(values, list) or not values or len(values) > MAX_VALUES:
        raise fail(f"values must be a non-empty list of at most {MAX_VALUES} strings", f"{name}.values")
    for v in values:
        if not isinstance(v, str) or not VALUE_PATTERN.fullmatch(v) or v in RESERVED_VALUES:
            raise fail(f"{v!r} is not allowed: values use letters, digits, '_', '.', '+', '-' (at most "
                       f"64) and {OTHER!r}/{UNKNOWN!r} are reserved", f"{name}.values")
    if len(set(values)) != len(values):
        raise fail("values repeat", f"{name}.values")
    rule = sub.get("rule", "exact")
    if rule not in RULES:
        raise fail(f"{rule!r} is not allowed; use one of {', '.join(RULES)}", f"{name}.rule")
    return DimensionSpec(name, tuple(values), rule)


def parse_metric_dimensions(value: Any, table: DimensionTable | None, fail: Any) -> tuple[DimensionSpec, ...]:
    """A metric's ``dimensions = [...]`` field resolved against the ``[dimensions]`` table."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("must be a list of dimension names", "dimensions")
    if len(set(value)) != len(value):
        raise fail("a dimension is listed twice", "dimensions")
    known = {} if table is None else table.dimensions
    out = []
    for name in value:
        if name not in known:
            raise fail(f"unknown dimension {name!r} (declared in [dimensions]: "
                       f"{', '.join(sorted(known)) or 'none'})", "dimensions")
        out.append(known[name])
    return tuple(out)


# --- segments ---------------------------------------------------------------------------------
def segment_key(metric: str, dims: Sequence[DimensionSpec], values: Mapping[str, str]) -> str:
    """The store's metric column for a segment: ``metric@d1=v1;d2=v2`` in the metric's order."""
    return metric + SEGMENT_SEP + ";".join(f"{d.name}={values.get(d.name, UNKNOWN)}" for d in dims)


def split_segment_key(stored: str) -> tuple[str, dict[str, str] | None]:
    """Inverse of ``segment_key``: (metric, {dimension: value}) or (metric, None) for a total."""
    metric, sep, rest = stored.partition(SEGMENT_SEP)
    if not sep:
        return metric, None
    return metric, dict(part.split("=", 1) for part in rest.split(";") if "=" in part)


def combination_count(dims: Iterable[DimensionSpec]) -> int:
    """How many segments the dimensions can form (their domains' product)."""
    return math.prod(len(d.domain) for d in dims)


def combination_bits(dims: Iterable[DimensionSpec]) -> float:
    """log2 of the number of combinations: the most a device's clear values can say about it
    (the entropy of the combination under a uniform population; any other population has less)."""
    return math.log2(combination_count(dims))
