"""The one exception tree of ldp-telemetry.

    LdptError                      base of everything we raise on purpose
    ├── RegistryError              a metrics TOML is malformed (names file, metric, field)
    ├── UnknownMetricError         a metric name is not in the registry
    ├── FingerprintMismatch        a report/sketch was made under other parameters
    ├── DomainError                a value is outside the metric's domain
    ├── InvalidPayload             a randomised report no honest client could produce
    ├── StoreError                 the sketch store is unreadable, foreign or too new
    ├── EstimationError            the sketch cannot be decoded as asked
    │   └── RapporFileError        a google/rappor CSV is malformed (estimators.rappor_io)
    ├── TransportError             SDK: no HTTP response from the collector
    ├── LedgerError                SDK: the privacy ledger file is unreadable or not ours
    ├── StateError                 SDK: the state directory cannot be used
    ├── OptedOutError              SDK: the user opted out
    ├── DistributionError          a simulation distribution is invalid (estimators.simulation)
    ├── ConfigError                a collector setting is invalid (collector.config)
    └── RemoteError                a collector answered the CLI unusably (cli.remote)

The last three and RapporFileError live beside the code that raises them, because
client_sdk must not know the layers above it; everything else is defined here.

HTTP-facing errors carry ``status`` and a machine-readable ``type`` slug so the collector
can turn them into RFC 9457 problem documents without a lookup table.
"""

from __future__ import annotations


class LdptError(Exception):
    """Base class: every deliberate error of ldp-telemetry."""

    status: int = 400
    type: str = "error"


class RegistryError(LdptError):
    """The metric registry (TOML) is invalid; the message names file, metric and field."""

    status = 422
    type = "invalid-registry"

    def __init__(self, message: str, *, source: str | None = None, metric: str | None = None,
                 field: str | None = None) -> None:
        parts = [p for p in (source, f"metric {metric!r}" if metric else None,
                             f"field {field!r}" if field else None) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.source, self.metric, self.field = source, metric, field


class UnknownMetricError(LdptError):
    """A metric name is not declared in the registry."""

    status = 422
    type = "unknown-metric"


class FingerprintMismatch(LdptError):
    """Data encoded under other parameters must never be mixed in."""

    status = 422
    type = "fingerprint-mismatch"


class DomainError(LdptError):
    """A true value is not in the metric's domain."""

    status = 422
    type = "value-out-of-domain"


class InvalidPayload(LdptError):
    """A randomised report that an honest client could not have produced."""

    status = 422
    type = "invalid-report"

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"report {index}")
        if field:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.index, self.field, self.reason = index, field, message


class StoreError(LdptError):
    """The sketch store cannot be used (unreadable, not ours, newer schema)."""

    status = 503
    type = "store-unavailable"


class EstimationError(LdptError):
    """The estimate asked for cannot be computed from this sketch."""

    status = 422
    type = "estimation-error"


class TransportError(LdptError):
    """No HTTP response: the collector is unreachable, the connection dropped or timed out."""

    status = 503
    type = "transport-error"


class LedgerError(LdptError):
    """The ledger file is unreadable or not ours."""

    status = 500
    type = "ledger-unreadable"


class StateError(LdptError):
    """The state directory cannot be used (unwritable, foreign secret, wrong mode)."""

    status = 500
    type = "client-state"


class OptedOutError(LdptError):
    """The user opted out: there is no secret and nothing is reported."""

    status = 403
    type = "opted-out"
