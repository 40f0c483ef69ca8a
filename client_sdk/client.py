"""``TelemetryClient``: what an app embeds. One line per value; everything sent is randomised.

```python
from client_sdk import TelemetryClient
client = TelemetryClient(endpoint="http://127.0.0.1:8080", registry="metrics.toml",
                         state_dir=".../myapp/ldpt")
client.report("theme", "dark")     # never blocks, never raises on the app's hot path
client.flush(timeout=10.0)         # True when everything queued was acknowledged
client.close()
```

``report()`` runs on the app's thread and does only in-memory work: look the value up in
the metric's domain, check the privacy budget against an in-memory mirror of the ledger,
encode the value with the metric's protocol (a batch of one, OS CSPRNG — the true value
ends here), and append the randomised report to a bounded queue. A background worker
(client_sdk.uploader) charges the ledger, batches, persists and sends. ``report()`` never
raises: an unknown metric, a value outside the domain, a refused budget, a full queue or an
opted-out user are counted (``stats()``) and logged once, and ``report()`` returns False.
``strict=True`` (tests) raises instead; ``validate(metric, value)`` checks without reporting.

Construction never raises for environmental reasons and never waits on the network
(non-strict mode): a state directory that cannot persist the spend or the secret disables
reporting, saying why (client_sdk.state.UnusableState: a run whose spend is forgotten would
let restarts spend the budget again), a corrupt secret is moved aside and replaced, and without
``registry=`` the registry is fetched on a background thread (client_sdk.startup) while
reports wait in memory. Options: ``ClientOptions`` (client_sdk.options), as an object or
as keywords.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ._lazy import LazyLogger, logging
from .device_clock import ElapsedClock, system_elapsed
from .errors import (
    DomainError,
    FingerprintMismatch,
    LdptError,
    LedgerError,
    RegistryError,
    StateError,
    UnknownMetricError,
)
from .files import atomic_write
from .hashing import encode_text
from .ledger import Book, Charge, Refusal, RefusalCounts, apply, day_of
from .options import ClientOptions
from .protocols.device import Context, numpy_types
from .queue import DiskOutbox, MemoryOutbox, OutboxLimits
from .registry import (
    DeviceBudget,
    Kind,
    MetricSpec,
    PublishedMetric,
    Registry,
    canonical_value,
    load_registry,
)
from .state import (
    CORRUPT_SECRET_ADVICE,
    REGISTRY_CACHE_FILE,
    ClientState,
    FileState,
    UnusableState,
    ledger_key,
    open_state,
    unusable,
    value_digest,
)
from .transport import HTTPTransport, Transport
from .uploader import QueuedReport, RetryPolicy, Uploader

if TYPE_CHECKING:
    from .startup import RegistryResolver

log = LazyLogger("client_sdk")  # logging loads with the first message (client_sdk._lazy)

#: Seconds ``close()`` waits by default, and what the interpreter-exit hook allows.
DEFAULT_CLOSE_TIMEOUT = 10.0
EXIT_CLOSE_TIMEOUT = 1.0
DEFAULT_RETRY = RetryPolicy()
REFUSAL_TEXT = {
    Refusal.WINDOW: "reports_per_window reached for this window",
    Refusal.LIFETIME: "lifetime_epsilon would be exceeded",
    Refusal.DEVICE_WINDOW: "the device's epsilon_per_window would be exceeded ([device])",
    Refusal.DEVICE_LIFETIME: "the device's lifetime_epsilon would be exceeded ([device])",
}
#: Distinct problems logged per client (then silence: e.g. endless made-up metric names).
MAX_LOGGED_KINDS = 100
ENDPOINT_ENV = "LDPT_ENDPOINT"
STATE_DIR_ENV = "LDPT_STATE_DIR"

#: What ``stats()`` counts for a client (the uploader adds its own counters).
CLIENT_COUNTERS = (
    "reported",                 # accepted on the app thread and queued (randomised)
    "charged",                  # charged to the ledger by the worker (will be sent)
    "refused_window",           # beyond reports_per_window: never sent
    "refused_lifetime",         # beyond lifetime_epsilon: never sent
    "refused_device_window",    # beyond [device] epsilon_per_window: never sent
    "refused_device_lifetime",  # beyond [device] lifetime_epsilon: never sent
    "invalid_value",            # not in the metric's domain (numeric: NaN, ±inf, not a number)
    "clipped",                  # numeric: outside the metric's range, clipped to it and reported;
                                # discover strings: longer than max_length bytes, truncated and reported
    "unknown_metric",           # not in the registry
    "stale_metric",             # the collector no longer accepts this metric's parameters
    "dropped_queue_full",       # the bounded queue was full (drop-newest)
    "dropped",                  # dropped after queueing (evicted, opted out, ledger error)
    "opted_out",                # report() after opt_out()
    "closed",                   # report() after close()
    "dropped_no_registry",      # waited for the registry, which never came before close()
    "disabled",                 # the ledger or the registry is unusable: nothing is reported
    "disabled_state",           # the state directory cannot persist the spend or the secret:
                                # nothing is reported (client_sdk.state.UnusableState)
    "internal_error",           # a bug: logged once, never raised
)


#: Counters of reports the app handed over that will never be delivered (refusals by the privacy
#: budget are by design, not losses): a close() that saw any of them returns False.
LOST_COUNTERS = ("dropped_queue_full", "dropped", "dropped_no_registry", "disabled", "internal_error",
                 "outbox_dropped_reports", "outbox_expired_reports")


def _wall_clock() -> float:
    """The default clock: ``time.time()`` looked up at each call."""
    return time.time()


class _Metric:
    """Per-metric constants the hot path needs, resolved once per registry."""

    __slots__ = ("name", "spec", "encoder", "kind", "fingerprint", "index", "string", "max_bytes", "eps", "eps_inf",
                 "memoised", "rpw", "budget", "numeric", "lo", "hi", "scale",
                 "inner_edges", "labels", "two_round", "dev_window", "dev_lifetime", "window_charges")

    def __init__(self, spec: MetricSpec, device: DeviceBudget | None = None,
                 published: PublishedMetric | None = None) -> None:
        # here, not on the SDK's import: the first metric of a registry loads its protocols
        from .encoder_block import encoder_block
        from .protocols.blocks import encoder_from_block
        from .window_charge import WindowCharges

        # One path for every metric: block -> one-report encoder. A published registry's block is
        # the published one (checked, and compared with this SDK's derivation unless the app's pins
        # vouch for it: client_sdk.remote.registry_from_json); a TOML registry's, the block its
        # device half derives from the parameters (docs/conformance.md, "The encoder block").
        block = published.encoder if published is not None else encoder_block(spec)
        self.encoder = encoder_from_block(block)
        self.name, self.spec, self.kind = spec.name, spec, spec.kind
        if published is not None and not published.derived:   # a compiled registry: nothing derived
            self.fingerprint, self.eps, self.eps_inf = published.fingerprint, published.epsilon, \
                published.epsilon_longitudinal
            charges = block.get("window_charges")
            self.window_charges = None if charges is None else \
                WindowCharges.from_json(charges, self.eps, spec.reports_per_window)   # checked by the registry
        else:
            proto = spec.protocol_impl
            self.fingerprint = spec.fingerprint
            self.eps = float(proto.epsilon)
            self.eps_inf = proto.epsilon_longitudinal
            self.window_charges = spec.window_charges   # None but for a GRR memo at r > 1
        self.string = spec.kind is Kind.STRING
        self.max_bytes = block.get("max_length") if self.string else None   # discover's device cut
        self.index = spec.domain_index   # a numbered domain computes it: nothing listed
        self.memoised = self.eps_inf is not None
        self.rpw = spec.reports_per_window
        self.budget = spec.lifetime_epsilon
        # L-GRR, L-OSUE, LOLOHA, dBitFlipPM, memobitmean: memoised first round from the secret
        self.two_round = self.encoder.two_round
        self.dev_window = device.epsilon_per_window if device is not None else None
        self.dev_lifetime = device.lifetime_epsilon if device is not None else None
        self.numeric = spec.kind is Kind.NUMERIC
        if self.numeric:
            self.lo, self.hi = spec.bounds
            self.scale = 2.0 / (self.hi - self.lo)
            self.inner_edges = spec.edge_list[1:-1] if spec.is_histogram else None
            self.labels = spec.domain

    def number(self, value: Any, secret: bytes = b"") -> tuple[str, int, bool] | None:
        """Numeric metrics: (key, index, clipped) of a value, None when it is not a finite number.

        Mean metrics: the index is the grid point of t = 2(x − lo)/(hi − lo) − 1 after randomised
        rounding (``discretise_one``, OS CSPRNG), or, for memoised means (memobitmean), after
        the device's fixed α-point rounding derived from ``secret``; histogram metrics: the
        bucket index. Values outside [lo, hi] are clipped first. Plain Python: report()'s hot path.
        """
        kind = type(value)
        if kind is not float and kind is not int:
            if isinstance(value, (bool, *numpy_types("bool_"))) \
                    or not isinstance(value, (int, float, *numpy_types("integer", "floating"))):
                return None
        try:
            x = float(value)
        except (OverflowError, ValueError, TypeError):   # an int beyond the float range
            return None
        if not math.isfinite(x):
            return None
        clipped = x < self.lo or x > self.hi
        if clipped:
            x = self.lo if x < self.lo else self.hi
        if self.inner_edges is None:
            t = (x - self.lo) * self.scale - 1.0
            if self.two_round:
                return "", self.encoder.alpha_round(t, secret, self.name), clipped
            return "", self.encoder.discretise_one(t), clipped
        idx = bisect.bisect_right(self.inner_edges, x)
        return self.labels[idx], idx, clipped

    def lookup(self, value: Any) -> tuple[str, int] | None:
        """(canonical key, domain index) of a true value, None when it is not in the domain."""
        if self.string:
            return (value, -1) if isinstance(value, str) else None
        if self.kind is Kind.JOINT:   # a tuple/dict of the parts' values: one cell of the product
            cell = self.spec.joint.cell(value)
            return None if cell is None else (self.spec.domain[cell], cell)  # type: ignore[index]
        key = canonical_value(self.kind, value)
        idx = self.index.get(key)
        return None if idx is None else (key, idx)


class _MetricTable:
    """Lazily built _Metric objects of one registry (shared by every client using it)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> _Metric | None:
        rt = self.metrics.get(name)
        if rt is None and name in self.registry.metrics:
            with self._lock:
                rt = self.metrics.get(name)
                if rt is None:
                    published = self.registry.published
                    rt = self.metrics[name] = _Metric(self.registry.metrics[name], self.registry.device,
                                                      None if published is None else published.get(name))
        return rt


_TABLES: dict[int, tuple[weakref.ref[Registry], _MetricTable]] = {}
_TABLES_LOCK = threading.Lock()


def _table_for(registry: Registry) -> _MetricTable:
    with _TABLES_LOCK:
        entry = _TABLES.get(id(registry))
        if entry is not None and entry[0]() is registry:
            return entry[1]
        table = _MetricTable(registry)
        key = id(registry)
        _TABLES[key] = (weakref.ref(registry, lambda _r, k=key, tables=_TABLES: tables.pop(k, None)), table)
        return table


def resolve_registry(registry: Registry | str | os.PathLike[str] | Mapping[str, Any] | None,
                     transport: Transport | None, state: ClientState | None = None,
                     pins: Mapping[str, str] | None = None) -> Registry:
    """A TOML path, a parsed Registry, the published JSON, or None: fetch /v1/registry.

    A fetched registry is cached in the state directory and used when the collector cannot be
    reached at start-up. ``pins`` (metric -> fingerprint) turns a changed metric into a
    FingerprintMismatch instead of a silent switch of parameters.
    """
    from .remote import cached_domains, check_pins, fetch_registry, registry_from_json  # not on import

    if isinstance(registry, Registry):
        check_pins(registry, pins)
        return registry
    if isinstance(registry, (str, os.PathLike)):
        reg = load_registry(registry)
        check_pins(reg, pins)
        return reg
    if isinstance(registry, Mapping):
        return registry_from_json(registry, pinned=pins)
    if registry is not None:
        raise TypeError("registry must be a TOML path, a Registry, the published JSON, or None")
    if transport is None:
        raise RegistryError("no registry: pass registry=PATH, or endpoint= to fetch /v1/registry")
    cache = state.path / REGISTRY_CACHE_FILE if isinstance(state, FileState) else None
    try:
        reg, raw = fetch_registry(transport, pins, cache.parent if cache is not None else None)
    except FingerprintMismatch:
        raise
    except LdptError as exc:
        if cache is None or not cache.exists():
            raise RegistryError(f"cannot fetch the registry from the collector ({exc}) and there is no "
                                "cached copy; pass registry=PATH or retry when the collector is "
                                "reachable") from None
        log.warning("ldpt: cannot fetch the registry (%s); using the cached copy %s", exc, cache)
        return registry_from_json(cache.read_bytes(), source=str(cache), pinned=pins,
                                  domains=cached_domains(cache.parent))
    if cache is not None:
        try:
            atomic_write(cache, raw)
        except OSError as exc:
            log.warning("ldpt: cannot cache the registry in %s (%s)", cache, exc)
    return reg


class EncodedValue(NamedTuple):
    """One value's report as ``report()`` computes it before the ledger and the queue
    (``ClientCore.encode_value``): what the conformance report vectors pin (docs/conformance.md)."""

    #: the value's key in the domain; for a memoised metric, the memo key the ledger charges
    key: str
    #: the domain index (the grid index of a mean, −1 for a string metric)
    index: int
    #: whether the value was clipped to the range, or a string cut to discover's length
    clipped: bool
    #: the ledger's digest of a memoised metric's key (None for the others)
    digest: str | None
    #: the randomised wire payload
    payload: Any


class ClientCore:
    """Everything but the driver: state, registry, budget mirror, encode, queue (sync & async).

    Subclasses build their uploader, then call ``_start_registry`` (which raises only in
    strict mode or for an unusable ``registry=`` argument).
    """

    def __init__(self, endpoint: str | None = None,
                 registry: Registry | str | os.PathLike[str] | Mapping[str, Any] | None = None,
                 state_dir: str | os.PathLike[str] | None = None, *,
                 state: ClientState | None = None, transport: Transport | None = None,
                 options: ClientOptions | None = None) -> None:
        self.options = options = options if options is not None else ClientOptions()
        self._strict = strict = options.strict
        # wall clock (seconds since the epoch): the ledger's windows are its UTC days; tests and
        # simulations inject one (ClientOptions.clock) to move through days
        self._clock: Callable[[], float] = options.clock or _wall_clock
        # elapsed clock (epoch, seconds) that decides how fast the ledger opens new windows
        # (client_sdk.device_clock); read by the ledger under its lock, and here for the mirror
        self._elapsed: ElapsedClock = options.elapsed_clock or system_elapsed
        self._lock = threading.Lock()
        self._logged: set[Any] = set()
        self._counters = dict.fromkeys(CLIENT_COUNTERS, 0)
        self._closed = False
        self._dimensions: dict[str, str] = {}
        if options.dimensions:
            self.set_dimensions(options.dimensions)
        endpoint = endpoint or os.environ.get(ENDPOINT_ENV) or None
        state_dir = state_dir or os.environ.get(STATE_DIR_ENV) or None
        if state is None:
            if state_dir is None:
                raise ValueError("give state_dir= (where the client secret and privacy ledger live), "
                                 "or state=MemoryState() for tests and simulations")
            state = open_state(state_dir, strict=strict)
        self.state = state
        self.endpoint = endpoint
        if transport is None and endpoint is not None:
            transport = HTTPTransport(endpoint, timeout=options.timeout)
        self._transport = transport
        self._registry_arg = registry
        self.registry: Registry | None = None
        self._table: _MetricTable | None = None
        self._waiting: collections.deque[tuple[str, Any]] = collections.deque()   # before the registry
        self._resolver: RegistryResolver | None = None
        self._fetch_only_transport = False      # the async client fetches with a blocking transport
        self._opted_out = state.opted_out
        self._secret: bytes | None = None
        self._lkey: bytes | None = None
        self._disabled: str | None = None
        self._disabled_counter = "disabled"
        self._accounts: Book = Book()
        self._mirror: Book = Book()
        self._uncommitted: dict[int, Charge] = {}
        self._refusals: dict[tuple[str, Refusal], list[Any]] = {}
        self._resync = False
        if isinstance(state, UnusableState):
            self._disable_state(state.reason)
        elif not self._opted_out:
            self._load_secret(state_dir)
        try:
            self._accounts = self.state.ledger.snapshot()
            self._mirror = self._accounts.copy()
        except LedgerError as exc:
            if strict:
                raise
            self._disabled = str(exc)
            log.error("ldpt: reporting is disabled: %s", exc)
        self._uploader: Any = None
        _LIVE_CLIENTS.add(self)

    # --- start-up ---------------------------------------------------------------------------------
    def _load_secret(self, state_dir: str | os.PathLike[str] | None) -> None:
        """Read (or create) the secret; a corrupt one is moved aside, an unusable one disables reporting."""
        if isinstance(self.state, UnusableState):
            return
        try:
            self._secret = self.state.secret
        except (StateError, OSError) as exc:
            if self._strict:
                if isinstance(exc, StateError):
                    raise
                where = getattr(self.state, "secret_path", None) or state_dir
                raise StateError(f"{where}: cannot use the client secret ({_describe(exc)})") from exc
            self._secret = self._recover_secret(exc, state_dir)
        self._lkey = ledger_key(self._secret) if self._secret is not None else None

    def _recover_secret(self, exc: Exception, state_dir: str | os.PathLike[str] | None) -> bytes | None:
        """A corrupt secret is replaced (persisted: the ledger charges the new one); a secret that
        cannot be read or created disables reporting — a new random secret each run would draw
        fresh memoised responses each run, so restarts would reveal the value without bound."""
        if isinstance(exc, StateError) and isinstance(self.state, FileState):
            try:
                moved = self.state.quarantine_secret()
                log.warning("ldpt: %s; moved it to %s and created a new secret (a new privacy spend: "
                            "the ledger charges values afresh)",
                            str(exc).removesuffix(CORRUPT_SECRET_ADVICE), moved.name)
                return self.state.secret
            except (StateError, OSError) as again:
                exc = again
        where = getattr(self.state, "secret_path", None) or state_dir
        problem = f"{where}: cannot use the client secret ({_describe(exc)})"
        from pathlib import Path

        self.state = unusable(Path(state_dir) if state_dir is not None else None, problem)
        self._opted_out = self.state.opted_out
        self._disable_state(self.state.reason)
        return None

    def _disable_state(self, reason: str) -> None:
        """Nothing is reported: the state directory cannot persist the spend or the secret."""
        self._disabled = reason
        self._disabled_counter = "disabled_state"
        log.error("ldpt: reporting is disabled: %s", reason)

    @property
    def disabled_reason(self) -> str | None:
        """Why report() does nothing (an unusable state directory, ledger or registry), or None."""
        return self._disabled

    def _start_registry(self) -> None:
        """Resolve ``registry=`` now, or (no registry, non-strict, an endpoint) in the background.

        Non-strict, a registry that cannot be read or does not match the pins disables
        reporting (logged, counted) instead of failing the app's start.
        """
        registry, transport, pins = self._registry_arg, self._transport, self.options.pins
        if registry is None and transport is not None and not self._strict:
            def fetch() -> Registry:
                try:
                    return resolve_registry(None, transport, self.state, pins)
                finally:
                    if self._fetch_only_transport:
                        transport.close()   # no idle connection kept for a one-off fetch

            from .startup import RegistryResolver  # only for a registry fetched in the background

            self._resolver = RegistryResolver(fetch, self.install_registry, self._registry_failed,
                                              self.options.retry)
            self._resolver.start()
            return
        try:
            resolved = resolve_registry(registry, transport, self.state, pins)
        except (LdptError, OSError) as exc:
            if self._strict or registry is None:   # strict, or no way to get a registry at all
                raise
            self._registry_failed(exc)              # e.g. the app's metrics.toml went missing
            return
        self.install_registry(resolved)

    def install_registry(self, registry: Registry) -> None:
        """Make ``registry`` current, then encode the reports that waited for it (the start-up's
        and the background fetch's last step; a test or the conformance generator may call it
        on a client built without one)."""
        table = _table_for(registry)
        for name in registry.metrics:  # resolve now: a 10⁶-value domain takes ~0.3 s, not report()'s
            table.get(name)
        with self._lock:
            self.registry, self._table = registry, table
            waiting = list(self._waiting)
            self._waiting.clear()
        for metric, value in waiting:
            self.report(metric, value)

    def _registry_failed(self, exc: Exception) -> None:
        with self._lock:
            self._disabled = f"the metric registry cannot be used: {exc}"
            dropped = len(self._waiting)
            self._waiting.clear()
        self._counters["disabled"] += dropped
        log.error("ldpt: reporting is disabled: %s", exc)

    def _wait_for(self, metric: str, value: Any) -> bool:
        """report() before the registry is known: keep the call in memory (bounded), True if kept."""
        with self._lock:
            if self._table is None:
                if len(self._waiting) >= self.options.queue_size:
                    self._counters["dropped_queue_full"] += 1
                    return False
                self._waiting.append((metric, value))   # the true value: memory only, never disk
                return True
        return self._report(metric, value)

    def wait_for_registry(self, timeout: float = 10.0) -> bool:
        """True when the registry is known (at once unless it is being fetched in the background)."""
        if self._table is not None:
            return True
        if self._resolver is None:
            return False
        self._resolver.hurry()
        self._resolver.wait(timeout)
        return self._table is not None

    def _stop_registry(self) -> None:
        """close(): stop fetching; what still waits for a registry is dropped (counted)."""
        if self._resolver is not None:
            self._resolver.stop()
        with self._lock:
            dropped = len(self._waiting)
            self._waiting.clear()
        if dropped:
            self._counters["dropped_no_registry"] += dropped
            log.warning("ldpt: %d report(s) were dropped at close: the metric registry could not be "
                        "fetched (pass registry= or check the endpoint)", dropped)

    # --- the hot path ---------------------------------------------------------------------------
    def report(self, metric: str, value: Any) -> bool:
        """Randomise ``value`` and queue it for ``metric``; True if queued. Never raises (unless strict)."""
        try:
            return self._report(metric, value)
        except Exception as exc:
            if self._strict:
                raise
            self._counters["internal_error"] += 1
            try:
                message = f"ldpt: report({metric!r}) failed internally: {type(exc).__name__}: {exc}"
            except Exception:  # noqa: BLE001 - a metric name or error that cannot even be printed
                message = f"ldpt: report() failed internally: {type(exc).__name__}"
            self._log_once(("internal", type(exc)), logging.ERROR, message)
            return False

    def _report(self, metric: str, value: Any) -> bool:
        table = self._table
        if table is None:
            if self._closed or self._opted_out or self._disabled is not None:
                return self._not_reporting(metric)
            return self._wait_for(metric, value)
        rt = table.get(metric)
        if rt is None:
            return self._bad_metric(metric)
        if self._closed or self._opted_out or self._disabled is not None:
            return self._not_reporting(metric)
        if metric in self._uploader.batcher.stale_metrics:
            self._counters["stale_metric"] += 1
            if self._strict:
                raise LdptError(f"metric {metric!r} was rejected by the collector (registry changed)")
            return False
        found = self._looked_up(rt, value)
        if found is None:
            return self._bad_value(rt, value)
        key, idx, clipped = found
        if clipped:
            self._counters["clipped"] += 1   # discover: truncated on the device (docs/discovery.md)
        if self._resync:
            self._resync_after_fork()
        now = self._clock()
        day = day_of(now)
        charge = Charge(rt.name, rt.fingerprint, day, rt.eps, rt.eps_inf,
                        value_digest(self._lkey, rt.fingerprint, key) if rt.memoised else None,  # type: ignore[arg-type]
                        rt.rpw, rt.budget, rt.dev_window, rt.dev_lifetime, rt.window_charges)
        with self._lock:
            refusal = apply(self._mirror, charge, self._elapsed())   # reserve in the mirror of the ledger
            if refusal is None:
                self._uncommitted[id(charge)] = charge
            else:
                self._refused(charge, refusal)
        if refusal is not None:
            return False
        try:
            payload = self._encode(rt, key, idx, day)
            ok = self._uploader.submit(QueuedReport(self, charge, rt.name, rt.fingerprint, payload),
                                       time.monotonic())
        except BaseException:
            self._unreserve(charge)
            raise
        if not ok:
            self._unreserve(charge)
            self._counters["dropped_queue_full"] += 1
            self._log_once("queue-full", logging.WARNING,
                           "ldpt: the report queue is full; new reports are dropped (drop-newest) "
                           "until the worker catches up")
            return False
        self._counters["reported"] += 1
        return True

    def _looked_up(self, rt: _Metric, value: Any) -> tuple[str, int, bool] | None:
        """(key, index, clipped) of one value of metric ``rt``, None outside its domain: a number
        rounded to the grid (fresh coins, or the secret's α for a memoised mean), a category or
        string looked up (a string longer than discover keeps is clipped); for a memoised metric
        the key is the memo key, one ε∞ per distinct key (LOLOHA: per distinct hashed value)."""
        if rt.numeric:
            found = rt.number(value, self._secret) if rt.two_round else rt.number(value)
            if found is None:
                return None
            key, idx, clipped = found
        else:
            found = rt.lookup(value)
            if found is None:
                return None
            key, idx = found
            clipped = rt.max_bytes is not None and len(encode_text(key)) > rt.max_bytes
        if rt.two_round:
            key = rt.encoder.memo_key(idx, self._secret, rt.name)
        return key, idx, clipped

    def encode_value(self, metric: str, value: Any) -> EncodedValue:
        """One value's report of ``metric`` as ``report()`` computes it, without charging the ledger
        or queueing anything (the conformance generator's entry point: docs/conformance.md). The
        registry must be installed; DomainError for a value outside the domain."""
        rt = self._table.get(metric) if self._table is not None else None
        if rt is None:
            raise RegistryError(f"metric {metric!r} is not in an installed registry")
        found = self._looked_up(rt, value)
        if found is None:
            _raise_domain_error(rt, value)
        key, idx, clipped = found   # type: ignore[misc]
        digest = value_digest(self._lkey, rt.fingerprint, key) if rt.memoised else None  # type: ignore[arg-type]
        return EncodedValue(key, idx, clipped, digest, self._encode(rt, key, idx))

    def _encode(self, rt: _Metric, key: str, idx: int, day: int | None = None) -> Any:
        """The randomised wire payload of one value (the true value goes no further); ``day``:
        the report's UTC day (default: the clock's). Every metric's encoder is built from its
        encoder block (client_sdk.protocols.blocks): it takes the client's secret, the metric and
        the day as a Context, and draws its fresh coins from the OS CSPRNG."""
        ctx = Context(self._secret, rt.name, day_of(self._clock()) if day is None else day)  # type: ignore[arg-type]
        return rt.encoder.encode_one(idx, key, ctx)

    # --- refusals and bad input ------------------------------------------------------------------
    def _bad_metric(self, metric: str) -> bool:
        self._counters["unknown_metric"] += 1
        if self._strict:
            self.registry.get(metric)  # raises UnknownMetricError with the known names
        self._log_once(("unknown", metric), logging.WARNING,
                       f"ldpt: unknown metric {metric!r} (not in {self.registry.source}); "
                       "its reports are counted and dropped")
        return False

    def _bad_value(self, rt: _Metric, value: Any) -> bool:
        self._counters["invalid_value"] += 1
        if self._strict:
            _raise_domain_error(rt, value)
        # The log names the metric, never the value (it may be private).
        domain = "finite numbers" if rt.numeric else f"{rt.spec.domain_size or 'string'} values"
        self._log_once(("value", rt.name), logging.WARNING,
                       f"ldpt: a value reported for {rt.name!r} is not in its domain "
                       f"({domain}); such reports are counted and dropped")
        return False

    def _not_reporting(self, metric: str) -> bool:
        reason = "closed" if self._closed else "opted_out" if self._opted_out else self._disabled_counter
        self._counters[reason] += 1
        if self._strict and self._disabled is not None:
            raise LdptError(f"reporting is disabled: {self._disabled}")
        return False

    def _refused(self, charge: Charge, refusal: Refusal) -> None:
        """Count a budget refusal (lock held); the worker writes it to the ledger."""
        self._counters[f"refused_{refusal.value}"] += 1
        entry = self._refusals.get((charge.metric, refusal))
        if entry is None:
            self._refusals[(charge.metric, refusal)] = [charge, 1]
        else:
            entry[1] += 1
        self._uploader.note_refusal(self)
        self._log_refusal(charge.metric, refusal)
        if self._strict:
            raise LdptError(f"metric {charge.metric!r}: report refused by the privacy ledger "
                            f"({refusal.value} budget)")

    def _log_refusal(self, metric: str, refusal: Refusal) -> None:
        """Routine with the default budget (one report per window), hence INFO, once per kind."""
        self._log_once(("refused", metric, refusal), logging.INFO,
                       f"ldpt: a report of {metric!r} was refused by the privacy budget "
                       f"({REFUSAL_TEXT[refusal]}); it is not sent. Further refusals of this kind "
                       "are counted in stats() only")

    def _log_once(self, key: Any, level: int, message: str) -> None:
        if key not in self._logged and len(self._logged) < MAX_LOGGED_KINDS:
            self._logged.add(key)
            log.log(level, message)

    # --- the uploader's view of the client (client_sdk.uploader.Owner): called by its worker --------
    @property
    def ledger(self) -> Any:
        """The device's privacy ledger (the state's), charged by the uploader as it builds batches."""
        return self.state.ledger

    @property
    def elapsed_clock(self) -> ElapsedClock:
        """The device's elapsed clock (``ClientOptions.elapsed_clock``), read by the ledger."""
        return self._elapsed

    def drain_refusals(self) -> RefusalCounts:
        """Refusals counted on the app's threads since the last call, for the ledger (then cleared)."""
        with self._lock:
            out = [(c, reason, n) for (_, reason), (c, n) in self._refusals.items()]
            self._refusals.clear()
            return out

    def set_dimensions(self, values: Mapping[str, Any]) -> None:
        """Set the device's public dimensions (e.g. ``{"os": "android", "app_version": "4.2.1"}``).

        They are sent *in clear* with every batch (docs/wire-format.md, docs/privacy.md "Public
        dimensions"), mapped through the registry's rule at send time: a value outside a
        dimension's closed set goes as ``other``, a dimension the registry does not declare is
        not sent. Replaces the values set before.
        """
        if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
            raise TypeError("dimensions must be a mapping of dimension names to values")
        with self._lock:
            self._dimensions = {k: str(v) for k, v in values.items()}

    def wire_dimensions(self) -> dict[str, str]:
        """The dimensions this device sends: the registry's declared ones, bucketed."""
        registry = self.registry
        table = None if registry is None else registry.dimension_table
        if table is None or not self._dimensions:
            return {}
        return {name: table.dimensions[name].bucket(raw) for name, raw in sorted(self._dimensions.items())
                if name in table.dimensions}

    def accepts_reports(self) -> bool:
        """False once the app, or another process sharing its state, opted out."""
        if self._opted_out:
            return False
        if self.state.opted_out:   # another process of the app opted out
            self._opted_out = True
            return False
        return True

    def note_committed(self, items: Any, outcomes: Any, accounts: Book | None,
                       foreign: bool = True) -> None:
        """The worker charged (or dropped) queued reports: update counters and the mirror.

        The mirror is the committed book plus the reports still queued. When every report was
        charged as reserved and nobody else wrote the book, the mirror is already right and
        only the committed book is swapped in (no replay: O(batch), not O(queue)).
        """
        with self._lock:
            as_reserved = not foreign and accounts is not None
            for it, outcome in zip(items, outcomes):
                self._uncommitted.pop(id(it.charge), None)
                if outcome is None:
                    self._counters["charged"] += 1
                    continue
                as_reserved = False
                if isinstance(outcome, Refusal):
                    self._counters[f"refused_{outcome.value}"] += 1
                    self._log_refusal(it.metric, outcome)   # another process spent the budget first
                else:
                    self._counters["dropped"] += 1
            if accounts is not None:
                self._accounts = accounts
            if not as_reserved:
                self._rebuild_mirror()

    def _unreserve(self, charge: Charge) -> None:
        with self._lock:
            self._uncommitted.pop(id(charge), None)
            self._rebuild_mirror()

    def _rebuild_mirror(self) -> None:
        """mirror = committed accounts + reports queued but not yet charged (lock held)."""
        mirror = self._accounts.copy()
        if self._uncommitted:
            reading = self._elapsed()
            for c in self._uncommitted.values():
                apply(mirror, c, reading)
        self._mirror = mirror

    def _resync_after_fork(self) -> None:
        with self._lock:
            self._resync = False
            self._uncommitted.clear()
            self._refusals.clear()
            try:
                self._accounts = self.state.ledger.snapshot()
            except LedgerError as exc:
                self._disabled = str(exc)
            self._rebuild_mirror()

    # --- public helpers -------------------------------------------------------------------------------
    def validate(self, metric: str, value: Any) -> None:
        """Raise UnknownMetricError / DomainError if ``report(metric, value)`` would be dropped as bad input.

        RegistryError while the registry is still being fetched (``wait_for_registry`` first).
        """
        if self._table is None or self.registry is None:
            raise RegistryError("the metric registry is not known yet (it is being fetched from the "
                                "collector); call wait_for_registry() first")
        rt = self._table.get(metric)
        if rt is None:
            self.registry.get(metric)
            raise UnknownMetricError(metric)  # pragma: no cover - get() raised
        if (rt.number(value) if rt.numeric else rt.lookup(value)) is None:
            _raise_domain_error(rt, value)

    def stats(self) -> dict[str, int]:
        """Counters of this client (and of its uploader when it owns one)."""
        out = dict(self._counters)
        out["awaiting_registry"] = len(self._waiting)
        if self._uploader is not None and getattr(self, "_owns_uploader", False):
            out.update(self._uploader.batcher.counters)
            out["queued"] = len(self._uploader.batcher.queue)
            out["dropped_queue_full"] = max(out["dropped_queue_full"], self._uploader.batcher.queue.dropped)
            ob = self._uploader.batcher.outbox
            out["outbox_pending"] = ob.pending()
            out["outbox_dropped_reports"] = ob.dropped_reports
            out["outbox_expired_reports"] = ob.expired_reports
        return out

    def undelivered(self) -> dict[str, int]:
        """The non-zero ``LOST_COUNTERS`` of ``stats()``: reports that will never be delivered."""
        counts = self.stats()
        return {k: counts[k] for k in LOST_COUNTERS if counts.get(k, 0) > 0}

    def _close_result(self, delivered: bool) -> bool:
        """What close()/aclose() return: False (and one log line saying what) when reports were
        lost, else whether everything was acknowledged (``delivered``)."""
        lost = self.undelivered()
        if lost:
            log.warning("ldpt: closed with reports that were not delivered: %s",
                        ", ".join(f"{k} {v}" for k, v in lost.items()))
            return False
        return delivered

    def ledger_snapshot(self) -> Book:
        """The privacy ledger as committed (what `ldpt ledger` shows)."""
        return self.state.ledger.snapshot()

    def opt_out(self) -> None:
        """Stop reporting for good: delete queued reports, the offline queue and the secret."""
        with self._lock:
            self._opted_out = True
            self._uncommitted.clear()
            self._refusals.clear()
            self._waiting.clear()
        if self._uploader is not None:
            self._uploader.batcher.purge(self, outbox_too=getattr(self, "_owns_uploader", False))
        self.state.opt_out()
        self._secret = None
        self._lkey = None

    def opt_in(self) -> None:
        """Undo ``opt_out``: this client reports again, with a fresh secret (a new privacy spend).

        The ledger's totals were kept, so the lifetime budget still binds; memoised values are
        charged afresh (their digests were keyed by the deleted secret).
        """
        self.state.opt_in()
        self._load_secret(getattr(self.state, "path", None))
        with self._lock:
            self._opted_out = self.state.opted_out
            try:
                self._accounts = self.state.ledger.snapshot()
            except LedgerError as exc:
                self._disabled = str(exc)
            self._rebuild_mirror()

    @property
    def opted_out(self) -> bool:
        return self._opted_out

    def _after_fork_child(self) -> None:
        self._lock = threading.Lock()
        self._resync = True
        self._waiting.clear()   # like the report queue: the parent encodes and sends what waited
        if self._resolver is not None and not self._closed:
            self._resolver.after_fork_child()


def _describe(exc: BaseException) -> str:
    """An OSError as its strerror ("Is a directory"), anything else as its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _raise_domain_error(rt: _Metric, value: Any) -> None:
    """DomainError naming the metric (and, for categorical domains, the allowed values)."""
    if rt.string:
        raise DomainError(f"metric {rt.name!r} takes string values, got {type(value).__name__}")
    if rt.numeric:
        rt.spec.number(value)  # raises for non-numbers, NaN and infinities
        raise DomainError(f"metric {rt.name!r}: {value!r} cannot be reported")  # pragma: no cover
    rt.spec.indices([value])  # raises DomainError naming the metric and the value


def _make_outbox(state: ClientState, limits: OutboxLimits, offline: bool) -> Any:
    directory = state.outbox_dir if offline else None
    return DiskOutbox(directory, limits) if directory is not None else MemoryOutbox(limits)


class TelemetryClient(ClientCore):
    """The SDK for threaded apps: ``report``, ``flush``, ``close``, ``opt_out``, ``opt_in``, ``stats``.

    Keyword-only beyond endpoint/registry/state_dir: ``state`` (a ``MemoryState`` instead of
    a directory), ``transport`` (e.g. ``client_sdk.testing.MemoryTransport`` in tests),
    ``uploader`` (share one worker between many clients, e.g. a simulated fleet),
    ``options`` (``ClientOptions``), and any ``ClientOptions`` field as a keyword
    (``batch_size``, ``max_batch_age``, ``queue_size``, ``drop_policy``, ``retry``,
    ``outbox_limits``, ``offline``, ``strict``, ``pins``, ``timeout``, ``clock`` — the wall
    clock in seconds since the epoch, default ``time.time``: the ledger's windows are its UTC days —
    and ``elapsed_clock``, which decides how fast new windows may open: client_sdk.device_clock).
    """

    def __init__(self, endpoint: str | None = None,
                 registry: Registry | str | os.PathLike[str] | Mapping[str, Any] | None = None,
                 state_dir: str | os.PathLike[str] | None = None, *,
                 state: ClientState | None = None, transport: Transport | None = None,
                 uploader: Uploader | None = None, options: ClientOptions | None = None,
                 **option_overrides: Any) -> None:
        options = ClientOptions.merge(options, option_overrides)
        super().__init__(endpoint, registry, state_dir, state=state, transport=transport, options=options)
        self._owns_uploader = uploader is None
        if uploader is None:
            if self._transport is None:
                raise ValueError("give endpoint= (the collector URL) or transport=")
            uploader = Uploader(self._transport, _make_outbox(self.state, options.outbox_limits, options.offline),
                                **options.uploader_kwargs(), sealer=options.make_sealer(self._transport))
        elif options.seal is not None:
            raise ValueError("seal= configures the client's own uploader; with a shared uploader= give "
                             "Uploader(..., sealer=Sealer(seal, transport)) instead")
        self._uploader = uploader
        try:
            self._start_registry()
        except BaseException:
            if self._owns_uploader:
                uploader.close(0)
            elif self._transport is not None:
                self._transport.close()
            raise
        if self._owns_uploader and isinstance(uploader.batcher.outbox, DiskOutbox) \
                and uploader.batcher.outbox.pending():
            uploader.start()   # batches left by an earlier run go out now

    @property
    def uploader(self) -> Uploader:
        return self._uploader

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything now; True when all of it was acknowledged within ``timeout`` seconds.

        "Now": a registry still being fetched is fetched again at once, and a retry back-off
        after an outage is cut short (client_sdk.uploader).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        if self._table is None and self._waiting and not self.wait_for_registry(timeout):
            return False
        return self._uploader.flush(max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> bool:
        """Stop reporting, flush within ``timeout``; what is unsent stays in the offline queue.

        True when every report was acknowledged; False when some are still queued, or were
        dropped (no registry, a full queue, ...: ``undelivered()`` says which, and one warning
        is logged)."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self._table is None and self._waiting:
            self.wait_for_registry(timeout)
        self._closed = True
        self._stop_registry()
        timeout = max(0.0, deadline - time.monotonic())
        if self._owns_uploader:
            return self._close_result(self._uploader.close(timeout))
        return self._close_result(self._uploader.flush(timeout))

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- process-wide hooks ----------------------------------------------------------------------------------

_LIVE_CLIENTS: weakref.WeakSet[ClientCore] = weakref.WeakSet()


def _clients_after_fork_child() -> None:
    for client in list(_LIVE_CLIENTS):
        client._after_fork_child()


def _close_at_exit() -> None:
    """Interpreter exit: queued reports of unclosed clients go to their offline queue (briefly)."""
    for client in list(_LIVE_CLIENTS):
        if isinstance(client, TelemetryClient) and client._owns_uploader and not client._closed:
            try:
                client.close(EXIT_CLOSE_TIMEOUT)
            except Exception:  # noqa: BLE001 - never fail interpreter shutdown
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_clients_after_fork_child)
atexit.register(_close_at_exit)
