/** Node device state: the secret, the ledger under the lock file across processes, the outbox. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
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

test("a state directory another SDK owns is refused; this SDK claims its own and unowned ones", async () => {
  for (const owner of ["python", "jvm", "swift"]) {
    const dir = fresh();
    writeFileSync(join(dir, "owner"), `${owner}\n`);
    await assert.rejects(new FileStore(dir).open(), (e: Error) =>
      e instanceof StateError && e.message.includes(`belongs to the '${owner}' SDK (its owner file)`));
  }
  for (const [sdk, lock] of [["python", "ledger.lock"], ["jvm", "ledger.jvmlock"]]) {
    const dir = fresh(); // used by that SDK before owner files existed
    writeFileSync(join(dir, lock), "");
    await assert.rejects(new FileStore(dir).open(), (e: Error) =>
      e instanceof StateError && e.message.includes(`'${sdk}' SDK (its lock file ${lock})`));
    await assert.rejects(fs.access(join(dir, "owner")));
  }
  const dir = fresh();
  await new FileStore(dir).open();
  assert.equal(readFileSync(join(dir, "owner"), "utf8"), "node\n");
  await new FileStore(dir).open(); // its own: opened again
  assert.deepEqual((await fs.readdir(dir)).sort(), ["owner"]); // no temporary left
});

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
  let entered!: () => void;
  const inside = new Promise<void>((r) => { entered = r; });
  const first = withFileLock(path, async () => {
    order.push("a-in");
    entered();
    await new Promise((r) => setTimeout(r, 30));
    order.push("a-out");
  });
  await inside; // the first holds the lock before the second asks (two asking at once: either may win)
  const second = withFileLock(path, () => { order.push("b"); });
  await Promise.all([first, second]);
  assert.deepEqual(order, ["a-in", "a-out", "b"]);
});

/** Whether process `pid` is stopped (Linux /proc; null where it cannot be told). */
function stopped(pid: number): boolean | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("T");
  } catch {
    return null;
  }
}

test("a paused (SIGSTOPped) holder keeps the ledger's lock however old its file: 1 report under reports_per_window = 1",
  { skip: process.platform !== "linux" && "needs /proc to see the holder stopped" }, async () => {
    const dir = fresh();
    await new FileStore(dir).open();
    const worker = fileURLToPath(new URL("./charge_worker.js", import.meta.url));
    const holder = run(process.execPath, [worker, dir, "1", "1", "stop"]);
    const pid = holder.child.pid!;
    for (let i = 0; stopped(pid) !== true; i++) { // it stops itself inside its transaction
      assert.ok(i < 20_000, "the holder never stopped");
      await new Promise((r) => setTimeout(r, 5));
    }
    const lock = join(dir, "ledger.nodelock");
    const old = new Date(Date.now() - 3600_000);
    await fs.utimes(lock, old, old); // an hour old: the age rule of before took it over at 30 s
    const store = await new FileStore(dir).open();
    let waits = 0;
    store.onLockWait = () => {
      waits += 1;
      if (waits === 1) {
        assert.equal(stopped(pid), true); // judged held while its holder is still paused
        process.kill(pid, "SIGCONT");
      }
    };
    const charge = { metric: "m", fingerprint: "a".repeat(32), day: 20_000, epsilon: 1, epsilonLongitudinal: null,
      digest: null, reportsPerWindow: 1, lifetimeBudget: null, deviceWindowBudget: 10, deviceLifetimeBudget: null };
    const mine = await new DeviceLedger(store).commit([charge], [], () => ["boot:worker", 1000]);
    if (waits === 0) process.kill(pid, "SIGCONT"); // we took the lock over (the defect): let it finish
    const theirs = Number((await holder).stdout.trim());
    assert.ok(waits >= 1);
    assert.deepEqual([theirs, mine.outcomes[0]], [1, "window"]); // the holder's, then ours refused
    assert.equal(store.ledgerConflicts, 0);
    assert.equal(parseLedger(readFileSync(join(dir, "ledger.json"), "utf8")).accounts.get("m")?.window_reports, 1);
  });

test("the ledger's compare-and-swap: a book changed under a writer's feet makes it charge again on the new one", async () => {
  const dir = fresh();
  const store = await new FileStore(dir).open();
  const charge = { metric: "m", fingerprint: "a".repeat(32), day: 20_000, epsilon: 1, epsilonLongitudinal: null,
    digest: null, reportsPerWindow: 1, lifetimeBudget: null, deviceWindowBudget: null, deviceLifetimeBudget: null };
  const elsewhere = await new FileStore(fresh()).open(); // the book another writer wrote: one charge spent
  await new DeviceLedger(elsewhere).commit([charge], [], () => ["boot:worker", 1000]);
  const theirBook = readFileSync(join(elsewhere.where, "ledger.json"), "utf8");
  let calls = 0;
  const mine = await new DeviceLedger(store).commit([charge], [], () => {
    calls += 1; // a writer that also believed it held the lock (its lease taken over) wrote meanwhile
    if (calls === 1) writeFileSync(join(dir, "ledger.json"), theirBook);
    return ["boot:worker", 1000];
  });
  assert.equal(calls, 2); // the first write was refused before its rename, and redone on their book
  assert.equal(mine.outcomes[0], "window");
  assert.equal(store.ledgerConflicts, 1);
  assert.equal(parseLedger(readFileSync(join(dir, "ledger.json"), "utf8")).accounts.get("m")?.window_reports, 1);
});

test("a lock file of a reused pid (another start time) is taken over; another host's lease only when it is old",
  { skip: process.platform !== "linux" && "start times from /proc" }, async () => {
  const dir = fresh();
  const path = join(dir, "x.lock");
  const host = (await import("node:os")).hostname();
  writeFileSync(path, `${process.ppid} ${host} 1 feed\n`); // a live pid, but it did not start at tick 1
  assert.equal(await withFileLock(path, () => "got it"), "got it");
  writeFileSync(path, "1 elsewhere.example 5 feed\n"); // another host, fresh lease: waited for
  let waited = 0;
  const got = withFileLock(path, () => "after the lease", { onWait: () => {
    waited += 1;
    if (waited === 1) { const old = new Date(Date.now() - 60_000); utimesSync(path, old, old); } // the lease expires
  } });
  assert.equal(await got, "after the lease");
  assert.equal(waited, 1);
});

test("outbox: oldest first, exclusive claims, release, done, caps", async () => {
  for (const store of [await new FileStore(fresh(), { maxBatches: 3, maxBytes: 1e6, maxAge: 100 }).open(),
    new MemoryStore({ limits: { maxBatches: 3, maxBytes: 1e6, maxAge: 100 } })]) {
    const ob = store.outbox;
    const id = (n: number) => new Uint8Array(16).fill(n);
    for (let i = 0; i < 4; i++) await ob.add(id(i), new Uint8Array([i]), 1, 1000 + i);
    assert.equal(await ob.pending(), 3);
    assert.equal(ob.counters.droppedReports, 1); // the oldest went first
    const a = await ob.claim(1050);
    const b = await ob.claim(1050);
    assert.deepEqual([a?.body[0], b?.body[0]], [1, 2]);
    await ob.release(a!);
    assert.equal((await ob.claim(1050))?.body[0], 1);
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
