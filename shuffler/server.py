"""Run the shuffler in this process until SIGTERM/SIGINT.

Graceful shutdown: stop accepting, let in-flight envelopes finish (each answered after its
store), let a forwarding under way finish (up to ``shutdown_timeout``; cutting it short is safe,
the batch is formed and is sent again on the next start), close the pool, exit 0. A SIGKILL at
any moment loses nothing acknowledged (shuffler/pool.py, "Exactly-once").
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable

from aiohttp import web

from collector.config import ConfigError
from collector.connections import CollectorRunner
from collector.tls import tls_context

from .app import STATE, create_app
from .config import ShuffleConfig, read_token
from .pool import Pool

log = logging.getLogger("ldpt.shuffler")
BACKLOG = 1024


def listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(BACKLOG)
    return sock


def serve(config: ShuffleConfig, *, announce: Callable[[str], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; the process exit code (0 after a clean shutdown)."""
    announce = announce or (lambda line: print(line, file=sys.stderr, flush=True))
    token = read_token(config)          # a bad token file fails before the port is taken
    ctx = tls_context(config)
    Pool(config.db, synchronous=config.sqlite_synchronous).close()   # create or check it now
    sock = listen(config.host, config.port)
    host, port = sock.getsockname()[:2]
    scheme = "https" if ctx else "http"
    shown = f"[{host}]" if ":" in host else host
    line = (f"ldpt shuffle: listening on {scheme}://{shown}:{port}{'/v1/envelopes'} (pool {config.db}, "
            f"min_batch {config.min_batch}, max_batch {config.max_batch}, max_delay {config.max_delay:g} s; "
            f"forwarding to {config.base_url})")
    return asyncio.run(_main(config, token, sock, ctx, lambda: announce(line)))


async def _main(config: ShuffleConfig, token: bytes, sock: socket.socket, ctx: ssl.SSLContext | None,
                on_ready: Callable[[], None]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = create_app(config, token)
    runner = CollectorRunner(app, guard=app[STATE].guard, handle_signals=False,
                             shutdown_timeout=config.shutdown_timeout,
                             access_log=log if config.access_log else None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock, ssl_context=ctx).start()
        on_ready()
        await stop.wait()
        log.info("shutting down: stopped accepting; finishing in-flight envelopes and the forwarding under way")
    finally:
        await runner.cleanup()
    log.info("stopped cleanly")
    return 0
