/**
 * Device state in a browser: IndexedDB, one database `ldpt` per origin, every record keyed by
 * [namespace, name] so several SDK devices (apps of one origin, or simulated devices in a test
 * page) keep apart. Records: `secret` (32 bytes), `ledger` (the ledger.ts JSON), `registry`,
 * `opted-out`; the outbox store holds batches (exact wire bytes) with their claim time.
 *
 * Two tabs of one origin share the state. The ledger's read-modify-write runs inside the Web
 * Locks API's exclusive lock `ldpt:<namespace>:ledger` (navigator.locks) *and* inside one
 * IndexedDB readwrite transaction (get, charge synchronously, put), which the browser
 * serialises across tabs too; outbox claims are one readwrite transaction each, so no two tabs
 * send the same batch at once. A browser without IndexedDB (some private modes) cannot persist
 * the ledger: `openBrowserStore` raises StateError and the client reports nothing.
 */

import {
  type DeviceStore, type Outbox, type OutboxCounters, type OutboxLimits, type StoredBatch,
  CLAIM_TIMEOUT, DEFAULT_OUTBOX_LIMITS, SECRET_BYTES, StateError, batchName, overCaps, redate,
} from "../state.js";
import { withWebLock } from "../lock.browser.js";

const DB_NAME = "ldpt";
const DB_VERSION = 1;
const KV = "kv";
const OUTBOX = "outbox";

interface OutboxRecord { body: Uint8Array; reports: number; created: number; claimedAt: number | null }

let opening: Promise<IDBDatabase> | null = null;

function openDb(): Promise<IDBDatabase> {
  opening ??= new Promise<IDBDatabase>((resolve, reject) => {
    if (typeof indexedDB === "undefined") {
      reject(new StateError("IndexedDB is not available: the privacy ledger cannot be persisted"));
      return;
    }
    const req = indexedDB.open(DB_NAME, DB_VERSION);
    req.onupgradeneeded = () => {
      const db = req.result;
      for (const name of [KV, OUTBOX]) if (!db.objectStoreNames.contains(name)) db.createObjectStore(name);
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(new StateError(`IndexedDB cannot be opened: ${req.error?.message ?? "unknown error"}`));
    req.onblocked = () => reject(new StateError("IndexedDB is blocked by another tab holding an old version"));
  });
  opening.catch(() => { opening = null; });
  return opening;
}

/** Run `body` in one transaction; resolves with its result once the transaction committed. */
function transact<T>(db: IDBDatabase, stores: string[], mode: IDBTransactionMode,
  body: (tx: IDBTransaction, done: (value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const tx = db.transaction(stores, mode);
    let result: T;
    tx.oncomplete = () => resolve(result);
    // an error aborts the transaction: one rejection, whichever event comes first
    tx.onerror = tx.onabort = () => reject(new StateError(`IndexedDB: ${tx.error?.message ?? "transaction aborted"}`));
    try {
      body(tx, (value) => { result = value; });
    } catch (exc) {
      tx.abort();
      reject(exc);
    }
  });
}

function range(ns: string): IDBKeyRange {
  return IDBKeyRange.bound([ns, ""], [ns, "\uffff"]);
}

export class IndexedDbOutbox implements Outbox {
  readonly counters: OutboxCounters = { droppedReports: 0, expiredReports: 0 };

  constructor(private readonly db: IDBDatabase, private readonly ns: string,
    private readonly limits: OutboxLimits = DEFAULT_OUTBOX_LIMITS) {}

  async add(batchId: Uint8Array, body: Uint8Array, reports: number, created: number): Promise<void> {
    const name = batchName(created, reports, batchId);
    await transact<void>(this.db, [OUTBOX], "readwrite", (tx) => {
      const store = tx.objectStore(OUTBOX);
      store.put({ body, reports, created, claimedAt: null } satisfies OutboxRecord, [this.ns, name]);
      const req = store.openCursor(range(this.ns));
      const rows: Array<{ key: IDBValidKey; created: number; reports: number; size: number }> = [];
      req.onsuccess = () => {
        const cursor = req.result;
        if (cursor) {
          const v = cursor.value as OutboxRecord;
          if (v.claimedAt === null) rows.push({ key: cursor.primaryKey, created: v.created, reports: v.reports, size: v.body.length });
          cursor.continue();
          return;
        }
        // expired batches are left to the claim that follows (it expires and re-dates every batch)
        for (const i of overCaps(rows, this.limits, created).dropped) {
          store.delete(rows[i].key);
          this.counters.droppedReports += rows[i].reports;
        }
      };
    });
  }

  claim(now: number): Promise<StoredBatch | null> {
    return transact<StoredBatch | null>(this.db, [OUTBOX], "readwrite", (tx, done) => {
      done(null);
      const store = tx.objectStore(OUTBOX);
      const req = store.openCursor(range(this.ns));
      let pick: StoredBatch | undefined;
      req.onsuccess = () => { // every waiting batch: re-dated or expired (state.ts redate); the first is claimed
        const cursor = req.result;
        if (!cursor) return;
        const v = cursor.value as OutboxRecord;
        const name = (cursor.primaryKey as string[])[1];
        const r = v.claimedAt !== null && now - v.claimedAt <= CLAIM_TIMEOUT ? 0 : redate(name, v.created, now, this.limits.maxAge);
        if (r === null) {
          cursor.delete();
          this.counters.expiredReports += v.reports;
        } else if (r && (r[0] !== name || !pick)) {
          cursor.delete(); // a re-dated key sorts later: the cursor meets it again, claimed or unchanged
          store.put({ ...v, created: r[1], claimedAt: pick ? v.claimedAt : now } satisfies OutboxRecord, [this.ns, r[0]]);
          if (!pick) done(pick = { name: r[0], body: v.body, reports: v.reports, created: r[1] });
        }
        cursor.continue();
      };
    });
  }

  release(batch: StoredBatch): Promise<void> {
    return transact<void>(this.db, [OUTBOX], "readwrite", (tx) => {
      const store = tx.objectStore(OUTBOX);
      const req = store.get([this.ns, batch.name]);
      req.onsuccess = () => {
        if (req.result) store.put({ ...(req.result as OutboxRecord), claimedAt: null }, [this.ns, batch.name]);
      };
    });
  }

  done(batch: StoredBatch): Promise<void> {
    return transact<void>(this.db, [OUTBOX], "readwrite", (tx) => {
      tx.objectStore(OUTBOX).delete([this.ns, batch.name]);
    });
  }

  pending(): Promise<number> {
    return transact<number>(this.db, [OUTBOX], "readonly", (tx, done) => {
      const req = tx.objectStore(OUTBOX).count(range(this.ns));
      req.onsuccess = () => done(req.result);
    });
  }

  clear(): Promise<void> {
    return transact<void>(this.db, [OUTBOX], "readwrite", (tx) => {
      tx.objectStore(OUTBOX).delete(range(this.ns));
    });
  }
}

export class IndexedDbStore implements DeviceStore {
  readonly where: string;
  readonly outbox: IndexedDbOutbox;

  constructor(private readonly db: IDBDatabase, private readonly ns: string, limits?: OutboxLimits) {
    this.where = `indexeddb:${DB_NAME}/${ns}`;
    this.outbox = new IndexedDbOutbox(db, ns, limits);
  }

  private get(name: string): Promise<unknown> {
    return transact<unknown>(this.db, [KV], "readonly", (tx, done) => {
      const req = tx.objectStore(KV).get([this.ns, name]);
      req.onsuccess = () => done(req.result ?? null);
    });
  }

  private put(name: string, value: unknown): Promise<void> {
    return transact<void>(this.db, [KV], "readwrite", (tx) => {
      if (value === null) tx.objectStore(KV).delete([this.ns, name]);
      else tx.objectStore(KV).put(value, [this.ns, name]);
    });
  }

  async loadSecret(): Promise<Uint8Array> {
    // add() fails if the key exists: two tabs racing here end up with the same secret
    const fresh = crypto.getRandomValues(new Uint8Array(SECRET_BYTES)); // never leaves the device
    const secret = await transact<unknown>(this.db, [KV], "readwrite", (tx, done) => {
      const store = tx.objectStore(KV);
      const req = store.get([this.ns, "secret"]);
      req.onsuccess = () => {
        if (req.result) done(req.result);
        else {
          store.add(fresh, [this.ns, "secret"]);
          done(fresh);
        }
      };
    });
    if (!(secret instanceof Uint8Array) || secret.length !== SECRET_BYTES) {
      throw new StateError(`${this.where}: the stored client secret is not ${SECRET_BYTES} bytes`);
    }
    return secret;
  }

  async readLedger(): Promise<string | null> {
    return (await this.get("ledger")) as string | null;
  }

  updateLedger<T>(fn: (text: string | null) => [string | null, T]): Promise<T> {
    return withWebLock(`ldpt:${this.ns}:ledger`, () => transact<T>(this.db, [KV], "readwrite", (tx, done) => {
      const store = tx.objectStore(KV);
      const req = store.get([this.ns, "ledger"]);
      req.onsuccess = () => {
        const [text, result] = fn((req.result as string | undefined) ?? null);
        if (text !== null) store.put(text, [this.ns, "ledger"]);
        done(result);
      };
    }));
  }

  async isOptedOut(): Promise<boolean> {
    return (await this.get("opted-out")) !== null;
  }

  async optOut(): Promise<void> {
    await this.put("opted-out", true);
    await this.put("secret", null);
    await this.outbox.clear();
  }

  async optIn(): Promise<void> {
    await this.put("opted-out", null);
  }

  async readRegistry(): Promise<string | null> {
    return (await this.get("registry")) as string | null;
  }

  async writeRegistry(text: string): Promise<void> {
    await this.put("registry", text);
  }

  async readDomain(sha256: string): Promise<string | null> {
    return ((await this.get(`domain-${sha256}`)) as string | undefined) ?? null;
  }

  async writeDomain(sha256: string, text: string): Promise<void> {
    await this.put(`domain-${sha256}`, text);
  }
}

/** The state of device `namespace` in this origin's IndexedDB (StateError when unavailable). */
export async function openBrowserStore(namespace = "default", limits?: OutboxLimits): Promise<IndexedDbStore> {
  return new IndexedDbStore(await openDb(), namespace, limits);
}
