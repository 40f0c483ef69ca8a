/**
 * Device state in a directory (Node), laid out as the Python SDK's (docs/guide-app-teams.md,
 * "The state directory"), so `ldpt ledger --state-dir DIR` reads it:
 *
 *     secret        32 random bytes, mode 0600, created by write-temp + link (never overwritten)
 *     ledger.json   the privacy ledger (ledger.ts), replaced atomically under the lock
 *     ledger.nodelock  the lock file every Node process of the directory takes (lock.node.ts;
 *                   present only while held, unlike the Python SDK's flock(2) file ledger.lock;
 *                   never taken from a live holder of this host, however long it holds it)
 *     outbox/       batches waiting for the collector, `<name>.ldpb`; claimed by renaming
 *     registry.json the last fetched registry
 *     opted-out     present after optOut()
 *     owner         "node": the SDK whose lock guards this directory (claimDirectory)
 *
 * Every write is write-temp-fsync-rename (readers see the old file or the new one, never a torn
 * one). The lock file is this SDK's own: a Python process and a Node process must not share
 * one directory (the Python SDK locks with flock(2)), and the owner file makes sure they do not.
 */

import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import { dirname, join } from "node:path";

import { withFileLock } from "../lock.node.js";
import {
  type DeviceStore, type Outbox, type OutboxCounters, type OutboxLimits, type StoredBatch,
  CLAIM_TIMEOUT, DEFAULT_OUTBOX_LIMITS, SECRET_BYTES, StateError, batchName, overCaps, parseBatchName, redate,
} from "../state.js";

const BATCH_SUFFIX = ".ldpb";
const CLAIM_SUFFIX = ".sending";

function tempName(path: string): string {
  const slash = path.lastIndexOf("/");
  return `${path.slice(0, slash + 1)}.${path.slice(slash + 1)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
}

async function fsyncDir(dir: string): Promise<void> {
  try {
    const h = await fs.open(dir, "r");
    try {
      await h.sync();
    } finally {
      await h.close();
    }
  } catch {
    /* best effort (platforms where directories cannot be opened) */
  }
}

/** Write-temp-fsync-rename: readers see the old file or the new one, never a torn one.
 *  With `unchanged`, asked once the new bytes are durable and just before the rename: false
 *  leaves the file as it is and returns false (the caller's compare-and-swap failed). */
export async function atomicWrite(path: string, data: Uint8Array | string, durable = true,
  unchanged?: () => Promise<boolean>): Promise<boolean> {
  const tmp = tempName(path);
  const h = await fs.open(tmp, "wx", 0o600);
  try {
    await h.writeFile(data);
    if (durable) await h.sync();
  } catch (exc) {
    await h.close();
    await fs.rm(tmp, { force: true });
    throw exc;
  }
  await h.close();
  try {
    if (unchanged !== undefined && !(await unchanged())) {
      await fs.rm(tmp, { force: true });
      return false;
    }
    await fs.rename(tmp, path);
  } catch (exc) {
    await fs.rm(tmp, { force: true });
    throw exc;
  }
  if (durable) await fsyncDir(join(path, ".."));
  return true;
}

async function readOrNull(path: string, encoding?: "utf8"): Promise<any> {
  try {
    return await fs.readFile(path, encoding ?? null);
  } catch (exc) {
    if ((exc as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw exc;
  }
}

export class FileOutbox implements Outbox {
  readonly counters: OutboxCounters = { droppedReports: 0, expiredReports: 0 };

  constructor(readonly dir: string, private readonly limits: OutboxLimits = DEFAULT_OUTBOX_LIMITS) {}

  private async scan(): Promise<{ waiting: string[]; claims: string[] }> {
    let names: string[];
    try {
      names = await fs.readdir(this.dir);
    } catch (exc) {
      if ((exc as NodeJS.ErrnoException).code === "ENOENT") return { waiting: [], claims: [] };
      throw exc;
    }
    const waiting = names.filter((n) => n.endsWith(BATCH_SUFFIX) && parseBatchName(n.slice(0, -BATCH_SUFFIX.length)));
    return { waiting: waiting.sort(), claims: names.filter((n) => n.endsWith(CLAIM_SUFFIX)) };
  }

  async add(batchId: Uint8Array, body: Uint8Array, reports: number, created: number): Promise<void> {
    await fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    await atomicWrite(join(this.dir, batchName(created, reports, batchId) + BATCH_SUFFIX), body);
    const { waiting } = await this.scan();
    const rows = [];
    for (const n of waiting) {
      const meta = parseBatchName(n.slice(0, -BATCH_SUFFIX.length));
      const size = await fs.stat(join(this.dir, n)).then((s) => s.size, () => 0);
      rows.push({ ...(meta as { created: number; reports: number }), size });
    }
    const { expired, dropped } = overCaps(rows, this.limits, created);
    for (const [list, key] of [[expired, "expiredReports"], [dropped, "droppedReports"]] as const) {
      for (const i of list) {
        if (await fs.rm(join(this.dir, waiting[i])).then(() => true, () => false)) this.counters[key] += rows[i].reports;
      }
    }
  }

  async claim(now: number): Promise<StoredBatch | null> {
    const { waiting, claims } = await this.scan();
    for (const c of claims) { // abandoned claims (their sender died) go back to the queue
      const mtime = await fs.stat(join(this.dir, c)).then((s) => s.mtimeMs / 1000, () => now);
      if (now - mtime > CLAIM_TIMEOUT) {
        await fs.rename(join(this.dir, c), join(this.dir, c.split(BATCH_SUFFIX)[0] + BATCH_SUFFIX)).catch(() => undefined);
      }
    }
    const ready: Array<[string, number, number]> = [];
    for (const n of waiting) { // every waiting batch: re-dated (renamed) or expired (state.ts redate)
      const meta = parseBatchName(n.slice(0, -BATCH_SUFFIX.length)) as { created: number; reports: number };
      const r = redate(n, meta.created, now, this.limits.maxAge);
      const moved = r === null ? fs.rm(join(this.dir, n)) : r[0] === n ? null : fs.rename(join(this.dir, n), join(this.dir, r[0]));
      if (moved && !(await moved.then(() => true, () => false))) continue; // another process took it first
      if (r) ready.push([r[0], r[1], meta.reports]);
      else this.counters.expiredReports += meta.reports;
    }
    for (const [n, created, reports] of ready) {
      const claimed = join(this.dir, `${n}.${process.pid}.${randomBytes(3).toString("hex")}${CLAIM_SUFFIX}`);
      try {
        await fs.rename(join(this.dir, n), claimed);
      } catch {
        continue; // another process claimed (or finished) it first
      }
      const t = new Date();
      await fs.utimes(claimed, t, t).catch(() => undefined); // the claim's age starts now
      const body = new Uint8Array(await fs.readFile(claimed));
      return { name: claimed, body, reports, created };
    }
    return null;
  }

  async update(batch: StoredBatch, body: Uint8Array): Promise<void> {
    await atomicWrite(batch.name, body); // the claimed file: its name is unchanged
  }

  async release(batch: StoredBatch): Promise<void> {
    const base = batch.name.slice(batch.name.lastIndexOf("/") + 1);
    await fs.rename(batch.name, join(this.dir, base.split(BATCH_SUFFIX)[0] + BATCH_SUFFIX)).catch(() => undefined);
  }

  async done(batch: StoredBatch): Promise<void> {
    await fs.rm(batch.name, { force: true });
  }

  async pending(): Promise<number> {
    const { waiting, claims } = await this.scan();
    return waiting.length + claims.length;
  }

  async clear(): Promise<void> {
    const { waiting, claims } = await this.scan();
    await Promise.all([...waiting, ...claims].map((n) => fs.rm(join(this.dir, n), { force: true })));
  }
}

/** Create `path` holding `data` (mode 0600) unless it exists, never overwriting it: a private
 *  temporary file, fsynced, hard-linked into place (link fails if another process won). */
async function createOnce(path: string, data: Uint8Array): Promise<void> {
  const tmp = tempName(path);
  const h = await fs.open(tmp, "wx", 0o600);
  try {
    await h.writeFile(data);
    await h.sync();
  } finally {
    await h.close();
  }
  try {
    await fs.link(tmp, path); // fails if another process created it first: use theirs
  } catch (exc) {
    if ((exc as NodeJS.ErrnoException).code !== "EEXIST") throw exc;
  } finally {
    await fs.rm(tmp, { force: true });
  }
  await fsyncDir(dirname(path));
}

/** The file naming the SDK whose lock guards a state directory (docs/conformance.md, "The state
 *  directory"): the SDKs' ledger locks (flock(2) on ledger.lock, this lock file, fcntl(2) on
 *  ledger.jvmlock) do not exclude one another, so two SDKs on one directory could spend one
 *  budget twice. */
export const OWNER_FILE = "owner";
export const OWNER = "node";
/** The lock file each SDK leaves in a directory it used before owner files existed. */
const OWNER_LOCK_FILES: Record<string, string> = { python: "ledger.lock", jvm: "ledger.jvmlock" };

/** Make this SDK the owner of `dir`, or StateError if another SDK is. */
export async function claimDirectory(dir: string): Promise<void> {
  const path = join(dir, OWNER_FILE);
  let text = await readOrNull(path, "utf8");
  if (text === null) {
    for (const [sdk, lock] of Object.entries(OWNER_LOCK_FILES)) {
      if ((await readOrNull(join(dir, lock))) !== null) refuse(dir, sdk, `its lock file ${lock}`);
    }
    await createOnce(path, new TextEncoder().encode(`${OWNER}\n`));
    text = await fs.readFile(path, "utf8");
  }
  const owner = text.slice(0, 64).trim();
  if (owner !== OWNER) refuse(dir, owner, `its ${OWNER_FILE} file`);
}

function refuse(dir: string, owner: string, evidence: string): never {
  throw new StateError(`${dir}: the state directory belongs to the '${owner}' SDK (${evidence}); SDKs lock ` +
    "the ledger differently, so two of them sharing one directory could spend one budget twice — " +
    "give each SDK its own state directory");
}

/** One device's state in `dir` (created 0700). */
export class FileStore implements DeviceStore {
  readonly outbox: FileOutbox;
  /** Called with the holder's lock text each time the ledger's lock is found held (diagnostics). */
  onLockWait?: (holder: string) => void;
  /** Ledger writes refused by the compare-and-swap (someone wrote the book meanwhile) and redone. */
  ledgerConflicts = 0;

  constructor(readonly where: string, limits: OutboxLimits = DEFAULT_OUTBOX_LIMITS) {
    this.outbox = new FileOutbox(join(where, "outbox"), limits);
  }

  /** Create the directory, check it can be written and claim it for this SDK; StateError
   *  otherwise (a directory another SDK owns among them: `claimDirectory`). */
  async open(): Promise<this> {
    try {
      await fs.mkdir(this.where, { recursive: true, mode: 0o700 });
      await fs.access(this.where, (await import("node:fs")).constants.W_OK);
    } catch (exc) {
      throw new StateError(`${this.where}: the state directory cannot be used (${(exc as Error).message})`);
    }
    try {
      await claimDirectory(this.where);
    } catch (exc) {
      if (exc instanceof StateError) throw exc;
      throw new StateError(`${this.where}: cannot read or write the state directory's owner (${(exc as Error).message})`);
    }
    return this;
  }

  private path(name: string): string {
    return join(this.where, name);
  }

  async loadSecret(): Promise<Uint8Array> {
    const path = this.path("secret");
    let data: Buffer | null = await readOrNull(path);
    if (data === null) {
      await createOnce(path, randomBytes(SECRET_BYTES)); // the secret: never leaves this directory
      data = await fs.readFile(path);
    }
    if (data.length !== SECRET_BYTES) {
      throw new StateError(`${path}: not a client secret (${data.length} bytes, expected ${SECRET_BYTES})`);
    }
    return new Uint8Array(data);
  }

  readLedger(): Promise<string | null> {
    return readOrNull(this.path("ledger.json"), "utf8");
  }

  /** Read-modify-write of the ledger under the lock file, with a compare-and-swap before the
   *  rename: if the book is no longer the one `fn` was given (a writer that held the lock
   *  while we believed we did: lock.node.ts), `fn` runs again on the book as it now is. */
  async updateLedger<T>(fn: (text: string | null) => [string | null, T]): Promise<T> {
    return withFileLock(this.path("ledger.nodelock"), async () => {
      for (;;) {
        const before = await this.readLedger();
        const [text, result] = fn(before);
        if (text === null) return result;
        if (await atomicWrite(this.path("ledger.json"), text, true, async () => (await this.readLedger()) === before)) {
          return result;
        }
        this.ledgerConflicts += 1;
      }
    }, { onWait: this.onLockWait });
  }

  async isOptedOut(): Promise<boolean> {
    return fs.access(this.path("opted-out")).then(() => true, () => false);
  }

  async optOut(): Promise<void> {
    await atomicWrite(this.path("opted-out"), "opted out: nothing is reported\n");
    await fs.rm(this.path("secret"), { force: true });
    await fs.rm(this.outbox.dir, { recursive: true, force: true });
    await fsyncDir(this.where);
  }

  async optIn(): Promise<void> {
    await fs.rm(this.path("opted-out"), { force: true });
  }

  readRegistry(): Promise<string | null> {
    return readOrNull(this.path("registry.json"), "utf8");
  }

  async writeRegistry(text: string): Promise<void> {
    await atomicWrite(this.path("registry.json"), text);
  }

  readDomain(sha256: string): Promise<string | null> {
    return /^[0-9a-f]{64}$/.test(sha256) ? readOrNull(this.path(`domain-${sha256}.txt`), "utf8") : Promise.resolve(null);
  }

  async writeDomain(sha256: string, text: string): Promise<void> {
    if (/^[0-9a-f]{64}$/.test(sha256)) await atomicWrite(this.path(`domain-${sha256}.txt`), text);
  }
}
