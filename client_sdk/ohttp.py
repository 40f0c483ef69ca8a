"""Oblivious HTTP (Thomson and Wood, RFC 9458) for sealed batches: key configurations,
encapsulated requests and responses, both ends, and the padding classes.

A sealed batch is today's batch bytes as the content of a Binary HTTP (RFC 9292) request
``POST https:///v1/reports`` (one header, ``content-type: application/msgpack``), zero-padded
to a size class (``PAD_CLASSES``), then HPKE-sealed (Barnes et al., RFC 9180, base mode) to
the collector's key configuration: ``hdr ‖ enc ‖ Seal(info = "message/bhttp request" ‖ 0x00 ‖
hdr, request)`` with hdr = key id (1 byte) ‖ KEM ‖ KDF ‖ AEAD (2 bytes each). The collector's
answer comes back as ``response_nonce ‖ AEAD(key, nonce, response)``, the key and nonce
derived from the request's HPKE context (Export("message/bhttp response", max(Nn, Nk)), then
HKDF with salt enc ‖ response_nonce), so only the sender can read it (docs/wire-format.md,
"Sealed batches").

One suite is supported: DHKEM(X25519, HKDF-SHA256) 0x0020, HKDF-SHA256 0x0001, AES-128-GCM
0x0001 — native in WebCrypto in current browsers and Node, and RFC 9458's own example.
HPKE is pyhpke's (with ``cryptography``): an optional extra of the SDK
(``pip install 'ldp-telemetry-sdk[sealed]'``), imported on the first seal or open only.

Both ends live here, the gateway's (``PrivateKey``, ``open_request``, ``seal_response``) beside the
client's: they share one key schedule (header, info, the exported response secret, the response
key and nonce), which then has one home, and the gateway half is pure functions over the same
extra, with no server package and no numpy (docs/design.md, "Two distributions").
collector/gateway.py and collector.testing.FakeCollector open requests with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from . import bhttp

__all__ = ["AEAD_AES_128_GCM", "KDF_HKDF_SHA256", "KEM_X25519_HKDF_SHA256", "KeyConfig", "OhttpError",
           "PAD_CLASSES", "PrivateKey", "SealedRequest", "decode_key_configs", "encode_key_configs",
           "inner_request", "open_request", "open_response", "padded_length", "seal_request",
           "seal_response"]

KEM_X25519_HKDF_SHA256 = 0x0020
KDF_HKDF_SHA256 = 0x0001
AEAD_AES_128_GCM = 0x0001
SUITE = (KEM_X25519_HKDF_SHA256, KDF_HKDF_SHA256, AEAD_AES_128_GCM)
NPK = NENC = NSK = 32          # X25519 public key, encapsulated key, private key (RFC 9180 §7.1)
NK, NN, NT = 16, 12, 16        # AES-128-GCM key, nonce, tag
RESPONSE_NONCE_BYTES = max(NN, NK)
HEADER_BYTES = 7
REQUEST_LABEL = b"message/bhttp request"
RESPONSE_LABEL = b"message/bhttp response"

REQUEST_TYPE = "message/ohttp-req"
RESPONSE_TYPE = "message/ohttp-res"
KEYS_TYPE = "application/ohttp-keys"
GATEWAY_PATH = "/.well-known/ohttp-gateway"   # RFC 9540 §3: the gateway and its key configs
#: The requests' own header lines (client_sdk/transport.py, wire_headers).
KEYS_HEADERS = {"Accept": KEYS_TYPE}
SEALED_HEADERS = {"Accept": RESPONSE_TYPE, "Content-Type": REQUEST_TYPE}
INNER_PATH = "/v1/reports"
INNER_CONTENT_TYPE = b"application/msgpack"
#: RFC 9458 §5.3: the problem type of a request sealed to an unknown or outdated key.
KEY_PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#ohttp-key"

#: Sizes (bytes) a sealed request's Binary HTTP message is zero-padded to: the smallest that
#: fits. A device's batch holds one report per metric and window (55-65 bytes each with the
#: example registries; bench/sealed.py prints the distribution), so a batch of up to ~15
#: metrics is in the first class, and the envelope length says nothing about which metrics or
#: how many reports it carries. Larger batches (many reports per window, large unary domains)
#: fall in the next classes, four times apart; beyond the last one, multiples of it.
PAD_CLASSES: tuple[int, ...] = (1024, 4096, 16384, 65536, 262144, 1048576)
#: A response's Binary HTTP message is padded to this many bytes (or a multiple): an
#: acknowledgement and a problem document then have the same length on the relay's wire.
RESPONSE_PAD = 1024
#: Bytes an encapsulated request adds to its padded Binary HTTP message: header, enc, tag.
ENVELOPE_OVERHEAD = HEADER_BYTES + NENC + NT
#: At most this many bytes of Binary HTTP framing around the batch (control data, header,
#: lengths): a batch of n bytes needs a class of at least n + this.
MAX_FRAMING = 64


class OhttpError(ValueError):
    """Malformed key configurations, or a message that cannot be (de)capsulated."""


def padded_length(size: int) -> int:
    """The size class of a ``size``-byte Binary HTTP message (``PAD_CLASSES``)."""
    for cls in PAD_CLASSES:
        if size <= cls:
            return cls
    top = PAD_CLASSES[-1]
    return -(-size // top) * top


def sealed_size_limit(max_batch_bytes: int) -> int:
    """The largest encapsulated request a batch of at most ``max_batch_bytes`` can produce."""
    return padded_length(max_batch_bytes + MAX_FRAMING) + ENVELOPE_OVERHEAD


# --- key configurations (RFC 9458 §3) ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KeyConfig:
    """One key configuration: key id, KEM, public key and the (KDF, AEAD) pairs it accepts."""

    key_id: int
    kem_id: int
    public_key: bytes
    suites: tuple[tuple[int, int], ...] = ((KDF_HKDF_SHA256, AEAD_AES_128_GCM),)

    def encode(self) -> bytes:
        algs = b"".join(struct.pack(">HH", kdf, aead) for kdf, aead in self.suites)
        return struct.pack(">BH", self.key_id, self.kem_id) + self.public_key + struct.pack(">H", len(algs)) + algs

    @property
    def supported(self) -> bool:
        """Whether this SDK can seal to it (the one suite of the module docstring)."""
        return (self.kem_id == KEM_X25519_HKDF_SHA256 and len(self.public_key) == NPK
                and (KDF_HKDF_SHA256, AEAD_AES_128_GCM) in self.suites)


def _public_key_length(kem_id: int) -> int | None:
    return {0x0010: 65, 0x0011: 97, 0x0012: 133, 0x0020: 32, 0x0021: 56}.get(kem_id)


def decode_key_configs(data: bytes) -> list[KeyConfig]:
    """An ``application/ohttp-keys`` document: 2-byte length ‖ key config, repeated (RFC 9458
    §3.2). Any encoding error rejects the whole document (clients MUST discard it)."""
    out, pos = [], 0
    if not data:
        raise OhttpError("an empty key configuration document")
    while pos < len(data):
        if pos + 2 > len(data):
            raise OhttpError("a key configuration length runs past the end")
        (length,) = struct.unpack_from(">H", data, pos)
        config = data[pos + 2:pos + 2 + length]
        if len(config) != length:
            raise OhttpError("a key configuration runs past the end")
        out.append(_decode_one(config))
        pos += 2 + length
    return out


def _decode_one(config: bytes) -> KeyConfig:
    if len(config) < 3:
        raise OhttpError("a key configuration shorter than its header")
    key_id, kem_id = struct.unpack_from(">BH", config, 0)
    npk = _public_key_length(kem_id)
    if npk is None:
        raise OhttpError(f"unknown KEM 0x{kem_id:04x} in a key configuration")
    if len(config) < 3 + npk + 2:
        raise OhttpError("a key configuration shorter than its public key")
    public = config[3:3 + npk]
    (alen,) = struct.unpack_from(">H", config, 3 + npk)
    algs = config[5 + npk:]
    if alen != len(algs) or alen == 0 or alen % 4:
        raise OhttpError("the symmetric algorithms of a key configuration are malformed")
    suites = tuple(struct.unpack_from(">HH", algs, i) for i in range(0, alen, 4))
    return KeyConfig(key_id, kem_id, public, suites)


def encode_key_configs(configs: Iterable[KeyConfig]) -> bytes:
    """The ``application/ohttp-keys`` document of ``configs`` (each length-prefixed)."""
    out = b""
    for config in configs:
        raw = config.encode()
        out += struct.pack(">H", len(raw)) + raw
    return out


def choose(configs: Sequence[KeyConfig]) -> KeyConfig:
    """The first configuration this SDK can seal to (the gateway lists its preferred first)."""
    for config in configs:
        if config.supported:
            return config
    raise OhttpError("none of the gateway's key configurations uses DHKEM(X25519, HKDF-SHA256) "
                     "with HKDF-SHA256 and AES-128-GCM, the suite this SDK seals with")


# --- HPKE through pyhpke ------------------------------------------------------------------------------
def _hpke() -> Any:
    try:
        import pyhpke
    except ImportError:
        raise ImportError("sealed reports need HPKE: pip install 'ldp-telemetry-sdk[sealed]' "
                          "(pyhpke and cryptography)") from None
    return pyhpke


_SUITE_CACHE: list[Any] = []


def _suite() -> Any:
    if not _SUITE_CACHE:
        h = _hpke()
        _SUITE_CACHE.append(h.CipherSuite.new(h.KEMId.DHKEM_X25519_HKDF_SHA256, h.KDFId.HKDF_SHA256,
                                              h.AEADId.AES128_GCM))
    return _SUITE_CACHE[0]


def _header(key_id: int) -> bytes:
    return struct.pack(">BHHH", key_id, *SUITE)


def _info(header: bytes) -> bytes:
    return REQUEST_LABEL + b"\x00" + header


@dataclasses.dataclass(frozen=True)
class SealedRequest:
    """An encapsulated request and what its sender needs to read the answer.

    ``secret`` is the request context's Export("message/bhttp response", 16): it opens the
    response only (never the request), and is kept with the envelope so that a resend of the
    same bytes can still read its answer.
    """

    envelope: bytes
    enc: bytes
    secret: bytes
    key_id: int


def seal_request(config: KeyConfig, message: bytes, *, ephemeral_key: bytes | None = None) -> SealedRequest:
    """HPKE-seal a Binary HTTP request to ``config`` (RFC 9458 §4.3).

    ``ephemeral_key`` (the 32-byte X25519 private key skE) is for test vectors only; in
    production it is None and pyhpke draws a fresh key from the OS CSPRNG per request.
    """
    recipient = _recipient(config)
    suite = _suite()
    eks = None
    if ephemeral_key is not None:
        h = _hpke()
        sk = suite.kem.deserialize_private_key(ephemeral_key)
        eks = h.KEMKeyPair(sk, suite.kem.deserialize_public_key(_x25519_public(ephemeral_key)))
    enc, ctx = suite.create_sender_context(recipient.public_key, recipient.info, eks=eks)
    ct = ctx.seal(message)
    secret = ctx.export(RESPONSE_LABEL, RESPONSE_NONCE_BYTES)
    return SealedRequest(b"".join((recipient.header, enc, ct)), enc, secret, config.key_id)


@dataclasses.dataclass(frozen=True)
class _Recipient:
    """What sealing to one key configuration needs that no batch changes: pyhpke's
    deserialised public key, the request header (hdr) and the HPKE info built from it."""

    public_key: Any
    header: bytes
    info: bytes


_RECIPIENTS: dict[KeyConfig, _Recipient] = {}


def _recipient(config: KeyConfig) -> _Recipient:
    """The cached ``_Recipient`` of ``config`` (OhttpError for a suite this SDK cannot seal to)."""
    recipient = _RECIPIENTS.get(config)
    if recipient is None:
        if not config.supported:
            raise OhttpError(f"key configuration {config.key_id} is not DHKEM(X25519)/HKDF-SHA256/AES-128-GCM")
        if len(_RECIPIENTS) > 16:       # a few keys live at once (rotation with overlap)
            _RECIPIENTS.clear()
        header = _header(config.key_id)
        recipient = _RECIPIENTS[config] = _Recipient(
            _suite().kem.deserialize_public_key(config.public_key), header, _info(header))
    return recipient


def _x25519_public(private: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


def _response_keys(secret: bytes, enc: bytes, response_nonce: bytes) -> tuple[bytes, bytes]:
    """RFC 9458 §4.4: prk = Extract(enc ‖ response_nonce, secret); key, nonce = Expand(prk, …)."""
    prk = hmac.digest(enc + response_nonce, secret, hashlib.sha256)
    key = hmac.digest(prk, b"key\x01", hashlib.sha256)[:NK]       # HKDF-Expand, one block
    nonce = hmac.digest(prk, b"nonce\x01", hashlib.sha256)[:NN]
    return key, nonce


_AESGCM: list[Any] = []


def _aesgcm(key: bytes) -> Any:
    if not _AESGCM:           # imported on the first open, kept (an import statement per call costs ~1 µs)
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            _hpke()   # the same one-line install message
            raise
        _AESGCM.append(AESGCM)
    return _AESGCM[0](key)


def open_response(sealed: SealedRequest, enc_response: bytes) -> bytes:
    """The Binary HTTP response inside ``enc_response``; OhttpError if it does not open."""
    if len(enc_response) < RESPONSE_NONCE_BYTES + NT:
        raise OhttpError("an encapsulated response shorter than its nonce and tag")
    nonce_r, ct = enc_response[:RESPONSE_NONCE_BYTES], enc_response[RESPONSE_NONCE_BYTES:]
    key, nonce = _response_keys(sealed.secret, sealed.enc, nonce_r)
    try:
        return _aesgcm(key).decrypt(nonce, ct, b"")
    except Exception:  # cryptography's InvalidTag
        raise OhttpError("the encapsulated response does not open with this request's key "
                         "(not the gateway's answer to it)") from None


# --- the gateway's half ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PrivateKey:
    """A gateway key: its configuration and the X25519 private key (32 bytes)."""

    config: KeyConfig
    private: bytes

    @classmethod
    def generate(cls, key_id: int) -> PrivateKey:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        sk = X25519PrivateKey.generate().private_bytes_raw()
        return cls.from_private(key_id, sk)

    @classmethod
    def from_private(cls, key_id: int, private: bytes) -> PrivateKey:
        if not 0 <= key_id <= 255 or len(private) != NSK:
            raise OhttpError("a key id is 0-255 and an X25519 private key 32 bytes")
        return cls(KeyConfig(key_id, KEM_X25519_HKDF_SHA256, _x25519_public(private)), private)


@dataclasses.dataclass(frozen=True)
class OpenedRequest:
    """A decapsulated request: the Binary HTTP bytes and what answering it needs."""

    message: bytes
    enc: bytes
    secret: bytes
    key_id: int


class KeyProblem(OhttpError):
    """The request names a key this gateway does not hold (or no longer accepts)."""


def parse_header(envelope: bytes) -> tuple[int, int, int, int]:
    """(key id, KEM, KDF, AEAD) of an encapsulated request; OhttpError if too short."""
    if len(envelope) < HEADER_BYTES + NENC + NT:
        raise OhttpError(f"{len(envelope)} bytes is shorter than an encapsulated request "
                         f"({HEADER_BYTES + NENC + NT} at least)")
    return struct.unpack_from(">BHHH", envelope, 0)


def open_request(keys: dict[int, PrivateKey], envelope: bytes) -> OpenedRequest:
    """Decapsulate (RFC 9458 §4.3): KeyProblem for an unknown key id or another suite, and
    for a request that does not open (a stale key under a reused id looks the same)."""
    key_id, kem, kdf, aead = parse_header(envelope)
    key = keys.get(key_id)
    if key is None:
        raise KeyProblem(f"key id {key_id} is unknown to this gateway (fetch {GATEWAY_PATH} again)")
    if (kem, kdf, aead) != SUITE or (kdf, aead) not in key.config.suites:
        raise KeyProblem(f"key id {key_id} is not used with KEM 0x{kem:04x}, KDF 0x{kdf:04x}, "
                         f"AEAD 0x{aead:04x}")
    header = envelope[:HEADER_BYTES]
    enc = envelope[HEADER_BYTES:HEADER_BYTES + NENC]
    ct = envelope[HEADER_BYTES + NENC:]
    suite = _suite()
    try:
        ctx = suite.create_recipient_context(enc, _private_key(key.private), _info(header))
        message = ctx.open(ct)
    except Exception:
        raise KeyProblem(f"the request does not open with key {key_id} (sealed to another key, "
                         "or corrupted)") from None
    return OpenedRequest(message, enc, ctx.export(RESPONSE_LABEL, RESPONSE_NONCE_BYTES), key_id)


_SK_CACHE: dict[bytes, Any] = {}


def _private_key(raw: bytes) -> Any:
    key = _SK_CACHE.get(raw)
    if key is None:
        if len(_SK_CACHE) > 16:
            _SK_CACHE.clear()
        key = _SK_CACHE[raw] = _suite().kem.deserialize_private_key(raw)
    return key


def seal_response(opened: OpenedRequest | SealedRequest, message: bytes, *,
                  response_nonce: bytes | None = None) -> bytes:
    """Encapsulate a Binary HTTP response (RFC 9458 §4.4); ``response_nonce`` for tests only."""
    nonce_r = os.urandom(RESPONSE_NONCE_BYTES) if response_nonce is None else response_nonce
    key, nonce = _response_keys(opened.secret, opened.enc, nonce_r)
    return nonce_r + _aesgcm(key).encrypt(nonce, message, b"")


# --- ldp-telemetry's inner request ----------------------------------------------------------------------
def inner_request(batch: bytes) -> bytes:
    """The padded Binary HTTP request that carries a wire-format batch (docs/wire-format.md)."""
    # bhttp.encode_request(req, padded_length(...)) byte for byte (tests/test_sealed_wire.py):
    # the head (framing, control data, the one header) never changes, then the content's
    # length and the content, then the empty trailer section (one zero byte) and the zero
    # padding — one run of zeros.
    length = bhttp.encode_varint(len(batch))
    size = len(_INNER_HEAD) + len(length) + len(batch)
    return b"".join((_INNER_HEAD, length, batch, bytes(padded_length(size + 1) - size)))


_INNER_HEAD = bhttp.request_head(bhttp.Request("POST", "https", "", INNER_PATH,
                                               (("content-type", INNER_CONTENT_TYPE),)))


def inner_response(status: int, headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """The padded Binary HTTP response the gateway seals (padded to RESPONSE_PAD multiples)."""
    resp = bhttp.Response(status, tuple((k.lower(), v.encode("latin-1")) for k, v in headers), body)
    raw = bhttp.encode_response(resp)
    return bhttp.encode_response(resp, -(-len(raw) // RESPONSE_PAD) * RESPONSE_PAD)
