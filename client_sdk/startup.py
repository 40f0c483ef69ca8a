"""Start-up that never hurts the host app: the registry is resolved on a background thread.

A client built without ``registry=`` needs ``GET /v1/registry`` before it can encode
anything. Fetching it in the constructor would block the app's start for up to the HTTP
timeout, and fail the first start of an app that is offline. Instead (non-strict mode) the
constructor returns at once and a ``RegistryResolver`` daemon thread fetches the registry —
falling back to the copy cached in the state directory — retrying with the client's
``RetryPolicy`` until it succeeds. Reports made meanwhile wait in a bounded buffer in memory
(never on disk: they are not randomised yet) and are encoded as soon as the registry is
known. ``flush()`` cuts the retry wait short; ``close()`` stops the thread.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from ._lazy import LazyLogger
from .errors import FingerprintMismatch
from .registry import Registry
from .uploader import RetryPolicy

log = LazyLogger("client_sdk")  # logging loads with the first message (client_sdk._lazy)


class RegistryResolver:
    """Calls ``fetch`` on a daemon thread until it returns a Registry (see the module docstring).

    ``on_ready(registry)`` or, for an error retrying cannot fix (a pinned fingerprint that
    changed), ``on_fail(exc)`` is called exactly once, on the resolver's thread.
    """

    def __init__(self, fetch: Callable[[], Registry], on_ready: Callable[[Registry], None],
                 on_fail: Callable[[Exception], None], retry: RetryPolicy) -> None:
        self._fetch, self._on_ready, self._on_fail = fetch, on_ready, on_fail
        self.retry = retry
        self.attempts = 0
        self.done = threading.Event()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._rand = random.SystemRandom()   # jitter from the OS CSPRNG, like every SDK draw

    def start(self) -> None:
        if not self.done.is_set() and not self._stopped:
            self._thread = threading.Thread(target=self._run, name="ldpt-registry", daemon=True)
            self._thread.start()

    def hurry(self) -> None:
        """Try again now instead of waiting out the back-off (flush)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def wait(self, timeout: float) -> bool:
        """True once the registry was resolved (or failed for good) within ``timeout`` seconds."""
        return self.done.wait(max(0.0, timeout))

    def _run(self) -> None:
        while not self._stopped:
            self._wake.clear()
            try:
                registry = self._fetch()
            except FingerprintMismatch as exc:
                self._finish(self._on_fail, exc)
                return
            except Exception as exc:  # noqa: BLE001 - collector down, bad answer: retry later
                self.attempts += 1
                delay = self.retry.delay(self.attempts, None, self._rand)
                if self.attempts == 1:
                    log.warning("ldpt: cannot resolve the metric registry yet (%s); reports wait in "
                                "memory and the fetch is retried (next in %.1fs)", exc, delay)
                else:
                    log.debug("ldpt: registry fetch failed again (%s); retry in %.2fs", exc, delay)
                self._wake.wait(delay)
                continue
            self._finish(self._on_ready, registry)
            return

    def _finish(self, callback: Callable[[object], None], arg: object) -> None:
        try:
            callback(arg)
        except Exception as exc:  # noqa: BLE001 - never die silently with `done` unset
            log.error("ldpt: installing the metric registry failed: %r", exc)
        finally:
            self.done.set()

    def after_fork_child(self) -> None:
        """Threads do not survive fork: a child still waiting starts its own resolver."""
        self._wake = threading.Event()
        if not self.done.is_set():
            self.start()
