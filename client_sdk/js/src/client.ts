/**
 * `TelemetryClient`: what a web page or Node app embeds — the Python SDK's `TelemetryClient`
 * (client_sdk/client.py, uploader.py), point by point.
 *
 * `report(metric, value)` is synchronous and does only in-memory work: look the value up in
 * the metric's domain, check the privacy budget against an in-memory mirror of the ledger,
 * randomise the value with the metric's protocol (CSPRNG — the true value ends here) and queue
 * the randomised report. It never throws (unless `strict`): bad input, refusals, a full queue,
 * an opted-out user are counted in `stats()` and `report()` returns false.
 *
 * A worker (promises on the page's or process's event loop) then, per batch: charges the
 * ledger in one locked transaction (state.ts — a report the ledger refuses, e.g. because
 * another tab spent the budget, is dropped and never sent), packs the rest into one wire batch
 * with a random id (wire.ts), stores it in the outbox *before* the first send, and POSTs it.
 * In browsers (`Platform.chargeEarly`) the charge comes first, right after report(), so that
 * the page's hide/pagehide handler can send charged reports synchronously (`sendNow`).
 * Only the collector's JSON ack deletes a batch; only its problem document drops one; anything
 * else (network error, 408/429/5xx, a proxy's page, a redirect) keeps the same bytes for a
 * retry after the back-off or the server's Retry-After.
 *
 * When the device state cannot be opened (no IndexedDB, an unwritable directory, an unreadable
 * ledger), the client reports nothing — privacy first — and `stats().disabled_reason` says why.
 */

import { type ElapsedClock, realmElapsed } from "./deviceClock.js";
import {
  type Charge, type Refusal, type RefusalCounts,
  Book, apply, copyAccounts, dayOf,
} from "./ledger.js";
import type { Metric, Registry } from "./metrics.js";
import { domainValues, fileDomains, loadRegistry } from "./registry.js";
import {
  type DeviceStore, type OutboxLimits, type StoredBatch, DEFAULT_OUTBOX_LIMITS, DeviceLedger, StateError, batchName,
} from "./state.js";
import {
  type RetryPolicy, type Transport, DEFAULT_RETRY, DEFAULT_TIMEOUT, FetchTransport, Response, TransportError,
  DOMAINS_PATH, fromCollector, getRegistry, isRetryable, postBatch, retryDelay,
} from "./transport.js";
import { type WireReport, type WireValue, batchReports, newBatchId, packBatch } from "./wire.js";

export const DEFAULT_BATCH_SIZE = 100;
/** Reports wait on the device up to this long before a batch goes out (hides when the app reported). */
export const DEFAULT_MAX_BATCH_AGE = 30;
export const DEFAULT_QUEUE_SIZE = 10_000;
// Problems that refuse a metric's reports from now on (the rest of the batch goes again): a
// registry the collector no longer shares (422), or a metric it takes only through an
// authenticated shuffler (403 shuffle-required: the client sends it in plain or sealed direct).
const STALE_METRIC_PROBLEMS = new Set(["unknown-metric", "fingerprint-mismatch", "shuffle-required"]);

/**
 * What `stats()` counts: the Python SDK's counters, every one of them by the same name
 * (tests/test_sdk_counters.py compares the two lists). `queue_evicted` stays 0: this queue drops the
 * newest report when full (`dropped_queue_full`), it never evicts a queued one.
 */
export const COUNTERS = [
  "reported", "charged", "refused_window", "refused_lifetime", "refused_device_window",
  "refused_device_lifetime", "invalid_value", "clipped", "unknown_metric", "stale_metric",
  "dropped_queue_full", "dropped", "opted_out", "closed", "dropped_no_registry", "disabled",
  "disabled_state", "internal_error", "batches_built", "batches_sent", "batches_acked",
  "reports_acked", "duplicates", "retries", "network_errors", "batches_rejected",
  "reports_rejected", "reports_refused_at_commit", "reports_dropped_opted_out", "ledger_errors",
  "outbox_write_errors", "queue_evicted",
] as const;
export type Counter = (typeof COUNTERS)[number];

/** Where the device state lives, chosen by the package entry (index.ts / node.ts). */
export interface Platform {
  openStore(options: ClientOptions): Promise<DeviceStore>;
  /** Call `hide` when the page is hidden or left, or the process is about to exit. */
  onHide(hide: () => void): () => void;
  /**
   * Browsers: charge each report as soon as report() returns (one ledger transaction per burst
   * of reports) and send charged reports synchronously on hide — a page may go away at any
   * time, and after its pagehide event nothing asynchronous runs. Node charges per batch.
   */
  chargeEarly?: boolean;
  /** The platform's elapsed clock for the ledger's window rule (default: this realm's). */
  elapsed?: ElapsedClock;
  /** The HTTP transport an `endpoint` gets (default: `fetch`'s; Node: node:http's, httpNode.ts). */
  http?: new (endpoint: string, timeout: number) => Transport;
}

export interface ClientOptions {
  /** The collector's URL (`ldpt serve`). */
  endpoint?: string;
  /** The registry as the collector publishes it (object or JSON text), or one already
   *  resolved (`loadRegistry`); omitted: fetched from the collector (and cached). */
  registry?: unknown;
  /** Node: the state directory. */
  stateDir?: string;
  /** Browser: the IndexedDB namespace of this device (default "default"). */
  namespace?: string;
  /** A ready store instead of the platform's (tests: `MemoryStore`). */
  store?: DeviceStore;
  transport?: Transport;
  batchSize?: number;
  maxBatchAge?: number;
  queueSize?: number;
  retry?: Partial<RetryPolicy>;
  outboxLimits?: OutboxLimits;
  /** HTTP timeout in seconds. */
  timeout?: number;
  /** Wall clock in seconds since the epoch (the ledger's windows are its UTC days). */
  clock?: () => number;
  /** Monotonic seconds for batch ages and retry back-offs (default `performance.now()`). */
  monotonic?: () => number;
  /**
   * The elapsed clock that decides how fast the ledger opens new windows: () => [epoch id, whole
   * seconds], never faster than real time (deviceClock.ts). Default: the platform's (Node on
   * Linux: the boot clock; elsewhere this process's or page's monotonic clock).
   */
  elapsedClock?: ElapsedClock;
  /** Throw instead of counting (tests). */
  strict?: boolean;
  /** metric -> the fingerprint the app was built against. */
  pins?: Record<string, string>;
  /** Flush when the page is hidden (browsers) or the process exits (Node). Default true. */
  flushOnHide?: boolean;
  /** Send batches sealed (Oblivious HTTP): `Seal.relay(url)` etc. from "@ldp-telemetry/sdk/sealed". It
   *  wraps the device store and sets the client's `transport` (none of it is in the core bundle). */
  seal?: { open(client: { store: DeviceStore | null; transport: Transport | null }): void };
}

interface Queued { charge: Charge; report: WireReport; at: number; charged: boolean }

/** A report refused by the client: thrown in strict mode. */
export class ReportError extends Error {
  override name = "ReportError";
}

const sleep = (seconds: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, seconds) * 1000));

/** `promise`, or undefined after `seconds` (the timer is cleared: nothing lingers). */
async function within<T>(promise: Promise<T>, seconds: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([promise, new Promise<undefined>((r) => { timer = setTimeout(() => r(undefined), Math.max(0, seconds) * 1000); })]);
  } finally {
    clearTimeout(timer);
  }
}

export class TelemetryClient {
  /** Resolves when state and registry are loaded (or reporting was disabled: see stats()). */
  readonly ready: Promise<void>;
  private readonly counters = Object.fromEntries(COUNTERS.map((c) => [c, 0])) as Record<Counter, number>;
  private readonly clock: () => number;
  private readonly mono: () => number;
  private readonly upClock: ElapsedClock;
  private readonly batchSize: number;
  private readonly maxBatchAge: number;
  private readonly queueSize: number;
  private readonly retry: RetryPolicy;
  private readonly strict: boolean;
  private readonly chargeEarly: boolean;
  transport: Transport | null;
  /** Public only for the `seal` option, which wraps it (and `transport`) in its sealing layer. */
  store: DeviceStore | null = null;
  private ledger: DeviceLedger | null = null;
  private registry: Registry | null = null;
  private secret: Uint8Array | null = null;
  private disabledReason: string | null = null;
  /** What a report() counts while reporting is disabled: `disabled_state` when the device state
   *  cannot be used (a StateError: no IndexedDB, a state directory that cannot be written, a bad
   *  secret), `disabled` when the ledger or the registry cannot — the Python SDK's split. */
  private disabledCounter: Counter = "disabled";
  private optedOut = false;
  private closed = false;
  private waiting: Array<[string, unknown]> = [];
  private queue: Queued[] = [];
  private accounts = new Book();
  private mirror = new Book();
  private uncommitted = new Set<Charge>();
  private refusals = new Map<string, [Charge, Refusal, number]>();
  private readonly stale = new Set<string>();
  private backoffUntil = 0;
  private serverBackoff = false;
  private attempts = 0;
  private flushing = 0;
  private pump: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private timerAt = 0;
  private unhide: (() => void) | null = null;
  /** Ends the wait before the next registry fetch (flush, close). */
  private hurry: (() => void) | null = null;
  private logged = new Set<string>();

  constructor(options: ClientOptions, platform: Platform) {
    this.clock = options.clock ?? (() => Date.now() / 1000);
    this.mono = options.monotonic ?? (() => performance.now() / 1000);
    this.upClock = options.elapsedClock ?? platform.elapsed ?? realmElapsed;
    this.batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
    this.maxBatchAge = options.maxBatchAge ?? DEFAULT_MAX_BATCH_AGE;
    this.queueSize = options.queueSize ?? DEFAULT_QUEUE_SIZE;
    this.retry = { ...DEFAULT_RETRY, ...(options.retry ?? {}) };
    this.strict = options.strict ?? false;
    if (this.batchSize < 1) throw new RangeError("batchSize must be >= 1");
    this.transport = options.transport
      ?? (options.endpoint ? new (platform.http ?? FetchTransport)(options.endpoint, options.timeout ?? DEFAULT_TIMEOUT) : null);
    if (this.transport === null) throw new TypeError("give endpoint (the collector URL) or transport");
    const limits = options.outboxLimits ?? DEFAULT_OUTBOX_LIMITS;
    this.ready = this.start({ ...options, outboxLimits: limits }, platform);
    this.chargeEarly = platform.chargeEarly ?? false;
    // on hide/exit: what is queued is charged, stored and sent now (keepalive outlives the page)
    if (options.flushOnHide ?? true) {
      this.unhide = platform.onHide(() => {
        if (this.chargeEarly) this.sendNow();
        if (this.queue.length) void this.flush(1);
      });
    }
  }

  private async start(options: ClientOptions, platform: Platform): Promise<void> {
    try {
      this.store = options.store ?? await platform.openStore(options);
      options.seal?.open(this); // sealed delivery wraps the store and the transport, before any batch is stored or sent
      this.ledger = new DeviceLedger(this.store);
      this.optedOut = await this.store.isOptedOut();
      if (!this.optedOut) this.secret = await this.store.loadSecret();
      this.accounts = await this.ledger.snapshot();
      this.mirror = copyAccounts(this.accounts);
      // an unreachable collector (and no cached copy) is retried with the retry policy, the
      // reports waiting in memory meanwhile; flush() retries at once, close() gives up
      for (let attempt = 1; this.registry === null && !this.closed; attempt++) {
        try {
          this.registry = await this.resolveRegistry(options);
        } catch (exc) {
          if (!(exc instanceof TransportError) || this.strict) throw exc;
          this.log(`ldpt: cannot fetch the registry (${exc.message}); retrying, reports wait in memory`);
          await new Promise<void>((go) => {
            const t = setTimeout(go, retryDelay(this.retry, attempt, null) * 1000);
            this.hurry = () => { clearTimeout(t); go(); };
          });
          this.hurry = null;
        }
      }
      if (this.registry === null) return; // closed before the registry came
    } catch (exc) {
      this.disable(exc as Error);
      if (this.strict) throw exc;
      return;
    }
    const waiting = this.waiting;
    this.waiting = [];
    for (const [metric, value] of waiting) this.report(metric, value);
    if (await this.store.outbox.pending()) this.wake(); // batches an earlier run left
  }

  private disable(exc: Error): void {
    this.disabledReason = `${exc.name}: ${exc.message}`;
    if (exc instanceof StateError) this.disabledCounter = "disabled_state";
    this.counters[this.disabledCounter] += this.waiting.length;
    this.waiting = [];
    this.log(`ldpt: reporting is disabled: ${this.disabledReason}`);
  }

  private async resolveRegistry(options: ClientOptions): Promise<Registry> {
    const given = options.registry as Registry | undefined;
    if (given !== undefined && typeof given.get === "function") return given; // already resolved
    if (given !== undefined) return loadRegistry(given, options.pins);
    const store = this.store as DeviceStore;
    try {
      const resp = await getRegistry(this.transport as Transport);
      if (resp.status !== 200) throw new TransportError(`the collector answered ${resp.status} to GET /v1/registry`);
      const text = new TextDecoder().decode(resp.body);
      const registry = loadRegistry(text, options.pins, undefined, await this.domainLists(text));
      await store.writeRegistry(text);
      return registry;
    } catch (exc) {
      const cached = await store.readRegistry();
      if (cached === null || !(exc instanceof TransportError)) throw exc;
      this.log(`ldpt: cannot fetch the registry (${(exc as Error).message}); using the cached copy`);
      return loadRegistry(cached, options.pins, undefined, await this.domainLists(cached));
    }
  }

  /** The values of the registry's file domains: cached by digest, else fetched (and cached). */
  private async domainLists(registryText: string): Promise<Record<string, string[]>> {
    const store = this.store as DeviceStore;
    const out: Record<string, string[]> = {};
    for (const d of fileDomains(registryText)) {
      const cached = await store.readDomain?.(d.sha256);
      let text = cached;
      if (!cached) {
        const resp = await (this.transport as Transport).request("GET", DOMAINS_PATH + encodeURIComponent(d.name),
          undefined, { Accept: "text/plain", "Accept-Encoding": "gzip" }); // a browser sets its own Accept-Encoding
        if (resp.status !== 200) throw new TransportError(`domain list of ${d.name}: ${resp.status}`);
        text = new TextDecoder().decode(resp.body);
      }
      out[d.name] = domainValues(text as string, d);   // checked before it is cached
      if (!cached) await store.writeDomain?.(d.sha256, text as string);
    }
    return out;
  }

  private log(message: string): void {
    if (this.logged.has(message) || this.logged.size > 100) return;
    this.logged.add(message);
    console.warn(message);
  }

  // --- the hot path ---------------------------------------------------------------------------------

  /** Randomise `value` and queue it for `metric`; true if queued. Never throws (unless strict). */
  report(metric: string, value: unknown): boolean {
    try {
      return this.reportOne(metric, value);
    } catch (exc) {
      if (this.strict) throw exc;
      this.counters.internal_error += 1;
      this.log(`ldpt: report(${JSON.stringify(metric)}) failed internally: ${(exc as Error).name}: ${(exc as Error).message}`);
      return false;
    }
  }

  private reportOne(metric: string, value: unknown): boolean {
    if (this.closed || this.optedOut || this.disabledReason !== null) return this.notReporting();
    const registry = this.registry;
    if (registry === null) {
      if (this.waiting.length >= this.queueSize) {
        this.counters.dropped_queue_full += 1;
        return false;
      }
      this.waiting.push([metric, value]); // the true value: memory only, never stored
      return true;
    }
    const rt = registry.get(metric);
    if (rt === undefined) return this.fail("unknown_metric", `unknown metric ${JSON.stringify(metric)}`);
    if (this.stale.has(metric)) return this.fail("stale_metric", `metric ${metric} was rejected by the collector`);
    const secret = this.secret as Uint8Array;
    const day = dayOf(this.clock());
    const found = rt.lookup(value, secret, day);
    if (found === null) return this.fail("invalid_value", `a value reported for ${JSON.stringify(metric)} is not in its domain`);
    if (found.clipped) this.counters.clipped += 1;
    const charge = chargeOf(rt, registry, day, found.digest);
    const refusal = apply(this.mirror, charge, this.upClock()); // reserve in the mirror of the ledger
    if (refusal !== null) {
      this.counters[`refused_${refusal}`] += 1;
      const key = `${metric}\u0000${refusal}`;
      const entry = this.refusals.get(key);
      if (entry) entry[2] += 1;
      else this.refusals.set(key, [charge, refusal, 1]);
      if (this.strict) throw new ReportError(`metric ${JSON.stringify(metric)}: report refused by the privacy ledger (${refusal} budget)`);
      return false;
    }
    if (this.queue.length >= this.queueSize) {
      this.rebuildMirror(); // the reservation above is undone
      return this.fail("dropped_queue_full", "the report queue is full; new reports are dropped");
    }
    const payload: WireValue = rt.encode(found, secret, day);
    this.uncommitted.add(charge);
    this.queue.push({ charge, report: { m: rt.name, f: rt.fingerprint, p: payload }, at: this.mono(), charged: false });
    this.counters.reported += 1;
    if (this.queue.length >= this.batchSize) this.wake();
    else if (this.chargeEarly) this.schedule(0); // charged now, sent at batch time (or on hide)
    else this.schedule(this.maxBatchAge);
    return true;
  }

  private fail(counter: Counter, message: string): boolean {
    this.counters[counter] += 1;
    if (this.strict) throw new ReportError(message);
    this.log(`ldpt: ${message}; such reports are counted and dropped`);
    return false;
  }

  private notReporting(): boolean {
    const reason: Counter = this.closed ? "closed" : this.optedOut ? "opted_out" : this.disabledCounter;
    this.counters[reason] += 1;
    if (this.strict && this.disabledReason !== null) throw new ReportError(`reporting is disabled: ${this.disabledReason}`);
    return false;
  }

  /** mirror = committed book + reports queued but not yet charged. */
  private rebuildMirror(): void {
    const mirror = copyAccounts(this.accounts);
    if (this.uncommitted.size) {
      const reading = this.upClock();
      for (const c of this.uncommitted) apply(mirror, c, reading);
    }
    this.mirror = mirror;
  }

  // --- the worker ------------------------------------------------------------------------------------

  /** Wake the worker in `seconds`, unless it is already due to wake sooner. */
  private schedule(seconds: number): void {
    if (this.closed) return;
    const at = this.mono() + Math.max(0, seconds);
    if (this.timer !== null) {
      if (this.timerAt <= at) return;
      clearTimeout(this.timer);
    }
    this.timerAt = at;
    this.timer = setTimeout(() => { this.timer = null; this.wake(); }, Math.max(0, seconds) * 1000);
    (this.timer as { unref?: () => void }).unref?.(); // Node: never keeps a process alive
  }

  /** Run the worker now (one at a time); resolves when it has nothing more to do right now. */
  private wake(): Promise<void> {
    if (this.pump === null) {
      this.pump = this.cycle().catch((exc) => {
        this.log(`ldpt: uploader error: ${(exc as Error).message}`);
      }).finally(() => {
        this.pump = null;
      });
    }
    return this.pump;
  }

  private batchDue(now: number): boolean {
    const q = this.queue;
    return q.length > 0 && (q.length >= this.batchSize || this.flushing > 0 || now - q[0].at >= this.maxBatchAge);
  }

  private async cycle(): Promise<void> {
    if (this.store === null) return;
    if (this.refusals.size) await this.recordRefusals();
    if (this.chargeEarly) await this.chargeQueued();
    while (this.batchDue(this.mono())) await this.buildOne();
    for (;;) {
      const now = this.mono();
      if (now < this.backoffUntil) {
        this.schedule(this.backoffUntil - now);
        break;
      }
      const batch = await this.store.outbox.claim(this.clock());
      if (batch === null) break;
      let response: Response | null = null;
      let error: Error | null = null;
      try {
        response = await postBatch(this.transport as Transport, batch.body);
      } catch (exc) {
        error = exc as Error;
      }
      await this.handle(batch, response, error);
      while (this.batchDue(this.mono())) await this.buildOne();
    }
    if (this.queue.length) this.schedule(this.queue[0].at + this.maxBatchAge - this.mono());
  }

  private drainRefusals(): RefusalCounts {
    const out = [...this.refusals.values()];
    this.refusals.clear();
    return out;
  }

  private async recordRefusals(): Promise<void> {
    const refusals = this.drainRefusals();
    try {
      const result = await (this.ledger as DeviceLedger).commit([], refusals, this.upClock);
      this.accounts = result.accounts;
      this.rebuildMirror();
    } catch (exc) {
      this.log(`ldpt: cannot write the privacy ledger: ${(exc as Error).message}`);
    }
  }

  /**
   * Charge `items` (those not charged yet) in one ledger transaction; returns the charged ones.
   * A report the ledger refuses (another tab or process spent the budget first), or that
   * cannot be charged, is dropped: never sent.
   */
  private async charge(items: Queued[]): Promise<Queued[]> {
    const todo = items.filter((it) => !it.charged);
    if (!todo.length) return items;
    const drop = (its: Queued[]) => {
      for (const it of its) this.uncommitted.delete(it.charge);
      this.rebuildMirror();
      return items.filter((it) => it.charged);
    };
    if (await (this.store as DeviceStore).isOptedOut()) { // another tab or process opted out
      this.optedOut = true;
      this.counters.dropped += todo.length;
      this.counters.reports_dropped_opted_out += todo.length;
      return drop(todo);
    }
    let outcomes: Array<Refusal | null>;
    try {
      const result = await (this.ledger as DeviceLedger).commit(todo.map((it) => it.charge), this.drainRefusals(),
        this.upClock);
      outcomes = result.outcomes;
      this.accounts = result.accounts;
      for (const it of todo) this.uncommitted.delete(it.charge);
      if (result.foreign || outcomes.some((o) => o !== null)) this.rebuildMirror();
    } catch (exc) { // never send what could not be charged
      this.counters.ledger_errors += todo.length;
      this.log(`ldpt: cannot update the privacy ledger, reports dropped: ${(exc as Error).message}`);
      return drop(todo);
    }
    todo.forEach((it, i) => {
      const o = outcomes[i];
      if (o === null) {
        it.charged = true;
        this.counters.charged += 1;
      } else {
        this.counters[`refused_${o}`] += 1;
        this.counters.reports_refused_at_commit += 1;
      }
    });
    return items.filter((it) => it.charged);
  }

  /** Browsers: charge what report() queued right away, so a page that goes away can send it. */
  private async chargeQueued(): Promise<void> {
    const items = this.queue.filter((it) => !it.charged);
    if (!items.length) return;
    await this.charge(items);
    const tried = new Set(items); // refused or dropped ones leave the queue; later reports stay
    this.queue = this.queue.filter((it) => it.charged || !tried.has(it));
  }

  /** Take one batch off the queue, charge it, store what was charged in the outbox. */
  private async buildOne(): Promise<void> {
    const items = this.queue.splice(0, this.batchSize);
    if (!items.length) return;
    const accepted = await this.charge(items);
    if (accepted.length) await this.store_(accepted.map((it) => it.report), this.clock());
  }

  /**
   * The page is being hidden or left: send every charged report now, in this event handler —
   * the `fetch(..., {keepalive: true})` starts before anything is awaited, so it outlives the
   * page — and store the batch in the outbox too (if the page lives on, the answer settles it;
   * if the send is lost, the next page load resends it, the same bytes: counted once).
   */
  private sendNow(): void {
    const store = this.store;
    const ready = this.queue.filter((it) => it.charged);
    if (store === null || !ready.length) return;
    this.queue = this.queue.filter((it) => !it.charged);
    for (let i = 0; i < ready.length; i += this.batchSize) {
      const reports = ready.slice(i, i + this.batchSize).map((it) => it.report);
      const id = newBatchId();
      const body = packBatch(reports, id);
      const created = this.clock();
      const sending = postBatch(this.transport as Transport, body); // fetch starts here, synchronously
      const batch: StoredBatch = { name: batchName(created, reports.length, id), body, reports: reports.length, created };
      const stored = store.outbox.add(id, body, reports.length, created);
      void Promise.allSettled([sending, stored]).then(async ([sent, kept]) => {
        if (kept.status === "fulfilled") this.counters.batches_built += 1;
        else this.counters.outbox_write_errors += 1;
        await this.handle(batch, sent.status === "fulfilled" ? sent.value : null,
          sent.status === "rejected" ? (sent.reason as Error) : null);
      });
    }
  }

  private async store_(reports: WireReport[], created: number): Promise<void> {
    const batchId = newBatchId(); // the same on every retry: the outbox keeps these bytes
    const body = packBatch(reports, batchId);
    try {
      await (this.store as DeviceStore).outbox.add(batchId, body, reports.length, created);
      this.counters.batches_built += 1;
    } catch (exc) {
      this.counters.outbox_write_errors += 1;
      this.counters.dropped += reports.length;
      this.log(`ldpt: cannot write the offline queue (${(exc as Error).message}); reports dropped`);
    }
  }

  /** Account for one send attempt: ack, schedule a retry, or drop for good. */
  private async handle(batch: StoredBatch, response: Response | null, error: Error | null): Promise<void> {
    const outbox = (this.store as DeviceStore).outbox;
    this.counters.batches_sent += 1;
    const foreign = response !== null && !fromCollector(response);
    if (response === null || foreign || isRetryable(response.status)) {
      await outbox.release(batch);
      this.attempts += 1;
      this.counters.retries += 1;
      const retryAfter = response === null ? null : response.retryAfter(this.clock());
      let delay = retryDelay(this.retry, this.attempts, retryAfter);
      if (this.flushing && retryAfter === null) delay = Math.min(delay, this.retry.flushInterval);
      this.backoffUntil = this.mono() + delay;
      this.serverBackoff = retryAfter !== null;
      if (response === null) this.counters.network_errors += 1;
      const what = response === null ? String(error?.message)
        : `HTTP ${response.status}${foreign ? " that is not the collector's answer: check endpoint and any proxy" : ""}`;
      this.log(`ldpt: collector unavailable (${what}); batches are kept and retried`);
      return;
    }
    await outbox.done(batch); // acknowledged, or a final answer (4xx other than 408/429): never retried
    this.attempts = 0;
    this.backoffUntil = 0;
    this.serverBackoff = false;
    if (response.status !== 200) return this.reject(batch, response);
    this.counters.batches_acked += 1;
    this.counters.reports_acked += batch.reports;
    if ((response.json() as { duplicate?: boolean }).duplicate) this.counters.duplicates += 1;
  }

  private async reject(batch: StoredBatch, response: Response): Promise<void> {
    const slug = response.problemType ?? "error";
    const doc = (response.json() ?? {}) as Record<string, unknown>;
    const metric = typeof doc.metric === "string" ? doc.metric : null;
    const index = doc.report_index as number;
    let reports: WireReport[] = [];
    try {
      reports = batchReports(batch.body);
    } catch { /* our own bytes: cannot really fail */ }
    let keep: WireReport[] | null = null;
    if (STALE_METRIC_PROBLEMS.has(slug) && metric !== null) {
      this.stale.add(metric);
      keep = reports.filter((r) => r.m !== metric);
      this.log(`ldpt: metric ${JSON.stringify(metric)} refused from now on (${slug})`);
    } else if (response.status === 422 && slug === "invalid-report" && Number.isInteger(index) && index >= 0 && index < reports.length) {
      keep = reports.filter((_, i) => i !== index);
      this.log(`ldpt: the collector refuses a report of ${JSON.stringify(metric)} as invalid (${String(doc.detail)})`);
    } else if (response.status === 413 && reports.length > 1) {
      const half = reports.length >> 1;
      await this.store_(reports.slice(0, half), batch.created);
      await this.store_(reports.slice(half), batch.created);
      return;
    } else {
      this.log(`ldpt: the collector rejected a batch with HTTP ${response.status} (${slug}: ${String(doc.detail ?? "")}), not retried`);
    }
    this.counters.batches_rejected += 1;
    this.counters.reports_rejected += reports.length ? reports.length - (keep?.length ?? 0) : batch.reports;
    if (keep !== null && keep.length) await this.store_(keep, batch.created); // new id: never committed
  }

  // --- public surface ----------------------------------------------------------------------------------

  /** Send everything now; true when all of it was acknowledged within `timeout` seconds. */
  async flush(timeout = 10): Promise<boolean> {
    const deadline = Date.now() + Math.max(0, timeout) * 1000;
    const failures = this.failures();
    this.flushing += 1;
    if (!this.serverBackoff) this.backoffUntil = Math.min(this.backoffUntil, this.mono());
    this.hurry?.(); // a registry fetch waiting to be retried: now
    try {
      await within(this.ready, timeout);
      if (this.registry === null && this.disabledReason === null) return false;
      for (;;) {
        await this.wake();
        if (this.store === null) return false;
        if (!this.queue.length && !(await this.store.outbox.pending())) return this.failures() === failures;
        const left = (deadline - Date.now()) / 1000;
        if (left <= 0) return false;
        await sleep(Math.min(left, Math.max(0.005, this.backoffUntil - this.mono())));
      }
    } finally {
      this.flushing -= 1;
    }
  }

  private failures(): number {
    const c = (this.store?.outbox.counters) ?? { droppedReports: 0, expiredReports: 0 };
    return this.counters.reports_rejected + this.counters.ledger_errors + this.counters.outbox_write_errors
      + c.droppedReports + c.expiredReports;
  }

  /** Stop reporting and flush within `timeout`; what is unsent stays in the outbox. */
  async close(timeout = 10): Promise<boolean> {
    const ok = await this.flush(timeout);
    this.closed = true;
    this.hurry?.();
    this.counters.dropped_no_registry += this.waiting.length;
    this.waiting = [];
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.unhide?.();
    return ok;
  }

  /** Stop reporting for good: delete queued reports, the outbox and the secret. */
  async optOut(): Promise<void> {
    this.optedOut = true;
    this.queue = [];
    this.uncommitted.clear();
    this.refusals.clear();
    this.waiting = [];
    this.secret = null;
    await this.ready;
    if (this.store !== null) {
      await this.store.optOut();
      await (this.ledger as DeviceLedger).forgetValues();
    }
  }

  /** Undo optOut: report again with a fresh secret (a new privacy spend, charged by the ledger). */
  async optIn(): Promise<void> {
    await this.ready;
    if (this.store === null) return;
    await this.store.optIn();
    this.secret = await this.store.loadSecret();
    this.optedOut = false;
    this.accounts = await (this.ledger as DeviceLedger).snapshot();
    this.rebuildMirror();
  }

  /** Throw ReportError if `report(metric, value)` would be dropped as bad input (after `ready`). */
  validate(metric: string, value: unknown): void {
    const rt = this.registry?.get(metric);
    if (this.registry === null) throw new ReportError("the metric registry is not known yet: await client.ready");
    if (rt === undefined) throw new ReportError(`unknown metric ${JSON.stringify(metric)}`);
    if (rt.lookup(value, this.secret ?? new Uint8Array(32), dayOf(this.clock())) === null) {
      throw new ReportError(`a value reported for ${JSON.stringify(metric)} is not in its domain`);
    }
  }

  get isOptedOut(): boolean {
    return this.optedOut;
  }

  /** Counters (the Python SDK's names), queue sizes, and why reporting is disabled, if it is. */
  async stats(): Promise<Record<string, number | string | null>> {
    const store = this.store;
    return {
      ...this.counters,
      queued: this.queue.length,
      awaiting_registry: this.waiting.length,
      outbox_pending: store ? await store.outbox.pending() : 0,
      outbox_dropped_reports: store?.outbox.counters.droppedReports ?? 0,
      outbox_expired_reports: store?.outbox.counters.expiredReports ?? 0,
      disabled_reason: this.disabledReason,
      state: store?.where ?? null,
    };
  }

  /** The privacy ledger as committed, per metric (`summarise` turns it into `ldpt ledger`'s rows). */
  async ledgerSnapshot(): Promise<Book> {
    await this.ready;
    return this.ledger ? this.ledger.snapshot() : new Book();
  }
}

function chargeOf(rt: Metric, registry: Registry, day: number, digest: string | null): Charge {
  return {
    metric: rt.name, fingerprint: rt.fingerprint, day, epsilon: rt.epsilon,
    epsilonLongitudinal: rt.epsilonLongitudinal, digest: rt.epsilonLongitudinal === null ? null : digest,
    reportsPerWindow: rt.reportsPerWindow, lifetimeBudget: rt.lifetimeEpsilon,
    deviceWindowBudget: registry.device?.epsilonPerWindow ?? null,
    deviceLifetimeBudget: registry.device?.lifetimeEpsilon ?? null, windowCharges: rt.windowCharges,
  };
}
