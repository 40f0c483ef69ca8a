"""The metric registry: a TOML file that SDK, collector, simulator and estimators all read.

```toml
[metrics.theme]
kind = "categorical"            # boolean | categorical | string | numeric
categories = ["light", "dark", "system"]
protocol = "auto"               # or rr, grr, oue, sue, olh, hr, ss, lgrr, losue, loloha, dbitflip
                                # (strings: rappor, or discover with max_length = 16 bytes)
epsilon = 1.0
max_report_bytes = 64           # optional: every report fits (default 8192); `auto` picks among those

[metrics.session_minutes]
kind = "numeric"                # a mean: values in [lo, hi], clipped on the device
range = [0, 120]
unit = "minutes"                # optional: shown beside estimates (not in the fingerprint)
protocol = "auto"               # or laplace, duchi, bitmean, piecewise, hybrid
epsilon = 1.0

[metrics.startup_ms]
kind = "numeric"                # a histogram: buckets = B equal-width, or a list of edges
range = [0, 5000]
buckets = [0, 250, 500, 1000, 2000, 5000]
epsilon = 2.0                   # protocol: a frequency oracle over the buckets, as categorical
epsilon_inf = 4.0               # optional: memoise (L-protocols); epsilon is then one report's ε₁

[device]                        # optional: caps on the sum over all metrics (docs/privacy.md)
epsilon_per_window = 2.0
lifetime_epsilon = 50.0
```

A numeric metric without ``buckets`` is a *mean* metric: the device maps x to
t = 2(x − lo)/(hi − lo) − 1 in [−1, 1] and reports it with a numeric mechanism
(client_sdk.protocols.numeric). With ``buckets`` it is a *histogram* metric whose domain is
the bucket labels "[lo, hi)" (the last one "[lo, hi]"); the device reports its bucket index
through a frequency oracle, exactly like a categorical metric.

A *joint* metric (``kind = "joint"``, ``of = [...]`` naming 2 or 3 parts: client_sdk.joint) is
a categorical metric over the product of its parts' domains: one report, one ε, per tuple.

Every metric gets a *fingerprint*: a hash of its canonical parameters. Reports and sketches
carry it, so data randomised under other parameters can never be mixed in. ``auto`` is
resolved at load time (deterministically), and the file dumps back exactly as written.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .domains import DomainSource, NumberedDomain, parse_declaration
from .errors import DomainError, RegistryError, UnknownMetricError
from .protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from .protocols.device import DeviceHalf, numpy_types
from .protocols.factory import (
    AUTO_STRING,
    DEFAULT_MAX_REPORT_BYTES,
    build_protocol,
    carries_joint,
    choose_longitudinal_protocol,
    choose_numeric_protocol,
    choose_protocol,
    domain_refusal,
    epsilon_optional,
    joint_protocols,
    option_keys,
    report_bytes,
    reports_strings,
)
from .protocols.numeric import NUMERIC_PROTOCOL_NAMES, linspace_list
from .window_charge import WindowCharges, cumulative_charges

if TYPE_CHECKING:  # these load with the first registry that needs them, not with the SDK
    from pathlib import Path

    from .dimensions import DimensionSpec, DimensionTable
    from .joint import JointDomain, JointPart

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,99}$")
COMMON_KEYS = ("kind", "protocol", "epsilon", "categories", "description",
               "reports_per_window", "lifetime_epsilon", "range", "buckets", "max_report_bytes", "unit", "of",
               "shuffle")
#: Values of ``shuffle`` (a metric's, or the whole registry's at the top of the file): "required"
#: means the collector accepts the metric's reports only through an authenticated shuffler
#: (docs/privacy.md, "The central claim of shuffled reports"). Not in the fingerprint: it says
#: how reports may travel, not what they mean.
SHUFFLE_VALUES = ("required", "optional")
#: Fields of a metric about its public dimensions (client_sdk/dimensions.py).
DIMENSION_KEYS = ("dimensions", "min_reports")
MAX_CATEGORIES = 10_000_000
#: Most buckets a histogram metric may declare (its domain goes through a frequency oracle).
MAX_BUCKETS = 10_000
#: Largest |lo| or |hi| of a numeric range: variances are in the metric's units squared and sums
#: are n times a mean, so ends beyond this would overflow a double (1e100² · n stays finite).
MAX_NUMERIC_MAGNITUDE = 1e100
#: Smallest hi − lo: below it (hi − lo)/2 and the variances in units squared underflow, and an
#: estimate would claim a zero standard error.
MIN_NUMERIC_WIDTH = 1e-100


class Kind(str, enum.Enum):
    """What a metric's values are."""

    BOOLEAN = "boolean"
    CATEGORICAL = "categorical"
    STRING = "string"
    NUMERIC = "numeric"
    JOINT = "joint"             # a tuple of 2-3 private parts (client_sdk.joint)


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
    #: numeric metrics: [lo, hi] as written in the file (ints stay ints for the round trip)
    range: tuple[float, float] | None = None
    #: histogram metrics: the ``buckets`` field as written (an int B or a tuple of edges)
    buckets: int | tuple[float, ...] | None = None
    #: report-size budget as written (None: DEFAULT_MAX_REPORT_BYTES); not in the fingerprint,
    #: since the resolved protocol already says what a report means
    max_report_bytes: int | None = None
    #: numeric metrics: the values' unit as shown beside estimates ("ms", "minutes"); a label,
    #: not in the fingerprint
    unit: str = ""
    #: public dimensions the metric is broken down by (in the fingerprint when any)
    dimensions: tuple[DimensionSpec, ...] = ()
    #: segments with fewer reports are suppressed (None: the [dimensions] table's default)
    min_reports: int | None = None
    #: joint metrics: the parts named by ``of`` (client_sdk.joint), else None
    parts: tuple[JointPart, ...] | None = None
    #: categorical metrics declared ``categories = {ids = N}`` or ``{file = ...}`` (client_sdk.domains)
    domain_source: DomainSource | None = None
    #: ``shuffle`` as written in the metric's table (SHUFFLE_VALUES), None when absent; not in the
    #: fingerprint
    shuffle: str | None = None
    #: whether reports must come through an authenticated shuffler: the metric's ``shuffle``, else
    #: the registry's (resolved when the registry is parsed)
    shuffle_required: bool = False

    @functools.cached_property
    def joint(self) -> JointDomain:
        """The product domain of a joint metric (TypeError for other kinds)."""
        if self.parts is None:
            raise TypeError(f"metric {self.name!r} is not a joint metric")
        from .joint import JointDomain

        return JointDomain(self.parts)

    # --- numeric values ------------------------------------------------------------------------
    @property
    def is_mean(self) -> bool:
        """A numeric metric without buckets: reported with a mean mechanism."""
        return self.kind is Kind.NUMERIC and self.buckets is None

    @property
    def is_histogram(self) -> bool:
        """A numeric metric with buckets: reported through a frequency oracle over buckets."""
        return self.kind is Kind.NUMERIC and self.buckets is not None

    @functools.cached_property
    def bounds(self) -> tuple[float, float]:
        """(lo, hi) as floats (numeric metrics only)."""
        if self.range is None:
            raise TypeError(f"metric {self.name!r} is not numeric")
        return float(self.range[0]), float(self.range[1])

    @functools.cached_property
    def edge_list(self) -> list[float]:
        """Bucket edges e_0 = lo < e_1 < ... < e_B = hi of a histogram metric, as floats (the SDK
        buckets values with them; sketches.metric_arrays.edge_array is the same numbers as a float64 array)."""
        if self.buckets is None:
            raise TypeError(f"metric {self.name!r} is not a histogram metric")
        lo, hi = self.bounds
        if isinstance(self.buckets, int):
            edges = linspace_list(lo, hi, self.buckets + 1)
            edges[0], edges[-1] = lo, hi
            return edges
        return [float(b) for b in self.buckets]

    def number(self, value: Any) -> float:
        """A reported value as a finite float; DomainError (naming the metric) otherwise.

        int, float and numpy numbers are numbers; bool is not (``True`` is no duration).
        """
        if isinstance(value, (bool, *numpy_types("bool_"))) or not isinstance(value, (int, float, *numpy_types("integer", "floating"))):
            raise DomainError(f"metric {self.name!r} takes numbers, got {type(value).__name__}")
        try:
            x = float(value)
        except OverflowError:
            raise DomainError(f"metric {self.name!r} takes finite numbers; this integer is beyond "
                              "the float range") from None
        if not math.isfinite(x):
            raise DomainError(f"metric {self.name!r} takes finite numbers, got {x!r}")
        return x

    @functools.cached_property
    def _bucket_labels(self) -> tuple[str, ...]:
        return bucket_labels(self.edge_list)

    # --- domain -----------------------------------------------------------------------------
    @property
    def domain(self) -> tuple[str, ...] | None:
        """Domain values in index order (None for open-domain string metrics)."""
        if self.kind is Kind.BOOLEAN:
            return BOOLEAN_VALUES
        if self.kind is Kind.NUMERIC:
            return self._bucket_labels if self.buckets is not None else None
        if self.kind is Kind.JOINT:
            return self._joint_labels
        return self.categories

    @functools.cached_property
    def _joint_labels(self) -> tuple[str, ...]:
        return self.joint.labels()

    @property
    def domain_size(self) -> int | None:
        dom = self.domain
        return None if dom is None else len(dom)

    @functools.cached_property
    def _index(self) -> Mapping[str, int]:
        """Value -> index (a numbered domain computes it instead of listing it)."""
        if isinstance(self.categories, NumberedDomain):
            return self.categories.index_map()  # type: ignore[return-value]
        return {v: i for i, v in enumerate(self.domain or ())}

    @property
    def domain_index(self) -> Mapping[str, int]:
        """The value -> index map of the domain (``dict.get`` and ``[]``), built once."""
        return self._index

    def indices(self, values: Iterable[Any]) -> list[int]:
        """True values as 0-based domain indices; DomainError naming the metric and the first
        value outside the domain otherwise (sketches.metric_arrays.index_of is the array)."""
        out = []
        for pos, value in enumerate(values):
            key = canonical_value(self.kind, value)
            try:
                out.append(self._index[key] if self.parts is None else _joint_cell(self.joint, value))
            except KeyError:
                allowed = ", ".join(repr(v) for v in (self.domain or ())[:10])
                more = "" if (self.domain_size or 0) <= 10 else ", ..."
                raise DomainError(f"metric {self.name!r}: value {value!r} (position {pos}) is not "
                                  f"in the domain [{allowed}{more}]") from None
        return out

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
    def protocol_impl(self) -> DeviceHalf:
        """The protocol object (params resolved) shared by SDK, collector and estimators."""
        return build_protocol(self.protocol, self.domain_size, self.epsilon, self.options_dict)

    @functools.cached_property
    def window_charges(self) -> WindowCharges | None:
        """What the ledger charges k reports of this metric in one window where that is more
        than k·ε₁ (L-GRR, LOLOHA: a GRR memo, reports_per_window > 1), else None (client_sdk.window_charge)."""
        return cumulative_charges(self.protocol_impl, self.reports_per_window)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Hash of the canonical parameters (32 hex chars)."""
        import json  # here, like every SDK module's json: not needed by the import (docs/benchmarks.md)

        canonical = self.canonical()
        listed = self.domain_source is not None and isinstance(canonical.get("categories"), list)
        if listed:   # a domain file: its values' JSON written at C speed when they need no escapes
            values_json = json_string_list(canonical["categories"])
            if values_json is not None:
                canonical["categories"] = _PLACEHOLDER
                blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
                blob = blob.replace(json.dumps(_PLACEHOLDER), values_json, 1)
                return hashlib.sha256(blob.encode()).hexdigest()[:32]
        blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def canonical(self) -> dict[str, Any]:
        """The parameters that define what a report means (not descriptions or SDK limits).

        Besides what the file says, it holds the protocol's *resolved* parameters (defaults
        such as OLH's cohorts or RAPPOR's Bloom size filled in), so a version that changes a
        default can never share a fingerprint with an older one. (Only exact inputs go in: a
        value computed with libm could differ in its last bit between a phone and a server.)
        """
        resolved = dataclasses.asdict(self.protocol_impl.params)
        # a file domain hashes its values, as the same list inline would; a numbered one {"ids": d}
        categories: Any = self.domain_source.declaration() \
            if self.domain_source is not None and isinstance(self.categories, NumberedDomain) \
            else list(self.categories or [])
        out = {"name": self.name, "kind": self.kind.value, "protocol": self.protocol,
               "epsilon": self.epsilon, "categories": categories,
               "options": {k: v for k, v in self.options}, "resolved": resolved}
        if self.kind is Kind.NUMERIC:  # only here: other kinds keep their fingerprints
            out["range"] = list(self.bounds)
            out["buckets"] = None if self.buckets is None else list(self.edge_list)
        if self.parts is not None:
            out["of"] = [p.to_toml() for p in self.parts]
        if self.dimensions:  # only then: metrics without dimensions keep their fingerprints
            out["dimensions"] = [d.canonical() for d in self.dimensions]
        return out

    def to_toml_table(self) -> dict[str, Any]:
        """The TOML table this spec was loaded from (dump side of the round trip)."""
        from .joint import put_domain_fields

        table: dict[str, Any] = {"kind": self.kind.value, "protocol": self.requested_protocol}
        if self.epsilon is not None:
            table["epsilon"] = self.epsilon
        put_domain_fields(table, None if self.domain_source is not None else self.categories, self.range,
                          self.buckets)
        if self.domain_source is not None:
            table["categories"] = self.domain_source.declaration()
        if self.parts is not None:
            table["of"] = [p.to_toml() for p in self.parts]
        for key, value in self.options:
            table[key] = value
        if self.description:
            table["description"] = self.description
        if self.reports_per_window != 1:
            table["reports_per_window"] = self.reports_per_window
        if self.lifetime_epsilon is not None:
            table["lifetime_epsilon"] = self.lifetime_epsilon
        if self.max_report_bytes is not None:
            table["max_report_bytes"] = self.max_report_bytes
        if self.unit:
            table["unit"] = self.unit
        if self.dimensions:
            table["dimensions"] = [d.name for d in self.dimensions]
        if self.min_reports is not None:
            table["min_reports"] = self.min_reports
        if self.shuffle is not None:
            table["shuffle"] = self.shuffle
        return table

    def to_json(self) -> dict[str, Any]:
        """What `GET /v1/registry` publishes for one metric (``encoder``: the resolved integers an
        SDK in another language encodes from, client_sdk.encoder_block)."""
        from .encoder_block import encoder_block  # here: publishing, not a device's start-up

        proto = self.protocol_impl
        table = self.to_toml_table()
        if self.domain_source is not None:   # never the values: SDKs fetch a file's list apart
            table["categories"] = self.domain_source.published()
        return {**table, "name": self.name, "resolved_protocol": self.protocol,
                "fingerprint": self.fingerprint, "epsilon_per_report": proto.epsilon,
                "epsilon_longitudinal": proto.epsilon_longitudinal, "encoder": encoder_block(self)}


#: Stands for a long list of values in the canonical JSON while the rest is dumped (``fingerprint``).
_PLACEHOLDER = "\x00values\x00"
#: Bytes ``json.dumps`` writes as they are: printable ASCII but the backslash (and the quote,
#: which ``json_string_list`` counts instead).
_JSON_PLAIN = bytes(b for b in range(0x20, 0x7F) if b != 0x5C)


def json_string_list(values: Sequence[str]) -> str | None:
    """``json.dumps(values, separators=(",", ":"))`` when no value needs an escape (then it is the
    plain join, ~10x faster for 10^6 values), else None."""
    joined = '","'.join(values)
    if not joined.isascii() or joined.encode("ascii").translate(None, _JSON_PLAIN) \
            or joined.count('"') != 2 * max(len(values) - 1, 0):
        return None
    return f'["{joined}"]' if values else "[]"


def _edge_text(x: float) -> str:
    """An edge as a label writes it: integers without '.0', other floats by repr (exact)."""
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(float(x))


def bucket_labels(edges: Sequence[float]) -> tuple[str, ...]:
    """"[lo, hi)" per bucket, the last one "[lo, hi]" (it includes the range's top)."""
    text = [_edge_text(float(e)) for e in edges]
    last = len(text) - 2
    return tuple(f"[{text[i]}, {text[i + 1]}{']' if i == last else ')'}" for i in range(last + 1))


def _joint_cell(joint: JointDomain, value: Any) -> int:
    cell = joint.cell(value)
    if cell is None:
        raise KeyError(value)
    return cell


def canonical_value(kind: Kind, value: Any) -> str:
    """The string key of a true value: booleans accept bool/0/1/'true'/'false'."""
    if kind is Kind.BOOLEAN:
        if isinstance(value, (bool, *numpy_types("bool_"))):
            return "true" if value else "false"
        if isinstance(value, (int, *numpy_types("integer"))) and int(value) in (0, 1):
            return BOOLEAN_VALUES[int(value)]
        if isinstance(value, str) and value.strip().lower() in BOOLEAN_VALUES:
            return value.strip().lower()
        return repr(value)
    return value if isinstance(value, str) else str(value)


# A NamedTuple rather than a frozen dataclass: alike for its users, without the methods a dataclass
# compiles as its module loads (~0.6 ms of every process that loads a registry: issue 32).
class DeviceBudget(NamedTuple):
    """The ``[device]`` table: caps on what the ledger charges summed over all metrics.

    ``epsilon_per_window``: the sum of the per-report epsilons charged in one window (a UTC
    day); ``lifetime_epsilon``: the sum of the lifetime charges (sequential composition).
    A report that would exceed either is refused and counted (client_sdk.ledger).
    """

    epsilon_per_window: float | None = None
    lifetime_epsilon: float | None = None

    def to_toml_table(self) -> dict[str, float]:
        return {k: v for k, v in self._asdict().items() if v is not None}


DEVICE_KEYS = ("epsilon_per_window", "lifetime_epsilon")


def parse_device(table: Any, source: str = "<registry>") -> DeviceBudget:
    """Validate the optional ``[device]`` table."""
    if not isinstance(table, Mapping):
        raise RegistryError("[device] must be a table", source=source, field="device")
    unknown = set(table) - set(DEVICE_KEYS)
    if unknown:
        guess = did_you_mean(str(sorted(unknown)[0]), DEVICE_KEYS)
        raise RegistryError(f"unknown key(s) {sorted(unknown)} in [device]; use {', '.join(DEVICE_KEYS)}"
                            + (f" (did you mean {guess!r}?)" if guess else ""), source=source, field="device")
    values = {}
    for key in DEVICE_KEYS:
        value = table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise RegistryError(f"{value!r} is not allowed; use a positive number", source=source,
                                field=f"device.{key}")
        values[key] = None if value is None else float(value)
    return DeviceBudget(**values)


class PublishedMetric(NamedTuple):
    """What ``GET /v1/registry`` publishes for one metric besides its table, as the SDK keeps it."""

    #: the ``encoder`` block, checked (client_sdk.encoder_block.check_block): what the SDK encodes from
    encoder: Mapping[str, Any]
    fingerprint: str
    #: ``epsilon_per_report`` and ``epsilon_longitudinal``: what the ledger charges
    epsilon: float
    epsilon_longitudinal: float | None
    #: True when this SDK re-derived the metric from its parameters and found the same fingerprint
    #: and block (the default); False for a compiled registry read with ``rederive=False``, whose
    #: pinned fingerprints vouch for it
    derived: bool = True


@dataclasses.dataclass(frozen=True)
class Registry:
    """All metrics of one TOML file, by name, and the optional device-wide budget."""

    metrics: Mapping[str, MetricSpec]
    source: str = "<registry>"
    device: DeviceBudget | None = None
    dimension_table: DimensionTable | None = None
    #: the top-level ``shuffle`` (SHUFFLE_VALUES): every metric's default
    shuffle: str | None = None
    #: a published registry (client_sdk.remote.registry_from_json): per metric, its checked encoder
    #: block, which the SDK encodes from, and its published constants; None for a TOML registry,
    #: whose metrics encode from the block their own device halves derive
    published: Mapping[str, PublishedMetric] | None = None

    def segment_min_reports(self, spec: MetricSpec) -> int:
        """Fewest reports a segment of ``spec`` needs to be shown (per metric, else the table's)."""
        if spec.min_reports is not None:
            return spec.min_reports
        return self.dimension_table.min_reports if self.dimension_table is not None else 1000

    def get(self, name: str) -> MetricSpec:
        try:
            return self.metrics[name]
        except KeyError:
            known = ", ".join(sorted(self.metrics)) or "none"
            raise UnknownMetricError(f"{self.source}: unknown metric {name!r} (known: {known})") from None

    def __iter__(self):
        return iter(self.metrics.values())

    def __len__(self) -> int:
        return len(self.metrics)

    def to_toml(self) -> str:
        import tomli_w

        doc: dict[str, Any] = {} if self.shuffle is None else {"shuffle": self.shuffle}
        doc["metrics"] = {n: m.to_toml_table() for n, m in self.metrics.items()}
        if self.device is not None:
            doc["device"] = self.device.to_toml_table()
        if self.dimension_table is not None:
            doc["dimensions"] = self.dimension_table.to_toml_table()
        return tomli_w.dumps(doc)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"metrics": [m.to_json() for m in self.metrics.values()]}
        if self.shuffle is not None:
            doc["shuffle"] = self.shuffle
        if self.device is not None:
            doc["device"] = self.device.to_toml_table()
        if self.dimension_table is not None:
            doc["dimensions"] = self.dimension_table.to_toml_table()
        return doc


def load_registry(path: str | Path) -> Registry:
    """Read and validate a registry TOML file."""
    from pathlib import Path  # here: not on the SDK's import

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read file: {exc}", source=str(path)) from None
    return parse_registry(text, source=str(path), base_dir=path.parent)


def parse_registry(data: str | Mapping[str, Any], source: str = "<registry>",
                   base_dir: Path | None = None) -> Registry:
    """Validate a registry given as TOML text or an already parsed mapping (``base_dir``: where
    ``categories = {file = ...}`` files are; the registry file's directory)."""
    if isinstance(data, str):
        # imported here: `from client_sdk import TelemetryClient` and registries given as
        # mappings (the collector's JSON) never parse TOML (2-3 ms of start-up)
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            data = tomllib.loads(data)
        except tomllib.TOMLDecodeError as exc:
            raise RegistryError(f"not valid TOML: {exc}", source=source) from None
    unknown_top = set(data) - {"metrics", "device", "dimensions", "shuffle"}
    if unknown_top:
        guess = did_you_mean(str(sorted(unknown_top)[0]), ("metrics", "device", "dimensions", "shuffle"))
        raise RegistryError(f"unknown top-level key(s) {sorted(unknown_top)}; only [metrics.NAME] "
                            "tables, [device], [dimensions] and shuffle are allowed"
                            + (f" (did you mean [{guess}]?)" if guess else ""), source=source)
    shuffle = parse_shuffle(data.get("shuffle"), lambda message: RegistryError(message, source=source,
                                                                                field="shuffle"))
    dims = None
    if "dimensions" in data:
        from .dimensions import parse_dimensions  # here: a registry without [dimensions] never loads it

        dims = parse_dimensions(data["dimensions"], source)
    tables = data.get("metrics")
    if not isinstance(tables, Mapping) or not tables:
        raise RegistryError("no metrics declared; add a [metrics.NAME] table", source=source)
    metrics = {name: parse_metric(name, table, source, dims, base_dir) for name, table in tables.items()}
    device = parse_device(data["device"], source) if "device" in data else None
    if device is not None:
        check_device_fits_one_report(metrics, device, source)
    metrics = {name: _with_shuffle(spec, shuffle) for name, spec in metrics.items()}
    return Registry(metrics, source, device, dims, shuffle)


def parse_shuffle(value: Any, fail: Any) -> str | None:
    """A ``shuffle`` field (SHUFFLE_VALUES), None when absent."""
    if value is None or value in SHUFFLE_VALUES:
        return value
    raise fail(f"{value!r} is not allowed; use shuffle = \"required\" (reports only through an "
               "authenticated shuffler) or \"optional\"")


def _with_shuffle(spec: MetricSpec, default: str | None) -> MetricSpec:
    required = (spec.shuffle or default) == "required"
    return dataclasses.replace(spec, shuffle_required=True) if required else spec


def _memoised(impl: DeviceHalf) -> bool:
    return getattr(impl, "epsilon_longitudinal", None) is not None


def first_lifetime_charge(impl: DeviceHalf) -> float:
    """What the ledger charges a device's lifetime for its first report: ε, or ε∞ when memoised."""
    return float(impl.epsilon_longitudinal if _memoised(impl) else impl.epsilon)  # type: ignore[attr-defined]


def _exceeds(charge: float, budget: float) -> bool:
    return charge > budget * (1 + 1e-9)  # realised epsilons are quantised floats (the ledger's slack)


def check_device_fits_one_report(metrics: Mapping[str, MetricSpec], device: DeviceBudget,
                                 source: str) -> None:
    """A [device] cap below one report of some metric would make the ledger refuse all its reports."""
    for spec in metrics.values():
        impl = spec.protocol_impl
        for key, cap, charge in (("epsilon_per_window", device.epsilon_per_window, float(impl.epsilon)),
                                 ("lifetime_epsilon", device.lifetime_epsilon, first_lifetime_charge(impl))):
            if cap is not None and _exceeds(charge, cap):
                raise RegistryError(f"{cap:g} is below the {charge:.4g} one report of {spec.name!r} costs: "
                                    f"metric {spec.name!r} could never report; raise the cap",
                                    source=source, field=f"device.{key}")


def parse_metric(name: str, table: Any, source: str = "<registry>",
                 dimensions: DimensionTable | None = None, base_dir: Path | None = None,
                 derive: bool = True) -> MetricSpec:
    """Validate one [metrics.NAME] table into a MetricSpec (one validator per field below).

    ``derive=False`` (a compiled registry whose pinned fingerprints vouch for it,
    client_sdk.remote.registry_from_json) validates the fields but builds no protocol: the checks
    that need its derived parameters (report size, a lifetime below one report) were the
    publisher's, and the start-up searches of the numeric mechanisms are skipped."""
    spec = _MetricParser(name, table, source, base_dir).spec(derive)
    return _with_dimensions(spec, table, dimensions, source)


def _with_dimensions(spec: MetricSpec, table: Mapping[str, Any], dimensions: DimensionTable | None,
                     source: str) -> MetricSpec:
    """The metric's ``dimensions`` and ``min_reports`` fields (client_sdk/dimensions.py)."""
    def fail(message: str, field: str) -> RegistryError:
        return RegistryError(message, source=source, metric=spec.name, field=field)

    dims: tuple[DimensionSpec, ...] = ()
    if table.get("dimensions") is not None:
        from .dimensions import parse_metric_dimensions  # here: a metric without dimensions never loads it

        dims = parse_metric_dimensions(table["dimensions"], dimensions, fail)
    min_reports = table.get("min_reports")
    if min_reports is not None and (isinstance(min_reports, bool) or not isinstance(min_reports, int)
                                    or min_reports < 1):
        raise fail(f"{min_reports!r} is not allowed; use a positive integer", "min_reports")
    if not dims and min_reports is None:
        return spec
    return dataclasses.replace(spec, dimensions=dims, min_reports=min_reports)


class _MetricParser:
    """The validators of one [metrics.NAME] table, each raising a RegistryError naming its field."""

    def __init__(self, name: Any, table: Any, source: str, base_dir: Path | None = None) -> None:
        self.name, self.table, self.source, self.base_dir = name, table, source, base_dir
        self.domain_source: DomainSource | None = None

    def fail(self, message: str, field: str | None = None) -> RegistryError:
        return RegistryError(message, source=self.source, metric=self.name, field=field)

    def spec(self, derive: bool = True) -> MetricSpec:
        self.check_name_and_table()
        kind = self.kind()
        value_range, buckets = _parse_numeric_fields(kind, self.table, self.fail)
        mean_metric = kind is Kind.NUMERIC and buckets is None
        requested = self.requested_protocol(mean_metric)
        categories = self.categories(kind)
        parts = self.parts(kind)
        d = None if kind is Kind.STRING or mean_metric else \
            2 if kind is Kind.BOOLEAN else len(categories) if categories is not None else \
            math.prod(len(p.labels) for p in parts) if parts is not None else _bucket_count(buckets)
        protocol = self.declared_protocol(kind, requested, d)
        epsilon = self.epsilon(protocol)
        protocol = self.resolved_protocol(kind, protocol, mean_metric, d, epsilon)
        lifetime = self.lifetime_epsilon()
        max_bytes = self.max_report_bytes()
        spec = MetricSpec(name=self.name, kind=kind, protocol=protocol, requested_protocol=requested,
                          epsilon=epsilon, categories=categories,
                          options=tuple(sorted(self.options(protocol).items())),
                          description=self.description(),
                          reports_per_window=self.reports_per_window(),
                          lifetime_epsilon=None if lifetime is None else float(lifetime),
                          range=value_range, buckets=buckets, max_report_bytes=max_bytes,
                          unit=self.unit(kind), parts=parts, domain_source=self.domain_source,
                          shuffle=parse_shuffle(self.table.get("shuffle"), lambda m: self.fail(m, "shuffle")))
        if not derive:
            return spec
        try:
            size = report_bytes(spec.protocol_impl)  # also validates the protocol parameters now
        except (ValueError, TypeError) as exc:
            raise self.fail(f"invalid {protocol} parameters: {exc}", "protocol") from None
        budget = DEFAULT_MAX_REPORT_BYTES if max_bytes is None else max_bytes
        if size > budget:   # every protocol, explicit or chosen by `auto`, and the default budget too
            # only a frequency metric's `auto` respects the budget (strings' auto is rappor)
            hint = "use protocol = \"auto\" or raise max_report_bytes" \
                if requested != "auto" and kind is not Kind.STRING and not mean_metric else \
                "raise max_report_bytes or lower the protocol's size parameters (docs/protocols.md, \"Report size\")"
            which = f"max_report_bytes = {budget:,}" + (" (the default)" if max_bytes is None else "")
            raise self.fail(f"a {protocol} report takes {size:,} bytes, above {which}; {hint}",
                            "max_report_bytes")
        if lifetime is not None:
            self.check_lifetime_fits_one_report(spec.protocol_impl, float(lifetime))
        return spec

    def check_lifetime_fits_one_report(self, impl: DeviceHalf, lifetime: float) -> None:
        """A lifetime budget below one report's charge would make the ledger refuse every report."""
        first = first_lifetime_charge(impl)
        if _exceeds(first, lifetime):
            what = "ε∞, charged for each new value" if _memoised(impl) else "epsilon per report"
            raise self.fail(f"{lifetime:g} is below the {first:.4g} one report costs ({what}): every report "
                            "would be refused; raise it or leave it out", "lifetime_epsilon")

    def check_name_and_table(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):  # not match: $ allows \n
            raise self.fail("metric names start with a letter and use letters, digits, '_', '.', '-' "
                            "(at most 100 characters)")
        if not isinstance(self.table, Mapping):
            raise self.fail("must be a table of fields")
        # a misspelt common field (categores) would otherwise be reported as the field it meant,
        # missing; a protocol's own fields are checked, with suggestions, in options()
        requested = self.table.get("protocol")
        own = option_keys(requested) if isinstance(requested, str) and requested in _NAMED_PROTOCOLS else ()
        for key in self.table:
            if key not in COMMON_KEYS and key not in DIMENSION_KEYS and key not in own:
                guess = did_you_mean(str(key), (*COMMON_KEYS, *DIMENSION_KEYS, "epsilon_inf"))
                if guess and guess not in self.table:
                    raise self.fail(f"unknown field; did you mean {guess!r}?", key)

    def kind(self) -> Kind:
        kind_raw = self.table.get("kind")
        try:
            return Kind(kind_raw)
        except ValueError:
            raise self.fail(f"{kind_raw!r} is not allowed; use one of boolean, categorical, string, numeric, "
                            "joint",
                            "kind") from None

    def requested_protocol(self, mean_metric: bool) -> str:
        """The `protocol` field as written: auto or a name this kind of metric can use."""
        requested = self.table.get("protocol", "auto")
        frequency = PROTOCOL_NAMES + LONGITUDINAL_PROTOCOL_NAMES
        numeric = NUMERIC_PROTOCOL_NAMES + LONGITUDINAL_NUMERIC_NAMES
        names = numeric if mean_metric else frequency
        if requested != "auto" and requested not in names:
            what = "a numeric mean mechanism" if mean_metric else "a protocol"
            hint = ("; a histogram metric (buckets set) uses a frequency oracle"
                    if mean_metric and requested in frequency else
                    "; numeric mechanisms are for numeric metrics without buckets"
                    if requested in numeric else "")
            raise self.fail(f"{requested!r} is not {what}; use auto or one of {', '.join(names)}{hint}",
                            "protocol")
        return requested

    def categories(self, kind: Kind) -> Sequence[str] | None:
        if kind is not Kind.CATEGORICAL:
            if "categories" in self.table:
                raise self.fail(f"only categorical metrics take categories (this one is {kind.value})",
                                "categories")
            return None
        cats = self.table.get("categories")
        if isinstance(cats, Mapping):   # {ids = N} or {file = "..."} (client_sdk.domains)
            values, self.domain_source = parse_declaration(dict(cats), self.base_dir,
                                                           lambda msg: self.fail(msg, "categories"))
            if len(values) < 2:
                raise self.fail("a categorical metric needs at least 2 categories", "categories")
            if len(values) > MAX_CATEGORIES:
                raise self.fail(f"at most {MAX_CATEGORIES} categories", "categories")
            return values
        if not isinstance(cats, list) or len(cats) < 2:
            raise self.fail("a categorical metric needs a list of at least 2 categories", "categories")
        if not all(isinstance(c, str) for c in cats):
            raise self.fail("categories must all be strings", "categories")
        if len(set(cats)) != len(cats):
            seen: set[str] = set()
            dup = next(c for c in cats if c in seen or seen.add(c))  # O(d), not O(d²) with count()
            raise self.fail(f"category {dup!r} appears more than once", "categories")
        if len(cats) > MAX_CATEGORIES:
            raise self.fail(f"at most {MAX_CATEGORIES} categories", "categories")
        return tuple(cats)

    def parts(self, kind: Kind) -> tuple[JointPart, ...] | None:
        """The ``of`` field of a joint metric (client_sdk.joint.parse_parts); others may not have it."""
        if kind is not Kind.JOINT:
            if "of" in self.table:
                raise self.fail(f"only joint metrics take of (this one is {kind.value})", "of")
            return None
        from .joint import parse_parts

        return parse_parts(self.table.get("of"), self.fail)

    def declared_protocol(self, kind: Kind, requested: str, d: int | None) -> str:
        """The protocol before `auto` is resolved, checked against the metric's kind and domain."""
        if kind is Kind.JOINT and requested != "auto" and not carries_joint(requested):
            raise self.fail(f"a joint metric uses auto or one of {', '.join(joint_protocols())} (their count "
                            "estimates' covariance is known: docs/math.md, \"Joint reports\")", "protocol")
        if kind is Kind.STRING:
            protocol = AUTO_STRING if requested == "auto" else requested
            if not reports_strings(protocol):
                raise self.fail("string metrics use protocol rappor (decode a candidate list; or auto) or "
                                "discover (find the frequent strings without one)", "protocol")
            return protocol
        if requested == "auto":
            return requested
        if reports_strings(requested):
            raise self.fail(f"{requested} is for string metrics; use kind = \"string\"", "protocol")
        refusal = domain_refusal(requested, d)
        if refusal is not None:
            raise self.fail(refusal, "protocol")
        return requested

    def epsilon(self, protocol: str) -> float | None:
        epsilon = self.table.get("epsilon")
        if epsilon is None:
            if protocol == "auto" or not epsilon_optional(protocol):
                raise self.fail("missing; set the per-report privacy budget, e.g. epsilon = 1.0", "epsilon")
            return None
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
                or not math.isfinite(epsilon) or not 0 < epsilon <= 20:
            raise self.fail(f"{epsilon!r} is not allowed; epsilon must be a number in (0, 20]", "epsilon")
        return float(epsilon)

    def resolved_protocol(self, kind: Kind, protocol: str, mean_metric: bool, d: int | None,
                          epsilon: float | None) -> str:
        """`auto` resolved (memoised, numeric or frequency oracle); epsilon_inf checked."""
        memoised = self.table.get("epsilon_inf") is not None
        if memoised and kind is Kind.JOINT:
            raise self.fail("joint metrics are not memoised; remove epsilon_inf", "epsilon_inf")
        if memoised and kind is Kind.STRING:
            raise self.fail("string metrics memoise with RAPPOR's permanent randomised response (its ε∞ "
                            "follows from prob_f); remove epsilon_inf", "epsilon_inf")
        memo_names = LONGITUDINAL_NUMERIC_NAMES if mean_metric else LONGITUDINAL_PROTOCOL_NAMES
        if memoised and protocol != "auto" and protocol not in memo_names:
            raise self.fail(f"epsilon_inf turns on memoisation, which {protocol} does not do; use protocol "
                            f"auto or one of {', '.join(memo_names)}", "epsilon_inf")
        if protocol != "auto":
            return protocol
        max_bytes = self.max_report_bytes()
        budget = DEFAULT_MAX_REPORT_BYTES if max_bytes is None else max_bytes
        try:
            if memoised:
                return "memobitmean" if mean_metric else \
                    choose_longitudinal_protocol(d, epsilon, self.table["epsilon_inf"], budget)
            if mean_metric:
                return choose_numeric_protocol(epsilon, {k: self.table[k] for k in ("grid",) if k in self.table})
            return choose_protocol(d, epsilon, budget, joint_protocols() if kind is Kind.JOINT else None)
        except (ValueError, TypeError) as exc:
            field = "max_report_bytes" if "max_report_bytes" in str(exc) else \
                "epsilon_inf" if memoised else "epsilon"
            raise self.fail(str(exc), field) from None

    def max_report_bytes(self) -> int | None:
        """The report-size budget of every protocol, and the one `auto` chooses within
        (None: DEFAULT_MAX_REPORT_BYTES)."""
        max_bytes = self.table.get("max_report_bytes")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes < 1):
            raise self.fail(f"{max_bytes!r} is not allowed; use a positive integer number of bytes",
                            "max_report_bytes")
        return max_bytes

    def options(self, protocol: str) -> dict[str, Any]:
        """The fields the protocol module takes (OPTION_KEYS); any other unknown field is an error."""
        allowed = option_keys(protocol)
        options = {}
        for key, value in self.table.items():
            if key in COMMON_KEYS or key in DIMENSION_KEYS:
                continue
            if key not in allowed:
                extra = f"; {protocol} takes {', '.join(sorted(allowed))}" if allowed else \
                    f"; {protocol} takes no extra fields"
                guess = did_you_mean(str(key), {*allowed, *COMMON_KEYS, *DIMENSION_KEYS})
                raise self.fail(f"unknown field{extra}" + (f"; did you mean {guess!r}?" if guess else ""), key)
            options[key] = value
        return options

    def description(self) -> str:
        description = self.table.get("description", "")
        if not isinstance(description, str):
            raise self.fail("must be a string", "description")
        return description

    def unit(self, kind: Kind) -> str:
        unit = self.table.get("unit", "")
        if unit and kind is not Kind.NUMERIC:
            raise self.fail(f"only numeric metrics take unit (this one is {kind.value})", "unit")
        if not isinstance(unit, str) or len(unit) > 32 or not unit.isprintable():
            raise self.fail("must be a short label such as \"ms\" (at most 32 printable characters)", "unit")
        return unit

    def reports_per_window(self) -> int:
        rpw = self.table.get("reports_per_window", 1)
        if isinstance(rpw, bool) or not isinstance(rpw, int) or rpw < 1:
            raise self.fail(f"{rpw!r} is not allowed; use a positive integer", "reports_per_window")
        return rpw

    def lifetime_epsilon(self) -> float | None:
        lifetime = self.table.get("lifetime_epsilon")
        if lifetime is not None and (isinstance(lifetime, bool) or not isinstance(lifetime, (int, float))
                                     or not math.isfinite(lifetime) or lifetime <= 0):
            raise self.fail(f"{lifetime!r} is not allowed; use a positive number", "lifetime_epsilon")
        return lifetime


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """The known name ``word`` most likely misspells (difflib's ratio ≥ 0.75), or None."""
    import difflib

    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None


#: Protocols a registry may name (``auto`` aside).
_NAMED_PROTOCOLS = frozenset({*PROTOCOL_NAMES, *NUMERIC_PROTOCOL_NAMES, *LONGITUDINAL_PROTOCOL_NAMES,
                              *LONGITUDINAL_NUMERIC_NAMES})


def _parse_numeric_fields(kind: Kind, table: Mapping[str, Any], fail: Any
                          ) -> tuple[tuple[float, float] | None, int | tuple[float, ...] | None]:
    """``range`` and ``buckets`` (as written) of a numeric metric; errors name the field."""
    if kind is not Kind.NUMERIC:
        for key in ("range", "buckets"):
            if key in table:
                raise fail(f"only numeric metrics take {key} (this one is {kind.value})", key)
        return None, None
    raw = table.get("range")
    if raw is None:
        raise fail("missing; a numeric metric needs range = [lo, hi], e.g. range = [0, 120]", "range")
    if not isinstance(raw, list) or len(raw) != 2 or not all(_number(v) for v in raw):
        raise fail(f"{raw!r} is not allowed; use range = [lo, hi] with two finite numbers", "range")
    lo, hi = raw
    if max(abs(float(lo)), abs(float(hi))) > MAX_NUMERIC_MAGNITUDE:
        raise fail(f"[{lo}, {hi}] is not allowed; both ends must lie within ±{MAX_NUMERIC_MAGNITUDE:g} "
                   "(variances are in the metric's units squared)", "range")
    if not float(lo) < float(hi):   # as doubles: 2^53 < 2^53 + 1 only as Python ints
        raise fail(f"lo must be below hi, got [{lo}, {hi}] (compared as double-precision numbers)",
                   "range")
    if float(hi) - float(lo) < MIN_NUMERIC_WIDTH:
        raise fail(f"[{lo}, {hi}] is too narrow; hi − lo must be at least {MIN_NUMERIC_WIDTH:g} "
                   "(rescale the unit)", "range")
    buckets = table.get("buckets")
    return (lo, hi), None if buckets is None else _parse_buckets(buckets, float(lo), float(hi), fail)


def _parse_buckets(buckets: Any, lo: float, hi: float, fail: Any) -> int | tuple[float, ...]:
    """``buckets`` as written: B equal-width buckets, or a list of increasing edges spanning [lo, hi]."""
    if isinstance(buckets, int) and not isinstance(buckets, bool):
        if not 2 <= buckets <= MAX_BUCKETS:
            raise fail(f"{buckets} is not allowed; use an integer in [2, {MAX_BUCKETS}] or a list of "
                       "edges", "buckets")
        edges = linspace_list(lo, hi, buckets + 1)
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise fail(f"{buckets} equal-width buckets are too narrow for the range", "buckets")
        return buckets
    if not isinstance(buckets, list) or not all(_number(v) for v in buckets):
        raise fail(f"{buckets!r} is not allowed; use an integer B (equal-width buckets) or a list of "
                   "increasing edges", "buckets")
    if not 3 <= len(buckets) <= MAX_BUCKETS + 1:
        raise fail(f"a list of edges needs 3 to {MAX_BUCKETS + 1} numbers (2 to {MAX_BUCKETS} buckets)",
                   "buckets")
    if float(buckets[0]) != lo or float(buckets[-1]) != hi:
        raise fail(f"edges must span the range: the first must be {_edge_repr(lo)} and the last "
                   f"{_edge_repr(hi)}", "buckets")
    bad = next((i for i in range(1, len(buckets)) if not float(buckets[i - 1]) < float(buckets[i])),
               None)   # as doubles, which is how the edges are used
    if bad is not None:
        raise fail(f"edges must increase: {buckets[bad - 1]} then {buckets[bad]} (position {bad})",
                   "buckets")
    return tuple(buckets)


def _edge_repr(x: float) -> str:
    """A range end as the TOML file most likely wrote it (0, not 0.0)."""
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def _bucket_count(buckets: int | tuple[float, ...] | None) -> int:
    return buckets if isinstance(buckets, int) else len(buckets or ()) - 1
