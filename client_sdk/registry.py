"""The metric registry: a TOML file that SDK, collector, simulator and estimators all read.

```toml
[metrics.theme]
kind = "categorical"            # boolean | categorical | string
categories = ["light", "dark", "system"]
protocol = "auto"               # or rr, grr, oue, sue, olh, hr, ss, rappor, lgrr, losue, loloha, dbitflip
epsilon = 1.0
epsilon_inf = 4.0               # optional: memoise (L-protocols); epsilon is then one report's ε₁

[device]                        # optional: caps on the sum over all metrics (docs/privacy.md)
epsilon_per_window = 2.0
lifetime_epsilon = 50.0
```

Every metric gets a *fingerprint*: a hash of its canonical parameters. Reports and sketches
carry it, so data randomised under other parameters can never be mixed in. ``auto`` is
resolved at load time (deterministically), and the file dumps back exactly as written.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DomainError, RegistryError, UnknownMetricError
from .protocols import LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from .protocols.base import Protocol
from .protocols.factory import build_protocol, choose_longitudinal_protocol, choose_protocol, option_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,99}$")
COMMON_KEYS = ("kind", "protocol", "epsilon", "categories", "description",
               "reports_per_window", "lifetime_epsilon")
MAX_CATEGORIES = 10_000_000


class Kind(str, enum.Enum):
    """What a metric's values are."""

    BOOLEAN = "boolean"
    CATEGORICAL = "categorical"
    STRING = "string"


BOOLEAN_VALUES = ("false", "true")


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """One metric: its domain, protocol and budget, as declared (``requested_protocol``)
    and as resolved (``protocol``)."""

    name: str
    kind: Kind
    protocol: str
    requested_protocol: str
    epsilon: float | None
    categories: tuple[str, ...] | None = None
    options: tuple[tuple[str, Any], ...] = ()
    description: str = ""
    reports_per_window: int = 1
    lifetime_epsilon: float | None = None

    # --- domain -----------------------------------------------------------------------------
    @property
    def domain(self) -> tuple[str, ...] | None:
        """Domain values in index order (None for open-domain string metrics)."""
        if self.kind is Kind.BOOLEAN:
            return BOOLEAN_VALUES
        return self.categories

    @property
    def domain_size(self) -> int | None:
        dom = self.domain
        return None if dom is None else len(dom)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {v: i for i, v in enumerate(self.domain or ())}

    def index_of(self, values: Iterable[Any]) -> np.ndarray:
        """Map true values to 0-based indices; DomainError naming the metric otherwise."""
        out = []
        for pos, value in enumerate(values):
            key = canonical_value(self.kind, value)
            try:
                out.append(self._index[key])
            except KeyError:
                allowed = ", ".join(repr(v) for v in (self.domain or ())[:10])
                more = "" if (self.domain_size or 0) <= 10 else ", ..."
                raise DomainError(f"metric {self.name!r}: value {value!r} (position {pos}) is not "
                                  f"in the domain [{allowed}{more}]") from None
        return np.asarray(out, dtype=np.int64)

    # --- protocol -------------------------------------------------------------------------------
    @property
    def epsilon_inf(self) -> float | None:
        """ε∞ of a memoised metric (the ``epsilon_inf`` field), else None."""
        value = dict(self.options).get("epsilon_inf")
        return None if value is None else float(value)

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @functools.cached_property
    def protocol_impl(self) -> Protocol:
        """The protocol object (params resolved) shared by SDK, collector and estimators."""
        return build_protocol(self.protocol, self.domain_size, self.epsilon, self.options_dict)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Hash of the canonical parameters (32 hex chars)."""
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def canonical(self) -> dict[str, Any]:
        """The parameters that define what a report means (not descriptions or SDK limits).

        Besides what the file says, it holds the protocol's *resolved* parameters (defaults
        such as OLH's cohorts or RAPPOR's Bloom size filled in), so a version that changes a
        default can never share a fingerprint with an older one. (Only exact inputs go in: a
        value computed with libm could differ in its last bit between a phone and a server.)
        """
        resolved = dataclasses.asdict(self.protocol_impl.params)
        return {"name": self.name, "kind": self.kind.value, "protocol": self.protocol,
                "epsilon": self.epsilon, "categories": list(self.categories or []),
                "options": {k: v for k, v in self.options}, "resolved": resolved}

    def to_toml_table(self) -> dict[str, Any]:
        """The TOML table this spec was loaded from (dump side of the round trip)."""
        table: dict[str, Any] = {"kind": self.kind.value, "protocol": self.requested_protocol}
        if self.epsilon is not None:
            table["epsilon"] = self.epsilon
        if self.categories is not None:
            table["categories"] = list(self.categories)
        for key, value in self.options:
            table[key] = value
        if self.description:
            table["description"] = self.description
        if self.reports_per_window != 1:
            table["reports_per_window"] = self.reports_per_window
        if self.lifetime_epsilon is not None:
            table["lifetime_epsilon"] = self.lifetime_epsilon
        return table

    def to_json(self) -> dict[str, Any]:
        """What `GET /v1/registry` publishes for one metric."""
        proto = self.protocol_impl
        return {**self.to_toml_table(), "name": self.name, "resolved_protocol": self.protocol,
                "fingerprint": self.fingerprint, "epsilon_per_report": proto.epsilon,
                "epsilon_longitudinal": proto.epsilon_longitudinal}


def canonical_value(kind: Kind, value: Any) -> str:
    """The string key of a true value: booleans accept bool/0/1/'true'/'false'."""
    if kind is Kind.BOOLEAN:
        if isinstance(value, (bool, np.bool_)):
            return "true" if value else "false"
        if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
            return BOOLEAN_VALUES[int(value)]
        if isinstance(value, str) and value.strip().lower() in BOOLEAN_VALUES:
            return value.strip().lower()
        return repr(value)
    return value if isinstance(value, str) else str(value)


@dataclasses.dataclass(frozen=True)
class DeviceBudget:
    """The ``[device]`` table: caps on what the ledger charges summed over all metrics.

    ``epsilon_per_window``: the sum of the per-report epsilons charged in one window (a UTC
    day); ``lifetime_epsilon``: the sum of the lifetime charges (sequential composition).
    A report that would exceed either is refused and counted (client_sdk.ledger).
    """

    epsilon_per_window: float | None = None
    lifetime_epsilon: float | None = None

    def to_toml_table(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


DEVICE_KEYS = ("epsilon_per_window", "lifetime_epsilon")


def parse_device(table: Any, source: str = "<registry>") -> DeviceBudget:
    """Validate the optional ``[device]`` table."""
    if not isinstance(table, Mapping):
        raise RegistryError("[device] must be a table", source=source, field="device")
    unknown = set(table) - set(DEVICE_KEYS)
    if unknown:
        raise RegistryError(f"unknown key(s) {sorted(unknown)} in [device]; use {', '.join(DEVICE_KEYS)}",
                            source=source, field="device")
    values = {}
    for key in DEVICE_KEYS:
        value = table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise RegistryError(f"{value!r} is not allowed; use a positive number", source=source,
                                field=f"device.{key}")
        values[key] = None if value is None else float(value)
    return DeviceBudget(**values)


@dataclasses.dataclass(frozen=True)
class Registry:
    """All metrics of one TOML file, by name, and the optional device-wide budget."""

    metrics: Mapping[str, MetricSpec]
    source: str = "<registry>"
    device: DeviceBudget | None = None

    def get(self, name: str) -> MetricSpec:
        try:
            return self.metrics[name]
        except KeyError:
            known = ", ".join(sorted(self.metrics)) or "none"
            raise UnknownMetricError(f"{self.source}: unknown metric {name!r} (known: {known})") from None

    def by_fingerprint(self, fingerprint: str) -> MetricSpec | None:
        return next((m for m in self.metrics.values() if m.fingerprint == fingerprint), None)

    def __iter__(self):
        return iter(self.metrics.values())

    def __len__(self) -> int:
        return len(self.metrics)

    def to_toml(self) -> str:
        import tomli_w

        doc: dict[str, Any] = {"metrics": {n: m.to_toml_table() for n, m in self.metrics.items()}}
        if self.device is not None:
            doc["device"] = self.device.to_toml_table()
        return tomli_w.dumps(doc)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"metrics": [m.to_json() for m in self.metrics.values()]}
        if self.device is not None:
            doc["device"] = self.device.to_toml_table()
        return doc


def load_registry(path: str | Path) -> Registry:
    """Read and validate a registry TOML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read file: {exc}", source=str(path)) from None
    return parse_registry(text, source=str(path))


def parse_registry(data: str | Mapping[str, Any], source: str = "<registry>") -> Registry:
    """Validate a registry given as TOML text or an already parsed mapping."""
    if isinstance(data, str):
        try:
            data = tomllib.loads(data)
        except tomllib.TOMLDecodeError as exc:
            raise RegistryError(f"not valid TOML: {exc}", source=source) from None
    unknown_top = set(data) - {"metrics", "device"}
    if unknown_top:
        raise RegistryError(f"unknown top-level key(s) {sorted(unknown_top)}; only [metrics.NAME] "
                            "tables and [device] are allowed", source=source)
    tables = data.get("metrics")
    if not isinstance(tables, Mapping) or not tables:
        raise RegistryError("no metrics declared; add a [metrics.NAME] table", source=source)
    metrics = {name: parse_metric(name, table, source) for name, table in tables.items()}
    device = parse_device(data["device"], source) if "device" in data else None
    return Registry(metrics, source, device)


def parse_metric(name: str, table: Any, source: str = "<registry>") -> MetricSpec:
    """Validate one [metrics.NAME] table into a MetricSpec."""
    def fail(message: str, field: str | None = None) -> RegistryError:
        return RegistryError(message, source=source, metric=name, field=field)

    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):  # not match: $ allows a trailing \n
        raise fail("metric names start with a letter and use letters, digits, '_', '.', '-' "
                   "(at most 100 characters)")
    if not isinstance(table, Mapping):
        raise fail("must be a table of fields")

    kind_raw = table.get("kind")
    try:
        kind = Kind(kind_raw)
    except ValueError:
        raise fail(f"{kind_raw!r} is not allowed; use one of boolean, categorical, string",
                   "kind") from None

    requested = table.get("protocol", "auto")
    if requested != "auto" and requested not in PROTOCOL_NAMES and requested not in LONGITUDINAL_PROTOCOL_NAMES:
        names = ", ".join(PROTOCOL_NAMES + LONGITUDINAL_PROTOCOL_NAMES)
        raise fail(f"{requested!r} is not a protocol; use auto or one of {names}", "protocol")

    categories = None
    if kind is Kind.CATEGORICAL:
        cats = table.get("categories")
        if not isinstance(cats, list) or len(cats) < 2:
            raise fail("a categorical metric needs a list of at least 2 categories", "categories")
        if not all(isinstance(c, str) for c in cats):
            raise fail("categories must all be strings", "categories")
        if len(set(cats)) != len(cats):
            seen: set[str] = set()
            dup = next(c for c in cats if c in seen or seen.add(c))  # O(d), not O(d²) with count()
            raise fail(f"category {dup!r} appears more than once", "categories")
        if len(cats) > MAX_CATEGORIES:
            raise fail(f"at most {MAX_CATEGORIES} categories", "categories")
        categories = tuple(cats)
    elif "categories" in table:
        raise fail(f"only categorical metrics take categories (this one is {kind.value})", "categories")

    if kind is Kind.STRING:
        protocol = "rappor" if requested == "auto" else requested
        if protocol != "rappor":
            raise fail("string metrics use protocol rappor (or auto)", "protocol")
    else:
        d = 2 if kind is Kind.BOOLEAN else len(categories or ())
        if requested == "rappor":
            raise fail("rappor is for string metrics; use kind = \"string\"", "protocol")
        if requested == "rr" and d != 2:
            raise fail("rr is binary randomised response; it needs a boolean metric or 2 "
                       "categories (use grr for more)", "protocol")
        protocol = requested

    epsilon = table.get("epsilon")
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
                or not math.isfinite(epsilon) or not 0 < epsilon <= 20:
            raise fail(f"{epsilon!r} is not allowed; epsilon must be a number in (0, 20]", "epsilon")
        epsilon = float(epsilon)
    elif protocol != "rappor":
        raise fail("missing; set the per-report privacy budget, e.g. epsilon = 1.0", "epsilon")

    memoised = table.get("epsilon_inf") is not None
    if memoised and kind is Kind.STRING:
        raise fail("string metrics memoise with RAPPOR's permanent randomised response (its ε∞ "
                   "follows from prob_f); remove epsilon_inf", "epsilon_inf")
    if memoised and protocol != "auto" and protocol not in LONGITUDINAL_PROTOCOL_NAMES:
        raise fail(f"epsilon_inf turns on memoisation, which {protocol} does not do; use protocol "
                   f"auto or one of {', '.join(LONGITUDINAL_PROTOCOL_NAMES)}", "epsilon_inf")
    if protocol == "auto":
        try:
            protocol = choose_longitudinal_protocol(d, epsilon, table["epsilon_inf"]) if memoised \
                else choose_protocol(d, epsilon)
        except (ValueError, TypeError) as exc:
            raise fail(str(exc), "epsilon_inf" if memoised else "epsilon") from None

    allowed = option_keys(protocol)
    options = {}
    for key, value in table.items():
        if key in COMMON_KEYS:
            continue
        if key not in allowed:
            extra = f"; {protocol} takes {', '.join(sorted(allowed))}" if allowed else \
                f"; {protocol} takes no extra fields"
            raise fail(f"unknown field{extra}", key)
        options[key] = value

    description = table.get("description", "")
    if not isinstance(description, str):
        raise fail("must be a string", "description")
    rpw = table.get("reports_per_window", 1)
    if isinstance(rpw, bool) or not isinstance(rpw, int) or rpw < 1:
        raise fail(f"{rpw!r} is not allowed; use a positive integer", "reports_per_window")
    lifetime = table.get("lifetime_epsilon")
    if lifetime is not None and (isinstance(lifetime, bool) or not isinstance(lifetime, (int, float))
                                 or not math.isfinite(lifetime) or lifetime <= 0):
        raise fail(f"{lifetime!r} is not allowed; use a positive number", "lifetime_epsilon")

    spec = MetricSpec(name=name, kind=kind, protocol=protocol, requested_protocol=requested,
                      epsilon=epsilon, categories=categories,
                      options=tuple(sorted(options.items())), description=description,
                      reports_per_window=rpw,
                      lifetime_epsilon=None if lifetime is None else float(lifetime))
    try:
        spec.protocol_impl  # noqa: B018 - validates the protocol parameters now
    except (ValueError, TypeError) as exc:
        raise fail(f"invalid {protocol} parameters: {exc}", "protocol") from None
    return spec
