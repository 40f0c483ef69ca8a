"""ldp-telemetry client SDK: what runs on the device. Every value is randomised before it leaves.

```python
from client_sdk import TelemetryClient
client = TelemetryClient(endpoint="http://127.0.0.1:8080", registry="metrics.toml",
                         state_dir=".../myapp/ldpt")
client.report("theme", "dark")
client.flush(timeout=10.0)
client.close()
```

The public surface is ``__all__`` (checked by tests/test_sdk_api.py); test doubles live in
``client_sdk.testing``. Names are imported on
first use, so ``import client_sdk.registry`` (the collector, the estimators) does not load
the transport and the uploader.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The version of both distributions, ldp-telemetry-sdk and ldp-telemetry (the one place it is
#: written: both pyproject.toml files read it; docs/design.md, "Two distributions").
__version__ = "0.1.0"

#: Public name -> defining module (relative to this package).
_EXPORTS = {
    "TelemetryClient": "client",
    "ClientOptions": "options",
    "AsyncTelemetryClient": "aio",
    "MemoryState": "state",
    "FileState": "state",
    "RetryPolicy": "uploader",
    "Uploader": "uploader",
    "AsyncUploader": "aio",
    "OutboxLimits": "queue",
    "DropPolicy": "queue",
    "Transport": "transport",
    "HTTPTransport": "transport",
    "TransportError": "transport",
    "AsyncTransport": "aio",
    "AsyncHTTPTransport": "aio",
    "Refusal": "ledger",
    "read_ledger": "ledger",
    "registry_from_json": "remote",
    "load_registry": "registry",
    "LdptError": "errors",
    "Seal": "sealing",
    "Sealer": "sealing",
}

__all__ = [
    "AsyncHTTPTransport",
    "AsyncTelemetryClient",
    "AsyncTransport",
    "AsyncUploader",
    "ClientOptions",
    "DropPolicy",
    "FileState",
    "HTTPTransport",
    "LdptError",
    "MemoryState",
    "OutboxLimits",
    "Refusal",
    "RetryPolicy",
    "Seal",
    "Sealer",
    "TelemetryClient",
    "Transport",
    "TransportError",
    "Uploader",
    "load_registry",
    "read_ledger",
    "registry_from_json",
]

assert set(__all__) == set(_EXPORTS), "__all__ and _EXPORTS must list the same names"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'client_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
