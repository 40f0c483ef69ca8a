"""The registry as the collector publishes it (`GET /v1/registry`), pinned by fingerprint.

``registry_from_json`` rebuilds a ``Registry`` from ``Registry.to_json()`` output and checks
that every metric's fingerprint, recomputed here from its parameters, equals the published
one: an SDK that would encode differently from what the collector expects (other protocol
version, tampered document) fails loudly instead of sending reports that mix parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .dimensions import parse_dimensions
from .domains import domain_digest, values_from_text
from .encoder_block import check_block, encoder_block
from .errors import FingerprintMismatch, LdptError, RegistryError
from .protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from .protocols.blocks import block_protocol
from .protocols.factory import option_keys
from .protocols.numeric import NUMERIC_PROTOCOL_NAMES
from .registry import (
    COMMON_KEYS,
    DIMENSION_KEYS,
    MetricSpec,
    PublishedMetric,
    Registry,
    parse_device,
    parse_metric,
)

#: Members `GET /v1/registry` adds to each metric's TOML table (not registry input).
PUBLISHED_KEYS = ("name", "resolved_protocol", "fingerprint", "epsilon_per_report",
                  "epsilon_longitudinal", "encoder")


#: ``domains(metric, published)``: the values of a file domain the registry describes by
#: ``{"file", "size", "sha256"}`` (client_sdk.domains), checked against that digest.
DomainResolver = Callable[[str, Mapping[str, Any]], Sequence[str]]


def published_file_domain(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``categories`` of a published metric whose values live in a domain file, else None."""
    cats = entry.get("categories")
    return cats if isinstance(cats, Mapping) and "sha256" in cats and "size" in cats else None


def registry_from_json(doc: Mapping[str, Any] | str | bytes, source: str = "GET /v1/registry",
                       pinned: Mapping[str, str] | None = None,
                       domains: DomainResolver | None = None, *, rederive: bool = True) -> Registry:
    """A Registry from the published JSON; FingerprintMismatch if a fingerprint disagrees.

    ``pinned`` maps metric names to the fingerprints the app was built against; a published
    metric whose fingerprint differs (its parameters changed) is a FingerprintMismatch too.
    ``domains`` gives the values of file domains (``fetch_registry`` fetches and caches them);
    without it a registry that has one is a RegistryError.

    Every metric encodes from its published ``encoder`` block, after ``check_block``. By default
    (and always for a fetched registry) the SDK also re-derives each metric from its parameters
    and refuses a fingerprint or block that differs (``check_published_block``): a collector
    cannot make the device encode at another ε than the fingerprinted parameters give.
    ``rederive=False`` is for a registry document the app ships (compiled ahead of time, e.g.
    saved from ``GET /v1/registry``) with a pin for every metric: a metric is then trusted when
    its fingerprint is the pinned one, and nothing is derived at start-up (the window and
    mixture searches of the numeric mechanisms are skipped; docs/guide-app-teams.md). The
    fingerprint pins the parameters, not the block: the block's thresholds and the ε it states
    are trusted as the app's own build artifact, so a document fetched at run time must never
    take this path, and the app's tests should read the shipped one with ``rederive=True``.
    """
    if not rederive and not pinned:
        raise RegistryError("rederive=False needs the app's pins (metric -> fingerprint) for every metric",
                            source=source)
    if isinstance(doc, (str, bytes)):
        import json  # here: the SDK's import does not load json (docs/benchmarks.md)

        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise RegistryError(f"not JSON: {exc}", source=source) from None
    entries = doc.get("metrics") if isinstance(doc, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise RegistryError("expected {\"metrics\": [...]} with at least one metric", source=source)
    dims = parse_dimensions(doc["dimensions"], source) if doc.get("dimensions") is not None else None
    specs, published = {}, {}
    for pos, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise RegistryError(f"metric #{pos} has no name", source=source)
        name = entry["name"]
        if name in specs:   # the later entry would replace the earlier one unseen
            raise RegistryError("listed twice", source=source, metric=name, field="name")
        if entry.get("encoder") is not None:   # never encode from an inconsistent block (docs/conformance.md)
            check_block(entry["encoder"], name, source)
        requested = entry.get("protocol", "auto")
        resolved = entry.get("resolved_protocol") or requested
        if resolved not in PROTOCOL_NAMES + LONGITUDINAL_PROTOCOL_NAMES + NUMERIC_PROTOCOL_NAMES \
                + LONGITUDINAL_NUMERIC_NAMES:
            raise RegistryError(f"protocol {resolved!r} is not known to this SDK; upgrade the SDK",
                                source=source, metric=name, field="resolved_protocol")
        # Build exactly what the collector resolved (`auto` may resolve differently in another
        # version); keep only the keys a registry table may carry (newer collectors may add more).
        allowed = set(COMMON_KEYS) | set(DIMENSION_KEYS) | set(option_keys(resolved))
        table = {k: v for k, v in entry.items() if k in allowed and k not in PUBLISHED_KEYS}
        table["protocol"] = resolved
        file_domain = published_file_domain(entry)
        if file_domain is not None:   # the same metric as its values inline (same fingerprint)
            if domains is None:
                raise RegistryError("its values are published apart (GET /v1/registry/domains/"
                                    f"{name}); fetch the registry with fetch_registry", source=source,
                                    metric=name, field="categories")
            table["categories"] = list(checked_domain(name, file_domain, domains(name, file_domain), source))
        if not rederive:
            specs[name], published[name] = compiled_metric(entry, table, pinned, source, dims)   # type: ignore[arg-type]
            continue
        spec = parse_metric(name, table, source, dims)
        spec = dataclasses.replace(spec, requested_protocol=requested)
        fingerprint = entry.get("fingerprint")
        if fingerprint is not None and fingerprint != spec.fingerprint:
            raise FingerprintMismatch(f"{source}: metric {name!r} is published with fingerprint "
                                      f"{fingerprint} but its parameters give {spec.fingerprint} here; "
                                      "this SDK would not encode what the collector expects (upgrade it)")
        if entry.get("encoder") is not None:
            check_published_block(spec, entry["encoder"], source)
            impl = spec.protocol_impl
            published[name] = PublishedMetric(entry["encoder"], spec.fingerprint, float(impl.epsilon),
                                              impl.epsilon_longitudinal)
        if pinned and name in pinned and pinned[name] != spec.fingerprint:
            raise FingerprintMismatch(f"{source}: metric {name!r} changed: fingerprint {spec.fingerprint}, "
                                      f"the app is pinned to {pinned[name]}; update the app's pin "
                                      "(a new fingerprint is a new metric for the estimates)")
        specs[name] = spec
    missing = sorted(set(pinned or {}) - set(specs))
    if missing:
        raise RegistryError(f"pinned metric(s) {', '.join(missing)} are not published", source=source)
    device = parse_device(doc["device"], source) if doc.get("device") is not None else None
    return Registry(specs, source, device, dims, published=published)


def compiled_metric(entry: Mapping[str, Any], table: dict[str, Any], pinned: Mapping[str, str], source: str,
                    dims: Any) -> tuple[MetricSpec, PublishedMetric]:
    """One metric of a compiled registry (``rederive=False``): its table validated without building
    its protocol, its fingerprint the pinned one, its block checked, its ε as published."""
    name = entry["name"]
    fingerprint = entry.get("fingerprint")
    if name not in pinned:
        raise RegistryError("rederive=False trusts pinned metrics only; pin this metric or re-derive",
                            source=source, metric=name, field="fingerprint")
    if fingerprint != pinned[name]:
        raise FingerprintMismatch(f"{source}: metric {name!r} changed: fingerprint {fingerprint}, "
                                  f"the app is pinned to {pinned[name]}; update the app's pin "
                                  "(a new fingerprint is a new metric for the estimates)")
    block = entry.get("encoder")
    if block is None:
        raise RegistryError("a compiled registry needs each metric's encoder block", source=source,
                            metric=name, field="encoder")
    if block.get("protocol") != table["protocol"]:
        raise RegistryError(f"the encoder block is of protocol {block.get('protocol')!r}, the metric's is "
                            f"{table['protocol']!r}", source=source, metric=name, field="protocol")
    eps, eps_inf = entry.get("epsilon_per_report"), entry.get("epsilon_longitudinal")
    for field, value in (("epsilon_per_report", eps), ("epsilon_longitudinal", eps_inf)):
        if not (value is None and field == "epsilon_longitudinal") and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
            raise RegistryError(f"{field} must be a positive finite number, got {value!r}", source=source,
                                metric=name, field=field)
    spec = dataclasses.replace(parse_metric(name, table, source, dims, derive=False),
                               requested_protocol=entry.get("protocol", "auto"))
    check_compiled_domain(spec, block, source)
    check_compiled_charges(spec, block, float(eps), eps_inf, source)   # type: ignore[arg-type]
    return spec, PublishedMetric(block, fingerprint, float(eps), None if eps_inf is None else float(eps_inf),  # type: ignore[arg-type]
                                 derived=False)


def check_compiled_domain(spec: MetricSpec, block: Mapping[str, Any], source: str) -> None:
    """RegistryError when a compiled metric's block encodes over another domain than the metric's
    own (its categories, buckets or booleans, known without deriving anything): GRR at a larger d
    keeps the value with the published p but spreads the rest over values that do not exist, a
    larger ε than the published one (P(x | x)/P(x | x′) = (d − 1)·p/(1 − p))."""
    d, size = block.get("d"), spec.domain_size
    if d is not None and size is not None and d != size:
        raise RegistryError(f"the encoder block is over d = {d} values, the metric's domain has {size}", source=source,
                            metric=spec.name, field="d")


def check_compiled_charges(spec: MetricSpec, block: Mapping[str, Any], eps: float, eps_inf: float | None,
                           source: str) -> None:
    """RegistryError when what a compiled metric's ledger would charge does not fit how its block
    encodes: a memoised block (``BlockProtocol.memoised``) needs an ε∞ of at least ε₁ (else no new
    value is charged to the lifetime), a block that is not memoised has none, and its window
    charges are finite figures of at least k·ε₁ (``WindowCharges.from_json``)."""
    def fail(message: str, field: str) -> RegistryError:
        return RegistryError(message, source=source, metric=spec.name, field=field)

    found = block_protocol(block.get("protocol"))
    if found is not None and found.memoised and (eps_inf is None or eps_inf < eps):
        raise fail(f"a {block['protocol']} block memoises its first round: the ledger charges ε∞ for each new "
                   f"value, so epsilon_longitudinal must be a number of at least epsilon_per_report = {eps!r}, "
                   f"got {eps_inf!r}", "epsilon_longitudinal")
    if found is not None and not found.memoised and eps_inf is not None:
        raise fail(f"a {block['protocol']} block memoises nothing: epsilon_longitudinal must be absent, got "
                   f"{eps_inf!r}", "epsilon_longitudinal")
    charges = block.get("window_charges")
    if charges is not None:
        from .window_charge import WindowCharges

        try:
            WindowCharges.from_json(charges, eps, spec.reports_per_window)
        except ValueError as exc:
            raise fail(str(exc), "window_charges") from None


def check_published_block(spec: Any, published: Mapping[str, Any], source: str) -> None:
    """RegistryError naming the first member where the published ``encoder`` block differs from
    the block of the metric this SDK built from the same parameters: its reports would follow
    other integers than the ones every other SDK encodes from (docs/conformance.md)."""
    own = encoder_block(spec)
    for key in [*own, *(k for k in published if k not in own)]:   # the block's own order
        if own.get(key) != published.get(key):
            def text(value: Any) -> str:
                shown = repr(value)
                return shown if len(shown) <= 60 else shown[:57] + "..."
            raise RegistryError(f"the published encoder block has {key} = {text(published.get(key))}, the "
                                f"metric's parameters give {text(own.get(key))} here; this SDK would not encode "
                                "from the published integers (upgrade it)", source=source, metric=spec.name,
                                field=key)


def checked_domain(name: str, published: Mapping[str, Any], values: Sequence[str], source: str) -> Sequence[str]:
    """``values`` when they are the domain the registry describes (size and SHA-256)."""
    if len(values) != published.get("size") or domain_digest(values) != published.get("sha256"):
        raise RegistryError(f"the domain list of {name!r} does not match the registry's size and sha256 "
                            "(a stale cache or a changed registry: fetch both again)", source=source,
                            metric=name, field="categories")
    return values


def check_pins(registry: Registry, pinned: Mapping[str, str] | None) -> None:
    """FingerprintMismatch when a local registry disagrees with the app's pins."""
    for name, fp in (pinned or {}).items():
        spec = registry.get(name)
        if spec.fingerprint != fp:
            raise FingerprintMismatch(f"{registry.source}: metric {name!r} has fingerprint "
                                      f"{spec.fingerprint}, the app is pinned to {fp}")


def cached_domains(cache_dir: Path | None, transport: Any = None) -> DomainResolver:
    """A resolver of file domains: the copy cached in ``cache_dir`` under its digest, else (with a
    transport) GET /v1/registry/domains/{metric}, checked and then cached."""
    def resolve(metric: str, published: Mapping[str, Any]) -> Sequence[str]:
        digest = str(published.get("sha256", ""))
        path = cache_dir / f"domain-{digest}.txt" if cache_dir is not None and digest.isalnum() else None
        if path is not None and path.exists():
            text = path.read_text(encoding="utf-8")
        elif transport is None:
            raise RegistryError(f"no cached copy of the domain list of {metric!r}", source=str(cache_dir),
                                metric=metric)
        else:
            response = transport.get_domain(metric)
            if response.status != 200:
                raise RegistryError(f"the collector answered {response.status} to GET /v1/registry/domains/"
                                    f"{metric}", source="GET /v1/registry", metric=metric)
            body = response.body
            if response.headers.get("content-encoding", "").lower() == "gzip":
                import gzip  # only for a file domain's list

                body = gzip.decompress(body)
            text = body.decode("utf-8")
        values = values_from_text(text, f"domain list of {metric!r}",
                                  lambda msg: RegistryError(msg, source="GET /v1/registry", metric=metric))
        values = checked_domain(metric, published, values, "GET /v1/registry")
        if path is not None and not path.exists():
            try:
                from .files import atomic_write

                atomic_write(path, text.encode("utf-8"))
            except OSError:
                pass   # no cache: fetched again next time
        return values
    return resolve


def fetch_registry(transport: Any, pinned: Mapping[str, str] | None = None,
                   cache_dir: Path | None = None) -> tuple[Registry, bytes]:
    """GET /v1/registry through a transport; returns the registry and the raw JSON (for caching).
    File domains are fetched too (cached in ``cache_dir`` under their digest)."""
    response = transport.get_registry()
    if response.status != 200:
        raise RegistryError(f"the collector answered {response.status} to GET /v1/registry",
                            source="GET /v1/registry")
    try:
        return registry_from_json(response.body, pinned=pinned,
                                  domains=cached_domains(cache_dir, transport)), response.body
    except LdptError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise RegistryError(f"unusable registry document: {exc}", source="GET /v1/registry") from None
