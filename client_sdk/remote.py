"""The registry as the collector publishes it (`GET /v1/registry`), pinned by fingerprint.

``registry_from_json`` rebuilds a ``Registry`` from ``Registry.to_json()`` output and checks
that every metric's fingerprint, recomputed here from its parameters, equals the published
one: an SDK that would encode differently from what the collector expects (other protocol
version, tampered document) fails loudly instead of sending reports that mix parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .dimensions import parse_dimensions
from .errors import FingerprintMismatch, LdptError, RegistryError
from .protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from .protocols.factory import option_keys
from .protocols.numeric import NUMERIC_PROTOCOL_NAMES
from .registry import COMMON_KEYS, DIMENSION_KEYS, Registry, parse_device, parse_metric

#: Members `GET /v1/registry` adds to each metric's TOML table (not registry input).
PUBLISHED_KEYS = ("name", "resolved_protocol", "fingerprint", "epsilon_per_report",
                  "epsilon_longitudinal", "encoder")


def registry_from_json(doc: Mapping[str, Any] | str | bytes, source: str = "GET /v1/registry",
                       pinned: Mapping[str, str] | None = None) -> Registry:
    """A Registry from the published JSON; FingerprintMismatch if a fingerprint disagrees.

    ``pinned`` maps metric names to the fingerprints the app was built against; a published
    metric whose fingerprint differs (its parameters changed) is a FingerprintMismatch too.
    """
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
    specs = {}
    for pos, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise RegistryError(f"metric #{pos} has no name", source=source)
        name = entry["name"]
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
        spec = parse_metric(name, table, source, dims)
        spec = dataclasses.replace(spec, requested_protocol=requested)
        published = entry.get("fingerprint")
        if published is not None and published != spec.fingerprint:
            raise FingerprintMismatch(f"{source}: metric {name!r} is published with fingerprint "
                                      f"{published} but its parameters give {spec.fingerprint} here; "
                                      "this SDK would not encode what the collector expects (upgrade it)")
        if pinned and name in pinned and pinned[name] != spec.fingerprint:
            raise FingerprintMismatch(f"{source}: metric {name!r} changed: fingerprint {spec.fingerprint}, "
                                      f"the app is pinned to {pinned[name]}; update the app's pin "
                                      "(a new fingerprint is a new metric for the estimates)")
        specs[name] = spec
    missing = sorted(set(pinned or {}) - set(specs))
    if missing:
        raise RegistryError(f"pinned metric(s) {', '.join(missing)} are not published", source=source)
    device = parse_device(doc["device"], source) if doc.get("device") is not None else None
    return Registry(specs, source, device, dims)


def check_pins(registry: Registry, pinned: Mapping[str, str] | None) -> None:
    """FingerprintMismatch when a local registry disagrees with the app's pins."""
    for name, fp in (pinned or {}).items():
        spec = registry.get(name)
        if spec.fingerprint != fp:
            raise FingerprintMismatch(f"{registry.source}: metric {name!r} has fingerprint "
                                      f"{spec.fingerprint}, the app is pinned to {fp}")


def fetch_registry(transport: Any, pinned: Mapping[str, str] | None = None) -> tuple[Registry, bytes]:
    """GET /v1/registry through a transport; returns the registry and the raw JSON (for caching)."""
    response = transport.get_registry()
    if response.status != 200:
        raise RegistryError(f"the collector answered {response.status} to GET /v1/registry",
                            source="GET /v1/registry")
    try:
        return registry_from_json(response.body, pinned=pinned), response.body
    except LdptError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise RegistryError(f"unusable registry document: {exc}", source="GET /v1/registry") from None
