/**
 * The client around the protocols: budgets against the ledger, batching, the outbox, and the
 * Python SDK's delivery rules (acks, retries with Retry-After, answers that are not the
 * collector's, final rejections), with an injected clock. A toy registry stands in for the
 * protocols (pinned by the conformance suite); the transport is an in-memory collector.
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { ReportError, TelemetryClient, type Platform } from "../src/client.js";
import { summarise } from "../src/ledger.js";
import { FileStore } from "../src/storage/node.js";
import { MemoryStore } from "../src/storage/memory.js";
import { unpack } from "../src/wire.js";
import { TransportError } from "../src/transport.js";
import { FakeCollector, json, problem, toyRegistry, vectors } from "./support.js";

const DAY = 20_000 * 86_400;
const noPlatform: Platform = {
  openStore: async () => { throw new Error("tests pass a store"); },
  onHide: () => () => undefined,
};

async function client(options: Record<string, unknown> = {}) {
  const collector = new FakeCollector();
  const now = [DAY + 3600];
  const mono = [1000];
  const registry = (options.registry as ReturnType<typeof toyRegistry>) ?? toyRegistry([
    { name: "theme", reportsPerWindow: 2 }, { name: "page", reportsPerWindow: 5, lifetimeEpsilon: 7 },
    { name: "memo", memo: true, reportsPerWindow: 9, epsilon: 0.5 }]);
  const c = new TelemetryClient({
    transport: collector, registry, store: new MemoryStore(), clock: () => now[0], monotonic: () => mono[0], batchSize: 100,
    elapsedClock: () => ["boot:test", Math.floor(now[0])], // a right clock: simulated days are real days
    retry: { initial: 1, maximum: 4 }, flushOnHide: false, ...options,
  }, noPlatform);
  await c.ready;
  return { c, collector, now, mono };
}

test("reports within the budget are charged, batched, sent once and acknowledged", async () => {
  const { c, collector, now } = await client();
  assert.ok(c.report("theme", "a"));
  assert.ok(c.report("theme", "b"));
  assert.equal(c.report("theme", "c"), false); // reports_per_window = 2
  assert.equal(c.report("theme", "zzz"), false);
  assert.equal(c.report("nope", "a"), false);
  assert.ok(await c.flush(5));
  let s = await c.stats();
  assert.deepEqual([s.reported, s.charged, s.refused_window, s.invalid_value, s.unknown_metric, s.reports_acked],
    [2, 2, 1, 1, 1, 2]);
  assert.equal(collector.bodies.length, 1);
  const doc = unpack(collector.bodies[0]) as any;
  assert.deepEqual(Object.keys(doc), ["v", "batch_id", "reports"]);
  assert.deepEqual(doc.reports.map((r: any) => [r.m, r.p]), [["theme", 0], ["theme", 1]]);
  now[0] += 86_400; // the next UTC day: a new window
  assert.ok(c.report("theme", "c"));
  assert.ok(await c.flush(5));
  s = await c.stats();
  assert.equal(s.reports_acked, 3);
  const rows = summarise(await c.ledgerSnapshot());
  assert.deepEqual(rows.map((r) => [r.metric, r.window_reports, r.lifetime_reports, r.refused_window]),
    [["theme", 1, 3, 1]]);
});

test("validate() names bad input without reporting", async () => {
  const { c } = await client({ strict: true });
  c.validate("theme", "a");
  assert.throws(() => c.validate("theme", "zzz"), ReportError);
  assert.throws(() => c.validate("nope", "a"), /unknown metric/);
  assert.throws(() => c.report("nope", "a"), ReportError); // strict: report() raises too
  assert.equal((await c.stats()).reported, 0);
});

test("lifetime caps and memoised values: ε∞ once per distinct value", async () => {
  const { c, now } = await client();
  for (let d = 0; d < 9; d++) {
    c.report("page", "a");
    c.report("memo", d % 2 ? "a" : "b");
    assert.ok(await c.flush(5)); // charged the day they are made (the ledger reads the elapsed clock then)
    now[0] += 86_400;
  }
  assert.ok(await c.flush(5));
  const s = await c.stats();
  assert.equal(s.refused_lifetime, 2); // 7 reports of ε = 1 fit a lifetime budget of 7
  const memo = summarise(await c.ledgerSnapshot()).find((r) => r.metric === "memo")!;
  assert.deepEqual([memo.lifetime_reports, memo.lifetime_epsilon, memo.distinct_values], [9, 4, 2]);
});

test("[device] caps hold across metrics", async () => {
  const registry = toyRegistry([{ name: "x", reportsPerWindow: 9 }, { name: "y", reportsPerWindow: 9 }],
    { epsilonPerWindow: 3, lifetimeEpsilon: null });
  const { c } = await client({ registry });
  const ok = ["x", "y", "x", "y", "x"].map((m) => c.report(m, "a"));
  assert.deepEqual(ok, [true, true, true, false, false]);
  assert.ok(await c.flush(5));
  assert.equal((await c.stats()).refused_device_window, 2);
});

test("network errors and 503 keep the same bytes; Retry-After is honoured; acks settle", async () => {
  const { c, collector, mono } = await client();
  const overloaded = problem(503, "overloaded") as { status: number; body: unknown };
  collector.script = ["drop", { ...overloaded, headers: { "retry-after": "30" } }];
  c.report("theme", "a");
  assert.equal(await c.flush(0.05), false); // dropped: a back-off of at most flush_interval (1 s)
  assert.equal(collector.bodies.length, 1);
  mono[0] += 1.01;
  assert.equal(await c.flush(0.05), false); // 503 + Retry-After: 30 s
  assert.equal(collector.bodies.length, 2);
  mono[0] += 29;
  assert.equal(await c.flush(0.05), false); // the server's Retry-After is honoured even by flush
  assert.equal(collector.bodies.length, 2);
  mono[0] += 1.01;
  assert.ok(await c.flush(5));
  assert.equal(collector.bodies.length, 3);
  assert.deepEqual(collector.bodies[2], collector.bodies[0]); // the same batch id and bytes each time
  const s = await c.stats();
  assert.deepEqual([s.retries, s.network_errors, s.batches_acked, s.outbox_pending], [2, 1, 1, 0]);
});

test("answers that are not the collector's never settle a batch", async () => {
  const { c, collector, mono } = await client();
  collector.script = [
    { status: 200, body: "<html>captive portal</html>" },
    { status: 404, body: "<html>not found</html>" },
    { status: 302, body: "" },
  ];
  c.report("theme", "a");
  for (let i = 0; i < 3; i++) {
    await c.flush(0.05);
    mono[0] += 10;
  }
  assert.equal((await c.stats()).outbox_pending, 1);
  assert.ok(await c.flush(5));
  const s = await c.stats();
  assert.deepEqual([s.reports_acked, s.reports_rejected, s.retries], [1, 0, 3]);
  assert.equal(new Set(collector.bodies.map((b) => b.join())).size, 1);
});

test("final rejections: a stale metric is refused from then on, the rest is resent", async () => {
  const { c, collector } = await client();
  collector.script = [problem(422, "fingerprint-mismatch", { metric: "page" })];
  c.report("theme", "a");
  c.report("page", "a");
  assert.equal(await c.flush(5), false); // one report was rejected for good
  let s = await c.stats();
  assert.deepEqual([s.reports_rejected, s.reports_acked], [1, 1]);
  const resent = unpack(collector.bodies[1]) as any;
  assert.deepEqual(resent.reports.map((r: any) => r.m), ["theme"]);
  assert.notDeepEqual(resent.batch_id, (unpack(collector.bodies[0]) as any).batch_id);
  assert.equal(c.report("page", "b"), false);
  s = await c.stats();
  assert.equal(s.stale_metric, 1);
  collector.script = [problem(413, "body-too-large")];
  c.report("theme", "b");
  c.report("memo", "a");
  assert.ok(await c.flush(5)); // split in two, both acknowledged
  assert.equal((await c.stats()).reports_acked, 3);
});

test("403 shuffle-required: the metric is refused from then on, the rest of the batch is resent", async () => {
  // what the Python SDK does (client_sdk/uploader.py): a metric the collector takes only through
  // an authenticated shuffler is dropped from now on; the other metrics' reports go again
  const { c, collector } = await client();
  collector.script = [problem(403, "shuffle-required", { metric: "page" })];
  c.report("theme", "a");
  c.report("page", "a");
  assert.equal(await c.flush(5), false);
  const s = await c.stats();
  assert.deepEqual([s.reports_rejected, s.reports_acked, s.batches_rejected], [1, 1, 1]);
  const resent = unpack(collector.bodies[1]) as any;
  assert.deepEqual(resent.reports.map((r: any) => r.m), ["theme"]);
  assert.equal(c.report("page", "b"), false);
  assert.equal((await c.stats()).stale_metric, 1);
});

test("a 403 other than shuffle-required drops the batch without retiring the metric", async () => {
  const { c, collector } = await client();
  collector.script = [problem(403, "forbidden", { metric: "page" })];
  c.report("theme", "a");
  c.report("page", "a");
  assert.equal(await c.flush(5), false);
  const s = await c.stats();
  assert.deepEqual([s.reports_rejected, s.reports_acked], [2, 0]);
  assert.equal(collector.bodies.length, 1);
  assert.ok(c.report("page", "b"));
});

test("two clients on one state directory (two processes' worth) never overspend", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldpt-js-client-"));
  const registry = toyRegistry([{ name: "x", reportsPerWindow: 3 }]);
  const a = await client({ registry, store: await new FileStore(dir).open() });
  const b = await client({ registry, store: await new FileStore(dir).open() });
  for (let i = 0; i < 3; i++) {
    assert.ok(a.c.report("x", "a")); // each mirror alone allows three
    assert.ok(b.c.report("x", "b"));
  }
  await Promise.all([a.c.flush(5), b.c.flush(5)]);
  const sa = await a.c.stats();
  const sb = await b.c.stats();
  assert.equal(a.collector.reports + b.collector.reports, 3);
  assert.equal(Number(sa.reports_refused_at_commit) + Number(sb.reports_refused_at_commit), 3);
});

test("state that cannot be opened disables reporting, and stats() says why", async () => {
  const failing: Platform = {
    openStore: async () => { throw new (await import("../src/state.js")).StateError("IndexedDB is not available"); },
    onHide: () => () => undefined,
  };
  const c = new TelemetryClient({ transport: new FakeCollector(), registry: toyRegistry([{ name: "x" }]) }, failing);
  c.report("x", "a"); // before the state is known: waits in memory
  await c.ready;
  assert.equal(c.report("x", "a"), false);
  const s = await c.stats();
  assert.match(String(s.disabled_reason), /IndexedDB is not available/);
  assert.deepEqual([s.disabled_state, s.disabled], [2, 0]); // the Python SDK's counter for unusable state
});

test("another process opting out of a shared state directory drops what this one queued", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldpt-js-client-"));
  const registry = toyRegistry([{ name: "x", reportsPerWindow: 3 }]);
  const a = await client({ registry, store: await new FileStore(dir).open() });
  const b = await client({ registry, store: await new FileStore(dir).open() });
  assert.ok(a.c.report("x", "a")); // queued, not charged yet
  await b.c.optOut();
  await a.c.flush(5);
  const s = await a.c.stats();
  assert.deepEqual([s.dropped, s.reports_dropped_opted_out, s.charged, s.queue_evicted], [1, 1, 0, 0]);
  assert.equal(a.collector.reports, 0);
});

test("opt-out deletes the queue and the outbox and stops reporting; opt-in reports again", async () => {
  const { c, collector } = await client();
  collector.script = ["drop"];
  c.report("theme", "a");
  await c.flush(0.05);
  await c.optOut();
  assert.equal(c.report("theme", "b"), false);
  const s = await c.stats();
  assert.deepEqual([s.opted_out, s.outbox_pending], [1, 0]);
  await c.optIn();
  assert.ok(c.report("theme", "b"));
  assert.ok(await c.flush(5));
});

test("a fetched registry is cached in the device state and used while the collector is down", async () => {
  const published = JSON.stringify(vectors("registry.json").registry);
  const store = new MemoryStore();
  const up = new FakeCollector();
  const get = up.request.bind(up);
  up.request = async (method, path, body) => (method === "GET" && path === "/v1/registry"
    ? json(200, published) : get(method, path, body));
  const first = new TelemetryClient({ transport: up, store, flushOnHide: false }, noPlatform);
  await first.ready;
  assert.ok(first.report("theme", "dark"));
  assert.ok(await first.flush(5));
  assert.equal(await store.readRegistry(), published);
  const down = new FakeCollector();
  down.request = async () => { throw new TransportError("connection refused"); };
  const second = new TelemetryClient({ transport: down, store, flushOnHide: false }, noPlatform);
  await second.ready;
  assert.equal((await second.stats()).disabled_reason, null);
  assert.equal(second.report("theme", "light"), false); // the same device: today's theme was reported
  assert.ok(second.report("crash", true)); // encoded with the cached registry, kept for later
});

test("an unreachable collector: the registry fetch is retried, reports wait in memory", async () => {
  const published = JSON.stringify(vectors("registry.json").registry);
  const collector = new FakeCollector();
  const post = collector.request.bind(collector);
  let down = true;
  collector.request = async (method, path, body) => {
    if (method !== "GET") return post(method, path, body);
    if (down) throw new TransportError("connection refused");
    return json(200, published);
  };
  const c = new TelemetryClient({ transport: collector, store: new MemoryStore(), flushOnHide: false,
    retry: { initial: 60, maximum: 60 } }, noPlatform);
  assert.ok(c.report("theme", "dark")); // waits for the registry
  assert.equal(await c.flush(0.1), false);
  assert.equal((await c.stats()).awaiting_registry, 1);
  down = false;
  assert.ok(await c.flush(5)); // retries the fetch at once, then encodes and sends what waited
  const s = await c.stats();
  assert.deepEqual([s.reports_acked, s.awaiting_registry, s.disabled_reason], [1, 0, null]);

  const never = new TelemetryClient({ transport: { request: async () => { throw new TransportError("down"); } },
    store: new MemoryStore(), flushOnHide: false, retry: { initial: 60, maximum: 60 } }, noPlatform);
  assert.ok(never.report("theme", "dark"));
  assert.equal(await never.close(0.1), false);
  assert.equal((await never.stats()).dropped_no_registry, 1); // dropped at close, never encoded
});

test("a registry document this SDK cannot use disables reporting, and stats() says why", async () => {
  const collector = new FakeCollector();
  collector.request = async () => json(200, { metrics: "not a list" });
  const c = new TelemetryClient({ transport: collector, store: new MemoryStore(), flushOnHide: false }, noPlatform);
  assert.ok(c.report("theme", "a")); // waits for the registry
  await c.ready;
  const s = await c.stats();
  assert.match(String(s.disabled_reason), /RegistryError/);
  assert.equal(s.disabled, 1);
});

test("browsers: reports are charged at once, and hiding the page sends them synchronously", async () => {
  let hide: () => void = () => undefined;
  const browserLike: Platform = { chargeEarly: true, openStore: noPlatform.openStore, onHide: (h) => { hide = h; return () => undefined; } };
  const collector = new FakeCollector();
  const store = new MemoryStore();
  const c = new TelemetryClient({ transport: collector, store, registry: toyRegistry([{ name: "theme", reportsPerWindow: 3 }]) }, browserLike);
  await c.ready;
  assert.ok(c.report("theme", "a"));
  assert.ok(c.report("theme", "b"));
  await new Promise((r) => setTimeout(r, 50)); // the charge pass runs right after report()
  assert.equal((await c.stats()).charged, 2);
  assert.equal(collector.bodies.length, 0); // charged, not sent: batching goes on
  hide();
  assert.equal(collector.bodies.length, 1); // sent inside the event handler, nothing awaited
  assert.ok(await c.flush(5));
  const s = await c.stats();
  assert.deepEqual([s.reports_acked, s.queued, s.outbox_pending], [2, 0, 0]);
  await c.close(0);
});
