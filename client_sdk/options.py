"""``ClientOptions``: every tuning knob of ``TelemetryClient`` and ``AsyncTelemetryClient``, once.

Declared here as data, so both clients (and their docs) take the same options with the same
defaults. Pass an object, or any field as a keyword (a keyword overrides the object)::

    opts = ClientOptions(batch_size=50, retry=RetryPolicy(initial=0.5))
    TelemetryClient(endpoint=..., state_dir=..., options=opts, timeout=5.0)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from .queue import DEFAULT_QUEUE_SIZE, DropPolicy, OutboxLimits
from .transport import DEFAULT_TIMEOUT
from .uploader import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_AGE, RetryPolicy


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    """How a client batches, retries, stores and checks (docs/guide-app-teams.md, "Delivery")."""

    batch_size: int = DEFAULT_BATCH_SIZE          # a batch goes when this many reports are queued ...
    max_batch_age: float = DEFAULT_MAX_BATCH_AGE  # ... or when the oldest has waited this long (s)
    queue_size: int = DEFAULT_QUEUE_SIZE          # bounded in-memory queue
    drop_policy: DropPolicy = DropPolicy.DROP_NEWEST
    retry: RetryPolicy = RetryPolicy()            # back-off of the uploader and the registry fetch
    outbox_limits: OutboxLimits = OutboxLimits()  # caps of the offline queue
    offline: bool = True                          # keep unsent batches on disk
    strict: bool = False                          # raise instead of counting and logging (tests)
    pins: Mapping[str, str] | None = None         # metric -> fingerprint the app was built against
    timeout: float = DEFAULT_TIMEOUT              # HTTP timeout (s)
    clock: Callable[[], float] | None = None      # wall clock, s since the epoch (None: time.time)
    #: elapsed clock for the ledger's window rule: () -> (epoch id, whole seconds), never faster
    #: than real time (None: client_sdk.device_clock.system_elapsed; tests: testing.ManualClock)
    elapsed_clock: Callable[[], tuple[str, int]] | None = None
    dimensions: Mapping[str, Any] | None = None   # public dimensions sent in clear (client_sdk/dimensions.py)
    seal: Any = None                              # client_sdk.Seal: send batches sealed (OHTTP; client_sdk/sealing.py)

    @classmethod
    def merge(cls, options: ClientOptions | None, overrides: Mapping[str, Any]) -> ClientOptions:
        """``options`` (default: the defaults) with keyword ``overrides``; TypeError names a typo."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"unknown client option(s) {', '.join(unknown)}; "
                            f"see client_sdk.ClientOptions for the list")
        base = options if options is not None else cls()
        return dataclasses.replace(base, **overrides) if overrides else base

    def make_sealer(self, collector: Any) -> Any:
        """The uploader's ``Sealer`` for ``seal`` (None when batches go plain); ``collector`` is
        a blocking transport to the collector (key fetches, and the gateway itself)."""
        if self.seal is None:
            return None
        from .sealing import Seal, Sealer

        if not isinstance(self.seal, Seal):
            raise TypeError("seal= takes client_sdk.Seal.gateway(), Seal.relay(url) or Seal.shuffler(url)")
        return Sealer(self.seal, collector, timeout=self.timeout, clock=self.clock or time.time)

    def uploader_kwargs(self) -> dict[str, Any]:
        """The arguments an Uploader / AsyncUploader takes from these options."""
        return {"batch_size": self.batch_size, "max_batch_age": self.max_batch_age,
                "queue_size": self.queue_size, "drop_policy": self.drop_policy, "retry": self.retry,
                # batches are dated and aged by the client's wall clock (a simulated one moves them too)
                **({"wall": self.clock} if self.clock is not None else {})}
