"""Sealed delivery: the one option an app sets (``seal=``), and what the uploader does with it.

``Seal`` says where sealed batches go (docs/guide-app-teams.md, "Sealed reports"):

- ``Seal.gateway()`` — straight to the collector's gateway, ``POST {endpoint}/.well-known/ohttp-gateway``:
  sealed and padded, but the collector still sees the device's address (for tests, or when
  the endpoint is itself a relay's URL for the gateway);
- ``Seal.relay(url)`` — to an Oblivious HTTP relay (RFC 9458) that forwards to that gateway: the
  collector sees the relay's address, never the device's;
- ``Seal.shuffler(url)`` — to `ldpt shuffle`, which stores envelopes and forwards them to the
  collector in shuffled batches; it acknowledges with its own plain answer (docs/wire-format.md,
  "The shuffler's acknowledgement").

The key configuration is fetched from the collector (``GET {endpoint}/.well-known/ohttp-gateway``,
kept ``KEY_CONFIG_TTL`` seconds) unless the app gives it (``key_config=``: the bytes of an
``application/ohttp-keys`` document, or their base64, as `ldpt keys config` prints them) —
giving it pins the key, so the collector cannot hand this device a key of its own.

``Sealer`` is the uploader's side. A batch is sealed once (client_sdk/ohttp.py: the padded
Binary HTTP request, HPKE to the key) and the envelope is stored with it in the outbox before
it is first sent, so every retry sends the same bytes (a shuffler deduplicates on them; the
inner batch id still deduplicates at the collector). Only when the gateway answers that the
key is unknown (``ohttp-key``, after a rotation outlived the overlap) is a batch sealed again,
to the freshly fetched configuration, once. A sealed client never sends a plain batch.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import TransportError
from .transport import DEFAULT_TIMEOUT, HTTPTransport, Response, Transport

if TYPE_CHECKING:
    import ssl

    from .ohttp import KeyConfig, SealedRequest
    from .queue import StoredBatch

__all__ = ["KEY_CONFIG_TTL", "Seal", "Sealer"]

MODES = ("gateway", "relay", "shuffler")
#: Seconds a fetched key configuration is used before it is fetched again.
KEY_CONFIG_TTL = 86_400.0


@dataclasses.dataclass(frozen=True)
class Seal:
    """Where sealed batches go and which key they are sealed to (module docstring)."""

    mode: str = "gateway"
    url: str | None = None
    key_config: bytes | str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"seal mode {self.mode!r}: use Seal.gateway(), Seal.relay(url) or Seal.shuffler(url)")
        if self.mode != "gateway" and not self.url:
            raise ValueError(f"Seal.{self.mode}(url) needs the {self.mode}'s URL")
        if self.mode == "gateway" and self.url:
            raise ValueError("Seal.gateway() posts to the collector's endpoint; for another URL use Seal.relay(url)")
        if self.key_config is not None:
            self.configs()  # a malformed document fails here, when the app starts

    @classmethod
    def gateway(cls, key_config: bytes | str | None = None) -> Seal:
        return cls("gateway", None, key_config)

    @classmethod
    def relay(cls, url: str, key_config: bytes | str | None = None) -> Seal:
        return cls("relay", url, key_config)

    @classmethod
    def shuffler(cls, url: str, key_config: bytes | str | None = None) -> Seal:
        return cls("shuffler", url, key_config)

    def configs(self) -> list[KeyConfig]:
        """The given key configurations (ValueError when malformed), [] when none was given."""
        from . import ohttp

        raw = self.key_config
        if raw is None:
            return []
        if isinstance(raw, str):
            try:
                raw = base64.b64decode(raw.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("key_config text must be the base64 of an application/ohttp-keys "
                                 "document (`ldpt keys config` prints it)") from None
        try:
            return ohttp.decode_key_configs(bytes(raw))
        except ohttp.OhttpError as exc:
            raise ValueError(f"key_config is not an application/ohttp-keys document: {exc}") from None


def is_key_problem(response: Response) -> bool:
    """A gateway's (or shuffler's) clear 400 saying the envelope's key is unknown (RFC 9458 §5.3)."""
    if response.status != 400:
        return False
    from .ohttp import KEY_PROBLEM_TYPE

    doc = response.json()
    return isinstance(doc, dict) and doc.get("type") == KEY_PROBLEM_TYPE


class Sealer:
    """Seals, stores and sends batches for one ``Seal``; used from the uploader's thread."""

    def __init__(self, seal: Seal, collector: Transport | None, *, timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None, clock: Callable[[], float] = time.time,
                 post: Transport | None = None) -> None:
        from . import ohttp  # noqa: F401 - the wire format module (pure); HPKE loads on the first seal

        self.seal = seal
        self.collector = collector
        self.clock = clock
        self.shuffler = seal.mode == "shuffler"
        self._given = seal.configs()
        if not self._given and collector is None:
            raise ValueError("sealed batches need the collector's key configuration: give endpoint= "
                             "(it is fetched from there) or Seal(..., key_config=...)")
        if post is not None:
            self.post, self.path = post, self._path_of(seal.url)
        elif seal.mode == "gateway":
            if collector is None:
                raise ValueError("Seal.gateway() posts to the collector: give endpoint= or transport=")
            self.post, self.path = collector, ohttp.GATEWAY_PATH
        else:
            assert seal.url is not None
            self.post = HTTPTransport(seal.url, timeout=timeout, ssl_context=ssl_context)
            self.path = self._path_of(seal.url)
        self._owns_post = post is None and seal.mode != "gateway"
        self._config: KeyConfig | None = None
        self._fetched_at = -float("inf")
        self._lock = threading.Lock()
        self.counters = {"sealed": 0, "resealed": 0, "key_fetches": 0, "undecryptable_answers": 0}

    @staticmethod
    def _path_of(url: str | None) -> str:
        import urllib.parse

        return "" if url and urllib.parse.urlsplit(url).path.rstrip("/") else "/"

    # --- the key configuration --------------------------------------------------------------------
    def cached_config(self) -> KeyConfig | None:
        """The key configuration if known without the network (given, or fetched and fresh)."""
        from . import ohttp

        if self._given:
            return ohttp.choose(self._given)
        if self._config is not None and self.clock() - self._fetched_at < KEY_CONFIG_TTL:
            return self._config
        return None

    def config(self, refresh: bool = False) -> KeyConfig:
        """The configuration to seal to; fetched from the collector when not given (TransportError
        when it cannot be: the batch waits and is retried like an unreachable collector)."""
        from . import ohttp

        with self._lock:
            cached = None if refresh else self.cached_config()
            if cached is not None:
                return cached
            if self._given:
                return ohttp.choose(self._given)
            assert self.collector is not None
            self.counters["key_fetches"] += 1
            resp = self.collector.request("GET", ohttp.GATEWAY_PATH, None, ohttp.KEYS_HEADERS)
            ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            if resp.status != 200 or ctype != ohttp.KEYS_TYPE:
                raise TransportError(f"the collector answered {resp.status} ({ctype or 'no type'}) to GET "
                                     f"{ohttp.GATEWAY_PATH}: no key configuration to seal to")
            try:
                self._config = ohttp.choose(ohttp.decode_key_configs(resp.body))
            except ohttp.OhttpError as exc:
                raise TransportError(f"the collector's key configuration is unusable: {exc}") from None
            self._fetched_at = self.clock()
            return self._config

    def refetchable(self) -> bool:
        return not self._given

    # --- sealing ----------------------------------------------------------------------------------
    def seal_batch(self, batch: StoredBatch, config: KeyConfig) -> SealedRequest:
        from . import ohttp

        batch.sealed = ohttp.seal_request(config, ohttp.inner_request(batch.body))
        self.counters["sealed"] += 1
        return batch.sealed

    def try_seal(self, batch: StoredBatch) -> None:
        """Seal at build time when the key is known without the network (else: before sending)."""
        config = self.cached_config()
        if config is not None and batch.sealed is None:
            self.seal_batch(batch, config)

    # --- sending ------------------------------------------------------------------------------------
    def send(self, batch: StoredBatch, persist: Callable[[StoredBatch], None]) -> Response:
        """Send ``batch`` sealed and return the answer to settle it on: the collector's inner
        answer (gateway, relay), the shuffler's acknowledgement, or the outer answer itself
        when there is no inner one (an error of the relay or of the gateway's outer layer).
        ``persist`` stores a newly made envelope before it is sent. Raises TransportError."""
        fresh = False
        if batch.sealed is None:
            self.seal_batch(batch, self.config())
            persist(batch)
        for attempt in (0, 1):
            from . import ohttp

            assert batch.sealed is not None
            resp = self.post.request("POST", self.path, batch.sealed.envelope, ohttp.SEALED_HEADERS)
            if is_key_problem(resp) and attempt == 0 and self.refetchable() and not fresh:
                # the key rotated beyond its overlap: seal again to the new key, once
                self.seal_batch(batch, self.config(refresh=True))
                self.counters["resealed"] += 1
                persist(batch)
                fresh = True
                continue
            if self.shuffler:
                return resp
            return self.inner(batch, resp)
        raise AssertionError("unreachable")  # pragma: no cover

    def inner(self, batch: StoredBatch, resp: Response) -> Response:
        """The collector's answer inside an encapsulated response (or ``resp`` when it is not one)."""
        from . import bhttp, ohttp

        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if resp.status != 200 or ctype != ohttp.RESPONSE_TYPE:
            return resp
        assert batch.sealed is not None
        try:
            inner = bhttp.decode_response(ohttp.open_response(batch.sealed, resp.body))
        except (ohttp.OhttpError, bhttp.BinaryHTTPError):
            self.counters["undecryptable_answers"] += 1
            return Response(200, {"content-type": "text/plain"}, b"an answer that does not open")
        headers: dict[str, str] = {}
        for name, value in inner.headers:
            headers.setdefault(name, value.decode("latin-1"))
        return Response(inner.status, headers, inner.content)

    def close(self) -> None:
        if self._owns_post:
            self.post.close()


def shuffler_ack(response: Response) -> dict[str, Any] | None:
    """The shuffler's acknowledgement (202, JSON ``{"stored": true, ...}``), or None."""
    if response.status != 202:
        return None
    try:
        doc = json.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("stored") is True else None
