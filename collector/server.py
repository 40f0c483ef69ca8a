"""Run the collector: one process, or N worker processes sharing a port (SO_REUSEPORT).

With ``workers == 1`` the collector runs in this process. With more, this process becomes a
small supervisor: it binds the port with SO_REUSEPORT (bound, never listening, so it holds
the port without receiving connections), forks the workers — each binds its own
SO_REUSEPORT socket on that port and listens, and the kernel spreads connections over them —
forwards SIGTERM/SIGINT to them, restarts a worker that dies unexpectedly, and exits 0 once
every worker has shut down cleanly. Workers share the store (SQLite in WAL mode with a busy
timeout, or PostgreSQL) and the telemetry table (shared memory).

Graceful shutdown of a worker (SIGTERM or SIGINT): stop accepting, let in-flight requests
finish (they wait for their commit), commit everything queued, close the store, exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable

from aiohttp import web

from client_sdk.registry import Registry, load_registry

from .access_log import QueryFreeAccessLogger
from .admin import AdminServer
from .app import STATE, create_app
from .config import ConfigError, ServeConfig, read_tokens
from .connections import CollectorRunner
from .segments import cap_warnings
from .telemetry import Telemetry
from .tls import tls_context

log = logging.getLogger("ldpt.collector")

BACKLOG = 1024
#: gen-0/1/2 thresholds of the cyclic garbage collector in workers (see ``tune_gc``).
GC_THRESHOLDS = (20_000, 20, 20)
WORKER_START_TIMEOUT = 60.0
#: A supervisor gives up when workers die this many times within RESTART_WINDOW seconds.
MAX_RESTARTS, RESTART_WINDOW = 5, 60.0


def make_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A bound TCP socket (not yet listening); SO_REUSEPORT when workers share the port."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        if not hasattr(socket, "SO_REUSEPORT"):  # pragma: no cover - not on Linux/macOS
            raise OSError("--workers > 1 needs SO_REUSEPORT, which this platform lacks")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(False)
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """The supervisor's SO_REUSEPORT socket on a port nobody else listens on.

    SO_REUSEPORT would let us *join* another process's group on a busy port (same user), so
    the port is first bound without it: that fails if anything already listens there.
    """
    probe = make_socket(host, port, reuse_port=False)
    port = probe.getsockname()[1]
    probe.close()
    return make_socket(host, port, reuse_port=True)


def check_store_directory(db: str | os.PathLike[str]) -> None:
    """A SQLite store's directory must exist: say so, before anything is bound or created."""
    from pathlib import Path

    parent = Path(db).parent
    if not parent.is_dir():
        raise ConfigError(f"{db}: the directory {parent} does not exist (create it first: mkdir -p {parent})",
                          setting="db")


def prepare_store(config: ServeConfig) -> None:
    """Create or check the store once, before any worker starts (fails fast, clearly)."""
    if config.postgres:
        from collector.storage.postgres import PostgresStore

        async def init() -> None:
            store = await PostgresStore.open(config.postgres, min_size=1, max_size=1)
            await store.aclose()

        asyncio.run(init())
    else:
        from collector.storage.sqlite import SQLiteStore

        SQLiteStore(config.db, create=True).close()


def serve(config: ServeConfig, *, announce: Callable[[str], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code (0 after a clean shutdown)."""
    announce = announce or (lambda line: print(line, file=sys.stderr, flush=True))
    registry = load_registry(config.metrics_file)
    for line in cap_warnings(registry, config.max_segments):
        log.warning("%s", line)
    # bad token, key or certificate files fail before the port is taken
    read_tokens(config.query_token_file, allow_insecure=config.allow_insecure_token_file)
    read_tokens(config.ingest_key_file, what="ingest key",
                allow_insecure=config.allow_insecure_token_file)
    read_tokens(config.shuffler_token_file, what="shuffler token",
                allow_insecure=config.allow_insecure_token_file)
    tls_context(config)
    if not config.postgres:
        check_store_directory(config.db)
    # the ports first: a busy port must not leave a new, empty store behind
    sock = reserve_port(config.host, config.port) if config.workers > 1 else \
        make_socket(config.host, config.port, reuse_port=False)
    admin = None
    try:
        if config.admin_port is not None:
            # loopback unless admin_host says otherwise: the admin routes carry no token
            admin = reserve_port(config.admin_host, config.admin_port) if config.workers > 1 else \
                make_socket(config.admin_host, config.admin_port, reuse_port=False)
            config = dataclasses.replace(config, admin_port=admin.getsockname()[1])
        prepare_store(config)
    except BaseException:
        for s in (sock, admin):
            if s is not None:
                s.close()
        raise
    telemetry = Telemetry.create([m.name for m in registry], config.workers)
    host, port = sock.getsockname()[:2]
    scheme = "https" if config.tls_cert else "http"
    line = (f"ldpt serve: listening on {scheme}://{_url_host(host)}:{port} (workers {config.workers}, "
            f"store {config.store_description}, window {config.window})")
    if admin is not None:
        admin_host = admin.getsockname()[0]
        line += f"\nldpt serve: admin (healthz, readyz, metrics) on http://{_url_host(admin_host)}:{config.admin_port}"
    if config.workers == 1:
        sock.listen(BACKLOG)
        if admin is not None:
            admin.listen(BACKLOG)
        return run_worker(config, registry, telemetry, sock, lambda: announce(line), admin)
    return _supervise(config, registry, telemetry, sock, port, lambda: announce(line), admin)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run_worker(config: ServeConfig, registry: Registry, telemetry: Telemetry, sock: socket.socket,
               on_ready: Callable[[], None], admin: socket.socket | None = None) -> int:
    """Serve on a listening socket in this process until SIGTERM/SIGINT (and the monitoring
    routes on ``admin``, from a thread, when given)."""
    return asyncio.run(_worker_main(config, registry, telemetry, sock, on_ready, admin))


async def _worker_main(config: ServeConfig, registry: Registry, telemetry: Telemetry,
                       sock: socket.socket, on_ready: Callable[[], None],
                       admin_sock: socket.socket | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = create_app(config, registry, telemetry=telemetry)
    runner = CollectorRunner(app, guard=app[STATE].guard, handle_signals=False,
                             shutdown_timeout=config.shutdown_timeout,
                             access_log=log if config.access_log else None,
                             access_log_class=QueryFreeAccessLogger)
    await runner.setup()  # on_startup: opens the store, starts the committer
    if config.query_token_file is not None:
        prepare_for_queries()
    tune_gc()
    admin = None
    try:
        if admin_sock is not None:
            admin = AdminServer(app[STATE], admin_sock)
            admin.start()
        await web.SockSite(runner, sock, ssl_context=tls_context(config)).start()
        on_ready()
        await stop.wait()
        log.info("shutting down: stopped accepting; finishing in-flight requests and committing "
                 "queued batches")
    finally:
        if admin is not None:
            admin.stop()
        await runner.cleanup()  # stop sites, wait for handlers, on_cleanup: drain + close store
    log.info("stopped cleanly")
    return 0


#: GIL switch interval of a worker that answers queries: a thread formatting a large estimate
#: hands the interpreter back to the event loop within this many seconds (Python's default is
#: 5 ms per hand-over, and a request takes several).
QUERY_SWITCH_INTERVAL = 0.001


def prepare_for_queries() -> None:
    """Import the estimators now (numpy, pandas, scipy: ~1.5 s of CPU that would otherwise hold
    the interpreter during the first query, while batches wait) and shorten the GIL switch
    interval, so that queries computed on executor threads cannot stall ingestion
    (docs/operations.md, "Queries and ingestion")."""
    import estimators.breakdown  # noqa: F401 - imported for their side effect: loaded once, here
    import estimators.frequency  # noqa: F401
    import estimators.series  # noqa: F401

    sys.setswitchinterval(QUERY_SWITCH_INTERVAL)


def tune_gc() -> None:
    """Keep the cyclic GC off the ingest path.

    Decoding a batch allocates a few hundred containers (one map per report), so the default
    gen-0 threshold (700) runs a collection every batch or two, and the older generations then
    rescan every object the imports created. ``gc.freeze()`` moves those startup objects out of
    the collector's sight, and a larger gen-0 threshold amortises collections over many
    batches (measured: msgpack decoding of a 100-report batch 2-3x faster). Reference cycles
    are still collected, just less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def die_with_parent(parent: int) -> None:
    """Ask Linux to SIGTERM this worker when its supervisor dies (even by SIGKILL), so no
    orphan keeps serving the port; a graceful SIGTERM drains as usual. No-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _supervise(config: ServeConfig, registry: Registry, telemetry: Telemetry,
               reserved: socket.socket, port: int, on_ready: Callable[[], None],
               admin_reserved: socket.socket | None = None) -> int:
    """Fork the workers, forward signals, restart crashed workers, exit when all are done."""
    ready_r, ready_w = os.pipe()
    children: dict[int, int] = {}  # pid -> worker index
    stopping = False

    supervisor = os.getpid()

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # worker process
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                die_with_parent(supervisor)
                os.close(ready_r)
                reserved.close()
                sock = make_socket(config.host, port, reuse_port=True)
                sock.listen(BACKLOG)
                admin = None
                if admin_reserved is not None:
                    admin_reserved.close()
                    admin = make_socket(config.admin_host, config.admin_port, reuse_port=True)
                    admin.listen(BACKLOG)
                code = run_worker(config, registry, telemetry.for_worker(index), sock,
                                  lambda: os.write(ready_w, b"r"), admin)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children[pid] = index

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for i in range(config.workers):
        spawn(i)
    if not _await_ready(ready_r, children, config.workers):
        forward(signal.SIGTERM, None)
        _reap_all(children)
        log.error("a worker failed to start; see the errors above")
        return 1
    on_ready()
    failures = 0
    restarts: list[float] = []
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        index = children.pop(pid, None)
        if index is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            failures += code != 0
            continue
        log.error("worker %d (pid %d) exited unexpectedly with %d; restarting it", index, pid, code)
        telemetry.for_worker(index).worker_restarted()
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
        if len(restarts) > MAX_RESTARTS:
            log.error("workers keep dying; stopping")
            forward(signal.SIGTERM, None)
            _reap_all(children)
            return 1
        spawn(index)
    reserved.close()
    if admin_reserved is not None:
        admin_reserved.close()
    return 1 if failures else 0


def _await_ready(ready_r: int, children: dict[int, int], n: int) -> bool:
    """Wait until ``n`` workers signalled readiness; False if one died or time ran out."""
    got = 0
    deadline = time.monotonic() + WORKER_START_TIMEOUT
    while got < n and time.monotonic() < deadline:
        readable, _, _ = select.select([ready_r], [], [], 0.2)
        if readable:
            got += len(os.read(ready_r, n - got))
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            children.pop(pid, None)
            return False
    return got >= n


def _reap_all(children: dict[int, int]) -> None:
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        children.pop(pid, None)
