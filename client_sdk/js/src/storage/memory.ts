/**
 * Device state in memory: tests, and many simulated devices in one process. Each
 * `MemoryStore` is one device; one JavaScript thread runs each callback to completion, so
 * the ledger's read-modify-write is atomic without a lock.
 */

import {
  type DeviceStore, type Outbox, type OutboxCounters, type OutboxLimits, type StoredBatch,
  CLAIM_TIMEOUT, DEFAULT_OUTBOX_LIMITS, SECRET_BYTES, batchName, overCaps, redate,
} from "../state.js";

interface Entry { batch: StoredBatch; claimedAt: number | null }

export class MemoryOutbox implements Outbox {
  readonly counters: OutboxCounters = { droppedReports: 0, expiredReports: 0 };
  private entries: Entry[] = [];

  constructor(private readonly limits: OutboxLimits = DEFAULT_OUTBOX_LIMITS) {}

  async add(batchId: Uint8Array, body: Uint8Array, reports: number, created: number): Promise<void> {
    this.entries.push({ batch: { name: batchName(created, reports, batchId), body, reports, created }, claimedAt: null });
    this.entries.sort((a, b) => (a.batch.name < b.batch.name ? -1 : 1));
    const waiting = this.entries.filter((e) => e.claimedAt === null);
    const { expired, dropped } = overCaps(waiting.map((e) => ({ ...e.batch, size: e.batch.body.length })),
      this.limits, created);
    for (const i of expired) this.counters.expiredReports += waiting[i].batch.reports;
    for (const i of dropped) this.counters.droppedReports += waiting[i].batch.reports;
    const gone = new Set([...expired, ...dropped].map((i) => waiting[i]));
    this.entries = this.entries.filter((e) => !gone.has(e));
  }

  async claim(now: number): Promise<StoredBatch | null> {
    let pick: Entry | undefined;
    for (const e of [...this.entries]) { // every waiting batch: re-dated or expired (state.ts redate)
      if (e.claimedAt !== null && now - e.claimedAt <= CLAIM_TIMEOUT) continue;
      const r = redate(e.batch.name, e.batch.created, now, this.limits.maxAge);
      if (r) {
        e.batch = { ...e.batch, name: r[0], created: r[1] };
        pick ??= e;
      } else {
        this.counters.expiredReports += e.batch.reports;
        this.entries.splice(this.entries.indexOf(e), 1);
      }
    }
    if (!pick) return null;
    pick.claimedAt = now;
    return pick.batch;
  }

  async update(batch: StoredBatch, body: Uint8Array): Promise<void> {
    for (const e of this.entries) if (e.batch.name === batch.name) e.batch = { ...e.batch, body };
  }

  async release(batch: StoredBatch): Promise<void> {
    for (const e of this.entries) if (e.batch.name === batch.name) e.claimedAt = null;
  }

  async done(batch: StoredBatch): Promise<void> {
    this.entries = this.entries.filter((e) => e.batch.name !== batch.name);
  }

  async pending(): Promise<number> {
    return this.entries.length;
  }

  async clear(): Promise<void> {
    this.entries = [];
  }
}

export class MemoryStore implements DeviceStore {
  readonly where: string;
  readonly outbox: Outbox;
  private secret: Uint8Array | null;
  private ledger: string | null = null;
  private registry: string | null = null;
  private optedOut = false;

  constructor(options: { secret?: Uint8Array; name?: string; limits?: OutboxLimits } = {}) {
    if (options.secret !== undefined && options.secret.length !== SECRET_BYTES) {
      throw new RangeError(`a client secret is ${SECRET_BYTES} bytes`);
    }
    this.secret = options.secret ?? null;
    this.where = options.name ?? "memory";
    this.outbox = new MemoryOutbox(options.limits);
  }

  async loadSecret(): Promise<Uint8Array> {
    this.secret ??= crypto.getRandomValues(new Uint8Array(SECRET_BYTES));
    return this.secret;
  }

  async readLedger(): Promise<string | null> {
    return this.ledger;
  }

  async updateLedger<T>(fn: (text: string | null) => [string | null, T]): Promise<T> {
    const [text, result] = fn(this.ledger);
    if (text !== null) this.ledger = text;
    return result;
  }

  async isOptedOut(): Promise<boolean> {
    return this.optedOut;
  }

  async optOut(): Promise<void> {
    this.optedOut = true;
    this.secret = null;
    await this.outbox.clear();
  }

  async optIn(): Promise<void> {
    this.optedOut = false;
  }

  async readRegistry(): Promise<string | null> {
    return this.registry;
  }

  async writeRegistry(text: string): Promise<void> {
    this.registry = text;
  }

  private readonly domains = new Map<string, string>();

  async readDomain(sha256: string): Promise<string | null> {
    return this.domains.get(sha256) ?? null;
  }

  async writeDomain(sha256: string, text: string): Promise<void> {
    this.domains.set(sha256, text);
  }
}
