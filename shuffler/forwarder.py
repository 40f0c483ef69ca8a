"""Forwarding: when a batch is due, form it, shuffle it, send it to the collector until the
collector acknowledges its commit; and keep the collector's key configurations fresh.

A batch is **due** (``batch_due``) when ``max_batch`` envelopes wait (or their bytes fill
``max_forward_bytes``), or when the oldest waiting epoch is ``max_delay`` old **and** at least
``min_batch`` envelopes wait. Fewer than ``min_batch`` are never forwarded, however long they
wait: a smaller batch would be a smaller crowd than the operator promised, and the central
claim is computed from the smallest batch of the window (docs/privacy.md). They wait for more
envelopes; ``ldpt_shuffler_oldest_seconds`` shows the wait, and a warning is logged once it
passes twice ``max_delay`` (envelopes must be forwarded before the collector's key overlap
ends, 8 days by default, or the collector can no longer open them).

A formed batch (pool.py: its id and members in one transaction) is sent as a msgpack map
``{"v": 1, "batch_id": id, "envelopes": [...]}``, its envelopes in an order drawn afresh by a
Fisher–Yates shuffle from the OS CSPRNG at every send (``fisher_yates``), with
``Authorization: Bearer <token>``, to ``{collector}/v1/shuffled-batches``. Only a 200 whose
``batch_id`` is this batch's deletes it from the pool. A 409 (the id known with other
envelopes) gives the batch a new id; a 408, 429, 5xx or network failure is retried after
Retry-After or a doubling back-off (1 s up to ``retry_max``); any other answer is a
configuration error (wrong token, wrong URL, a collector limit below the shuffler's), logged,
and retried after ``retry_max`` — acknowledged envelopes are never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import socket
import ssl
from typing import TYPE_CHECKING, Any

import aiohttp
import msgpack

from client_sdk import ohttp
from client_sdk.deadline import within

from .pool import BATCH_FRAMING, ENVELOPE_FRAMING, PoolCounts, fisher_yates

if TYPE_CHECKING:
    from .app import ShufflerState

log = logging.getLogger("ldpt.shuffler")

SHUFFLED_PATH = "/v1/shuffled-batches"
#: Seconds between two looks at the pool when nothing wakes the forwarder.
IDLE_LOOK = 30.0
#: An epoch is closed after this share of max_delay (coarse arrival classes, bounded in number).
EPOCH_SHARE = 0.25
#: Forwarded digests are pruned this often (seconds).
PRUNE_EVERY = 3600.0


def batch_due(counts: PoolCounts, config: Any, now: float) -> bool:
    """Whether a batch should be formed now (module docstring)."""
    if counts.pooled >= config.max_batch:
        return True
    if counts.pooled_bytes + counts.pooled * ENVELOPE_FRAMING + BATCH_FRAMING >= config.max_forward_bytes:
        return counts.pooled >= config.min_batch
    return counts.pooled >= config.min_batch and counts.oldest is not None \
        and now - counts.oldest >= config.max_delay


def _retry_after(headers: Any, doc: Any) -> float | None:
    for raw in (headers.get("Retry-After"), doc.get("retry_after") if isinstance(doc, dict) else None):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one forwarding attempt got: status (0 for no answer), JSON body, Retry-After, why."""

    status: int
    doc: Any = None
    retry_after: float | None = None
    error: str = ""


class Forwarder:
    """The forwarding and key-refresh tasks of one shuffler."""

    def __init__(self, state: ShufflerState) -> None:
        self.state = state
        self.config = state.config
        self.session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._warned_wait = False
        self._last_prune = -math.inf
        self.sending = False

    # --- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config
        ctx = None
        if c.base_url.startswith("https:"):
            ctx = ssl.create_default_context(cafile=str(c.collector_ca_file) if c.collector_ca_file else None)
        connector = aiohttp.TCPConnector(ssl=ctx if ctx is not None else False, limit=4,
                                         local_addr=(c.source_address, 0) if c.source_address else None,
                                         family=socket.AF_INET6 if ":" in c.source_address else 0)
        # no cookies, no proxies from the environment, nothing but what a request states
        self.session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                             trust_env=False, skip_auto_headers=("User-Agent",),
                                             headers={"User-Agent": "ldpt-shuffle"})
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._keys_loop(), name="ldpt-shuffler-keys"),
                       loop.create_task(self._forward_loop(), name="ldpt-shuffler-forward")]

    async def stop(self, timeout: float) -> None:
        """Stop after the forwarding under way (up to ``timeout`` s; cancelling it is safe: the
        batch stays formed and is sent again on the next start)."""
        self._stop.set()
        self.state.wakeup.set()
        done, pending = await asyncio.wait(self._tasks, timeout=timeout) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.session is not None:
            await self.session.close()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or return early when stopping or woken by a new envelope."""
        self.state.wakeup.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            stop = asyncio.ensure_future(self._stop.wait())
            wake = asyncio.ensure_future(self.state.wakeup.wait())
            try:
                await asyncio.wait({stop, wake}, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                wake.cancel()

    async def _pause(self, seconds: float) -> None:
        """Back off ``seconds``, returning early only when stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await within(self._stop.wait(), max(0.0, seconds))

    # --- keys -------------------------------------------------------------------------------------
    async def refresh_keys(self) -> bool:
        """Fetch the collector's key configurations; True when they were taken."""
        state = self.state
        assert self.session is not None
        url = self.config.base_url + ohttp.GATEWAY_PATH
        try:
            async with self.session.get(url, headers={"Accept": ohttp.KEYS_TYPE},
                                        timeout=aiohttp.ClientTimeout(total=30)) as resp:
                body = await resp.read()
                ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                if resp.status != 200 or ctype != ohttp.KEYS_TYPE:
                    raise ValueError(f"HTTP {resp.status} ({ctype or 'no type'})")
            state.keys.set(body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            state.telemetry.key_fetch_failures += 1
            log.warning("cannot fetch the collector's key configurations from %s: %s%s", url,
                        type(exc).__name__ if not str(exc) else exc,
                        "" if state.keys.document is None else " (the last ones fetched stay in use)")
            return False
        await state.pool.call(state.pool.pool.save_key_configs, body)
        return True

    async def _keys_loop(self) -> None:
        while not self._stop.is_set():
            ok = await self.refresh_keys()
            await self._pause(self.config.key_refresh if ok else min(5.0, self.config.key_refresh))

    # --- forwarding -------------------------------------------------------------------------------
    async def _forward_loop(self) -> None:
        state, c = self.state, self.config
        pool = state.pool
        for batch_id in await pool.call(pool.pool.open_batches):   # formed before a restart
            if self._stop.is_set():
                return
            await self.deliver(batch_id)
        while not self._stop.is_set():
            now = state.clock()
            await self._housekeeping(now)
            if batch_due(state.counts, c, now):
                formed = await pool.call(lambda: pool.pool.form_batch(c.max_batch, c.max_forward_bytes,
                                                                      min_batch=c.min_batch))
                await self._after_forming(formed)
                if formed is not None:
                    await self.deliver(formed[0])
                else:   # the waiting envelopes do not pack into min_batch (larger than the limits now)
                    await self._sleep(IDLE_LOOK)
                continue
            await self._sleep(self._next_look(now))

    async def _after_forming(self, formed: tuple[bytes, int] | None) -> None:
        state = self.state
        state.epoch_opened = await state.pool.call(state.pool.pool.current_epoch_opened)
        state.publish()

    def _next_look(self, now: float) -> float:
        counts, c = self.state.counts, self.config
        wait = IDLE_LOOK
        if counts.pooled >= c.min_batch and counts.oldest is not None:
            wait = min(wait, counts.oldest + c.max_delay - now)
        return max(0.05, wait)

    async def _housekeeping(self, now: float) -> None:
        state, c = self.state, self.config
        pool = state.pool
        if now - state.epoch_opened >= EPOCH_SHARE * c.max_delay and state.counts.pooled:
            await pool.call(pool.pool.open_epoch)
            state.epoch_opened = await pool.call(pool.pool.current_epoch_opened)
        counts = state.counts
        if counts.pooled and counts.pooled < c.min_batch and counts.oldest is not None \
                and now - counts.oldest > 2 * c.max_delay and not self._warned_wait:
            self._warned_wait = True
            log.warning("%d envelopes have waited %.0f s, more than twice max_delay, because fewer than "
                        "min_batch (%d) are pooled; they are forwarded once min_batch are (lower min_batch "
                        "for a smaller crowd, or accept the wait; the collector opens envelopes only until "
                        "its key overlap ends)", counts.pooled, now - counts.oldest, c.min_batch)
        elif counts.pooled >= c.min_batch:
            self._warned_wait = False
        if now - self._last_prune >= PRUNE_EVERY:
            self._last_prune = now
            await pool.call(pool.pool.prune_forwarded, c.seen_days)

    async def deliver(self, batch_id: bytes) -> bool:
        """Send a formed batch until the collector acknowledges it (True) or the shuffler stops."""
        state, c = self.state, self.config
        pool = state.pool
        failures = 0
        while not self._stop.is_set():
            envelopes = await pool.call(pool.pool.batch_envelopes, batch_id)
            if not envelopes:   # acknowledged meanwhile (cannot happen with one forwarder)
                return True
            fisher_yates(envelopes)
            body = msgpack.packb({"v": 1, "batch_id": batch_id, "envelopes": envelopes}, use_bin_type=True)
            del envelopes
            self.sending = True
            try:
                answer = await self._post(body)
            finally:
                self.sending = False
            del body
            outcome = self._settle(batch_id, answer)
            if outcome == "acknowledged":
                n = await pool.call(pool.pool.acknowledged, batch_id)
                doc = answer.doc
                state.telemetry.forwarded_batches += 1
                state.telemetry.forwarded_envelopes += n
                if doc.get("duplicate") is True:
                    state.telemetry.duplicate_batches += 1
                else:
                    for key in state.telemetry.collector:
                        state.telemetry.collector[key] += int(doc.get(key, 0) or 0)
                state.publish()
                return True
            if outcome == "conflict":
                batch_id = await pool.call(pool.pool.renumber, batch_id)
                continue
            failures += 1
            if outcome == "retry":
                delay = answer.retry_after if answer.retry_after is not None else 2.0 ** min(failures - 1, 16)
                await self._pause(min(delay, c.retry_max))
            else:   # a configuration error: loud, and slow to retry
                await self._pause(c.retry_max)
        return False

    async def _post(self, body: bytes) -> Answer:
        assert self.session is not None
        headers = {"Content-Type": "application/msgpack",
                   "Authorization": f"Bearer {self.state.token.decode('utf-8', 'surrogateescape')}"}
        try:
            async with self.session.post(self.config.base_url + SHUFFLED_PATH, data=body, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=self.config.forward_timeout)) as resp:
                raw = await resp.read()
                try:
                    doc = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    doc = None
                return Answer(resp.status, doc, _retry_after(resp.headers, doc))
        except asyncio.TimeoutError:
            return Answer(0, error="timeout")
        except (aiohttp.ClientError, OSError) as exc:
            return Answer(0, error=f"network: {type(exc).__name__}: {exc}"[:200])

    def _settle(self, batch_id: bytes, answer: Answer) -> str:
        """acknowledged | conflict | retry | misconfigured, counting failures and logging them."""
        t = self.state.telemetry
        doc = answer.doc if isinstance(answer.doc, dict) else {}
        if answer.status == 200 and doc.get("batch_id") == batch_id.hex():
            return "acknowledged"
        if answer.status == 0:
            t.failures["timeout" if answer.error == "timeout" else "network"] += 1
            log.warning("forwarding a batch to the collector failed (%s); it is kept and sent again",
                        answer.error)
            return "retry"
        if answer.status == 409:
            t.failures["conflict"] += 1
            log.warning("the collector knows batch id %s with other envelopes; sending it under a new id",
                        batch_id.hex())
            return "conflict"
        detail = str(doc.get("detail", ""))[:300]
        if answer.status in (408, 429) or answer.status >= 500:
            t.failures["retry-later"] += 1
            log.warning("the collector answered HTTP %d (%s); the batch is kept and sent again", answer.status,
                        detail or "no detail")
            return "retry"
        t.failures["unauthorized" if answer.status in (401, 403) else
                   "refused" if 400 <= answer.status < 500 else "unexpected"] += 1
        log.error("the collector refused a shuffled batch with HTTP %d (%s): check collector_url, token_file "
                  "and the collector's shuffler_token_file and max_shuffled_batch_bytes; the batch is kept "
                  "and sent again every %g s", answer.status, detail or "no detail", self.config.retry_max)
        return "misconfigured"
