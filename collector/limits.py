"""Ingest limits that bound poisoning by one source (docs/security.md gives the figures).

Ingest is unauthenticated by design: a device cannot keep a secret from its owner, so anyone
can forge reports that an honest client could have produced. Each forged report moves an
estimate by a bounded amount (Cheu, Smith and Ullman 2021; Cao, Jia and Gong 2021), so what
a collector can bound is *how many* forged reports one source gets in:

- **Reports per metric per batch.** An honest device sends at most its metric's
  ``reports_per_window`` per window, and an SDK batch rarely spans more than a few windows:
  a batch may carry at most ``max_reports_per_metric × reports_per_window`` reports of one
  metric (422 ``too-many-reports``; retrying the same batch cannot help).
- **Requests per source address.** A token bucket per address (``rate_limit`` requests per
  second, bursts of ``rate_limit_burst``): beyond it 429 ``rate-limited`` with Retry-After.
  The address is the TCP peer, or, when the peer is one of ``trusted_proxies``, the
  rightmost X-Forwarded-For address that is not itself a trusted proxy (all header lines
  read as one list: a proxy that appends a line leaves the client's forged line on the left).
- **Relays.** Sources in ``relay_sources`` batch many devices' reports (an aggregation relay,
  `ldpt simulate --url`, a load test on the collector's host): neither limit applies to
  them. A request that arrives *through* an untrusted proxy (it carries X-Forwarded-For but
  its peer is not in ``trusted_proxies``) is never treated as a relay.
- **Ingest key.** Deployments whose apps can hold a shared key set ``ingest_key_file``:
  every batch must then carry ``Authorization: Bearer <key>`` (401 ``ingest-key-required``,
  ``reason`` missing, not-bearer or invalid). The key is checked after the rate limit, so a
  flood of refused requests is throttled like any other.

Every refusal is counted by its problem type in ``ldpt_requests_rejected_total``.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .config import ConfigError, ServeConfig
from .problems import Problem

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: The challenge of a 401 (RFC 9110 §11.6.1: a 401 names the scheme it wants).
INGEST_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ldpt-ingest"'}
#: Idle buckets are forgotten once this many sources are tracked (a full bucket holds no state).
MAX_TRACKED_SOURCES = 100_000


def parse_networks(text: str, setting: str) -> tuple[Network, ...]:
    """Comma-separated addresses or CIDR networks ("" = none)."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"setting {setting}: {item!r} is not an IP address or network "
                              "(e.g. 10.0.0.0/8)") from None
    return tuple(out)


def _within(address: Address | None, networks: Iterable[Network]) -> bool:
    return address is not None and any(address in net for net in networks)


def _address(text: str | None) -> Address | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip().split("%")[0])
    except ValueError:
        return None


def forwarded_for(headers: Mapping[str, str]) -> str | None:
    """Every X-Forwarded-For line of a request as one comma-separated list, or None.

    A proxy may append its own header line instead of extending the client's; read alone, the
    first line is the client's and says whatever the client likes. RFC 9110 §5.3 makes
    several lines of a list header one list in order, so the right-most hops, written by the
    proxies, stay the right-most."""
    getall = getattr(headers, "getall", None)
    lines = getall("X-Forwarded-For", []) if getall is not None else \
        [v for v in (headers.get("X-Forwarded-For"),) if v is not None]
    return ",".join(lines) if lines else None


class TokenBuckets:
    """One token bucket per source: ``rate`` tokens per second, at most ``burst`` stored.

    ``take(source)`` spends a token and returns 0, or returns the seconds until one is
    available. Memory is bounded: when ``max_sources`` are tracked, buckets that have refilled
    completely (indistinguishable from a new source) are dropped.
    """

    def __init__(self, rate: float, burst: float, *, clock: Callable[[], float] = time.monotonic,
                 max_sources: int = MAX_TRACKED_SOURCES) -> None:
        self.rate, self.burst, self.clock, self.max_sources = rate, burst, clock, max_sources
        self._buckets: dict[object, tuple[float, float]] = {}  # source -> (tokens, at)

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, source: object) -> float:
        now = self.clock()
        tokens, at = self._buckets.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[source] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) >= self.max_sources and source not in self._buckets:
            self._forget_full(now)
        self._buckets[source] = (tokens - 1.0, now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        full = [s for s, (tokens, at) in self._buckets.items()
                if tokens + (now - at) * self.rate >= self.burst]
        for s in full:
            del self._buckets[s]
        if len(self._buckets) >= self.max_sources:  # all busy: drop the oldest half
            for s in list(self._buckets)[: self.max_sources // 2]:
                del self._buckets[s]


class IngestPolicy:
    """The limits of one worker, built from the collector's settings."""

    def __init__(self, config: ServeConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_reports_per_metric = config.max_reports_per_metric
        self.trusted_proxies = parse_networks(config.trusted_proxies, "trusted_proxies")
        self.relay_sources = parse_networks(config.relay_sources, "relay_sources")
        self.buckets = TokenBuckets(config.rate_limit, config.rate_limit_burst, clock=clock)
        self.ingest_keys = read_ingest_keys(config.ingest_key_file)

    # --- who is asking ----------------------------------------------------------------------------
    def source(self, peer: str | None, headers: Mapping[str, str]) -> tuple[Address | None, bool]:
        """(source address, whether it is a relay) for a request from ``peer``."""
        address = _address(peer)
        forwarded = forwarded_for(headers)
        if forwarded is None:
            return address, _within(address, self.relay_sources)
        if not _within(address, self.trusted_proxies):
            return address, False  # forwarded by a proxy we do not trust: never a relay
        for hop in reversed(forwarded.split(",")):
            hop_address = _address(hop)
            if hop_address is None:
                return address, False  # garbled header: limit the proxy itself
            address = hop_address
            if not _within(address, self.trusted_proxies):
                break
        return address, _within(address, self.relay_sources)

    # --- checks -----------------------------------------------------------------------------------
    def check_key(self, authorization: str | None) -> None:
        """401 ``ingest-key-required`` unless ``Authorization: Bearer <key>`` carries an ingest key.

        The header is compared as the bytes that were sent (aiohttp decodes header bytes that
        are not UTF-8 as surrogates, which a plain ``encode()`` refuses): any value, however
        malformed, is a 401 with a machine-readable ``reason`` (missing, not-bearer, invalid),
        never an error. The caller spends the source's rate-limit token first, so refusals are
        throttled like any other request."""
        if not self.ingest_keys:
            return
        if authorization is None:
            raise self._key_problem("missing", "send Authorization: Bearer <key>")
        scheme, _, given = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise self._key_problem("not-bearer", "the Authorization header must be 'Bearer <key>'")
        given_bytes = given.strip().encode("utf-8", "surrogateescape")  # the bytes sent
        ok = False
        for key in self.ingest_keys:  # every comparison runs: no timing signal of which key
            ok |= hmac.compare_digest(given_bytes, key)
        if not ok:
            raise self._key_problem("invalid", "the key sent is not one of this collector's ingest keys")

    @staticmethod
    def _key_problem(reason: str, what: str) -> Problem:
        return Problem("ingest-key-required", f"this collector accepts batches only with its ingest key: "
                       f"{what}", headers=dict(INGEST_CHALLENGE), reason=reason)

    def admit(self, source: Address | None, relay: bool) -> None:
        """Spend one request token of the source; 429 when its bucket is empty."""
        if relay:
            return
        wait = self.buckets.take(source)
        if wait:
            raise Problem("rate-limited", "too many batches from this address; retry after "
                          "Retry-After seconds (an SDK sends a few batches a minute)",
                          retry_after=wait)

    def check_batch(self, per_metric: Mapping[str, int], reports_per_window: Mapping[str, int],
                    relay: bool) -> None:
        """At most max_reports_per_metric × reports_per_window reports of a metric per batch."""
        if relay:
            return
        for metric, count in per_metric.items():
            limit = self.max_reports_per_metric * reports_per_window.get(metric, 1)
            if count > limit:
                raise Problem("too-many-reports", f"{count} reports of metric {metric!r} in one "
                              f"batch; one device sends at most {limit} (a relay batching many "
                              "devices must be listed in the collector's relay_sources)",
                              metric=metric, limit=limit)


def read_ingest_keys(path: str | Path | None) -> tuple[bytes, ...]:
    """Ingest keys, one per line (several allow rotation); empty tuple = no key required."""
    if not path:
        return ()
    from .config import read_tokens

    return read_tokens(Path(path), what="ingest key")
