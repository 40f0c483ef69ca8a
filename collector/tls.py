"""The server TLS context of a service's tls_cert/tls_key (ldpt serve and ldpt shuffle share it)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Protocol

from .config import ConfigError


class TlsSettings(Protocol):
    """What a TLS context is built from: a certificate chain and its key file (None: plain HTTP)."""

    tls_cert: Path | None
    tls_key: Path | None


def tls_context(config: TlsSettings) -> ssl.SSLContext | None:
    """The server TLS context (TLS 1.2 or later) of tls_cert/tls_key, or None; ConfigError naming the files."""
    if config.tls_cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{config.tls_cert} / {config.tls_key}: cannot load the TLS certificate "
                          f"and key ({getattr(exc, 'strerror', None) or exc})") from None
    return ctx
