/**
 * Device state: the 32-byte secret, the privacy ledger and the offline outbox, over a storage
 * backend chosen by the package's `exports` conditions (storage/browser.ts: IndexedDB and the
 * Web Locks API; storage/node.ts: files with atomic replace and a lock file; storage/memory.ts:
 * tests and simulated fleets). Nothing stored holds a true value.
 *
 * `DeviceState.commit` is the ledger's one transaction: read the book, apply the charges
 * (ledger.ts), write it back, all under the device's exclusive lock — two tabs of one origin or
 * two Node processes on one state directory never overspend the budget together. A random
 * generation tag per write tells a writer whether someone else changed the book since.
 */

import { type ElapsedClock, randomTag } from "./deviceClock.js";
import { hexOf } from "./hashing.js";
import {
  type Book, type Charge, type Refusal, type RefusalCounts,
  commitCharges, dumpLedger, forgetValues, parseLedger,
} from "./ledger.js";

export const SECRET_BYTES = 32;

/** One batch in the outbox: the exact bytes that go on the wire (randomised reports only), or
 *  for a sealed batch the batch with its envelope (stored.ts). */
export interface StoredBatch {
  /** Backend's name of the entry (unique; sorts oldest first). */
  name: string;
  body: Uint8Array;
  reports: number;
  /** Wall-clock seconds when the batch was built. */
  created: number;
}

/** Caps of the offline queue (the Python SDK's `OutboxLimits`); the oldest batches go first. */
export interface OutboxLimits {
  maxBatches: number;
  maxBytes: number;
  /** Seconds. */
  maxAge: number;
}

/** 1,000 batches, 16 MiB, 7 days (client_sdk/queue.py). */
export const DEFAULT_OUTBOX_LIMITS: OutboxLimits = { maxBatches: 1000, maxBytes: 16_777_216, maxAge: 604_800 };
/** A claim older than this (seconds) was abandoned by a tab or process that died: sent again. */
export const CLAIM_TIMEOUT = 120;

/** Counters the outbox keeps (caps and expiry drop the oldest batches). */
export interface OutboxCounters {
  droppedReports: number;
  expiredReports: number;
}

/** Batches waiting for the collector, shared by every tab/process of the device. */
export interface Outbox {
  readonly counters: OutboxCounters;
  /** Store a new batch (before its first send), enforcing the caps. */
  add(batchId: Uint8Array, body: Uint8Array, reports: number, created: number): Promise<void>;
  /** Take the oldest waiting batch for sending (exclusive: no other sender gets it). */
  claim(now: number): Promise<StoredBatch | null>;
  /** Replace a claimed batch's stored bytes (its sealed envelope, made before the first send). */
  update?(batch: StoredBatch, body: Uint8Array): Promise<void>;
  /** Put a claimed batch back (to be retried). */
  release(batch: StoredBatch): Promise<void>;
  /** Remove a batch for good (acknowledged or finally rejected). */
  done(batch: StoredBatch): Promise<void>;
  pending(): Promise<number>;
  clear(): Promise<void>;
}

/** What a storage backend provides for one device (one state directory / one namespace). */
export interface DeviceStore {
  /** Where the state lives (a path, an IndexedDB namespace): for messages and stats(). */
  readonly where: string;
  /** Read the secret, creating it atomically when absent (never overwritten). */
  loadSecret(): Promise<Uint8Array>;
  /** The ledger text (null when none yet), read without the lock (writes are atomic). */
  readLedger(): Promise<string | null>;
  /**
   * Read-modify-write of the ledger text under the device's exclusive lock: `fn` gets the
   * current text and returns the text to write (null: write nothing) and a result.
   */
  updateLedger<T>(fn: (text: string | null) => [string | null, T]): Promise<T>;
  readonly outbox: Outbox;
  isOptedOut(): Promise<boolean>;
  /** Write the opt-out marker, delete the secret and the outbox. */
  optOut(): Promise<void>;
  optIn(): Promise<void>;
  readRegistry(): Promise<string | null>;
  writeRegistry(text: string): Promise<void>;
  /** A file domain's text by its SHA-256 (docs/wire-format.md), null when not cached. */
  readDomain?(sha256: string): Promise<string | null>;
  writeDomain?(sha256: string, text: string): Promise<void>;
}

/** Why this device's state cannot be used: nothing is reported (privacy first). */
export class StateError extends Error {
  override name = "StateError";
}

export interface CommitResult {
  outcomes: Array<Refusal | null>;
  accounts: Book;
  /** Someone else (another tab or process) wrote the book since this object last did. */
  foreign: boolean;
}

/** The ledger of one device over its store. */
export class DeviceLedger {
  private written: string | null = null;

  constructor(private readonly store: DeviceStore) {}

  async snapshot(): Promise<Book> {
    return parseLedger(await this.store.readLedger(), this.store.where).accounts;
  }

  /** Apply refusal counts and charges in order, in one locked transaction; `elapsed` is read
   *  once, inside it (the device clock rule compares readings in the order of the updates). */
  async commit(charges: readonly Charge[], refusals: RefusalCounts, elapsed: ElapsedClock): Promise<CommitResult> {
    return this.store.updateLedger((text) => {
      const { accounts, generation } = parseLedger(text, this.store.where);
      const foreign = generation !== this.written;
      const outcomes = commitCharges(accounts, charges, refusals, elapsed());
      if (!charges.length && !refusals.length) return [null, { outcomes, accounts, foreign }];
      const tag = randomTag();
      this.written = tag;
      return [dumpLedger(accounts, tag), { outcomes, accounts, foreign }];
    });
  }

  async forgetValues(): Promise<void> {
    await this.store.updateLedger((text) => {
      const { accounts } = parseLedger(text, this.store.where);
      if (!forgetValues(accounts)) return [null, undefined];
      this.written = randomTag();
      return [dumpLedger(accounts, this.written), undefined];
    });
  }
}

/** Enforce caps on a list of waiting batches (oldest first): which to drop, and why. */
export function overCaps(batches: ReadonlyArray<{ created: number; size: number; reports: number }>,
  limits: OutboxLimits, now: number): { expired: number[]; dropped: number[] } {
  const expired: number[] = [];
  const dropped: number[] = [];
  const keep: number[] = [];
  batches.forEach((b, i) => (now - b.created > limits.maxAge ? expired : keep).push(i));
  let total = keep.reduce((s, i) => s + batches[i].size, 0);
  while (keep.length && (keep.length > limits.maxBatches || total > limits.maxBytes)) {
    const i = keep.shift() as number;
    dropped.push(i);
    total -= batches[i].size;
  }
  return { expired, dropped };
}

const stamp = (t: number): string => String(Math.round(t * 1e6)).padStart(17, "0");

/** Outbox entry names: `<created µs, 17 digits>-<reports>-<batch id hex>`, sorting oldest first. */
export function batchName(created: number, reports: number, batchId: Uint8Array): string {
  return `${stamp(created)}-${reports}-${hexOf(batchId)}`;
}

/**
 * A waiting batch seen by a claim at wall time `now`: its name and date — a date after `now`
 * (built under a clock that ran ahead, since set right) re-dated to `now`, which the outbox
 * stores, so dates only move back — or null when it is older than `maxAge` (expired).
 * conformance/vectors/outbox.json; docs/privacy.md, "Clock errors".
 */
export const redate = (name: string, created: number, now: number, maxAge: number): [string, number] | null =>
  now - created > maxAge ? null : created > now ? [stamp(now) + name.slice(17), now] : [name, created];

export function parseBatchName(name: string): { created: number; reports: number } | null {
  const m = /^(\d{17})-(\d+)-([0-9a-f]{32})$/.exec(name);
  return m ? { created: Number(m[1]) / 1e6, reports: Number(m[2]) } : null;
}
