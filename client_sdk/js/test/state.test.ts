/** Node device state: the secret, the ledger under the lock file across processes, the outbox. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { promises as fs } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { withFileLock } from "../src/lock.node.js";
import type { Reading } from "../src/deviceClock.js";
import { parseLedger } from "../src/ledger.js";
import { DeviceLedger, StateError } from "../src/state.js";
import { FileStore } from "../src/storage/node.js";
import { MemoryStore } from "../src/storage/memory.js";

const run = promisify(execFile);
const fresh = () => mkdtempSync(join(tmpdir(), "ldpt-js-state-"));

test("the secret is 32 bytes, mode 0600, created once and never overwritten", async () => {
  const dir = fresh();
  const a = await new FileStore(dir).open();
  const [s1, s2] = await Promise.all([a.loadSecret(), new FileStore(dir).loadSecret()]);
  assert.equal(s1.length, 32);
  assert.deepEqual(s1, s2);
  assert.equal(statSync(join(dir, "secret")).mode & 0o777, 0o600);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  writeFileSync(join(dir, "secret"), "short");
  await assert.rejects(a.loadSecret(), StateError);
});

test("an unusable directory is a StateError (the client then reports nothing)", async () => {
  const file = join(fresh(), "a-file");
  writeFileSync(file, "x");
  await assert.rejects(new FileStore(join(file, "state")).open(), StateError);
});

test("two processes charging one state directory never overspend the device cap together", async () => {
  const dir = fresh();
  await new FileStore(dir).open();
  const worker = fileURLToPath(new URL("./charge_worker.js", import.meta.url));
  const outs = await Promise.all([0, 1, 2].map(() => run(process.execPath, [worker, dir, "8"])));
  const charged = outs.reduce((s, o) => s + Number(o.stdout.trim()), 0);
  assert.equal(charged, 10); // 24 attempts, a cap of 10 per window: exactly 10 charged
  const book = parseLedger(readFileSync(join(dir, "ledger.json"), "utf8")).accounts.get("m");
  assert.equal(book?.window_reports, 10);
  assert.equal(book?.refused_device_window, 14);
  const left = (await fs.readdir(dir)).filter((n) => n.includes("lock") || n.endsWith(".tmp"));
  assert.deepEqual(left, []); // no lock file or temporary file left behind
});

test("a lock file left by a dead process is taken over; a live one is waited for", async () => {
  const dir = fresh();
  const path = join(dir, "x.lock");
  writeFileSync(path, "999999999 " + (await import("node:os")).hostname() + "\n"); // no such pid
  assert.equal(await withFileLock(path, () => "got it"), "got it");
  const order: string[] = [];
  const first = withFileLock(path, async () => {
    order.push("a-in");
    await new Promise((r) => setTimeout(r, 30));
    order.push("a-out");
  });
  const second = withFileLock(path, () => { order.push("b"); });
  await Promise.all([first, second]);
  assert.deepEqual(order, ["a-in", "a-out", "b"]);
});

test("outbox: oldest first, exclusive claims, release, done, caps", async () => {
  for (const store of [await new FileStore(fresh(), { maxBatches: 3, maxBytes: 1e6, maxAge: 100 }).open(),
    new MemoryStore({ limits: { maxBatches: 3, maxBytes: 1e6, maxAge: 100 } })]) {
    const ob = store.outbox;
    const id = (n: number) => new Uint8Array(16).fill(n);
    for (let i = 0; i < 4; i++) await ob.add(id(i), new Uint8Array([i]), 1, 1000 + i);
    assert.equal(await ob.pending(), 3);
    assert.equal(ob.counters.droppedReports, 1); // the oldest went first
    const a = await ob.claim(2000);
    const b = await ob.claim(2000);
    assert.deepEqual([a?.body[0], b?.body[0]], [1, 2]);
    await ob.release(a!);
    assert.equal((await ob.claim(2000))?.body[0], 1);
    await ob.done(b!);
    assert.equal(await ob.pending(), 2);
    await ob.add(id(9), new Uint8Array([9]), 5, 1200); // 1001.. are older than max_age now
    assert.equal(ob.counters.expiredReports, 1);
  }
});

test("a commit tells whether someone else wrote the book since", async () => {
  const store = await new FileStore(fresh()).open();
  const a = new DeviceLedger(store);
  const b = new DeviceLedger(store);
  const charge = { metric: "m", fingerprint: "a".repeat(32), day: 1, epsilon: 1, epsilonLongitudinal: null,
    digest: null, reportsPerWindow: 9, lifetimeBudget: null, deviceWindowBudget: null, deviceLifetimeBudget: null };
  const now = (): Reading => ["boot:test", 1000];
  assert.equal((await a.commit([charge], [], now)).foreign, false);
  assert.equal((await a.commit([charge], [], now)).foreign, false);
  await b.commit([charge], [], now);
  assert.equal((await a.commit([charge], [], now)).foreign, true);
  assert.equal((await a.snapshot()).get("m")?.window_reports, 4);
});
